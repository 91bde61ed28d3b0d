"""The submitter's side: `git sup start --cluster` and the commands that follow a cluster task
from the clone that submitted it (`wait`, `show`, `stop`).

A submission is one workflow whose id is the task id: Temporal refuses a second workflow of
that id (running or ended), so a task runs once across every machine. The baseline goes to
the review remote first, as `refs/sup/<id>/baseline` (which the gate never lets anyone
rewrite), while Temporal's client loads and connects; the workflow starts once the push has
ended, and a host starts the task only when that ref holds the commit the workflow names.
The push only creates the ref: when it is there, the id was submitted before, and the
cluster says whether that submission started.

The clone keeps `$GIT_COMMON_DIR/sup/cluster/<id>.json` (the cluster's address, namespace and
queue), which is how `wait`, `show` and `stop` know the task runs on the cluster."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gitsup.cluster.client import connect
from gitsup.cluster.settings import ClusterSettings, check_address, review_remote
from gitsup.errors import Exit, GitsupError
from gitsup.ids import TaskId, new_task_id, parse_task_id
from gitsup.layout import task_refs
from gitsup.preload import preloading
from gitsup.spec import TaskSpec
from gitsup.store.suprepo import SupRepo

Progress = Callable[[str], None]


def _marker(ctx: SupRepo, task: str) -> Path:
    return ctx.layout.root / "cluster" / f"{task}.json"


def cluster_task(ctx: SupRepo, task: str) -> ClusterSettings | None:
    """The cluster a task of this clone was submitted to, None for a local task."""
    path = _marker(ctx, task)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    from gitsup.cluster.settings import load

    base = load(ctx.repo, check_address(str(data["address"]), str(path)))
    return replace(base, namespace=str(data["namespace"]), queue=str(data["queue"]))


def submit(
    ctx: SupRepo,
    settings: ClusterSettings,
    spec: TaskSpec,
    *,
    task_id: str | None = None,
    attempts: int = 0,
) -> TaskId:
    """Push the task's baseline and start its workflow; returns the task id."""

    async def go() -> TaskId:
        return (await _submit(ctx, settings, spec, task_id, attempts))[1]

    return asyncio.run(go())


def submit_and_follow(
    ctx: SupRepo,
    settings: ClusterSettings,
    spec: TaskSpec,
    *,
    task_id: str | None = None,
    on_submitted: Callable[[TaskId], None] | None = None,
    on_progress: Progress | None = None,
) -> tuple[TaskId, dict[str, Any]]:
    """`submit`, then `follow` the task to its end on the same connection: the task id and
    its final record."""

    async def go() -> tuple[TaskId, dict[str, Any]]:
        client, task = await _submit(ctx, settings, spec, task_id, 0)
        if on_submitted is not None:
            on_submitted(task)
        # what fetches the task once it ended loads while it runs
        with preloading(["gitsup.cluster.record"]):
            return task, await _follow_on(client, task, on_progress, None)

    return asyncio.run(go())


async def _submit(
    ctx: SupRepo, settings: ClusterSettings, spec: TaskSpec, task_id: str | None, attempts: int
) -> tuple[Any, TaskId]:
    """Push the baseline and start the workflow: the client, connected, and the task id."""
    import gitsup.host.proc  # noqa: F401 - by this thread, not by the push's
    from gitsup.git import remote as transport
    from gitsup.tasks.lifecycle import source_branch_of

    task = parse_task_id(task_id) if task_id is not None else new_task_id()
    if ctx.store.exists(task):
        raise GitsupError(f"task {task} already exists in this repository")
    remote = review_remote(ctx.repo)
    baseline = ctx.repo.resolve_commit(spec.base)
    job = {
        "task": task,
        "spec": spec.model_dump(mode="json"),
        "baseline": baseline,
        "source": source_branch_of(ctx, spec.base),
        "heartbeat": settings.heartbeat,
        "attempts": attempts,
    }
    ref = task_refs(task)["baseline"]
    workdir = ctx.repo.main_workdir
    # The baseline travels while Temporal's client loads (a few tenths of a second of
    # imports) and connects. The push only creates the ref: where the review remote has it
    # already, nothing there moves.
    pushing = asyncio.ensure_future(
        asyncio.to_thread(transport.push_new, workdir, remote, ref, baseline)
    )
    try:
        client = await connect(settings)
    except GitsupError:
        await asyncio.wait([pushing])  # a refused push is said first
        if (refused := pushing.exception()) is not None:
            raise refused from None
        raise
    pushed = await pushing
    if pushed != "created":
        # This id was submitted before: the review remote never loses a `refs/sup/` ref,
        # and a submission pushes its baseline first. The cluster says whether that task
        # started; a submission whose workflow never started may be made again (its
        # baseline moving forward, never back: the gate's rule). For good when the workflow
        # starts: Temporal never runs two of one id.
        await _refuse_known(client, settings, task)
        if pushed == "other":
            await asyncio.to_thread(transport.push, workdir, remote, [f"{baseline}:{ref}"])
    # only now, with the baseline on the review remote: a host that takes the task finds it
    await _start(client, settings, job)
    path = _marker(ctx, task)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {"address": settings.address, "namespace": settings.namespace, "queue": settings.queue}
        )
        + "\n",
        encoding="utf-8",
    )
    return client, task


