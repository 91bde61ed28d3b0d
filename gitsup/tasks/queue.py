"""The integration queue: ready candidates reach a target branch one signed integration
each, and the target only ever moves to a tree whose required checks passed on it.

One queue per target branch. Its state is a commit chain on
`refs/sup/queue/<branch>/state` (the tree holds `queue.json`; every change is one commit,
compare-and-swap), its events a log sealed into `refs/sup/queue/<branch>/log` like a task's.
A runner holds a lease on the queue (`$GIT_COMMON_DIR/sup/queue/<branch>`), so two runners
never integrate into the same branch at once; a runner killed mid-step leaves a provably
dead lease that the next `queue run` takes over.

A run: compose the queued candidates in order on the target (in-memory merges, unsigned
commits); a candidate that does not merge cleanly is sent back with the conflicting paths.
Test the whole composition (the union of the candidates' required checks, in a throw-away
worktree, inside the task sandbox). On failure, binary-search the shortest failing prefix:
its last candidate is the culprit (sent back with the failing output), the longest passing
prefix is integrated, and the rest is composed and tested again. Check results are kept
per (tree, check), so a tree tested once is never tested again for the same check.
Integrating a prefix writes one signed merge commit per candidate (the trailers of
`git sup integrate`) and moves the target once, by compare-and-swap, to the tested tip.

Crash safety: the target moves before the queue state says "integrated". A resumed
runner first reconciles: a queued candidate the target already contains is recorded as
integrated (never integrated twice); nothing leaves the queue without an outcome.

The queue's state and its add/remove/list live in `queue_state.py`, the testing of a
composition in `queue_checks.py`; this module is the runner (compose, bisect, integrate).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitsup.errors import GitsupError
from gitsup.faults import fault
from gitsup.git import GitRepo, RefConflict
from gitsup.host import proc
from gitsup.ids import Oid, TaskId, parse_task_id
from gitsup.integration.integrate import (
    inside_task,
    integration_signing,
    integration_trust,
    policy_change_trailer,
    record_integration,
    require_integrated,
    sign_integration_commit,
)
from gitsup.layout import task_refs
from gitsup.spec import Check
from gitsup.state import Status
from gitsup.store import eventtypes as et
from gitsup.store.events import EventLog
from gitsup.store.lease import Lease
from gitsup.store.record import CandidateNote
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.queue_checks import (
    DEFAULT_RETRIES,
    CheckSlots,
    CompositionTester,
    RunResult,
    _Step,
    spec_or_none,
)
from gitsup.tasks.queue_slots import DEFAULT_SLOTS
from gitsup.tasks.queue_state import (
    DEFAULT_BATCH,
    Entry,
    Queue,
    QueueError,
    _branch,
    default_target,
    queue_branches,
    write_runner_status,
)

_SHOW_PATHS = 10  # the dirty paths a refusal names

# --- the runner ------------------------------------------------------------------------


def _task_checks(ctx: SupRepo, task: str, note: CandidateNote) -> list[Check]:
    from gitsup.integration.integrate import required_checks

    return required_checks(ctx, parse_task_id(task), note)


class Runner:
    def __init__(
        self,
        ctx: SupRepo,
        into: str,
        *,
        batch: int = DEFAULT_BATCH,
        retries: int = DEFAULT_RETRIES,
        slots: int = DEFAULT_SLOTS,
        on_progress: Callable[[str], None] | None = None,
        hosts: Callable[[str, int], CheckSlots] | None = None,
    ) -> None:
        self.ctx = ctx
        self.repo = ctx.repo
        self.q = Queue(ctx, into)
        self.batch = max(1, batch)
        self.slots = max(1, slots)
        self.say = on_progress or (lambda _m: None)
        self.res = RunResult(into=self.q.branch, slots=self.slots)
        # `hosts`: where the checks run instead of here (the cluster's task hosts)
        self.hosts = hosts(self.q.branch, self.slots) if hosts is not None else None
        self.checks = CompositionTester(
            ctx,
            self.q,
            self.res,
            retries=max(0, retries),
            slots=self.slots,
            say=self.say,
            hosts=self.hosts,
        )
        self._repairs: list[tuple[Entry, str, str, dict[str, Any]]] = []
        self.checks.began, self.checks.depth = time.monotonic(), 0

    @property
    def retries(self) -> int:
        """Fresh runs of a failing check before it counts as failed (the tester's)."""
        return self.checks.retries

    # lease

    def _acquire(self) -> Lease:
        from gitsup.store.lease import LeaseConflict

        try:
            return self.ctx.leases.acquire(self.q.dir, f"queue:{self.q.branch}", steal_dead=True)
        except LeaseConflict as exc:
            raise QueueError(
                f"another queue runner (pid {exc.held.owner.pid}) is integrating into "
                f"{self.q.branch}; the queue is leased to it",
                hint="wait for it (`git sup queue` shows the progress); a runner that died is "
                "taken over by the next `git sup queue run`",
            ) from None

    def run(self) -> RunResult:
        start = time.monotonic()
        why = inside_task(self.ctx, env=os.environ, cwd=os.getcwd())
        if why:
            raise QueueError(f"refusing to run the queue from inside a task: {why}")
        if self.repo.ref_target(self.q.target_ref) is None:
            raise QueueError(f"no branch {self.q.branch} to integrate into")
        # before any work: a run that could only end refused at the move does not compose or test
        if self.q.read()[0].queued():
            self._require_clean_checkout()
        lease = self._acquire()
        try:
            self.q.event(et.QueueRunStarted(pid=os.getpid()))
            self._reconcile()
            self._loop()
        finally:
            self.res.wall_seconds = round(time.monotonic() - start, 3)
            self.res.target = self.repo.ref_target(self.q.target_ref) or ""
            done = {k: v for k, v in self.res.as_dict().items() if k != "sent_back"}
            self.q.event(
                et.QueueRunFinished(into=done.pop("into"), result=done), seal="queue run finished"
            )
            self.checks.close()
            write_runner_status(self.q, None)
            self.ctx.leases.release(lease)
        return self.res

    # crash recovery: the target may already contain what the state still calls queued

    def _reconcile(self) -> None:
        state, _ = self.q.read()
        target = self.repo.ref_target(self.q.target_ref)
        assert target is not None
        done: dict[str, str] = {}
        for e in state.queued():
            if self.repo.is_ancestor(Oid(e.candidate), target):
                done[e.task] = self._integration_of(target, e.candidate)
        if not done:
            return
        cands = {e.task: e.candidate for e in state.queued()}
        for task, commit in done.items():
            self._record_integrated(task, cands[task], commit)
        with self.q.change(f"resume: {len(done)} already integrated") as st:
            for e in st.queued():
                if e.task in done:
                    e.status, e.integration_commit = "integrated", done[e.task]
                    e.finished_at = time.time()
        self.res.resumed += list(done)
        self.q.event(et.QueueResumed(integrated=done), seal="resumed")

    def _integration_of(self, target: Oid, candidate: str) -> str:
        tip: Oid | None = target
        for _ in range(10_000):
            if tip is None:
                break
            info = self.repo.commit_info(tip)
            parents = list(info.parents)
            if len(parents) > 1 and parents[1] == candidate:
                return tip
            tip = Oid(parents[0]) if parents else None
        return ""

    def _record_integrated(
        self, task: str, candidate: str, commit: str, flaky: list[str] | None = None
    ) -> None:
        """The note, the task's event and record say integrated (also what a killed runner
        could not finish); `flaky`: checks that failed, then passed, on the tested tree."""
        tid = TaskId(task)
        cand = Oid(candidate)
        text = self.repo.read_note(cand)
        if text is None:
            return
        note = CandidateNote.parse(text)
        if note.status == Status.INTEGRATED:
            return
        from gitsup.integration.integrate import IntegrateResult

        info = self.repo.commit_info(Oid(commit)) if commit else None
        before = info.parents[0] if info and info.parents else ""
        res = IntegrateResult(
            task=task,
            candidate=cand,
            into=self.q.branch,
            strategy="merge",
            target_before=before,
            result=commit or cand,
            integrated=True,
        )
        with self.ctx.store.lock(tid):
            record_integration(
                self.ctx,
                self.repo,
                tid,
                note,
                res,
                note_extra={"queue_evidence": {"flaky": flaky}} if flaky else None,
            )

    # the loop

    def _loop(self) -> None:
        self._collect_repairs()
        if self.slots > 1:
            from gitsup.tasks.queue_slots import Speculation

            Speculation(self, self.slots).land()
            return
        while True:
            state, _ = self.q.read()
            pending = state.queued()[: self.batch]
            if not pending:
                return
            steps = self._prepare(pending)
            if steps:
                self._land(steps)
            self._flush_repairs()

    def _prepare(self, pending: list[Entry]) -> list[_Step]:
        """Candidates still ready and built on an integrated baseline; the rest go back."""
        steps = []
        target = self.repo.ref_target(self.q.target_ref)
        assert target is not None
        untrusted = self._untrusted_baselines(target, pending)
        for e in pending:
            cand = self.repo.ref_target(task_refs(TaskId(e.task))["candidate"])
            text = self.repo.read_note(Oid(e.candidate))
            note = CandidateNote.parse(text) if text else None
            if cand != e.candidate or note is None or note.status != Status.READY:
                why = (
                    "its candidate ref moved since it was queued"
                    if cand != e.candidate
                    else f"the candidate is {note.status.value if note else 'without a note'}"
                )
                self._finish(e, "parked", why, {"base": target}, park_task=False)
                continue
            bad = untrusted.get(note.baseline)
            if bad:
                self._finish(e, "parked", bad, {"base": target}, park_task=True)
                continue
            policy = self.repo.policy_change(Oid(note.baseline), Oid(e.candidate))
            if not set(policy) <= set(e.policy_change):
                why = (
                    f"it changes gitsup's policy ({', '.join(policy)}) and was queued without "
                    "--allow-policy-change"
                )
                self._finish(e, "parked", why, {"policy_change": policy}, park_task=False)
                continue
            steps.append(_Step(e, note, _task_checks(self.ctx, e.task, note)))
        return steps

    def _untrusted_baselines(self, target: Oid, pending: list[Entry]) -> dict[str, str]:
        """The target's history since the trust root must be integrated (else nothing is
        built on it), and so must what each baseline adds to it: baseline -> why not.
        Two `rev-list`s for the whole batch."""
        trust = integration_trust(self.repo)
        require_integrated(trust, self.q.branch, target, target)
        baselines: set[str] = set()
        for e in pending:
            text = self.repo.read_note(Oid(e.candidate))
            with contextlib.suppress(GitsupError):
                if text:
                    baselines.add(CandidateNote.parse(text).baseline)
        found = trust.check([(b, target, b) for b in sorted(baselines)])
        return {
            b: f"the task's baseline {b[:12]} brings {u.total} commit(s) that are not "
            f"integrated ({u.commit[:12]} {u.why})"
            for b, u in found.items()
            if u is not None
        }

    def _compose(
        self,
        base: Oid,
        steps: list[_Step],
        cache: dict[tuple[str, str], tuple[Oid, Oid]] | None = None,
        *,
        send_back: bool = True,
    ) -> list[_Step]:
        """Chain unsigned merges of `steps` on `base`; conflicting candidates go back
        (`send_back`; else they are only left out). `cache`: (tip, candidate) -> (tree,
        merge) of merges made before, reused."""
        out: list[_Step] = []
        tip = base
        for s in steps:
            hit = cache.get((tip, s.entry.candidate)) if cache is not None else None
            if hit is not None:
                s.tree, s.merge = hit
                tip = s.merge
                out.append(s)
                continue
            tree, conflicts = self.repo.merge_tree(tip, Oid(s.entry.candidate))
            if tree is None and not send_back:
                continue
            if tree is None:
                shown = ", ".join(conflicts[:20])
                self._finish(
                    s.entry,
                    "conflict",
                    f"does not merge cleanly onto {self.q.branch} "
                    f"{'(with the candidates ahead of it) ' if out else ''}: conflicts in {shown}",
                    {"conflicts": conflicts, "base": base, "composed_on": tip},
                    park_task=True,
                )
                continue
            s.tree = tree
            s.merge = self.repo.commit_tree(
                tree,
                [tip, Oid(s.entry.candidate)],
                f"gitsup queue composition\n\nSup-Task: {s.entry.task}\n",
            )
            if cache is not None:
                cache[(tip, s.entry.candidate)] = (tree, s.merge)
            tip = s.merge
            out.append(s)
        return out

    def _land(self, steps: list[_Step]) -> None:
        base = self.repo.ref_target(self.q.target_ref)
        assert base is not None
        steps = self._compose(base, steps)
        if not steps:
            return
        n = len(steps)
        ok, _ = self.checks.test(steps, n)
        if ok:
            self._integrate(base, steps)
            return
        # binary search for the shortest failing prefix: lo passes (0: the target), hi fails
        lo, hi = 0, n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            good, _ = self.checks.test(steps, mid)
            if good:
                lo = mid
            else:
                hi = mid
        culprit = steps[hi - 1]
        _, failed = self.checks.test(steps, hi)  # from the memo: no new run
        if lo:
            self._integrate(base, steps[:lo])
        self._finish(
            culprit.entry,
            "failed",
            f"required checks fail when composed onto {self.q.branch}"
            + (f" after {hi - 1} queued candidate(s)" if hi > 1 else "")
            + ": "
            + ", ".join(f["name"] for f in failed),
            {
                "failed": failed,
                "base": base,
                "composed_on": steps[hi - 2].merge if hi > 1 else base,
            },
            park_task=True,
        )

    # integration of a tested prefix

    def _integrate(self, base: Oid, steps: list[_Step]) -> None:
        signing = integration_signing(self.repo)
        trust = integration_trust(self.repo)
        tip = base
        made: list[tuple[_Step, Oid]] = []
        for s in steps:
            note = s.note
            goal = note.goal.strip().splitlines()[0] if note.goal.strip() else ""
            passed = ", ".join(f"{c.name}=passed" for c in s.checks) or "none"
            verdict = note.review.verdict if note.review and note.review.verdict else "none"
            message = (
                f"Merge gitsup candidate {s.entry.task} into {self.q.branch}\n\n"
                + (f"{goal}\n\n" if goal else "")
                + f"Sup-Task: {s.entry.task}\nSup-Candidate: {s.entry.candidate}\n"
                + f"Sup-Baseline: {note.baseline}\nSup-Checks: {passed}\nSup-Review: {verdict}\n"
                + f"Sup-Queue: {self.q.branch}\n"
                + policy_change_trailer(s.entry.policy_change)
            )
            tip = sign_integration_commit(
                self.repo, signing, s.tree, [tip, Oid(s.entry.candidate)], message
            )
            made.append((s, tip))
        bad = trust.check([(self.target_ref_name, base, tip)])[self.target_ref_name]
        if bad is not None:
            raise QueueError(
                f"the signed integrations would not pass the gate: {bad.commit[:12]} {bad.why}; "
                f"{self.q.branch} untouched",
                hint="`git sup init` adds the integration key to the allowed signers",
            )
        checkout = self._require_clean_checkout()
        fault("queue_before_move")
        try:
            self.repo.update_ref(
                self.target_ref_name,
                tip,
                old=base,
                message=f"gitsup queue: {len(made)} integration(s) into {self.q.branch}",
            )
        except RefConflict as exc:
            raise QueueError(
                f"{self.q.branch} moved while the queue ran ({exc}); nothing was changed",
                hint="`git sup queue run` again composes on the new tip",
            ) from None
        if checkout is not None:
            try:
                GitRepo.open(checkout).advance_checkout(base, tip)
            except GitsupError as exc:
                self.say(f"the checkout {checkout} was not advanced: {exc.message}")
        fault("queue_after_move")
        # checks that failed and then passed on the tested tree: recorded, blamed on nobody
        flaky = list(self.checks.flaky.get(steps[-1].tree, []))
        for s, commit in made:
            self._record_integrated(s.entry.task, s.entry.candidate, commit, flaky)
        done = {s.entry.task: c for s, c in made}
        with self.q.change(f"integrated {len(made)} into {self.q.branch}") as st:
            for e in st.entries:
                if e.task in done and e.status in ("queued", "removed"):
                    if e.status == "removed":  # `queue remove` came after it was tested
                        e.reason = "removed while it was being integrated; it is integrated"
                    e.status, e.integration_commit = "integrated", done[e.task]
                    if flaky:
                        e.evidence = {"flaky": flaky, "tree": steps[-1].tree}
                    e.finished_at = time.time()
        self.res.integrated += list(done)
        for s, commit in made:
            self.q.event(et.QueueIntegrated(task=TaskId(s.entry.task), commit=Oid(commit)))
        self.q.event(et.QueueTargetMoved(from_=base, to=tip), seal=f"{self.q.branch} at {tip[:12]}")

    def _require_clean_checkout(self) -> Path | None:
        """The checkout of the target branch (if any), refused unless clean: the queue advances
        it with the integrations, which must neither overwrite nor mix with a person's edits."""
        checkout = self.repo.checked_out_branches().get(self.q.branch)
        if checkout is None:
            return None
        wt = GitRepo.open(checkout)
        dirty = sorted(wt.dirty_paths())
        if not dirty:
            return checkout
        untracked = set(wt.untracked_paths())
        shown = ", ".join(
            f"{p} (untracked)" if p in untracked else p for p in dirty[:_SHOW_PATHS]
        ) + (f" and {len(dirty) - _SHOW_PATHS} more" if len(dirty) > _SHOW_PATHS else "")
        raise QueueError(
            f"{self.q.branch} is checked out in {checkout} with uncommitted changes: {shown}; "
            "nothing was composed or tested",
            hint=f"commit them, or set them aside with `git -C {checkout} stash "
            "--include-untracked` (untracked files are not stashed without it), "
            "then `git sup queue run` again",
        )

    @property
    def target_ref_name(self) -> str:
        return self.q.target_ref

    # sending a candidate back

    def _finish(
        self, e: Entry, kind: str, reason: str, evidence: dict[str, Any], *, park_task: bool
    ) -> None:
        """A candidate leaves the queue without being integrated: parked with its evidence
        (the candidate note and the task record say so, so `integrate` refuses it too)."""
        if park_task:
            self._park_task(e, reason, evidence)
        with self.q.change(f"{kind}: {e.task}") as st:
            for x in st.queued():
                if x.task == e.task:
                    x.status, x.reason, x.evidence = "parked", reason, evidence
                    x.finished_at = time.time()
        item = {"task": e.task, "kind": kind, "reason": reason, "evidence": evidence}
        self.res.sent_back.append(item)
        self.q.event(
            et.QueueParked(task=TaskId(e.task), kind=kind, reason=reason, evidence=evidence),
            seal=f"parked {e.task}",
        )
        self.say(f"{e.task}: {kind}: {reason}")
        if park_task:
            # started once the batch has landed: the repair's base is the new target
            self._repairs.append((e, kind, reason, item))

    def _flush_repairs(self) -> None:
        todo, self._repairs = self._repairs, []
        for e, kind, reason, item in todo:
            repair, why_not = self._start_repair(e, kind, reason, item["evidence"])
            item["repair_task"] = repair
            if not repair:
                item["no_repair"] = why_not
                continue
            with self.q.change(f"repair task {repair} for {e.task}") as st:
                for x in st.entries:
                    if x.task == e.task and x.status == "parked" and not x.repair_task:
                        x.status, x.repair_task = "repair", repair
            self._link_repair(e.task, repair)
            self.q.event(
                et.QueueRepair(task=TaskId(e.task), repair_task=repair), seal=f"repair {e.task}"
            )
            self.say(f"{e.task}: repair task {repair} started")

    def _start_repair(
        self, e: Entry, kind: str, reason: str, evidence: dict[str, Any]
    ) -> tuple[str, str]:
        """A repairable worker (claude, tmux) gets a repair task: the same spec on the new
        base, its goal carrying the evidence. Returns (task id, "") or ("", why not)."""
        spec = spec_or_none(self.ctx, e.task)
        if spec is None:
            return "", "the task's spec is gone"
        if spec.worker.kind == "process":
            return "", "its worker (process) cannot take a repair turn"
        if self.repair_rounds(e) >= spec.autonomy.max_repair_rounds:
            return "", f"repair rounds exhausted ({spec.autonomy.max_repair_rounds})"
        from gitsup.tasks.detach import start_detached

        base = self.repo.ref_target(self.q.target_ref) or ""
        lines = [
            spec.goal,
            "",
            f"Integration repair (queue into {self.q.branch}): candidate {e.candidate} of "
            f"task {e.task} {reason}.",
            f"This worktree starts at {self.q.branch} {base}. Bring that candidate's work in "
            f"(e.g. `git merge {e.candidate}` or `git cherry-pick` its commits), make it fit "
            "what is on the branch now so the required checks pass, and commit.",
        ]
        if evidence.get("conflicts"):
            lines.append("Conflicting paths: " + ", ".join(evidence["conflicts"][:50]))
        for f in evidence.get("failed", [])[:5]:
            lines += [f"Failing check {f['name']}, end of its output:", f["output_tail"][-3000:]]
        try:
            rec = start_detached(
                self.ctx,
                spec.model_copy(update={"base": self.q.branch, "goal": "\n".join(lines)}),
            )
        except GitsupError as exc:
            return "", f"the repair task could not start: {exc.message}"
        return rec.id, ""

    def repair_rounds(self, e: Entry) -> int:
        state, _ = self.q.read()
        rounds, cur = 0, e
        while cur.repair_of:
            rounds += 1
            prev = state.find(cur.repair_of)
            if prev is None:
                break
            cur = prev
        return rounds

    def _collect_repairs(self) -> None:
        """Repair tasks that finished: a ready candidate re-enters the queue (at its end)."""
        from gitsup.state import TERMINAL

        state, _ = self.q.read()
        done: dict[str, tuple[str, str]] = {}
        for e in state.entries:
            if e.status != "repair" or not e.repair_task:
                continue
            try:
                rec = self.ctx.store.load(e.repair_task)
            except GitsupError:
                done[e.task] = ("parked", "")
                continue
            if rec.state not in TERMINAL:
                continue
            cand = self.repo.ref_target(task_refs(TaskId(rec.id))["candidate"])
            ok = rec.status == Status.READY and cand is not None
            done[e.task] = ("repaired", cand or "") if ok else ("parked", "")
        if not done:
            return
        with self.q.change(f"repairs finished: {' '.join(done)}") as st:
            for e in st.entries:
                if e.task not in done or e.status != "repair":
                    continue
                outcome, repaired = done[e.task]
                e.status = outcome
                if outcome == "repaired":
                    st.entries.append(
                        Entry(
                            task=e.repair_task,
                            candidate=repaired,
                            added_at=time.time(),
                            repair_of=e.task,
                        )
                    )
                else:
                    e.reason += f"; repair task {e.repair_task} did not end ready"
        for task, (outcome, _cand) in done.items():
            self.q.event(et.QueueRepairFinished(task=TaskId(task), outcome=outcome))

    def _link_repair(self, task: str, repair: str) -> None:
        """The parked task's record names its repair task (`ls`, `watch`: the person is needed
        there now, not here)."""
        tid = TaskId(task)
        with self.ctx.store.lock(tid):
            record = self.ctx.store.load(tid)
            record.queue_repair = repair
            record.reasons.append(f"integration queue: repair task {repair} carries it on")
            self.ctx.store.save(record)

    def _park_task(self, e: Entry, reason: str, evidence: dict[str, Any]) -> None:
        tid = TaskId(e.task)
        with self.ctx.store.lock(tid):
            text = self.repo.read_note(Oid(e.candidate))
            if text is None:
                return
            note = CandidateNote.parse(text)
            if note.status != Status.READY:
                return
            why = f"integration queue into {self.q.branch}: {reason}"
            parked = note.model_copy(
                update={"status": Status.PARKED, "reasons": [*note.reasons, why]}
            )
            data = parked.model_dump(mode="json", by_alias=True)
            data["queue_evidence"] = evidence
            self.repo.write_note(Oid(e.candidate), json.dumps(data, indent=2) + "\n")
            with EventLog(self.ctx.layout.events(tid), tid) as log:
                log.append(
                    et.CandidateParked(
                        by="queue", into=self.q.branch, reason=reason, evidence=evidence
                    )
                )
                log.seal(self.repo, f"parked by the queue into {self.q.branch}")
            record = self.ctx.store.load(tid)
            record.status = Status.PARKED
            record.reasons.append(why)
            self.ctx.store.save(record)


def run(
    ctx: SupRepo,
    into: str | None = None,
    *,
    batch: int | None = None,
    retries: int | None = None,
    slots: int | None = None,
    on_progress: Callable[[str], None] | None = None,
    hosts: Callable[[str, int], CheckSlots] | None = None,
) -> list[RunResult]:
    branches = [_branch(into)] if into else queue_branches(ctx)
    if not branches:
        raise QueueError("nothing is queued", hint="`git sup queue add ID...` queues candidates")
    size = batch or int(ctx.repo.config_get("sup.queueBatch") or DEFAULT_BATCH)
    again = configured_retries(ctx) if retries is None else retries
    n = configured_slots(ctx) if slots is None else slots
    if n < 1:
        raise QueueError(f"--slots must be a number >= 1, not {n}")
    return [
        Runner(
            ctx, b, batch=size, retries=again, slots=n, on_progress=on_progress, hosts=hosts
        ).run()
        for b in branches
    ]


def configured_slots(ctx: SupRepo) -> int:
    """`git config sup.queue.slots` (default 1: one composition at a time, batching and
    bisection): compositions under test at once."""
    return _configured_count(ctx, "sup.queue.slots", DEFAULT_SLOTS, least=1)


def configured_retries(ctx: SupRepo) -> int:
    """`git config sup.queue.retries` (default 1): fresh runs of a failing composition check."""
    return _configured_count(ctx, "sup.queue.retries", DEFAULT_RETRIES, least=0)


def _configured_count(ctx: SupRepo, key: str, default: int, *, least: int) -> int:
    """A whole number >= `least` from `git config KEY`; `default` when unset or empty."""
    raw = ctx.repo.config_get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        n = int(raw.strip())
    except ValueError:
        n = least - 1
    if n < least:
        raise QueueError(f"{key} must be a number >= {least}, not {raw!r}")
    return n


def detach_run(
    ctx: SupRepo,
    into: str | None,
    batch: int | None,
    retries: int | None = None,
    slots: int | None = None,
) -> tuple[int, Path]:
    """`queue run --detach`: the same runner in its own session, output in the queue dir."""
    branch = _branch(into or default_target(ctx))
    q = Queue(ctx, branch)
    log = q.dir / "runner.log"
    argv = proc.gitsup_python("gitsup", "queue", "run", "--into", branch)
    if batch:
        argv += ["--batch", str(batch)]
    if retries is not None:
        argv += ["--retries", str(retries)]
    if slots is not None:
        argv += ["--slots", str(slots)]
    pid = proc.spawn_detached(argv, cwd=str(ctx.repo.main_workdir), log=log)
    return pid, log
