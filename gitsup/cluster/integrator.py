"""The queue on the cluster: one workflow per target branch, its one activity on an
integrator (the machine that holds the signing key, `git sup host run --integrator`).

The workflow's id is derived from the repository's task queue and the branch
(`gitsup-queue:<queue>:<branch>`), and Temporal never runs two workflows of one id: two
`git sup queue run --cluster` never integrate into one branch at once. Its activity is
scheduled on the integrators' own task queue (`<queue>.integrator`), which task hosts never
poll: a task host never composes, signs or pushes an integration.

The activity, in the integrator's clone: bring the target branch up to the review remote's
(a fast-forward; the checkout too), fetch each queued task (its refs, notes and record,
`record.fetch_task`), queue the ready ones in its own queue, run the queue as
`git sup queue run` does (compose, test in the sandbox, sign one merge per candidate), then
push the protected branch and the notes to the review remote, whose gate accepts only signed
integrations. The submitter then fetches the branch and records each outcome in its queue."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from gitsup.cluster.client import connect
from gitsup.cluster.heartbeat import heartbeating
from gitsup.cluster.settings import ClusterSettings
from gitsup.cluster.workflow import INTEGRATE_ACTIVITY, QUEUE_WORKFLOW, integrator_queue
from gitsup.errors import Exit, GitsupError
from gitsup.git import remote as transport
from gitsup.ids import Oid, TaskId
from gitsup.store.suprepo import SupRepo
from gitsup.supervision.publisher import review_remote


def queue_workflow_id(settings: ClusterSettings, branch: str) -> str:
    return f"gitsup-queue:{settings.queue}:{branch}"


def require_trust_roots(repo: Any) -> list[str]:
    """The repository's trust roots in the integrator's clone (`sup.trustRoot`): a target's
    history is verified from them before anything is signed on it. They are the
    integrator's own configuration, as its key is (never what a task, a host or a
    submitter sends): without them the integrator refuses to serve or to integrate
    (GitsupError, bad input) rather than trust whatever the branch holds."""
    roots = [r.strip() for r in repo.config_get_all("sup.trustRoot") if r.strip()]
    if not roots:
        raise GitsupError(
            "an integrator verifies the target's history from the repository's trust roots, "
            "and this clone has none (sup.trustRoot)",
            hint="copy them from the maintainer's clone or the review remote's gate: "
            "`git config --add sup.trustRoot <commit>` for each of "
            "`git config --get-all sup.trustRoot` there",
        )
    return roots


class Integrator:
    """The integration activity of one integrator: `clone` is its clone."""

    def __init__(self, ctx: SupRepo, name: str, address: str) -> None:
        self.clone = ctx.repo.main_workdir
        self.name = name
        self.address = address  # the cluster whose task hosts test the compositions

    @activity.defn(name=INTEGRATE_ACTIVITY)
    async def integrate(self, job: dict[str, Any]) -> dict[str, Any]:
        try:
            return await heartbeating(self._integrate, job, details={"integrator": self.name})
        except GitsupError as exc:
            raise ApplicationError(exc.message, type="GitsupError", non_retryable=True) from None

    def _integrate(self, job: dict[str, Any]) -> dict[str, Any]:
        from gitsup.cluster.record import fetch_task
        from gitsup.supervision.publisher import publish_notes
        from gitsup.tasks.queue_state import Queue, QueueError, add

        ctx = SupRepo.discover(self.clone)
        require_trust_roots(ctx.repo)  # before anything here could record the tips as roots
        remote = review_remote(ctx.repo)
        branch = str(job["into"])
        q = Queue(ctx, branch)
        _catch_up(ctx, remote, q.target_ref)
        skipped: dict[str, str] = {}
        state, _ = q.read()
        for entry in job["tasks"]:
            task = TaskId(str(entry["task"]))
            fetch_task(ctx, task, remote=remote)
            held = state.find(task)
            if held is not None and held.status == "queued":
                continue
            try:
                add(ctx, [task], branch, allow_policy_change=bool(entry.get("policy_change")))
            except QueueError as exc:
                skipped[task] = exc.message
        knobs = {k: job.get(k) for k in ("batch", "retries", "slots")}
        result = _run_queue(ctx, branch, self.address, knobs) if q.read()[0].queued() else {}
        tip = ctx.repo.ref_target(q.target_ref)
        assert tip is not None
        # the protected branch, then the notes that say integrated (signed merges only: the
        # gate refuses anything else)
        transport.push(ctx.repo.main_workdir, remote, [f"{q.target_ref}:{q.target_ref}"])
        publish_notes(ctx.repo, remote)
        state, _ = q.read()
        outcomes = {
            e.task: {
                "status": e.status,
                "integration_commit": e.integration_commit,
                "reason": e.reason,
            }
            for e in state.entries
            if e.task in {str(t["task"]) for t in job["tasks"]}
        }
        return {
            "into": branch,
            "integrator": self.name,
            "target": tip,
            "outcomes": outcomes,
            "skipped": skipped,
            "run": result,
        }


def _run_queue(ctx: SupRepo, branch: str, address: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """`git sup queue run --into BRANCH --on-hosts ADDRESS` in this clone, as its own process
    (the same runner as on one machine, deciding, signing and moving the branch here; the
    compositions' checks run on the task hosts, gitsup/cluster/checks.py)."""
    import json

    from gitsup.host import proc

    argv = proc.gitsup_python(
        "gitsup", "queue", "run", "--into", branch, "--json", "--quiet", "--on-hosts", address
    )
    for knob, value in knobs.items():
        if value is not None:
            argv += [f"--{knob}", str(int(value))]
    # stderr too: a run that fails says why there (`--quiet`: nothing else goes there)
    res = proc.run(argv, cwd=ctx.repo.main_workdir, max_output=1 << 22)
    try:
        runs = json.JSONDecoder().raw_decode(res.output[res.output.index("[") :])[0]
        out: dict[str, Any] = runs[0]
    except (ValueError, IndexError, KeyError, TypeError):
        raise GitsupError(
            f"the queue run into {branch} failed (exit {res.returncode}): {res.output[-400:]}"
        ) from None
    return out


def _catch_up(ctx: SupRepo, remote: str, ref: str) -> None:
    """This clone's target branch (and its checkout) at the review remote's, which only
    integrations move: a fast-forward, or a refusal when this clone has one of its own."""
    from gitsup.git import GitRepo

    repo = ctx.repo
    try:
        theirs = transport.fetch_one(repo.main_workdir, repo.common_dir, remote, ref)
    except transport.TransportError as exc:
        raise ApplicationError(f"cannot fetch {ref} from {remote}: {exc.message}") from None
    if theirs is None:
        raise GitsupError(f"the review remote {remote} has no {ref}")
    ours = repo.ref_target(ref)
    if ours == theirs:
        return
    if ours is not None and not repo.is_ancestor(ours, theirs):
        raise GitsupError(
            f"{ref} in the integrator's clone is not behind the review remote's",
            hint="an integrator's target branch moves only with its integrations",
        )
    checkout = repo.checked_out_branches().get(ref.removeprefix("refs/heads/"))
    if checkout is not None and ours is not None:
        GitRepo.open(checkout).advance_checkout(ours, theirs)
    else:
        repo.update_ref(ref, theirs, old=ours, message="gitsup: the review remote's")


# --- the submitter's side: `git sup queue run --cluster` --------------------------------------


def run_on_cluster(
    ctx: SupRepo,
    settings: ClusterSettings,
    into: str | None,
    knobs: dict[str, int | None] | None = None,
    *,
    wait: float = 3600.0,
    on_progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Run the queue of each branch (`into`, else every queue of this clone) as its
    workflow; returns each run's result once this clone's queue records its outcomes."""
    say = on_progress or (lambda _m: None)
    from gitsup.tasks.queue_state import Queue, QueueError, _branch, queue_branches

    remote = review_remote(ctx.repo)
    branches = [_branch(into)] if into else queue_branches(ctx)
    if not branches:
        raise QueueError("nothing is queued", hint="`git sup queue add ID...` queues candidates")
    results = []
    for branch in branches:
        q = Queue(ctx, branch)
        queued = q.read()[0].queued()
        if not queued:
            continue
        job = {
            "into": branch,
            "tasks": [{"task": e.task, "policy_change": bool(e.policy_change)} for e in queued],
            # `--batch`, `--retries`, `--slots` of the integrator's queue run (None: its config)
            **(knobs or {}),
        }
        res = asyncio.run(_run(settings, queue_workflow_id(settings, branch), job, wait, say))
        _record(ctx, remote, q, res, say)
        results.append(res)
    if not results:
        raise QueueError("nothing is queued", hint="`git sup queue add ID...` queues candidates")
    return results


def _follow(
    ctx: SupRepo,
    remote: str,
    branch: str,
    ref: str,
    ours: Oid,
    tip: Oid,
    say: Callable[[str], None],
) -> str:
    """This clone's branch follows the integrations as `git pull --ff-only` would: moved
    to `tip` when it is behind it, its checkout (if any) updated when clean (`moved`);
    otherwise left as it is, and said (`left`)."""
    from gitsup.git import GitRepo, RefConflict

    repo = ctx.repo
    message = "gitsup: integrated on the cluster"
    if not repo.is_ancestor(ours, tip):
        say(
            f"{branch} here has commits the review remote's does not: left as it is "
            f"(the integrations are in refs/remotes/{remote}/{branch})"
        )
        return "left"
    checkout = repo.checked_out_branches().get(branch)
    if checkout is not None and not GitRepo.open(checkout).is_clean():
        say(
            f"{branch} is checked out in {checkout} with uncommitted changes (or untracked "
            f"files): left at {ours[:12]} (`git merge --ff-only {remote}/{branch}` there "
            "brings the integrations)"
        )
        return "left"
    try:
        repo.update_ref(ref, tip, old=ours, message=message)
    except RefConflict:
        say(f"{branch} moved here meanwhile: left as it is")
        return "left"
    if checkout is None:
        return "moved"
    try:
        GitRepo.open(checkout).advance_checkout(ours, tip)
    except GitsupError as exc:
        with contextlib.suppress(RefConflict):
            repo.update_ref(ref, ours, old=tip, message=f"{message}: undone")
        say(f"{branch} left at {ours[:12]}: {exc.message}")
        return "left"
    return "moved"


async def _run(
    settings: ClusterSettings,
    wid: str,
    job: dict[str, Any],
    wait: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    from temporalio.client import WorkflowFailureError
    from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError

    client = await connect(settings)
    try:
        handle = await client.start_workflow(
            QUEUE_WORKFLOW,
            job,
            id=wid,
            task_queue=integrator_queue(settings.queue),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        raise GitsupError(
            f"another queue runner is integrating into {job['into']} on the cluster "
            f"(workflow {wid})",
            hint="wait for it; its outcomes reach this clone with the next `queue run --cluster`",
        ) from None
    say(f"the queue into {job['into']} runs as workflow {wid}; waiting for an integrator")
    try:
        result: dict[str, Any] = await asyncio.wait_for(handle.result(), timeout=wait)
    except WorkflowFailureError as exc:
        cause: object = exc.cause
        while getattr(cause, "cause", None) is not None:  # the integrator's own words
            cause = getattr(cause, "cause", None)
        raise GitsupError(
            f"the queue into {job['into']} failed on the cluster: {getattr(cause, 'message', cause)}",
            exit_code=Exit.INTERNAL,
        ) from None
    return result


def _record(
    ctx: SupRepo,
    remote: str,
    q: Any,
    res: dict[str, Any],
    say: Callable[[str], None] = lambda _m: None,
) -> None:
    """This clone's queue says what the integrator did; the branch and notes come here."""
    ref = q.target_ref
    transport.fetch(ctx.repo.main_workdir, remote, [f"+{ref}:refs/remotes/{remote}/{q.branch}"])
    notes = transport.fetch_one(
        ctx.repo.main_workdir, ctx.repo.common_dir, remote, "refs/notes/sup"
    )
    if notes is not None:
        ctx.repo.merge_notes(notes)
    ours = ctx.repo.ref_target(ref)
    tip = Oid(str(res["target"]))
    # how this clone's branch followed: moved, left (said why) or unchanged (or absent)
    res["local_branch"] = "unchanged"
    if ours is not None and ours != tip:
        res["local_branch"] = _follow(ctx, remote, q.branch, ref, ours, tip, say)
    outcomes: dict[str, dict[str, Any]] = res.get("outcomes", {})
    done = {t: o for t, o in outcomes.items() if o.get("status") not in (None, "queued")}
    if not done:
        return
    with q.change(f"cluster queue run: {len(done)} outcomes") as st:
        for e in st.queued():
            o = done.get(e.task)
            if o is not None:
                e.status = str(o["status"])
                e.integration_commit = o.get("integration_commit") or e.integration_commit
                e.reason = o.get("reason") or e.reason
                e.finished_at = time.time()
