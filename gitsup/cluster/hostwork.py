"""What a host does for the cluster: the task activity (the supervisor of one task, on this
machine, heartbeating while it runs) and `git sup host run`, which serves it.

The activity runs the task as a local detached task of the host's clone under the id its
submitter chose, with the host's name in the record (`host`) and in `worker_started`. Its
baseline comes from the review remote (`sup.reviewRemote`), where the submitter pushed it.
While it runs, the activity heartbeats every second or so with the task's state; a host
whose heartbeats stop (it died, or lost the cluster) has its task moved by Temporal to
another host (docs/cluster.md, "Failover"). A stop (`git sup stop ID` anywhere) is the
workflow's cancellation: the activity stops the local task, which saves its work, and
returns its record."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from gitsup.cluster.client import connect
from gitsup.cluster.settings import ClusterSettings
from gitsup.cluster.workflow import ACTIVITY, TaskWorkflow
from gitsup.errors import GitsupError
from gitsup.ids import Oid, TaskId, parse_task_id
from gitsup.layout import task_refs
from gitsup.state import TERMINAL
from gitsup.store.record import TaskRecord
from gitsup.tasks.lifecycle import SupRepo, status_exit


def review_remote(ctx: SupRepo) -> str:
    remote = ctx.repo.config_get("sup.reviewRemote")
    if not remote:
        raise GitsupError(
            "the cluster keeps every task's refs on the review remote, and this clone has none",
            hint="git config sup.reviewRemote <remote> (the gated remote every clone shares)",
        )
    return remote


def result_of(record: TaskRecord) -> dict[str, Any]:
    """The workflow's result: what the submitter shows and exits with."""
    return {
        "task": record.id,
        "state": record.state.value,
        "status": record.status.value,
        "host": record.host,
        "candidate": record.candidate,
        "wip": record.wip,
        "head": record.head,
        "turns": record.turns,
        "reasons": list(record.reasons),
        "exit": status_exit(record),
    }


class HostWork:
    """The activity of one host: `clone` is the host's clone, `name` the host's name."""

    def __init__(self, clone: Path, name: str) -> None:
        self.clone = clone
        self.name = name

    def _ctx(self) -> SupRepo:
        return SupRepo.discover(self.clone)

    @activity.defn(name=ACTIVITY)
    async def run_task(self, job: dict[str, Any]) -> dict[str, Any]:
        task = parse_task_id(str(job["task"]))
        info = activity.info()
        interval = max(0.2, min(1.0, float(job["heartbeat"]) / 5))
        begin = asyncio.ensure_future(asyncio.to_thread(self._begin, job, task, info.attempt))
        try:
            # a start takes a while (fetch, worktree, sandbox): heartbeat meanwhile
            while not begin.done():
                activity.heartbeat({"host": self.name, "state": "preparing", "turns": 0})
                await asyncio.wait([begin], timeout=interval)
            begin.result()
        except GitsupError as exc:
            # bad input stays bad on every host: the workflow ends failed, no retry
            raise ApplicationError(exc.message, type="GitsupError", non_retryable=True) from None
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await begin  # the start finishes (or fails) before it is stopped
            if not await asyncio.to_thread(self._ctx().store.exists, task):
                raise
            return await self._stopped(task)
        try:
            while True:
                record = await asyncio.to_thread(self._ctx().store.load, task)
                activity.heartbeat(
                    {"host": self.name, "state": record.state.value, "turns": record.turns}
                )
                if record.state in TERMINAL:
                    return result_of(record)
                if not await asyncio.to_thread(_supervised, record):
                    # the local supervisor died: another attempt (here or elsewhere) continues
                    raise ApplicationError(f"the supervisor of task {task} on {self.name} died")
                await asyncio.sleep(interval)
        except asyncio.CancelledError:
            return await self._stopped(task)

    async def _stopped(self, task: TaskId) -> dict[str, Any]:
        """The activity was cancelled: stop the task here (its work is saved). A stop that
        was asked for (`git sup stop`) or this host's own shutdown ends the task `stopped`;
        a host that lost its heartbeats (the cluster gave its task to another host) stops
        its copy and reports nothing."""
        details = activity.cancellation_details()
        record = await asyncio.to_thread(self._stop, task)
        if details is not None and details.timed_out:
            raise asyncio.CancelledError()
        return result_of(record)

    def _begin(self, job: dict[str, Any], task: TaskId, attempt: int) -> None:
        """Start the task here, or follow it when this host runs it already."""
        ctx = self._ctx()
        if ctx.store.exists(task):
            return  # this host started it (an earlier attempt): follow it to its end
        from gitsup.git import transport
        from gitsup.spec import TaskSpec
        from gitsup.tasks.detach import start_detached

        baseline = Oid(str(job["baseline"]))
        remote = review_remote(ctx)
        ref = task_refs(task)["baseline"]
        try:
            transport.fetch(ctx.repo.main_workdir, remote, [ref])
        except GitsupError as exc:  # not pushed yet, or the remote is away: try again
            raise ApplicationError(f"baseline of {task} not on {remote}: {exc.message}") from None
        fetched = ctx.repo.resolve_commit("FETCH_HEAD")
        if fetched != baseline:
            raise ApplicationError(
                f"{ref} on {remote} is {fetched}, not the submitted {baseline}", non_retryable=True
            )
        spec = TaskSpec.model_validate({**job["spec"], "base": baseline})
        start_detached(ctx, spec, source=job.get("source"), task_id=task, host=self.name)

    def _stop(self, task: TaskId) -> TaskRecord:
        from gitsup.tasks.lifecycle import stop_task

        ctx = self._ctx()
        with contextlib.suppress(GitsupError):
            return stop_task(ctx, task, wait=120.0)
        return ctx.store.load(task)


def _supervised(record: TaskRecord) -> bool:
    from gitsup.host.procid import ProcessId

    owner = ProcessId.from_dict(record.supervisor)
    return owner is None or owner.alive()


def serve(
    ctx: SupRepo,
    settings: ClusterSettings,
    *,
    name: str,
    slots: int,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve the repository's task queue until SIGTERM or Ctrl-C; running tasks are then
    stopped (their work saved) and handed back to the cluster."""
    review_remote(ctx)
    asyncio.run(_serve(ctx, settings, name=name, slots=slots, on_ready=on_ready))


async def _serve(
    ctx: SupRepo,
    settings: ClusterSettings,
    *,
    name: str,
    slots: int,
    on_ready: Callable[[], None] | None,
) -> None:
    client = await connect(settings, identity=name)
    work = HostWork(ctx.repo.main_workdir, name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    worker = Worker(
        client,
        task_queue=settings.queue,
        workflows=[TaskWorkflow],
        activities=[work.run_task],
        max_concurrent_activities=slots,
        identity=name,
        # a heartbeat's answer is how a stop reaches the task: send them as they come
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        default_heartbeat_throttle_interval=timedelta(seconds=1),
    )
    async with worker:
        if on_ready is not None:
            on_ready()
        await stop.wait()
