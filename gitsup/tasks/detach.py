"""`git sup start --detach` and `git sup wait`: a supervisor in the background.

The foreground process validates and prepares the task (so bad input fails at once),
then starts `python -m gitsup.tasks.detach` in its own session with its output in the task
directory (`supervisor.log`); the child takes the lease over and runs the supervisor.

A process that starts many tasks (a cluster host) can keep a `SpareSupervisor`: that child
started ahead of its task, its interpreter and modules loaded, waiting on a pipe for the
task it is to supervise, which saves each task the second a cold start of Python and
gitsup's modules takes. It runs the same code with the same arguments.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gitsup.errors import Exit, GitsupError
from gitsup.git import GitRepo
from gitsup.host.proc import gitsup_python, signal_group, spawn_detached, spawn_waiting, wait_exit
from gitsup.host.procid import ProcessId
from gitsup.ids import TaskId
from gitsup.layout import Layout
from gitsup.spec import TaskSpec
from gitsup.state import TERMINAL
from gitsup.store.lease import LeaseStore
from gitsup.store.record import TaskRecord
from gitsup.store.records import TaskStore
from gitsup.store.suprepo import SupRepo
from gitsup.supervision.supervisor import Supervisor
from gitsup.tasks.lifecycle import prepare_task, remove_unstarted, status_exit

SPARE = "--spare"


class SpareSupervisor:
    """A background supervisor started before its task is known (`python -m
    gitsup.tasks.detach --spare` in `cwd`, its own session): it loads what a supervisor
    needs, then waits on its stdin for its task. It ends, doing nothing, when the pipe ends
    without one (its starter closed it, or is gone)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self._child = spawn_waiting(gitsup_python("gitsup.tasks.detach", SPARE), cwd=cwd)
        self.pid = self._child.pid
        assert self._child.stdin is not None
        self._pipe = self._child.stdin
        self._lock = threading.Lock()
        self._used = False

    def hand(self, args: list[str], log: Path, cwd: Path) -> bool:
        """Give it the arguments a detached supervisor takes, and the log its output goes
        to. False when it cannot take them (used, another working directory, or gone):
        start one as usual."""
        with self._lock:
            if self._used or Path(cwd) != Path(self.cwd):
                return False
            self._used = True
            try:
                self._pipe.write((json.dumps({"args": args, "log": str(log)}) + "\n").encode())
                self._pipe.close()
            except (OSError, ValueError):  # it is gone (the pipe broke)
                return False
            return True

    def close(self, *, wait: float = 0.0) -> None:
        """It is not needed: it ends. With `wait`, return once it has (its process group
        is killed after `wait` seconds): a host that stops leaves nothing running."""
        with self._lock:
            used, self._used = self._used, True
            with contextlib.suppress(OSError, ValueError):
                self._pipe.close()
        if used or wait <= 0:
            return  # a supervisor that took a task is the task's, not ours to end
        if not wait_exit(self._child, wait):
            signal_group(self.pid, signal.SIGKILL)  # its own session: the group is its own
            wait_exit(self._child, 10.0)


def start_detached(
    ctx: SupRepo,
    spec: TaskSpec,
    *,
    wait_started: float = 15.0,
    source: str | None = None,
    prepared: Callable[[TaskRecord], None] | None = None,
    task_id: TaskId | None = None,
    host: str | None = None,
    spare: SpareSupervisor | None = None,
) -> TaskRecord:
    """`prepared`: called with the new record before its supervisor starts (what it writes
    into the task's log is there before anything the supervisor does). `spare`: the
    supervisor process to use, when it can take the task (else one is started)."""
    record, lease = prepare_task(
        ctx, spec, detached=True, source=source, task_id=task_id, host=host
    )
    if prepared is not None:
        prepared(record)
    task_dir = ctx.layout.task_dir(TaskId(record.id))
    me = ProcessId.current()
    args = [str(ctx.layout.common_dir), record.id, str(me.pid), repr(me.start_time)]
    log = task_dir / "supervisor.log"
    if spare is None or not spare.hand(args, log, ctx.repo.main_workdir):
        spawn_detached(
            gitsup_python("gitsup.tasks.detach", *args), cwd=ctx.repo.main_workdir, log=log
        )
    store = ctx.store
    end = time.monotonic() + wait_started
    while time.monotonic() < end:
        rec = store.load(record.id)
        if rec.supervisor is not None or rec.state in TERMINAL:
            return rec
        time.sleep(0.05)
    held = ctx.leases.get(record.worktree)
    if held is not None and held.owner == me:
        ctx.leases.release(lease)
    raise GitsupError(
        f"the background supervisor of task {record.id} did not start",
        hint=f"see {task_dir / 'supervisor.log'}",
        exit_code=Exit.INTERNAL,
    )


