"""What a host does for the cluster: the task activity (the supervisor of one task, on this
machine, heartbeating while it runs) and `git sup host run`, which serves it.

The activity runs the task as a local detached task of the host's clone under the id its
submitter chose, with the host's name in the record (`host`) and in `worker_started`. Its
baseline comes from the review remote (`sup.reviewRemote`), where the submitter pushed it.
While it runs, the activity heartbeats every second or so with the task's state; a host
whose heartbeats stop (it died, or lost the cluster) has its task moved by Temporal to
another host (docs/cluster.md, "Failure modes"). A stop (`git sup stop ID` in the clone that submitted it) is the
workflow's cancellation: the activity stops the local task, which saves its work, and
returns its record."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from gitsup.cluster.client import connect
from gitsup.cluster.control import POLL_INTERVAL
from gitsup.cluster.settings import ClusterSettings, review_remote
from gitsup.cluster.workflow import ACTIVITY, TaskWorkflow
from gitsup.errors import Exit, GitsupError
from gitsup.ids import Oid, TaskId, parse_task_id
from gitsup.layout import task_refs
from gitsup.state import TERMINAL
from gitsup.store.record import TaskRecord
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.detach import SpareSupervisor
from gitsup.tasks.lifecycle import status_exit

# how long an ended task's supervisor may take to publish it before the result goes out
LAST_PUBLICATION = 300.0
# how long a host that is stopped may take to hand its tasks over (`--drain-timeout`)
DRAIN = 60.0
# how often the sign of a task's last publication is looked for
END_POLL = 0.02


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
        # the activities that follow each task here now (a retry may follow what an earlier
        # attempt started), and the delayed stops of tasks no attempt follows any more
        self._live: dict[str, int] = {}
        # when an attempt of each task last came to this host (the event loop's clock)
        self._arrived: dict[str, float] = {}
        self._pending: set[asyncio.Task[None]] = set()
        self._children: set[tuple[int, float]] = set()  # supervisors started here, running
        self._taken: dict[str, set[int]] = {}  # the requests handed to each task's supervisor
        # a supervisor process started ahead of the next task here (gitsup/tasks/detach.py)
        self._spare: SpareSupervisor | None = None
        self._spare_lock = threading.Lock()
        self._closed = False

    def ready_spare(self) -> None:
        """Have a spare supervisor waiting for the next task (none when it cannot start,
        and none once the host stops)."""
        with self._spare_lock:
            if self._spare is None and not self._closed:
                with contextlib.suppress(OSError):
                    self._spare = SpareSupervisor(self.clone)

    def _take_spare(self) -> SpareSupervisor | None:
        with self._spare_lock:
            spare, self._spare = self._spare, None
            return spare

    def close(self) -> None:
        """The host stops serving: its spare supervisor ends (waited for, so that nothing
        of the host's runs after it), and no other starts."""
        with self._spare_lock:
            self._closed = True
        spare = self._take_spare()
        if spare is not None:
            spare.close(wait=10.0)

    def _ctx(self) -> SupRepo:
        return SupRepo.discover(self.clone)

    @activity.defn(name=ACTIVITY)
    async def run_task(self, job: dict[str, Any]) -> dict[str, Any]:
        task = parse_task_id(str(job["task"]))
        self._live[task] = self._live.get(task, 0) + 1
        self._arrived[task] = asyncio.get_running_loop().time()
        try:
            return await self._run(job, task)
        finally:
            self._live[task] -= 1
            # the next task's supervisor loads once this one is done: loading it while a
            # task starts would take the CPU that task's start needs
            await asyncio.to_thread(self.ready_spare)

    async def _run(self, job: dict[str, Any], task: TaskId) -> dict[str, Any]:
        info = activity.info()
        # the record is read four times a second (the task's end is seen at once); the SDK
        # sends at most one heartbeat a second of these (the host's throttle)
        interval = max(0.1, min(0.25, float(job["heartbeat"]) / 5))
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
        ended = 0.0
        asks = _Asks(self._ctx(), task)
        published = self._ctx().layout.published(task)
        polled = 0.0
        try:
            while True:
                record = await asyncio.to_thread(self._ctx().store.load, task)
                pending = await asyncio.to_thread(asks.pending, record)
                activity.heartbeat(
                    {
                        "host": self.name,
                        "state": record.state.value,
                        "turns": record.turns,
                        "pending": pending,
                    }
                )
                _reap(self._children, record)
                now = asyncio.get_running_loop().time()
                if now - polled >= POLL_INTERVAL and record.state not in TERMINAL:
                    polled = now
                    if _owner_alive(record):
                        await self._take_requests(task)
                if record.state in TERMINAL:
                    # the result once the supervisor's last publication (the candidate, the
                    # notes) is on the review remote, before anyone reads it: it says so
                    # (`published`), or it exited
                    loop = asyncio.get_running_loop()
                    ended = ended or loop.time()
                    if (
                        published.exists()
                        or not _owner_alive(record)
                        or loop.time() - ended > LAST_PUBLICATION
                    ):
                        self._collect_later(record)
                        return result_of(record)
                if not await asyncio.to_thread(_supervised, record):
                    # the local supervisor died: another attempt (here or elsewhere) continues
                    raise ApplicationError(f"the supervisor of task {task} on {self.name} died")
                # between two readings of the record, the sign of the last publication is
                # watched closely: the result goes out as soon as it is there
                await _until(published, END_POLL if ended else interval)
        except asyncio.CancelledError:
            return await self._stopped(task)

    def _collect_later(self, record: TaskRecord) -> None:
        """The task's result goes out while its supervisor may still be exiting: collect
        its exit once it has (a host would otherwise keep one zombie per task)."""

        async def collect() -> None:
            end = asyncio.get_running_loop().time() + LAST_PUBLICATION
            while _owner_alive(record) and asyncio.get_running_loop().time() < end:
                await asyncio.sleep(0.2)
            _reap(self._children, record)

        job = asyncio.create_task(collect())
        self._pending.add(job)
        job.add_done_callback(self._pending.discard)

    async def _take_requests(self, task: TaskId) -> None:
        """A person's requests for the task waiting in its workflow (`gitsup/cluster/control.py`):
        each handed once to the task's supervisor here, its outcome signalled back. A host that
        took one and died before it said so leaves it to the host that continues the task."""
        from temporalio.client import WorkflowHandle

        from gitsup.cluster.workflow import CONTROL_INBOX

        handle: WorkflowHandle[Any, Any] = activity.client().get_workflow_handle(
            activity.info().workflow_id or task
        )
        try:
            inbox = await handle.query(CONTROL_INBOX, result_type=list)
        except Exception:  # the frontend away, the workflow busy: the next poll asks again
            return
        seen = self._taken.setdefault(task, set())
        for req in inbox:
            if not isinstance(req, dict) or int(req.get("seq", 0)) in seen:
                continue
            seen.add(int(req["seq"]))
            job = asyncio.create_task(self._take(handle, task, req))
            self._pending.add(job)
            job.add_done_callback(self._pending.discard)

    async def _take(self, handle: Any, task: TaskId, req: dict[str, Any]) -> None:
        from gitsup.cluster.control import apply
        from gitsup.cluster.workflow import CONTROL_DONE

        outcome = await asyncio.to_thread(apply, self._ctx(), task, req, host=self.name)
        for _ in range(30):  # the frontend may be restarting: say it until it is heard
            try:
                await handle.signal(CONTROL_DONE, outcome)
                return
            except Exception:
                await asyncio.sleep(1.0)

    async def _stopped(self, task: TaskId) -> dict[str, Any]:
        """The activity was cancelled: stop the task here (its work is saved). A stop that
        was asked for (`git sup stop`) or this host's own shutdown ends the task `stopped`;
        an attempt the cluster timed out (this host was silent past the heartbeat timeout:
        a partition, a hang) reports nothing: the task's next attempt may come here again and follow
        the task on; when none has within a grace, the cluster gave it to another host, and
        this host stops its copy."""
        details = activity.cancellation_details()
        if details is not None and details.worker_shutdown and not details.cancel_requested:
            # this host is shutting down: another host continues the task
            return await self._hand_over(task)
        if details is None or not (details.cancel_requested or details.worker_shutdown):
            # timed out, or no longer known to the server (it timed the attempt out)
            timeout = activity.info().heartbeat_timeout
            grace = 3 * (timeout.total_seconds() if timeout is not None else 30.0)
            since = asyncio.get_running_loop().time()
            later = asyncio.create_task(self._stop_if_unfollowed(task, grace, since))
            self._pending.add(later)
            later.add_done_callback(self._pending.discard)
            raise asyncio.CancelledError()
        record = await asyncio.to_thread(self._stop, task)
        # its supervisor saves and publishes the work before it exits: wait for that
        end = asyncio.get_running_loop().time() + LAST_PUBLICATION
        while _owner_alive(record) and asyncio.get_running_loop().time() < end:
            activity.heartbeat({"host": self.name, "state": record.state.value})
            await asyncio.sleep(0.1)
        return result_of(record)

    async def _hand_over(self, task: TaskId) -> dict[str, Any]:
        """This host shuts down (SIGTERM, Ctrl-C): the task's supervisor and worker here are
        stopped, its state saved in the wip and published, and the activity fails so that
        Temporal runs it again on another host, which continues the task from that wip
        (`host_changed` there). A task that ended meanwhile returns its result."""
        job = asyncio.ensure_future(asyncio.to_thread(self._release, task))
        while not job.done():
            with contextlib.suppress(Exception):
                activity.heartbeat({"host": self.name, "state": "handing over"})
            await asyncio.wait([job], timeout=0.25)
        record, error = job.result()
        if record.state in TERMINAL:
            return result_of(record)
        saved = f"its state published as {record.wip}" if error is None else error
        # retryable: the next attempt goes to a host that still serves the queue
        raise ApplicationError(
            f"host {self.name} shut down and handed task {task} over ({saved})",
            type="HandedOver",
        )

    def _release(self, task: TaskId) -> tuple[TaskRecord, str | None]:
        """Stop the task's supervisor and worker here, leaving the task live (as a
        supervisor that died would, but with nothing left running), save the worktree in
        the wip, record `handed_over` and publish the task. Returns the record and, when
        the publication failed, why (the state saved here is then not on the remote)."""
        from gitsup.cluster.record import publish
        from gitsup.store import eventtypes as et
        from gitsup.store.taskgit import ImportLimits
        from gitsup.supervision.journal import task_log
        from gitsup.supervision.publisher import snapshot_wip
        from gitsup.supervision.recovery import release_dead

        ctx = self._ctx()
        record = ctx.store.load(task)
        if record.state in TERMINAL:
            return record, None
        killed = _kill_supervisor(record)
        record = ctx.store.load(task)
        if record.state in TERMINAL:
            return record, None  # it ended before it was stopped
        proof = release_dead(ctx, record)
        killed += [p for p in proof.killed if p not in killed]
        repo, layout = ctx.repo, ctx.layout
        spec = ctx.store.load_spec(task)
        error: str | None = None
        try:
            snapshot_wip(repo, layout, record, ImportLimits.resolve(repo, spec.limits.model_dump()))
        except Exception as exc:  # the wip published last stays the task's state
            error = f"its worktree could not be saved: {exc}"
        wip = repo.ref_target(task_refs(task)["wip"])
        head = repo.branch_target(record.branch) or Oid(record.baseline)
        reason = f"host {self.name} shut down"
        if not proof.gone:
            reason += f"; its worker is not provably gone ({proof.how})"
        record.wip = wip or record.wip
        record.reasons.append(f"handed over: {reason}")
        ctx.store.save(record)
        with task_log(layout, task, spec) as log:
            log.append(
                et.HandedOver(host=self.name, reason=reason, wip=wip, head=head, killed=killed)
            )
        last: GitsupError | None = None
        for _ in range(3):  # a push that lost a race with the notes is tried again
            try:
                publish(ctx, task)
                return record, error
            except GitsupError as exc:
                last = exc
        return record, f"its publication failed: {last.message if last else '?'}"

    def abandon(self) -> int:
        """The hand-over took too long (or a second signal came): kill the supervisors and
        workers of the tasks this host still runs, leaving each live for the cluster to
        move once its heartbeats stop. Returns how many."""
        from gitsup.host.procid import ProcessId
        from gitsup.supervision.recovery import release_dead

        self.close()  # no spare supervisor outlives the host either
        ctx = self._ctx()
        left = 0
        finishing: list[int] = []  # supervisors publishing a task's end: they finish
        for name, n in list(self._live.items()):
            task = TaskId(name)
            if n <= 0 or not ctx.store.exists(task):
                continue
            record = ctx.store.load(task)
            if record.state in TERMINAL:
                owner = ProcessId.from_dict(record.supervisor)
                if owner is not None and owner.alive():
                    finishing.append(owner.pid)
                continue
            _kill_supervisor(record)
            with contextlib.suppress(Exception):
                release_dead(ctx, ctx.store.load(task))
            left += 1
        _end_own_children(keep=finishing)
        return left

    async def _stop_if_unfollowed(self, task: TaskId, grace: float, since: float) -> None:
        """Stop the task here when no attempt of it came to this host within `grace` after
        the one the cluster timed out at `since`. Not merely none live at the end: a later
        attempt that also timed out leaves a gap before the next (the retry's backoff), and
        it watches the grace of its own."""
        await asyncio.sleep(grace)
        if not self._live.get(task) and self._arrived.get(task, 0.0) <= since:
            await asyncio.to_thread(self._stop, task)

    def _begin(self, job: dict[str, Any], task: TaskId, attempt: int) -> None:
        """Start the task here; or follow it when this host runs it already; or continue it
        (`adopt`) when a host that ran it is gone: this one, or another that published it."""
        from gitsup.git import remote as transport
        from gitsup.layout import task_record_ref
        from gitsup.store.suprepo import SupRepo

        ctx = self._ctx()
        remote = review_remote(ctx.repo)
        if ctx.store.exists(task) and not ctx.layout.fetched(task).exists():
            record = ctx.store.load(task)
            if record.state in TERMINAL or not _dead(record):
                return  # it ended, or its supervisor runs here: follow it
            self._adopt(ctx, task, job)  # it ran here and its supervisor died: continue it
            return
        repo = ctx.repo
        record_ref, ref = task_record_ref(task), task_refs(task)["baseline"]
        try:
            # one look at the remote: was the task published (its record), and its baseline
            there = transport.remote_refs(repo.main_workdir, remote, [record_ref, ref])
        except transport.TransportError as exc:  # the remote is away: try again
            raise ApplicationError(f"cannot read {task} on {remote}: {exc.message}") from None
        if record_ref in there:
            self._adopt(ctx, task, job)  # another host ran it and is gone: continue its work
            return
        # nothing published: a new task (or one whose host died before its first turn
        # ended), started from its baseline (fetched unless this clone has that commit)
        baseline = Oid(str(job["baseline"]))
        fetched = there.get(ref)
        if fetched is not None and not repo.has_object(fetched):
            try:
                fetched = transport.fetch_listed(repo.main_workdir, repo.common_dir, remote, ref)
            except transport.TransportError as exc:
                raise ApplicationError(f"cannot fetch {ref} from {remote}: {exc.message}") from None
        if fetched != baseline:
            raise ApplicationError(
                f"{ref} on {remote} is {fetched}, not the submitted {baseline}",
                non_retryable=fetched is not None,
            )
        from gitsup.spec import TaskSpec
        from gitsup.tasks.detach import start_detached

        spec = TaskSpec.model_validate({**job["spec"], "base": baseline})
        spare = self._take_spare()
        try:
            start_detached(
                SupRepo.discover(self.clone),
                spec,
                source=job.get("source"),
                task_id=task,
                host=self.name,
                spare=spare,
            )
        finally:
            if spare is not None:
                spare.close()  # unused when the start failed before its supervisor

    def _adopt(self, ctx: SupRepo, task: TaskId, job: dict[str, Any]) -> None:
        """`git sup adopt-remote` in the background (its own session, as a detached task's
        supervisor): it continues the task here from what was published, and supervises it,
        with the spec the workflow holds (the submitter's: a published spec that differs is
        refused, and the task ends failed). Returns once it supervises the task (or the task
        ended)."""
        import os
        import time

        from gitsup.host.proc import gitsup_python, spawn_detached
        from gitsup.host.procid import ProcessId
        from gitsup.spec import TaskSpec

        log = ctx.layout.root / "cluster" / f"{task}.adopt.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        spec = TaskSpec.model_validate({**job["spec"], "base": str(job["baseline"])})
        spec_file = ctx.layout.root / "cluster" / f"{task}.spec.json"
        spec_file.write_text(spec.model_dump_json(indent=1), encoding="utf-8")
        argv = gitsup_python(
            "gitsup", "adopt-remote", task, "--host", self.name, "--quiet", "--spec", str(spec_file)
        )
        pid = spawn_detached(argv, cwd=ctx.repo.main_workdir, log=log)
        try:
            me: ProcessId | None = ProcessId.of(pid)
        except Exception:  # it is gone already (psutil.NoSuchProcess)
            me = None
        while True:
            if ctx.store.exists(task) and not ctx.layout.fetched(task).exists():
                record = ctx.store.load(task)
                if record.state in TERMINAL or record.supervisor is not None:
                    return
            if me is None or not me.alive():
                try:
                    _, status = os.waitpid(pid, 0)
                    code = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    code = None
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                # bad input (a forged record, a spec that is not the submitted one) is bad
                # on every host: no retry
                raise ApplicationError(
                    f"could not continue {task} on {self.name}: {' / '.join(tail)}",
                    type="GitsupError" if code == Exit.BAD_INPUT else None,
                    non_retryable=code == Exit.BAD_INPUT,
                )
            time.sleep(0.1)

    def _stop(self, task: TaskId) -> TaskRecord:
        from gitsup.tasks.lifecycle import stop_task

        ctx = self._ctx()
        with contextlib.suppress(GitsupError):
            return stop_task(ctx, task, wait=120.0)
        return ctx.store.load(task)


class _Asks:
    """The task's open asks for the heartbeat (`show` on the submitter lists them as
    `pending`), read again only when its event log grew."""

    def __init__(self, ctx: SupRepo, task: TaskId) -> None:
        self._ctx, self._task = ctx, task
        self._size = -1
        self._last: list[dict[str, Any]] = []

    def pending(self, record: TaskRecord) -> list[dict[str, Any]]:
        import os

        from gitsup.state import State
        from gitsup.tasks.human import pending

        if record.state != State.PAUSED:  # an open ask pauses the task
            return []
        try:
            size = os.path.getsize(self._ctx.layout.events(self._task))
        except OSError:
            return self._last
        if size != self._size:
            self._size = size
            self._last = pending(self._ctx, record)
        return self._last


def _end_own_children(*, keep: Sequence[int] = (), rounds: int = 3) -> None:
    """SIGKILL what this host process still runs below it (a hand-over's push in flight, a
    composition's checks), except the processes `keep` and theirs: an abandoning host
    leaves nothing else running in its clone. A few rounds, for a thread that started one
    more while the others were killed."""
    import os

    import psutil

    from gitsup.host import proc

    kept = set(keep) | {p.pid for pid in keep for p in proc.descendants(pid)}
    for _ in range(rounds):
        rest = [p for p in proc.descendants(os.getpid()) if p.pid not in kept]
        if not rest:
            return
        proc.kill_each(rest)
        psutil.wait_procs(rest, timeout=5)


def _kill_supervisor(record: TaskRecord) -> list[int]:
    """SIGKILL the task's supervisor and every process under it (its checks, its
    decider), stopped first so that none of them acts on the others' end. Returns the
    pids killed."""
    from gitsup.host import proc
    from gitsup.host.procid import ProcessId

    owner = ProcessId.from_dict(record.supervisor)
    if owner is None or not owner.alive():
        return []
    # ours (the supervisor this host started) is reaped too
    return proc.kill_tree(owner.pid, wait=10)


async def _until(path: Path, seconds: float) -> None:
    """Sleep `seconds`, or less: until `path` exists (looked for every END_POLL)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not path.exists():
        left = end - loop.time()
        if left <= 0:
            return
        await asyncio.sleep(min(END_POLL, left))


def _supervised(record: TaskRecord) -> bool:
    from gitsup.host.procid import ProcessId

    owner = ProcessId.from_dict(record.supervisor)
    return owner is None or owner.alive()


def _reap(children: set[tuple[int, float]], record: TaskRecord) -> None:
    """Collect the exit of the supervisors this host process started (its children): a
    long-running host would otherwise keep one zombie per task it ran. `children`: those
    seen so far and not yet collected; `record`'s supervisor joins them."""
    import os

    import psutil

    from gitsup.host.procid import same_start

    owner = record.supervisor or {}
    pid, started = owner.get("pid"), owner.get("start_time")
    if isinstance(pid, int) and isinstance(started, int | float):
        children.add((pid, float(started)))
    for pid, started in list(children):
        try:
            proc = psutil.Process(pid)
            # that process (not another that took its pid), and ours
            if not same_start(started, proc.create_time()) or proc.ppid() != os.getpid():
                children.discard((pid, started))
            elif proc.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(pid, os.WNOHANG)
                children.discard((pid, started))
        except (psutil.Error, ChildProcessError, OSError):
            children.discard((pid, started))


def _owner_alive(record: TaskRecord) -> bool:
    from gitsup.host.procid import ProcessId

    owner = ProcessId.from_dict(record.supervisor)
    return owner is not None and owner.alive()


def _dead(record: TaskRecord) -> bool:
    """A task record whose supervisor is provably gone (or that never had one)."""
    return not _supervised(record) or record.supervisor is None


def serve(
    ctx: SupRepo,
    settings: ClusterSettings,
    *,
    name: str,
    slots: int,
    integrator: bool = False,
    drain: float = DRAIN,
    on_ready: Callable[[], None] | None = None,
    on_abandon: Callable[[str], None] | None = None,
) -> None:
    """Serve the repository's task queue until SIGTERM or Ctrl-C; running tasks are then
    handed over to other hosts (`HostWork._hand_over`: stopped here, their state published,
    the activity failed for Temporal to run again elsewhere). The hand-over is bounded by
    `drain` seconds and by a second signal: what is still running then is killed here (as
    on a host that died: the cluster moves it after the heartbeat timeout) and
    `on_abandon` is told. A host publishes every task it runs to the review remote (at
    every turn's end and at the end: `sup.cluster.publish`, set here when unset). An
    `integrator` (the clone whose user holds the signing key) also serves the queue's
    integrations (`gitsup/cluster/integrator.py`)."""
    from gitsup.supervision.publisher import PUBLISH_KEY, publish_enabled

    review_remote(ctx.repo)
    if not publish_enabled(ctx.repo):
        if ctx.repo.config_get(PUBLISH_KEY) is not None:
            raise GitsupError(
                f"a host publishes every task it runs, and {PUBLISH_KEY} is off in this clone",
                hint=f"git config {PUBLISH_KEY} true",
            )
        ctx.repo.config_set(PUBLISH_KEY, "true")
    if integrator:
        from gitsup.integration.integrate import integration_signing

        integration_signing(ctx.repo)  # no key here: refused before serving
        from gitsup.cluster.integrator import require_trust_roots

        require_trust_roots(ctx.repo)  # nor without the repository's trust roots
    asyncio.run(
        _serve(
            ctx,
            settings,
            name=name,
            slots=slots,
            integrator=integrator,
            drain=drain,
            on_ready=on_ready,
            on_abandon=on_abandon,
        )
    )


def on_stop_signals(
    loop: asyncio.AbstractEventLoop, handler: Callable[[], None]
) -> Callable[[], None]:
    """Call `handler` in `loop` at each SIGTERM or SIGINT this process receives; returns
    what puts the previous handlers back. Not `loop.add_signal_handler`: that makes the
    signal module write each signal's number to the loop's wakeup socket, and a child forked
    without exec (pyroute2 forks this process for its network namespace calls, then stops
    the child with SIGTERM) inherits both the handler and the socket: its SIGTERM would
    reach this loop as this process's own, and stop the host. Here a signal caught in such a
    child does nothing there, and nothing here."""
    import os

    me = os.getpid()

    def caught(signum: int, frame: object) -> None:
        if os.getpid() == me:  # not in a fork of this process
            loop.call_soon_threadsafe(handler)

    previous = {sig: signal.signal(sig, caught) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


async def _serve(
    ctx: SupRepo,
    settings: ClusterSettings,
    *,
    name: str,
    slots: int,
    integrator: bool,
    drain: float,
    on_ready: Callable[[], None] | None,
    on_abandon: Callable[[str], None] | None,
) -> None:
    client = await connect(settings, identity=name)
    work = HostWork(ctx.repo.main_workdir, name)
    stop, force = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def signalled() -> None:
        if stop.is_set():
            force.set()  # a second signal: no more waiting for the hand-over
        stop.set()

    restore = on_stop_signals(loop, signalled)
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
    extra: list[Worker] = []
    await asyncio.to_thread(work.ready_spare)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(restore)
        stack.callback(work.close)
        await stack.enter_async_context(worker)
        if integrator:
            from gitsup.cluster.integrator import Integrator
            from gitsup.cluster.workflow import QueueWorkflow, integrator_queue

            integrations = Worker(
                client,
                task_queue=integrator_queue(settings.queue),
                workflows=[QueueWorkflow],
                activities=[Integrator(ctx, name, settings.address).integrate],
                max_concurrent_activities=1,
                identity=f"{name} (integrator)",
            )
            await stack.enter_async_context(integrations)
            extra.append(integrations)
        else:
            # the queue's composition checks: task hosts only (the integrator runs no
            # candidate code), up to `slots` at once (gitsup/cluster/checks.py)
            from gitsup.cluster.checks import CompositionChecks
            from gitsup.cluster.workflow import CheckWorkflow, checks_queue

            checking = Worker(
                client,
                task_queue=checks_queue(settings.queue),
                workflows=[CheckWorkflow],
                activities=[CompositionChecks(ctx.repo.main_workdir, name).check],
                max_concurrent_activities=slots,
                identity=f"{name} (checks)",
                max_heartbeat_throttle_interval=timedelta(seconds=1),
                default_heartbeat_throttle_interval=timedelta(seconds=1),
            )
            await stack.enter_async_context(checking)
            extra.append(checking)
        if on_ready is not None:
            on_ready()
        while not stop.is_set():  # a signal's handler runs when the main thread wakes
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
        # the workers' shutdown cancels the running activities: each hands its task over
        workers = [worker, *extra]
        shutdown: asyncio.Future[Any] = asyncio.ensure_future(
            asyncio.gather(*(w.shutdown() for w in workers))
        )
        forced: asyncio.Future[Any] = asyncio.ensure_future(force.wait())
        await asyncio.wait([shutdown, forced], timeout=drain, return_when=asyncio.FIRST_COMPLETED)
        forced.cancel()
        if not shutdown.done():
            # bounded: what is left is ended here as a host that died would leave it, and
            # the caller ends this process (the hand-overs still running cannot be awaited)
            left = await asyncio.to_thread(work.abandon)
            if on_abandon is not None:
                on_abandon(
                    f"host {name} stopped before handing over {left} task(s): they move to "
                    "another host after the heartbeat timeout"
                )
