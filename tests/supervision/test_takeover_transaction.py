"""A takeover is a transaction on the worktree's lease: `recover --takeover` writes the
lease `cleanup-pending` before it touches what the dead supervisor left, and settles it
once the cleanup is done. A taker SIGKILLed at each step of the cleanup (the fault points
`takeover_cleanup_pending`, `takeover_worker_proven`, `takeover_cleaned`) leaves that
state behind, and the next reader (`ls`, `doctor`, `recover`) reconciles it: the cleanup
finished (the old worker killed, its cgroup removed), the takeover rolled back (the lease
released), the task still one `recover --takeover` continues. Through the real CLI with a
process worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, run_sup
from tests.helpers.require import requires
from tests.helpers.sup import common_dir

COMMITS_THEN_SLEEPS = (
    "#!/bin/sh\n"
    "echo 'def add(a, b):\n    return a + b' > calc.py\n"
    "git commit -qam 'fix add'\n"
    "echo committed\n"
    "sleep 300\n"
)


def _record(repo: Path, task: str) -> dict[str, Any]:
    return dict(json.loads(run_sup(repo, "show", task, "--json").stdout))


def _wait(pred: Any, timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _orphaned_task(repo: Path, tmp: Path) -> tuple[str, dict[str, Any]]:
    """A running task whose supervisor was SIGKILLed: its worker lives on."""
    worker = tmp / "w.sh"
    worker.write_text(COMMITS_THEN_SLEEPS)
    worker.chmod(0o755)
    spec = tmp / "t.toml"
    spec.write_text(
        f'goal = "g"\n[worker]\nkind = "process"\nargv = ["{worker}"]\n[review]\nkind = "none"\n'
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "gitsup", "start", "--spec", str(spec), "--json", "-q"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ls = lambda: json.loads(run_sup(repo, "ls", "--json").stdout or "[]")  # noqa: E731
        task = _wait(lambda: (ls() or [{}])[0].get("id"))
        rec = _wait(lambda: (r := _record(repo, task))["state"] == "running" and r)
        wt = Path(rec["worktree"])
        _wait(lambda: git(wt, "rev-parse", "HEAD") != rec["baseline"])
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.wait(timeout=30)
    return task, rec


@requires("root", "cgroup")
@pytest.mark.parametrize(
    ("step", "reader"),
    [
        ("takeover_cleanup_pending", "ls"),
        ("takeover_worker_proven", "doctor"),
        ("takeover_cleaned", "recover"),
    ],
)
def test_a_taker_killed_mid_cleanup_is_reconciled_by_the_next_reader(
    repo: Path, tmp: Path, step: str, reader: str
) -> None:
    task, rec = _orphaned_task(repo, tmp)
    worker_pid = rec["worker"]["pid"]
    cg = Path(rec["worker"]["cgroup"])
    assert _alive(worker_pid) and cg.exists()
    leases = common_dir(repo) / "sup" / "leases"

    died = run_sup(repo, "recover", task, "--takeover", "--json", "-q", env={"GITSUP_FAULT": step})
    assert died.returncode == -signal.SIGKILL, (died.returncode, died.stderr)
    (lease_file,) = leases.glob("*.json")
    lease = json.loads(lease_file.read_text())
    assert lease["state"] == "cleanup-pending" and lease["task"] == task
    assert lease["extra"]["taken_from"]["pid"] == rec["supervisor"]["pid"]
    assert not _alive(lease["owner"]["pid"])  # the taker is dead
    if step == "takeover_cleanup_pending":  # nothing of the old owner's was touched yet
        assert _alive(worker_pid) and cg.exists()
    else:
        assert not _alive(worker_pid) and not cg.exists()
    events = [json.loads(x) for x in run_sup(repo, "log", task, "--json").stdout.splitlines()]
    assert [e["type"] for e in events].count("worker_started") == 1  # no new worker yet

    if reader == "ls":
        res = run_sup(repo, "ls", "--json")
        assert res.returncode == 0, res.stderr
    elif reader == "doctor":
        res = run_sup(repo, "doctor", "--json")
        found = [f for f in json.loads(res.stdout) if f["kind"] == "takeover-interrupted"]
        assert len(found) == 1 and found[0]["task"] == task, found
        assert "rolled back" in found[0]["detail"], found
    else:
        res = run_sup(repo, "recover", task, "--takeover", "--park", "--json", "-q")
        assert res.returncode == 3, res.stderr
        assert json.loads(res.stdout)["status"] == "parked"
    # reconciled: the cleanup finished, the old worker gone with its cgroup
    assert not _alive(worker_pid) and not cg.exists()
    reasons = _record(repo, task)["reasons"]
    assert any("was interrupted" in r and "rolled back" in r for r in reasons), reasons
    if reader != "recover":
        # rolled back: no lease; the task is again one a takeover continues
        assert not list(leases.glob("*.json"))
        res = run_sup(repo, "recover", task, "--takeover", "--park", "--json", "-q")
        assert res.returncode == 3, res.stderr
        assert json.loads(res.stdout)["status"] == "parked"
    # nobody reconciles twice, and the parked task released its lease
    assert not list(leases.glob("*.json"))
    assert not [
        f
        for f in json.loads(run_sup(repo, "doctor", "--json").stdout)
        if f["kind"] == "takeover-interrupted"
    ]


@requires("root", "cgroup")
def test_a_finished_takeover_leaves_a_settled_lease(repo: Path, tmp: Path) -> None:
    """The lease a takeover's new supervisor holds is `held` (no `state`), never left
    `cleanup-pending` once its worker runs."""
    task, _rec = _orphaned_task(repo, tmp)
    leases = common_dir(repo) / "sup" / "leases"
    p = subprocess.Popen(
        [sys.executable, "-m", "gitsup", "recover", task, "--takeover", "--json", "-q"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def started_again() -> bool:
            log = run_sup(repo, "log", task, "--json").stdout.splitlines()
            return [json.loads(x)["type"] for x in log].count("worker_started") == 2

        _wait(started_again)
        (lease_file,) = leases.glob("*.json")
        lease = json.loads(lease_file.read_text())
        assert "state" not in lease and lease["owner"]["pid"] == p.pid, lease
    finally:
        p.kill()
        p.wait(timeout=30)
    # the second worker, orphaned in turn, is cleaned up the same way
    assert run_sup(repo, "recover", task, "--takeover", "--park", "-q").returncode == 3
