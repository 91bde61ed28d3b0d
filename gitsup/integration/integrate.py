"""`git sup integrate ID --into BRANCH`: the person/CI side of the boundary.

It refuses to run inside a task (its worktree, its worker's process tree, or
anything carrying `GITSUP_TASK`). It needs a `ready` candidate and a target whose
history since the trust root is integrated (so a branch a worker moved is not
built upon). It merges in memory (pygit2; always a merge, so `git log
--first-parent` lists exactly the integrations), re-runs the task's required
checks on that tree in a fresh temporary worktree (removed afterwards), confined as a task's
checks are (gitsup/verification/confined.py: sandbox, loopback network, a cgroup), then
writes the merge commit signed with the integrator's key (`git commit-tree -S`,
`Sup-*` trailers), checks that the gates will accept it, and moves the target
with a compare-and-swap. If the target is checked out somewhere it must be
clean; that checkout is then advanced like `git merge --ff-only` would
(`read-tree -m -u`). Afterwards the candidate note (and the merge commit's note)
say `integrated`, the task's event log records and seals it, and the task
record's status is `integrated`. It never pushes.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil

from gitsup.boundary.evaluate import own_commits_hint
from gitsup.boundary.gitrun import GitCli
from gitsup.boundary.hook import client_allowed_signers
from gitsup.boundary.lookup import RepoConfig
from gitsup.boundary.pusher import task_of_git_dir
from gitsup.boundary.trust import TrustCheck
from gitsup.errors import Exit, GitsupError
from gitsup.git import GitRepo, RefConflict
from gitsup.host import proc
from gitsup.host.procid import ProcessId, same_start
from gitsup.ids import Oid, TaskId, parse_task_id
from gitsup.integration.keys import (
    SigningSetup,
    follow_identity,
    protected_paths,
    signing_setup,
)
from gitsup.layout import task_refs
from gitsup.names import TASK_MARKER
from gitsup.spec import Check, TaskSpec
from gitsup.state import Status
from gitsup.store.events import EventLog
from gitsup.store.eventtypes import Integrated
from gitsup.store.record import CandidateNote, CheckResult, ReviewResult, TaskRecord
from gitsup.store.suprepo import SupRepo
from gitsup.verification.confined import ConfinedChecks, Confinement, Setup

EXIT_CHECKS_FAILED = Exit.PARKED  # 3: integration checks failed, target untouched


class Strategy(StrEnum):
    AUTO = "auto"  # the same as merge: an integration is always a signed merge commit
    FF = "ff"  # refused: a fast-forward has nothing to sign
    MERGE = "merge"


class IntegrationRefused(GitsupError):
    """Integration was refused before anything changed (exit 2)."""


@dataclass
class IntegrateResult:
    task: str
    candidate: str
    into: str
    strategy: str  # always "merge" (a signed merge commit)
    target_before: str
    result: str  # the commit the target points (or would point) to
    integrated: bool
    checks: list[CheckResult] = field(default_factory=list)
    checkout_updated: str | None = None
    reason: str | None = None
    # paths under .gitsup/ the candidate changes (integrated only with --allow-policy-change)
    policy_change: list[str] = field(default_factory=list)
    # what confined the checks: sandbox, network, cgroup (None: no checks ran); with a
    # review, `review`: what confined the reviewer
    confinement: dict[str, Any] | None = None
    # the integration review (`--review`; gitsup/integration/review.py), None without one
    review: ReviewResult | None = None

    @property
    def exit_code(self) -> int:
        return Exit.OK if self.integrated else EXIT_CHECKS_FAILED

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["checks"] = [c.model_dump(mode="json") for c in self.checks]
        d["review"] = None if self.review is None else self.review.model_dump(mode="json")
        d["exit_code"] = int(self.exit_code)
        return d


# --- who is calling ----------------------------------------------------------------------


def inside_task(ctx: SupRepo, *, env: Mapping[str, str], cwd: str) -> str | None:
    """Why the caller counts as inside a task (None: a person or CI outside any task)."""
    marker = env.get(TASK_MARKER, "").strip()
    if marker:
        return f"{TASK_MARKER}={marker} is set: this process belongs to task {marker}'s worker"
    task = task_of_git_dir(str(ctx.repo.git_dir), str(ctx.repo.common_dir))
    if task:
        return f"the current directory is task {task}'s worktree"
    here = os.path.realpath(cwd)
    records = list(ctx.store.iter_records())
    for rec in records:
        wt = os.path.realpath(rec.worktree) if rec.worktree else ""
        if wt and (here == wt or here.startswith(wt.rstrip("/") + "/")):
            return f"the current directory is inside task {rec.id}'s worktree {wt}"
    workers = {
        pid.pid: (rec.id, pid)
        for rec in records
        if (pid := ProcessId.from_dict(rec.worker)) is not None
    }
    if workers:
        try:
            parents = psutil.Process().parents()
        except psutil.Error:
            parents = []
        for p in parents:
            hit = workers.get(p.pid)
            if hit is None:
                continue
            try:
                same = same_start(hit[1].start_time, p.create_time())
            except psutil.Error:
                continue
            if same:
                return f"process {p.pid} above this one is task {hit[0]}'s worker"
    return None


# --- the integration ---------------------------------------------------------------------


def required_checks(ctx: SupRepo, task: TaskId, note: CandidateNote) -> list[Check]:
    """The checks an integration runs: the task spec's required ones, else the note's."""
    try:
        spec = ctx.store.load_spec(task)
        return [c for c in spec.checks if c.required]
    except (OSError, ValueError):
        # No spec on disk (e.g. a fetched candidate): the checks the note records.
        seen: dict[str, Check] = {}
        for c in note.checks:
            if c.required and c.argv:
                seen[c.name] = Check(name=c.name, argv=c.argv, required=True)
        return list(seen.values())


def _refuse(message: str, hint: str | None = None) -> IntegrationRefused:
    return IntegrationRefused(message, hint=hint)


def integrate(
    ctx: SupRepo,
    task: str,
    into: str,
    *,
    strategy: Strategy = Strategy.AUTO,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    on_progress: Callable[[str], None] | None = None,
    allow_policy_change: bool = False,
    review: bool = False,
) -> IntegrateResult:
    """`review`: an independent review of the merge before it is signed (also with git config
    `sup.integrate.review`; gitsup/integration/review.py)."""
    env = os.environ if env is None else env
    cwd = os.getcwd() if cwd is None else cwd
    say = on_progress or (lambda _m: None)
    tid = parse_task_id(task)
    why = inside_task(ctx, env=env, cwd=cwd)
    if why:
        raise _refuse(
            f"refusing to integrate from inside a task: {why}",
            hint="integration is a person's or CI's act: run `git sup integrate` from the "
            "main checkout, outside any worker",
        )
    repo = ctx.repo
    with ctx.store.lock(tid):
        record = ctx.store.load(tid)
        return _integrate_locked(
            ctx,
            repo,
            record,
            tid,
            into,
            strategy,
            say,
            allow_policy_change=allow_policy_change,
            review=review,
        )


def policy_change_refusal(task: str, candidate: str, paths: list[str]) -> IntegrationRefused:
    """The refusal of a candidate that changes `.gitsup/` without the person's consent."""
    return _refuse(
        f"candidate {candidate[:12]} of task {task} changes gitsup's policy: {', '.join(paths)}",
        hint="this changes what every later task may do (sandbox, shell policy); review the "
        "change (docs/sandbox.md, 'Reviewing a change to .gitsup/'), then pass "
        "--allow-policy-change",
    )


