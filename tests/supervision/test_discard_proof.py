"""Discarding a task whose supervisor died mid-task first proves its worker gone (killing
it), as recovery does: no worker outlives the worktree it was writing. Real CLI, a
process worker, its supervisor SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gitsup.host.procid import ProcessId
from tests.conftest import run_sup
from tests.helpers.sup import check_cmd, write_worker

HANG = "import time\ntime.sleep(600)\n"


def _wait(pred: Any, timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def _record(repo: Path, task: str) -> dict[str, Any]:
    return dict(json.loads(run_sup(repo, "show", task, "--json").stdout or "{}"))


def _start_hanging(
    repo: Path, args: list[str]
) -> tuple[subprocess.Popen[bytes], str, dict[str, Any]]:
    """`git sup start ARGS` in the background; the task's id and its worker's record once the
    worker runs."""
    p = subprocess.Popen(
        [sys.executable, "-m", "gitsup", *args, "--json", "-q"],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ls = lambda: json.loads(run_sup(repo, "ls", "--json").stdout or "[]")  # noqa: E731
        task = _wait(lambda: (ls() or [{}])[0].get("id"))
        w = _wait(
            lambda: (
                (_record(repo, task).get("worker") or {}).get("pid")
                and _record(repo, task)["worker"]
            )
        )
    except BaseException:
        p.kill()
        p.wait(timeout=30)
        raise
    return p, str(task), dict(w)


def test_discard_of_a_task_with_a_dead_supervisor_proves_its_worker_gone(
    repo: Path, tmp: Path
) -> None:
    worker = write_worker(tmp, HANG)
    check = check_cmd("from calc import add; assert add(1, 2) == 3")
    args = ["start", "fix add", "--worker", worker, "--check", check, "--review", "none"]
    p, task, w = _start_hanging(repo, args)
    worker_id: ProcessId | None = None
    try:
        worker_id = ProcessId.from_dict(w)
        assert worker_id is not None and worker_id.alive()
        os.kill(p.pid, signal.SIGKILL)  # the supervisor dies; its worker lives on
        p.wait(timeout=30)
        assert worker_id.alive()
        res = run_sup(repo, "discard", task, "--force")
        assert res.returncode == 0, res.stderr
        # From outside: the worker is gone, and so is the worktree.
        assert not worker_id.alive()
        rec = _record(repo, task)
        assert rec["state"] == "stopped" and not Path(rec["worktree"]).exists()
    finally:
        p.kill()
        p.wait(timeout=30)
        if worker_id is not None and worker_id.alive():
            os.kill(worker_id.pid, signal.SIGKILL)


def test_discard_refuses_when_the_worker_s_cgroup_was_replaced(repo: Path, tmp: Path) -> None:
    # The worker's cgroup, emptied and made again at its path (another inode): nothing proves
    # the worker gone, so nothing is removed and the record says what was left behind.
    worker = write_worker(tmp, HANG)
    args = ["start", "fix add", "--worker", worker, "--review", "none"]
    p, task, w = _start_hanging(repo, args)
    cgroup: Path | None = None
    try:
        assert isinstance(w.get("cgroup"), str), w
        cgroup = Path(w["cgroup"])
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        (cgroup / "cgroup.kill").write_text("1")
        _wait(lambda: not (cgroup / "cgroup.procs").read_text().strip())
        _wait(lambda: _rmdir(cgroup))
        cgroup.mkdir()
        res = run_sup(repo, "discard", task, "--force")
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert f"task {task}: its worker is not provably gone (cgroup" in res.stderr
        assert "the worktree and its lease are kept" in res.stderr
        rec = _record(repo, task)
        assert rec["left_behind"] == [f"at discard: cgroup {cgroup} was replaced (inode differs)"]
        assert Path(rec["worktree"]).is_dir()
    finally:
        p.kill()
        p.wait(timeout=30)
        if cgroup is not None and cgroup.is_dir():
            _rmdir(cgroup)


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except OSError:
        return False
    return True
