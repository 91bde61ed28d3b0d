"""Promises of the CLI around a running task: `start --detach` really detaches, `wait`
(--timeout, a supervisor that died), `doctor`'s findings, a foreground start interrupted by
SIGINT or SIGHUP, and `demo`."""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest

from gitsup.host.contain import find_cgroup_base
from tests.conftest import git, run_sup
from tests.helpers.sup import (
    FIX_AND_COMMIT,
    common_dir,
    kill_marked,
    kill_tree,
    marked,
    pid_alive,
    popen_sup,
    read_record,
    start_json,
    task_ids,
    wait_dead,
    wait_for,
    wait_unmarked,
    write_worker,
)

NO_REVIEW = ("--review", "none")


def _blocking_worker(tmp: Path) -> tuple[str, Path, Path, Path]:
    """A worker that edits calc.py, says it started (with its pid), and finishes (fix and
    commit) only once the test creates the `go` file."""
    started, go, pidfile = tmp / "started", tmp / "go", tmp / "worker.pid"
    body = (
        textwrap.dedent(f"""
        import os, pathlib, time
        pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))
        pathlib.Path("scratch.txt").write_text("uncommitted work\\n")
        pathlib.Path({str(started)!r}).write_text("x")
        print("waiting for go", flush=True)
        while not pathlib.Path({str(go)!r}).exists():
            time.sleep(0.02)
        os.remove("scratch.txt")
        """)
        + FIX_AND_COMMIT
    )
    return write_worker(tmp, body), started, go, pidfile


def _ancestors(pid: int) -> list[int]:
    return [p.pid for p in psutil.Process(pid).parents()]


def _doctor(repo: Path, *args: str) -> list[dict[str, Any]]:
    res = run_sup(repo, "doctor", "--json", *args)
    assert res.returncode == 0, res.stderr
    findings: list[dict[str, Any]] = json.loads(res.stdout)
    return findings


def test_detach_returns_while_the_task_runs_in_its_own_session(repo: Path, tmp: Path) -> None:
    worker, started, go, _ = _blocking_worker(tmp)
    res = run_sup(repo, "start", "g", "--worker", worker, "--detach", *NO_REVIEW)
    try:
        assert res.returncode == 0, res.stderr
        tid = res.stdout.strip()
        assert task_ids(repo) == [tid]
        # the foreground returned; the task goes on without it
        wait_for(started.exists, what="the worker to start")
        rec = wait_for(
            lambda: (r := read_record(repo, tid))["state"] == "running" and r,
            what="the running state",
        )
        assert rec["status"] == "pending"
        sup = rec["supervisor"]["pid"]
        assert pid_alive(sup)
        # not a child of the caller, nor in its session: the caller's hangup or Ctrl-C
        # does not reach it
        assert os.getpid() not in _ancestors(sup)
        assert os.getsid(sup) != os.getsid(0)
        assert os.getsid(sup) == os.getpgid(sup) == sup

        # `wait --timeout` gives up without touching the task
        w = run_sup(repo, "wait", tid, "--timeout", "0.5")
        assert w.returncode == 1, w.stderr
        assert f"task {tid} is still running after 0.5s" in w.stderr
        assert read_record(repo, tid)["state"] == "running" and pid_alive(sup)

        go.write_text("x")
        w = run_sup(repo, "wait", tid, "--json")
        assert w.returncode == 0, w.stderr
        assert json.loads(w.stdout)["status"] == "ready"
        assert wait_dead(sup, timeout=30)
    finally:
        go.write_text("x")


def test_wait_and_doctor_when_the_supervisor_died(repo: Path, tmp: Path) -> None:
    worker, started, go, pidfile = _blocking_worker(tmp)
    res = run_sup(repo, "start", "g", "--worker", worker, "--detach", *NO_REVIEW)
    assert res.returncode == 0, res.stderr
    tid = res.stdout.strip()
    wpid = 0
    try:
        wait_for(started.exists, what="the worker to start")
        wpid = int(pidfile.read_text())
        wait_for(lambda: read_record(repo, tid)["state"] == "running", what="the running state")
        sup = read_record(repo, tid)["supervisor"]["pid"]
        assert _doctor(repo) == []  # a live task is nobody's finding
        os.kill(sup, signal.SIGKILL)
        assert wait_dead(sup, timeout=30)

        w = run_sup(repo, "wait", tid)
        assert w.returncode == 1
        assert f"the supervisor of task {tid} died while the task was running" in w.stderr
        assert f"git sup recover {tid} --takeover" in w.stderr
        assert "Traceback" not in w.stderr

        found = _doctor(repo)
        kinds = {f["kind"] for f in found if f["task"] == tid}
        assert {"orphaned-task", "stale-lease"} <= kinds, found
        orphan = next(f for f in found if f["kind"] == "orphaned-task")
        assert f"pid {sup} is gone" in orphan["detail"] and orphan["fixed"] is None
        if find_cgroup_base() is not None:
            # the worker outlived its supervisor in the task's cgroup
            cg = next(f for f in found if f["kind"] == "orphan-cgroup")
            # the worker, and with a PID namespace the bootstrap's two waiting processes
            assert cg["task"] == tid and re.search(r"\b[13] process\(es\)", cg["detail"]), cg
        assert wpid > 0 and marked(str(tmp / "worker.py"))  # the worker outlived it

        # parking the orphaned task (after proving its worker gone) also releases its lease
        # and empties its cgroup: what is still found after that is fixed on its own
        fixed = _doctor(repo, "--fix")
        assert fixed[0]["kind"] == "orphaned-task" and fixed[0]["fixed"].startswith("parked")
        assert all(f["fixed"] and not f["fixed"].startswith("not fixed") for f in fixed), fixed
        rec = read_record(repo, tid)
        assert rec["state"] == "blocked" and rec["status"] == "parked"
        assert wait_unmarked(str(tmp / "worker.py"), 5)
        # the worker's uncommitted work is saved, not lost
        assert rec["wip"] and git(repo, "show", f"{rec['wip']}:scratch.txt") == "uncommitted work"
        assert _doctor(repo) == []
        # nor is anything of the task's left on the host (its network namespace included)
        netns = Path("/var/run/netns")
        assert not [n for n in (os.listdir(netns) if netns.is_dir() else []) if tid in n]
    finally:
        go.write_text("x")
        kill_marked(str(tmp / "worker.py"))