def policy_change_trailer(paths: list[str]) -> str:
    """The trailer that records an allowed change to `.gitsup/` in the integration commit."""
    return f"Sup-Policy-Change: {', '.join(paths)}\n" if paths else ""


def _integrate_locked(
    ctx: SupRepo,
    repo: GitRepo,
    record: TaskRecord,
    tid: TaskId,
    into: str,
    strategy: Strategy,
    say: Callable[[str], None],
    *,
    allow_policy_change: bool = False,
    review: bool = False,
) -> IntegrateResult:
    from gitsup.integration import review as integration_review

    review = integration_review.wanted(repo, review)
    refs = task_refs(tid)
    candidate = repo.ref_target(refs["candidate"])
    if candidate is None:
        raise _refuse(
            f"task {tid} has no candidate ({record.status.value})",
            hint=f"`git sup show {tid}` says why",
        )
    text = repo.read_note(candidate)
    if text is None:
        raise _refuse(f"candidate {candidate[:12]} of task {tid} has no note in refs/notes/sup")
    note = CandidateNote.parse(text)
    if note.status == Status.INTEGRATED:
        raise _refuse(
            f"candidate {candidate[:12]} of task {tid} is already integrated"
            + (f" into {note.integrated_into}" if note.integrated_into else "")
        )
    if note.status != Status.READY:
        reasons = "; ".join(note.reasons[-3:]) or "no reason recorded"
        raise _refuse(
            f"candidate {candidate[:12]} of task {tid} is {note.status.value}, not ready ({reasons})",
            hint="only a ready candidate crosses the boundary; start a new task to finish the work",
        )

    branch = into.removeprefix("refs/heads/")
    target_ref = f"refs/heads/{branch}"
    if strategy == Strategy.FF:
        raise _refuse(
            "an integration is always a signed merge commit; `--strategy ff` is not possible",
            hint="leave out --strategy (or use `--strategy merge`)",
        )
    old = repo.ref_target(target_ref)
    if old is None:
        raise _refuse(f"no branch {branch} to integrate into")
    if repo.is_ancestor(candidate, old):
        raise _refuse(f"{branch} already contains candidate {candidate[:12]}")
    checkout = repo.checked_out_branches().get(branch)
    if checkout is not None:
        _require_clean(checkout, branch)
    baseline = record.baseline or note.baseline
    if not baseline or not repo.is_ancestor(Oid(baseline), candidate):
        raise _refuse(
            f"the baseline {baseline[:12] or '(none)'} of task {tid} is not an ancestor of "
            f"its candidate {candidate[:12]}: the task record or note was altered"
        )
    policy = repo.policy_change(Oid(baseline), candidate)
    if policy and not allow_policy_change:
        raise policy_change_refusal(str(tid), candidate, policy)
    signing = integration_signing(repo)
    trust = integration_trust(repo)
    require_integrated(trust, branch, old, baseline)

    how = "merge"
    tree, conflicts = repo.merge_tree(old, candidate)
    if tree is None:
        shown = ", ".join(conflicts[:10]) + (" ..." if len(conflicts) > 10 else "")
        raise _refuse(
            f"candidate {candidate[:12]} does not merge cleanly into {branch}: "
            f"conflicts in {shown}",
            hint=f"start a new task based on {branch} to redo the work",
        )
    goal = note.goal.strip().splitlines()[0] if note.goal.strip() else ""
    subject = f"Merge gitsup candidate {tid} into {branch}\n\n" + (f"{goal}\n\n" if goal else "")
    # The checks run on an unsigned commit of the same tree and parents: only an
    # integration whose checks passed is ever signed.
    result = repo.commit_tree(tree, [old, candidate], subject + f"Sup-Task: {tid}\n")

    checks = required_checks(ctx, tid, note)
    res = IntegrateResult(
        task=str(tid),
        candidate=candidate,
        into=branch,
        strategy=how,
        target_before=old,
        result=result,
        integrated=False,
        policy_change=policy,
    )
    res.checks, res.confinement = _run_integration_checks(ctx, repo, tid, result, checks, say)
    failed = [c.name for c in res.checks if c.required and not c.passed]
    if failed:
        res.reason = f"integration checks failed: {', '.join(failed)}; {branch} untouched"
        return res

    verdict = note.review.verdict if note.review and note.review.verdict else "none"
    if review:
        res.review, review_confinement = integration_review.review_integration(
            repo,
            str(tid),
            _task_spec(ctx, tid),
            target=old,
            merge=result,
            into=branch,
            candidate=candidate,
            checks=res.checks,
            policy=policy,
            protect=protected_paths(repo),
            say=say,
        )
        res.confinement = {**(res.confinement or {}), "review": review_confinement}
        if res.review.verdict != "pass":
            why = res.review.verdict or f"failed: {res.review.error}"
            res.reason = f"integration review: {why}; {branch} untouched"
            return res
        verdict = integration_review.trailer(res.review)
    passed = ", ".join(f"{c.name}=passed" for c in res.checks) or "none"
    result = sign_integration_commit(
        repo,
        signing,
        tree,
        [old, candidate],
        subject
        + f"Sup-Task: {tid}\nSup-Candidate: {candidate}\nSup-Baseline: {baseline}\n"
        + f"Sup-Checks: {passed}\nSup-Review: {verdict}\n"
        + policy_change_trailer(policy),
    )
    res.result = result
    bad = trust.check([(target_ref, old, result)])[target_ref]
    if bad is not None:
        raise _refuse(
            f"the signed integration {result[:12]} would not pass the gate: "
            f"{bad.commit[:12]} {bad.why}; {branch} untouched",
            hint="`git sup init` adds the integration key to the allowed signers",
        )

    # The target may have moved, or its checkout become dirty, while the checks ran.
    if checkout is not None:
        _require_clean(checkout, branch)
    message = f"gitsup integrate {tid} ({how}) into {branch}"
    try:
        repo.update_ref(target_ref, result, old=old, message=message)
    except RefConflict as exc:
        raise _refuse(
            f"{branch} moved during integration ({exc}); nothing was changed",
            hint=f"run `git sup integrate {tid} --into {branch}` again",
        ) from None
    if checkout is not None:
        try:
            GitRepo.open(checkout).advance_checkout(old, result)
        except GitsupError as exc:
            with contextlib.suppress(RefConflict):
                repo.update_ref(target_ref, old, old=result, message=f"{message}: undone")
            raise _refuse(f"{branch} left at {old[:12]}: {exc.message}") from None
        res.checkout_updated = str(checkout)
    record_integration(ctx, repo, tid, note, res)
    res.integrated = True
    return res