def _duplicate(task: str) -> GitsupError:
    return GitsupError(
        f"task {task} was submitted already (a task runs once)",
        hint=f"`git sup wait {task}` follows it",
    )


async def _refuse_known(client: Any, settings: ClusterSettings, task: str) -> None:
    from temporalio.service import RPCError, RPCStatusCode

    try:
        await client.get_workflow_handle(task).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return
        raise GitsupError(
            f"the cluster at {settings.address} refused: {exc.message}", exit_code=Exit.INTERNAL
        ) from None
    raise _duplicate(task)


async def _start(client: Any, settings: ClusterSettings, job: dict[str, Any]) -> None:
    from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from gitsup.cluster.workflow import WORKFLOW

    try:
        await client.start_workflow(
            WORKFLOW,
            job,
            id=str(job["task"]),
            task_queue=settings.queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )
    except WorkflowAlreadyStartedError:
        raise _duplicate(str(job["task"])) from None


async def _cancel(settings: ClusterSettings, task: str) -> None:
    client = await connect(settings)
    await client.get_workflow_handle(task).cancel()


def follow(
    settings: ClusterSettings,
    task: str,
    *,
    on_progress: Progress | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Wait for a cluster task's end (saying where it runs as that changes); its final
    record as the workflow returned it."""
    return asyncio.run(_follow(settings, task, on_progress, timeout))


async def _follow(
    settings: ClusterSettings, task: str, on_progress: Progress | None, timeout: float | None
) -> dict[str, Any]:
    return await _follow_on(await connect(settings), task, on_progress, timeout)


async def _follow_on(
    client: Any, task: str, on_progress: Progress | None, timeout: float | None
) -> dict[str, Any]:
    from temporalio.client import WorkflowExecutionStatus

    handle = client.get_workflow_handle(task)
    loop = asyncio.get_running_loop()
    end = None if timeout is None else loop.time() + timeout
    said = ""
    # the result is a long poll that answers as the workflow ends; meanwhile, where it runs
    done = asyncio.ensure_future(_result(handle, task))
    while True:
        await asyncio.wait([done], timeout=0.5)
        if done.done():
            return done.result()
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return await done
        if on_progress is not None:
            line = await _where(client, desc)
            if line and line != said:
                on_progress(f"task {task}: {line}")
                said = line
        if end is not None and loop.time() > end:
            done.cancel()
            raise GitsupError(
                f"task {task} is still running after {timeout:g}s", exit_code=Exit.INTERNAL
            )


async def _result(handle: Any, task: str) -> dict[str, Any]:
    from temporalio.client import WorkflowFailureError

    try:
        result: dict[str, Any] = await handle.result()
    except WorkflowFailureError as exc:
        return {
            "task": task,
            "state": "failed",
            "status": "failed",
            "reasons": [f"the cluster ended it: {exc.cause or exc}"],
            "exit": int(Exit.FAILED),
        }
    return result


async def _heartbeat(client: Any, desc: Any) -> dict[str, Any]:
    """The host's last heartbeat for the task: `host`, `state`, `turns`, `pending` (its open
    asks); empty before the first."""
    pending = list(desc.raw_description.pending_activities)
    if not pending or not pending[0].heartbeat_details.payloads:
        return {}
    decoded = await client.data_converter.decode(pending[0].heartbeat_details.payloads)
    return decoded[0] if decoded and isinstance(decoded[0], dict) else {}


async def _where(client: Any, desc: Any) -> str:
    """`STATE on HOST (turns N)` from the activity's last heartbeat."""
    pending = list(desc.raw_description.pending_activities)
    if not pending:
        return "waiting for a host"
    act = pending[0]
    host = act.last_worker_identity or "?"
    details = await _heartbeat(client, desc)
    host = str(details.get("host") or host)
    state = details.get("state")
    attempt = f", attempt {act.attempt}" if act.attempt > 1 else ""
    if state is None:
        return f"starting on {host}{attempt}"
    return f"{state} on {host} (turns {details.get('turns', 0)}{attempt})"