def wait_task(ctx: SupRepo, task: str, *, timeout: float | None = None) -> TaskRecord:
    """Block until the task is terminal. Raises if its supervisor died first."""
    store = ctx.store
    end = None if timeout is None else time.monotonic() + timeout
    delay = 0.05
    while True:
        rec = store.load(task)
        if rec.state in TERMINAL:
            return rec
        if ctx.layout.fetched(rec.id).exists():
            raise GitsupError(
                f"task {task} runs in another clone ({rec.state.value} when last fetched); "
                "there is no supervisor here to wait for",
                hint=f"`git sup fetch-task {task}` refreshes this copy",
            )
        owner = ProcessId.from_dict(rec.supervisor)
        if owner is not None and not owner.alive():
            rec = store.load(task)
            if rec.state in TERMINAL:
                return rec
            from gitsup.supervision.recovery import recover_hint

            raise GitsupError(
                f"the supervisor of task {task} died while the task was {rec.state.value}",
                hint=recover_hint(ctx, task),
                exit_code=Exit.INTERNAL,
            )
        if end is not None and time.monotonic() > end:
            raise GitsupError(
                f"task {task} is still {rec.state.value} after {timeout:g}s",
                exit_code=Exit.INTERNAL,
            )
        time.sleep(delay)
        delay = min(0.5, delay * 1.5)


def _main(argv: list[str]) -> int:
    common_dir, task, parent_pid, parent_start = argv
    layout = Layout(Path(common_dir))
    store = TaskStore(layout)
    record = store.load(task)
    spec = store.load_spec(TaskId(task))
    leases = LeaseStore(layout.leases)
    held = leases.get(record.worktree)
    parent = ProcessId(int(parent_pid), float(parent_start))
    if held is None or held.owner != parent:
        sys.stderr.write(f"gitsup: lease of task {task} is not held by the starting process\n")
        return Exit.INTERNAL
    lease = leases.transfer(held, ProcessId.current())
    main_repo = GitRepo.open(common_dir)
    sup = Supervisor(main_repo, layout, record, spec, lease)
    final = remove_unstarted(SupRepo(main_repo, layout), sup.run())
    return status_exit(final)


# What a supervisor imports only once it starts its worker, besides what a task's start
# preloads (lifecycle.after_checkout): the attention store, the environment and worker
# checks, the seccomp filter, the egress gate. A spare loads all of it while it waits.
_SPARE_LATE = (
    "psutil",
    "gitsup.attention.notify",
    "gitsup.store.ledger",
    "gitsup.store.control",
    "gitsup.store.comments",
    "gitsup.integration.keys",
    "gitsup.environment.setup",
    "gitsup.environment.include",
    "gitsup.host.seccomp",
    "gitsup.host.egress",
    "gitsup.host.egress_gate",
    "gitsup.workers.agentbin",
    "gitsup.workers.preflight",
)


def spare_modules() -> list[str]:
    """What a spare supervisor imports before it has a task: what any task's supervisor
    would import (every worker kind's adapter, pyroute2 for a network namespace)."""
    from gitsup.tasks.lifecycle import TASK_MODULES
    from gitsup.workers.kinds import KINDS

    return [*TASK_MODULES, *(k.module for k in KINDS.values()), "pyroute2", *_SPARE_LATE]


def _spare() -> int:
    """A spare supervisor: what a supervisor loads late loaded now, then its task's
    arguments and log from stdin, then `_main`."""
    import importlib

    for name in spare_modules():
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return 0  # not needed
    job = json.loads(line)
    out = os.open(str(job["log"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    nothing = os.open(os.devnull, os.O_RDONLY)
    for fd, to in ((nothing, 0), (out, 1), (out, 2)):
        os.dup2(fd, to)
    os.close(out)
    os.close(nothing)
    return _main([str(a) for a in job["args"]])


if __name__ == "__main__":
    sys.exit(_spare() if sys.argv[1:] == [SPARE] else _main(sys.argv[1:]))