def integration_signing(repo: GitRepo) -> SigningSetup:
    """The key integration commits are signed with; refuses when it is missing."""
    signing = signing_setup(repo, create=False)
    if signing.dedicated and not Path(signing.key).exists():
        raise _refuse(
            f"no integration signing key ({signing.key})",
            hint="`git sup init` creates it (or configure your own SSH key: "
            "`git config gpg.format ssh`, `git config user.signingKey <key>`)",
        )
    signing.changed += follow_identity(repo, signing)
    return signing


def integration_trust(repo: GitRepo) -> TrustCheck:
    """The check that a history is integrated, with the repository's trust roots and signers."""
    cfg = RepoConfig.read(GitCli(cwd=str(repo.common_dir)))
    return TrustCheck(
        str(repo.common_dir),
        None,
        roots=cfg.trust_roots(),
        allowed_signers=client_allowed_signers(cfg, os.environ),
    )


def require_integrated(trust: TrustCheck, branch: str, old: str, baseline: str) -> None:
    """The target's history since the trust root, and what the baseline adds to it,
    must be integrated: an integration never publishes a commit a worker slipped in."""
    bad = trust.check([("target", "0" * 40, old)])["target"]
    if bad is not None:
        raise _refuse(
            f"{branch} moved outside integrations since the trust root: {bad.total} "
            f"commit(s) not integrated ({bad.commit[:12]} {bad.why})",
            hint=f"move {branch} back to its last integration (`git log --first-parent "
            f"{branch}`); {own_commits_hint(branch, '<last integration>', old)}",
        )
    bad = trust.check([("baseline", old, baseline)])["baseline"]
    if bad is not None:
        raise _refuse(
            f"the task's baseline {baseline[:12]} brings {bad.total} commit(s) that are not "
            f"integrated ({bad.commit[:12]} {bad.why})",
            hint=f"start a new task based on {branch}",
        )


