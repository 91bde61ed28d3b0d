"""An independent review at integration time (`git sup integrate --review`, or git config
`sup.integrate.review`): the task's reviewer (`[review]` of its spec) judges the integration
itself, the merge of the candidate into the target as it will be signed, with the checks that
just ran on it. It runs read-only: in a throw-away detached worktree of the merge, in the task
sandbox with that worktree read-only (`sup.sandbox`), a command reviewer in a loopback network
namespace, an agent reviewer in a namespace whose only way out is its model API, either in a
cgroup of its own that is killed, checked empty and removed when the review ends (the confined
runner's, gitsup/verification/confined.py): nothing it started outlives it. Its verdict
goes into the integration commit's `Sup-Review` trailer instead of the task's; anything but
`pass` leaves the target untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.host import proc
from gitsup.ids import Oid
from gitsup.names import TASK_MARKER
from gitsup.spec import TaskSpec
from gitsup.store.record import CheckResult, ReviewResult
from gitsup.verification.confined import Applied, cgroup_base, contained_run
from gitsup.verification.review import ReviewRequest, evidence_bundle, run_review

LABEL = "integrate-review"


def wanted(repo: GitRepo, flag: bool) -> bool:
    """`--review`, else git config `sup.integrate.review` (a Git boolean)."""
    if flag:
        return True
    raw = repo.config_get("sup.integrate.review")
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in ("true", "yes", "on", "1"):
        return True
    if value in ("false", "no", "off", "0", ""):
        return False
    raise GitsupError(
        f"git config sup.integrate.review = {raw!r} is not a boolean",
        hint="git config sup.integrate.review true (or false)",
    )


def trailer(result: ReviewResult) -> str:
    """The `Sup-Review` value of an integration this review passed."""
    return f"{result.verdict} (integration review, {result.kind})"


def review_integration(
    repo: GitRepo,
    task: str,
    spec: TaskSpec | None,
    *,
    target: Oid,
    merge: Oid,
    into: str,
    candidate: Oid,
    checks: Sequence[CheckResult],
    policy: Sequence[str],
    protect: Sequence[str],
    say: Callable[[str], None],
) -> tuple[ReviewResult, dict[str, Any]]:
    """The review of `merge` (on `target`, into `into`) and what confined it (sandbox,
    network, cgroup, what it left behind); refuses (exit 2) when the task has no reviewer, or
    the sandbox or a cgroup is required and missing. A review that left processes it could
    not stop gives no verdict."""
    if spec is None or spec.review.kind == "none":
        raise GitsupError(
            f"task {task} has no reviewer for an integration review "
            + ("(its spec is not here)" if spec is None else '([review] kind = "none")'),
            hint="integrate without --review (and with sup.integrate.review false)",
        )
    root = Path(os.path.realpath(tempfile.mkdtemp(prefix=f"gitsup-review-{task}-")))
    worktree = root / "worktree"
    try:
        repo.add_detached_worktree(worktree, merge)
        try:
            say(f"review: {spec.review.kind} on {merge[:12]}")
            evidence = GitRepo.open(worktree).evidence(target)
            bundle = evidence_bundle(task, spec, checks, evidence, policy)
            bundle["integration"] = {
                "into": into,
                "target": target,
                "candidate": candidate,
                "merge": merge,
                "note": "The change as it integrates: the diff is the target against the "
                "merge of the candidate into it.",
            }
            applied = Applied()
            with _confined(repo, spec, worktree, root, protect, applied) as (env, wrap, wrap_for):
                kind = spec.review.kind
                ctx = ReviewRequest(
                    task,
                    worktree,
                    env,
                    spec,
                    bundle,
                    network=_agent_network(kind),
                    wrap=wrap,
                    wrap_for=wrap_for,
                )
                result, _verdict = run_review(ctx)
            if applied.left_behind:  # what it started could not be stopped: no verdict
                result = result.model_copy(
                    update={
                        "verdict": None,
                        "error": f"left processes behind: {', '.join(applied.left_behind)}",
                    }
                )
            say(f"review: {result.verdict or 'failed: ' + (result.error or '')}")
            return result, applied.as_dict()
        finally:
            repo.remove_detached_worktree(worktree)
    finally:
        shutil.rmtree(root, ignore_errors=True)


Wrap = Callable[[list[str]], list[str]]


@contextlib.contextmanager
def _confined(
    repo: GitRepo,
    spec: TaskSpec,
    worktree: Path,
    root: Path,
    protect: Sequence[str],
    applied: Applied,
) -> Iterator[tuple[dict[str, str], Wrap, Callable[[str | None], Wrap | None]]]:
    """The reviewer's environment, the read-only sandbox prefix of a command reviewer (in a
    loopback namespace of its own), and that of an agent reviewer in a given namespace; each
    in the review's cgroup, which is killed and removed when the block ends. What applied
    goes into `applied`."""
    from gitsup.host.contain import bootstrap_argv, isolated_netns
    from gitsup.host.sandbox import build_plan, load_rules, require_enforced, resolve_mode
    from gitsup.verification.confined import sandbox_summary

    env = proc.child_env({"GITSUP_INTEGRATION": LABEL}, drop=(TASK_MARKER, "CLAUDECODE"))
    argv = list(spec.review.argv or ())
    plan = build_plan(
        mode=resolve_mode(None, repo.config_get("sup.sandbox")),
        rules=load_rules(repo.main_workdir),
        worktree=worktree,
        common_dir=repo.common_dir,
        task_dir=root,
        branch="",
        env=env,
        programs=[argv] if argv else [],
        protect=list(protect),
    )
    require_enforced(
        plan,
        hint="the integration review runs only in the task sandbox; "
        "`git config sup.sandbox auto` runs it with what this host enforces",
    )
    applied.sandbox = sandbox_summary(plan)
    cg_base = cgroup_base(spec.isolation.cgroup, applied)  # raises when required and missing

    with contextlib.ExitStack() as stack:
        ns: str | None = None
        if spec.review.kind == "command":
            if spec.isolation.network == "host":
                applied.weaken_network("host", 'network = "host"')
            else:
                try:
                    ns = stack.enter_context(isolated_netns(LABEL))
                    applied.weaken_network("loopback")
                except GitsupError as exc:
                    if spec.isolation.network == "none":
                        raise
                    applied.weaken_network("host", f"auto: {exc.message}")
        else:
            applied.weaken_network("gated")
        # entered last, left first: what the reviewer started dies before its namespace
        run = stack.enter_context(
            contained_run("integrate", cg_base, spec.isolation.cgroup, applied, what="the review")
        )

        def wrap_in(ns: str | None) -> Wrap:
            def wrap(argv: list[str]) -> list[str]:
                sandbox = plan.argv(read_only=True, files=argv)
                return bootstrap_argv(argv, cgroup=run.cgroup, netns=ns, sandbox=sandbox)

            return wrap

        yield {**plan.env, **run.env}, wrap_in(ns), wrap_in


def _agent_network(kind: str) -> Callable[[Mapping[str, str]], Any] | None:
    """An agent reviewer's network: a namespace whose only way out is its model API."""
    if kind == "command":
        return None
    from gitsup.host.egress_gate import gated_namespace

    def network(env: Mapping[str, str]) -> Any:
        return gated_namespace(LABEL, env, model=True, model_kind=kind)

    return network
