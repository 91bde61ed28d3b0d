"""A spare supervisor (gitsup/tasks/detach.py): a process started before its task, which
supervises the task it is handed; one not needed ends; a gone one is replaced by a fresh
start. Real processes, a real task."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from gitsup.spec import spec_from_mapping
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.detach import SpareSupervisor, start_detached, wait_task
from gitsup.tasks.lifecycle import init_repo
from tests.conftest import git
from tests.helpers.sup import worker_argv

WORKER = """
import pathlib, subprocess
pathlib.Path("done.txt").write_text("done\\n")
subprocess.run(["git", "add", "done.txt"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "done"], check=True)
"""


def _spec(tmp: Path) -> object:
    return spec_from_mapping(
        {
            "goal": "g",
            "worker": {"kind": "process", "argv": worker_argv(tmp, WORKER)},
            "review": {"kind": "none"},
        }
    )


def _gone(pid: int, timeout: float = 60) -> bool:
    """The process ended (a zombie counts: it is ours to reap)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                os.waitpid(pid, 0)
                return True
        except (psutil.NoSuchProcess, ChildProcessError):
            return True
        time.sleep(0.05)
    return False


def test_a_spare_supervises_the_task_it_is_handed(repo: Path, tmp: Path) -> None:
    ctx = SupRepo.discover(repo)
    init_repo(ctx, explicit=True)
    spare = SpareSupervisor(repo)
    started = psutil.Process(spare.pid).create_time()
    record = start_detached(ctx, _spec(tmp), spare=spare)  # type: ignore[arg-type]
    # the task's supervisor is the spare: the process started before the task existed
    assert record.supervisor is not None and record.supervisor["pid"] == spare.pid
    assert abs(float(record.supervisor["start_time"]) - started) < 0.01
    final = wait_task(ctx, record.id, timeout=120)
    assert (final.state.value, final.status.value) == ("completed", "ready"), final.reasons
    assert git(repo, "show", f"{final.candidate}:done.txt") == "done"
    assert _gone(spare.pid)
    # its output went to the task's supervisor log, as a supervisor started for the task's
    assert (ctx.layout.task_dir(record.id) / "supervisor.log").exists()
    # and it takes no second task
    assert not spare.hand(["x"], tmp / "log", repo)


def test_a_spare_not_needed_ends_and_a_gone_one_is_not_used(repo: Path, tmp: Path) -> None:
    ctx = SupRepo.discover(repo)
    init_repo(ctx, explicit=True)
    idle = SpareSupervisor(repo)
    idle.close()
    assert _gone(idle.pid)
    dead = SpareSupervisor(repo)
    os.kill(dead.pid, signal.SIGKILL)
    assert _gone(dead.pid)
    # a spare of another directory is not used either
    elsewhere = SpareSupervisor(tmp)
    for spare in (dead, elsewhere):
        record = start_detached(ctx, _spec(tmp), spare=spare)  # type: ignore[arg-type]
        assert record.supervisor is not None and record.supervisor["pid"] != spare.pid
        final = wait_task(ctx, record.id, timeout=120)
        assert final.status.value == "ready", final.reasons
    elsewhere.close()
    assert _gone(elsewhere.pid)