def sign_integration_commit(
    repo: GitRepo, signing: SigningSetup, tree: str, parents: list[Oid], message: str
) -> Oid:
    """A signed commit of `tree` on `parents` (not on any branch yet)."""
    argv = ["git", *signing.git_config_args(), "commit-tree", "-S"]
    for p in parents:
        argv += ["-p", p]
    res = proc.run(
        [*argv, tree],
        cwd=repo.common_dir,
        env=proc.child_env(),
        input=message.encode(),
        timeout=120,
        merge_stderr=False,
    )
    oid = res.output.strip()
    if not res.ok or len(oid) not in (40, 64):
        raise _refuse(
            f"cannot sign the integration commit with {signing.key}",
            hint="`git sup init` sets up the signing key; "
            "check `git config gpg.format` and `user.signingKey`",
        )
    return Oid(oid)


def _require_clean(checkout: Path, branch: str) -> None:
    if not GitRepo.open(checkout).is_clean():
        raise _refuse(
            f"{branch} is checked out in {checkout} with uncommitted changes (or untracked files)",
            hint=f"commit, stash or remove them, or switch that checkout away from {branch}",
        )


def _run_integration_checks(
    ctx: SupRepo,
    repo: GitRepo,
    tid: TaskId,
    commit: Oid,
    checks: list[Check],
    say: Callable[[str], None],
) -> tuple[list[CheckResult], dict[str, Any] | None]:
    """The candidate's checks on the integration's tree, confined as a task's checks are
    (gitsup/verification/confined.py); returns them and what confined them."""
    if not checks:
        return [], None
    from gitsup.environment.setup import task_recipe

    spec = _task_spec(ctx, tid)
    conf = Confinement.of([spec])
    # the task's setup phase first: the checks run in the environment the task had (a
    # setup that fails refuses the integration, exit 4, with its output)
    setup = Setup.of(
        task_recipe(repo.main_workdir, spec.environment if spec else None), repo.common_dir
    )
    with ConfinedChecks(
        repo,
        prefix=f"gitsup-integrate-{tid}-",
        marker=str(tid),
        label="integrate",
        confinement=conf,
        protect=protected_paths(repo),
    ) as box:
        results = box.run(commit, checks, say=say, setup=setup)
        return results, box.applied.as_dict()