def fetch_result(ctx: SupRepo, task: str) -> str | None:
    """Bring an ended cluster task's refs, notes and record from the review remote into this
    clone (`show`, `log`, `report` then read it here); None, or why it could not."""
    from gitsup.cluster.record import fetch_task

    try:
        fetch_task(ctx, task)
    except GitsupError as exc:
        return exc.message
    return None


def stop(settings: ClusterSettings, task: str, *, wait: float = 60.0) -> dict[str, Any]:
    """Cancel the task's workflow: its host stops the task and saves its work; the final
    record once it has."""
    asyncio.run(_cancel(settings, task))
    return follow(settings, task, timeout=wait)


def describe(settings: ClusterSettings, task: str) -> dict[str, Any]:
    """What the cluster says of a task now: its final record once it ended, else where it
    runs."""
    return asyncio.run(_describe(settings, task))


async def _describe(settings: ClusterSettings, task: str) -> dict[str, Any]:
    from temporalio.client import WorkflowExecutionStatus

    client = await connect(settings)
    handle = client.get_workflow_handle(task)
    desc = await handle.describe()
    if desc.status == WorkflowExecutionStatus.RUNNING:
        beat = await _heartbeat(client, desc)
        return {
            "task": task,
            "state": "running",
            "where": await _where(client, desc),
            # the asks that wait for `git sup answer` here (docs/human.md)
            "pending": list(beat.get("pending") or []),
        }
    return await _result(handle, task)


def running_here(ctx: SupRepo) -> list[dict[str, Any]]:
    """The tasks this clone submitted that run on the cluster now, as `describe` says them
    (`where`, `pending`) with `cluster` (the address); for `git sup ls`. Reads nothing of the
    cluster when this clone submitted nothing it has not seen end; one connection per
    cluster."""
    from gitsup.cluster import submitted_here

    folder = ctx.layout.root / "cluster"
    if not folder.is_dir():
        return []
    by_cluster: dict[ClusterSettings, list[str]] = {}
    for path in sorted(folder.glob("*.json")):
        if submitted_here(ctx.layout, path.stem):
            settings = cluster_task(ctx, path.stem)
            if settings is not None:
                by_cluster.setdefault(settings, []).append(path.stem)
    rows = []
    for settings, ids in by_cluster.items():
        try:
            rows += asyncio.run(_running(settings, ids))
        except GitsupError as exc:  # that cluster away: its tasks said so, the rest listed
            where = f"unknown: {exc.message}"
            address = settings.address
            rows += [
                {"task": t, "state": "unknown", "where": where, "pending": [], "cluster": address}
                for t in ids
            ]
    return rows


async def _running(settings: ClusterSettings, tasks: list[str]) -> list[dict[str, Any]]:
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    client = await connect(settings)
    rows = []
    for task in tasks:
        try:
            desc = await client.get_workflow_handle(task).describe()
        except RPCError:  # unknown to the cluster (another namespace, a lost database)
            continue
        if desc.status == WorkflowExecutionStatus.RUNNING:
            beat = await _heartbeat(client, desc)
            rows.append(
                {
                    "task": task,
                    "state": "running",
                    "where": await _where(client, desc),
                    "pending": list(beat.get("pending") or []),
                    "cluster": settings.address,
                }
            )
    return rows