def test_doctor_finds_missing_and_unknown_worktrees(repo: Path, tmp: Path) -> None:
    w = write_worker(tmp, FIX_AND_COMMIT)
    rc, rec, err = start_json(repo, "g", "--worker", w, *NO_REVIEW)
    assert rc == 0, err
    tid = rec["id"]
    assert _doctor(repo) == []
    # a worktree removed behind gitsup's back
    wt = Path(rec["worktree"])
    for p in sorted(wt.rglob("*"), reverse=True):
        if p.is_file() or p.is_symlink():
            p.unlink()
        else:
            p.rmdir()
    wt.rmdir()
    # a task-shaped worktree no task record knows
    stray = "20260101-abcdef"
    git(repo, "worktree", "add", "-q", "-b", "stray", str(tmp / stray))
    found = _doctor(repo)
    assert {(f["kind"], f["task"]) for f in found} == {
        ("missing-worktree", tid),
        ("unknown-worktree", stray),
    }, found
    assert next(f for f in found if f["kind"] == "missing-worktree")["detail"] == str(wt)
    # a worktree whose name is not a task id is the user's own: not a finding
    git(repo, "worktree", "add", "-q", "-b", "mine", str(tmp / "my-feature"))
    assert len(_doctor(repo)) == 2
    # a task that was discarded has no worktree by design
    assert run_sup(repo, "discard", tid, "--force").returncode == 0
    assert {f["kind"] for f in _doctor(repo)} == {"unknown-worktree"}


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGHUP, 5)])
def test_a_signalled_foreground_start_stops_the_task_and_keeps_its_work(
    repo: Path, tmp: Path, sig: signal.Signals, code: int
) -> None:
    worker, started, go, pidfile = _blocking_worker(tmp)
    p = popen_sup(repo, "start", "g", "--worker", worker, "--json", *NO_REVIEW)
    try:
        wait_for(started.exists, timeout=60, what="the worker to start")
        wpid = int(pidfile.read_text())
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        go.write_text("x")
        kill_tree(p.pid)
    assert p.returncode == code, err
    assert "Traceback" not in err
    rec = json.loads(out)
    assert rec["state"] == "stopped" and rec["status"] == "stopped"
    assert f"stopped: signal {sig.name}" in rec["reasons"]
    assert rec["exit_code"] == 5  # the task's own outcome; the process says it was interrupted
    assert wpid > 0 and wait_unmarked(str(tmp / "worker.py"), 5)
    assert rec["wip"] and git(repo, "show", f"{rec['wip']}:scratch.txt") == "uncommitted work"
    leases = list((common_dir(repo) / "sup" / "leases").glob("*.json"))
    assert leases == []


def test_demo_runs_one_task_to_a_ready_candidate(tmp: Path) -> None:
    res = run_sup(tmp, "demo", "--dir", str(tmp / "d"), "--worker", "process", "--json", "-q")
    assert res.returncode == 0, res.stderr
    rec = json.loads(res.stdout)
    assert rec["status"] == "ready" and rec["state"] == "completed"
    demo_repo = Path(rec["demo"]["repo"])
    assert demo_repo.parent == tmp / "d"
    tid = rec["id"]
    cand = git(demo_repo, "rev-parse", f"refs/sup/{tid}/candidate")
    assert cand == rec["candidate"]
    assert "a + b" in git(demo_repo, "show", f"{cand}:calc.py")
    assert "a - b" in git(demo_repo, "show", f"refs/sup/{tid}/baseline:calc.py")
    assert rec["checks"] and all(c["passed"] for c in rec["checks"])
    note = json.loads(git(demo_repo, "notes", "--ref=sup", "show", cand))
    assert note["status"] == "ready" and note["task"] == tid
    events = [json.loads(x) for x in run_sup(demo_repo, "log", tid, "--json").stdout.splitlines()]
    assert events[-1]["type"] == "task_finished"