def _task_spec(ctx: SupRepo, tid: TaskId) -> TaskSpec | None:
    try:
        return ctx.store.load_spec(tid)
    except (OSError, ValueError):
        return None


def record_integration(
    ctx: SupRepo,
    repo: GitRepo,
    tid: TaskId,
    note: CandidateNote,
    res: IntegrateResult,
    note_extra: dict[str, Any] | None = None,
) -> None:
    """Mark the task integrated: notes on the candidate and the result (plus `note_extra`),
    the sealed `integrated` event, the record's status."""
    now = time.time()
    done = note.model_copy(
        update={"status": Status.INTEGRATED, "integrated_into": res.into, "integrated_at": now}
    )
    extra = {"integration_commit": res.result, "integration_strategy": res.strategy}
    extra.update(note_extra or {})
    repo.write_note(Oid(res.candidate), _with(done, extra))
    if res.result != res.candidate:
        repo.write_note(Oid(res.result), _with(done, extra))
    with EventLog(ctx.layout.events(tid), tid) as log:
        log.append(
            Integrated(
                candidate=Oid(res.candidate),
                into=res.into,
                strategy=res.strategy,
                target_before=Oid(res.target_before),
                result=Oid(res.result),
                checks=[{"name": c.name, "passed": c.passed} for c in res.checks],
                **({"confinement": res.confinement} if res.confinement else {}),
            )
        )
        log.seal(repo, f"integrated into {res.into}")
    record = ctx.store.load(tid)
    record.status = Status.INTEGRATED
    ctx.store.save(record)


def _with(note: CandidateNote, extra: dict[str, Any]) -> str:
    data = note.model_dump(mode="json", by_alias=True)
    data.update(extra)
    return json.dumps(data, indent=2) + "\n"
