"""Containment and crash recovery with real processes: cgroups, network namespaces,
kill -9 of the supervisor at each lifecycle step, recover --takeover, doctor, many tasks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gitsup.ids import TaskId
from gitsup.layout import Layout
from gitsup.store.events import EventLog
from tests.conftest import git, run_sup
from tests.helpers.require import requires

needs_cgroup = requires("cgroup")


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _spec(path: Path, worker: str, extra: str = "") -> Path:
    path.write_text(
        f'goal = "test"\n[worker]\nkind = "process"\nargv = ["{worker}"]\n[review]\nkind = "none"\n{extra}'
    )
    return path


def _marked(task: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("GITSUP_TASK") == task:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def _task_ids(repo: Path) -> list[str]:
    return [t["id"] for t in json.loads(run_sup(repo, "ls", "--json").stdout or "[]")]


def _seqs(repo: Path, task: str) -> list[int]:
    common = Path(git(repo, "rev-parse", "--git-common-dir"))
    if not common.is_absolute():
        common = repo / common
    log = EventLog(Layout(common).events(TaskId(task)), TaskId(task))
    return [e.seq for e in log.read()]


DAEMON = """setsid sh -c 'sleep 300' </dev/null >/dev/null 2>&1 &
( sleep 300 & wait ) &
echo forked
sleep 1
"""


@needs_cgroup
def test_setsid_daemon_and_grandchild_are_reaped_with_cgroups(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", DAEMON)
    res = run_sup(repo, "start", "--spec", str(_spec(tmp_path / "t.toml", w)), "--json", "-q")
    rec = json.loads(res.stdout)
    assert rec["status"] == "parked"  # no commit: expected
    assert rec["worker"]["cgroup"], rec["worker"]
    assert not Path(rec["worker"]["cgroup"]).exists(), "worker cgroup not removed"
    assert _marked(rec["id"]) == []
    events = [json.loads(x) for x in run_sup(repo, "log", rec["id"], "--json").stdout.splitlines()]
    stopped = [
        e["data"] for e in events if e["type"] == "worker_stopped" and "verified_empty" in e["data"]
    ]
    assert stopped and stopped[0]["verified_empty"] is True and stopped[0]["removed"] is True


def test_without_cgroups_the_weaker_guarantee_is_reported(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", DAEMON)
    spec = _spec(tmp_path / "t.toml", w, '[isolation]\ncgroup = "off"\n')
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q")
    rec = json.loads(res.stdout)
    assert rec["worker"]["cgroup"] is None
    events = [json.loads(x) for x in run_sup(repo, "log", rec["id"], "--json").stdout.splitlines()]
    weak = [e["data"] for e in events if e["type"] == "worker_stopped" and "guarantee" in e["data"]]
    assert weak and weak[0]["guarantee"].startswith("weaker")
    # the marker sweep still caught the setsid daemon this time
    assert _marked(rec["id"]) == []


def test_required_cgroup_mode_fails_before_spawn(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    w = _script(tmp_path / "w.sh", f"touch {marker}\n")
    spec = _spec(tmp_path / "t.toml", w, '[isolation]\ncgroup = "required"\n')
    res = run_sup(
        repo, "start", "--spec", str(spec), "--json", "-q", env={"GITSUP_CGROUP_ROOT": "none"}
    )
    assert res.returncode == 4, res.stderr
    rec = json.loads(res.stdout)
    assert rec["status"] == "failed"
    assert any("cgroup" in r and "required" in r for r in rec["reasons"]), rec["reasons"]
    assert not marker.exists()
    events = [
        json.loads(x)["type"] for x in run_sup(repo, "log", rec["id"], "--json").stdout.splitlines()
    ]
    assert "worker_started" not in events


def _serve_once() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def accept() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.close()

    threading.Thread(target=accept, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_network_none_check_cannot_reach_host_loopback_but_has_its_own(
    repo: Path, tmp_path: Path
) -> None:
    srv, port = _serve_once()
    try:
        probe = tmp_path / "probe.py"
        probe.write_text(
            "import socket, sys, threading\n"
            "def try_connect(port):\n"
            "    s = socket.socket(); s.settimeout(2)\n"
            "    try:\n        s.connect(('127.0.0.1', port)); return True\n"
            "    except OSError:\n        return False\n"
            "own = socket.socket(); own.bind(('127.0.0.1', 0)); own.listen(1)\n"
            "mine = try_connect(own.getsockname()[1])\n"
            "host = try_connect(int(sys.argv[1]))\n"
            "print('own', mine, 'host', host)\n"
            "sys.exit(0 if (mine and not host) else 1)\n"
        )
        w = _script(
            tmp_path / "w.sh",
            "echo 'def add(a, b):\n    return a + b' > calc.py\ngit commit -qam fix\n",
        )
        spec = tmp_path / "t.toml"
        spec.write_text(
            f'goal = "g"\n[worker]\nkind = "process"\nargv = ["{w}"]\n[review]\nkind = "none"\n'
            f'[isolation]\nnetwork = "none"\n[[checks]]\nname = "net"\nargv = ["{sys.executable}", "{probe}", "{port}"]\n'
        )
        res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q")
        rec = json.loads(res.stdout)
        assert rec["checks"][0]["passed"], rec["checks"][0]["output_tail"]
        assert "own True host False" in rec["checks"][0]["output_tail"]
        assert rec["status"] == "ready", rec["reasons"]
        # and the same probe on the host network fails its assertion (the server is reachable)
        spec.write_text(spec.read_text().replace('network = "none"', 'network = "host"'))
        res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q")
        assert "host True" in json.loads(res.stdout)["checks"][0]["output_tail"]
    finally:
        srv.close()


# --- kill -9 the supervisor at each step -------------------------------------------------------


def _start_bg(repo: Path, spec: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gitsup", "start", "--spec", str(spec), "--json", "-q"],
        cwd=repo,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(pred: Any, timeout: float = 30.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def _record(repo: Path, task: str) -> dict[str, Any]:
    return json.loads(run_sup(repo, "show", task, "--json").stdout)


def _check_after_recovery(repo: Path, task: str) -> dict[str, Any]:
    rec = _record(repo, task)
    assert rec["state"] in ("completed", "blocked", "failed", "stopped"), rec["state"]
    assert _marked(task) == [], "a worker process survived"
    seqs = _seqs(repo, task)
    assert seqs == list(range(1, len(seqs) + 1)), "event log seq has gaps or duplicates"
    common = Path(git(repo, "rev-parse", "--git-common-dir"))
    leases = list(
        ((common if common.is_absolute() else repo / common) / "sup" / "leases").glob("*.json")
    )
    assert leases == [], "lease leaked"
    return rec


WORKER_EDITS_THEN_SLEEPS = "echo 'def add(a, b):\n    return a + b' > calc.py\necho untracked > notes.txt\necho edited\nsleep 300\n"


@pytest.mark.parametrize("point", ["before_spawn", "after_spawn", "during_seal"])
def test_kill9_at_fault_point_then_recover(repo: Path, tmp_path: Path, point: str) -> None:
    w = _script(tmp_path / "w.sh", WORKER_EDITS_THEN_SLEEPS)
    spec = _spec(tmp_path / "t.toml", w, '[budget]\nno_output_timeout = "60s"\n')
    p = _start_bg(repo, spec, {"GITSUP_FAULT": point})
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr.read() if p.stderr else ""
    task = _wait_for(lambda: (_task_ids(repo) or [None])[0])
    res = run_sup(repo, "recover", task, "--takeover", "--park", "--json", "-q")
    # every fault point is before the worker's first turn ran: parking it reports failed
    assert res.returncode == 4, res.stderr
    rec = _check_after_recovery(repo, task)
    assert rec["status"] == "failed", rec["reasons"]
    if point == "during_seal":
        # the events of the killed seal were sealed by the recovery, exactly once
        log = git(repo, "log", "--format=%B", f"refs/sup/{task}/log")
        ranges = [line for line in log.splitlines() if line.startswith("Sup-Sealed:")]
        assert len(ranges) == len(set(ranges))
    if rec["wip"]:
        assert "a + b" in git(repo, "show", f"{rec['wip']}:calc.py")


@pytest.mark.parametrize("phase", ["mid_turn", "during_checks", "during_review"])
def test_kill9_mid_phase_then_recover_or_doctor(repo: Path, tmp_path: Path, phase: str) -> None:
    if phase == "mid_turn":
        w = _script(tmp_path / "w.sh", WORKER_EDITS_THEN_SLEEPS)
        extra = ""
        ready = lambda rec: rec["state"] == "running" and rec["worker"] and rec["worker"].get("pid")  # noqa: E731
    else:
        keep = "echo untracked > notes.txt\n" if phase == "during_checks" else ""
        w = _script(
            tmp_path / "w.sh",
            "echo 'def add(a, b):\n    return a + b' > calc.py\ngit commit -qam fix\n" + keep,
        )
        slow = _script(tmp_path / "slow.sh", "sleep 300\n")
        if phase == "during_checks":
            extra = f'[[checks]]\nname = "slow"\nargv = ["{slow}"]\n'
        else:
            extra = '[[checks]]\nname = "ok"\nargv = ["true"]\n'
        ready = lambda rec: rec["state"] == "verifying"  # noqa: E731
    spec = tmp_path / "t.toml"
    review = (
        f'[review]\nkind = "command"\nargv = ["{tmp_path / "slow.sh"}"]\n'
        if phase == "during_review"
        else '[review]\nkind = "none"\n'
    )
    spec.write_text(f'goal = "g"\n[worker]\nkind = "process"\nargv = ["{w}"]\n{review}{extra}')
    p = _start_bg(repo, spec)
    task = _wait_for(lambda: (_task_ids(repo) or [None])[0])
    _wait_for(lambda: ready(_record(repo, task)))
    time.sleep(0.5)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    if phase == "during_review":
        res = run_sup(repo, "doctor", "--fix", "--json")
        assert res.returncode == 0, res.stderr
        kinds = {f["kind"] for f in json.loads(res.stdout)}
        assert "orphaned-task" in kinds
    else:
        res = run_sup(repo, "recover", task, "--takeover", "--park", "--json", "-q")
        assert res.returncode == 3, res.stderr
    rec = _check_after_recovery(repo, task)
    assert rec["status"] == "parked"
    if phase == "during_review":
        # everything was committed: the candidate ref holds it
        assert rec["candidate"] and "a + b" in git(repo, "show", f"{rec['candidate']}:calc.py")
        return
    # nothing uncommitted is lost: the untracked/edited files are in the wip snapshot
    assert rec["wip"], rec
    assert git(repo, "show", f"{rec['wip']}:notes.txt") == "untracked"


@pytest.mark.parametrize(
    ("point", "via"),
    [
        ("before_task_finished", "recover"),
        ("after_task_finished", "recover"),
        ("after_task_finished", "doctor"),
        ("before_task_finished", "two recovers at once"),
    ],
)
def test_kill9_as_the_task_ends_then_recover_completes_the_record(
    repo: Path, tmp_path: Path, point: str, via: str
) -> None:
    """The supervisor dies after the outcome was settled (candidate, note, the terminal
    record staged), before or after `task_finished`: the record never says the task ended
    while its log lacks the end, and `recover` (no takeover: no worker runs) completes it
    with the staged outcome, `task_finished` once and last, the log sealed, the lease free."""
    w = _script(
        tmp_path / "w.sh",
        "echo 'def add(a, b):\n    return a + b' > calc.py\ngit commit -qam fix\n",
    )
    spec = _spec(tmp_path / "t.toml", w, '[[checks]]\nname = "ok"\nargv = ["true"]\n')
    p = _start_bg(repo, spec, {"GITSUP_FAULT": point})
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr.read() if p.stderr else ""
    (task,) = _task_ids(repo)
    before = _record(repo, task)
    assert before["state"] == "verifying" and before["status"] == "pending", before
    finished = lambda: [e for e in _events(repo, task) if e.type == "task_finished"]  # noqa: E731
    assert len(finished()) == (1 if point == "after_task_finished" else 0)
    for cmd in ("wait", "stop"):
        told = run_sup(repo, cmd, task)
        assert told.returncode != 0 and f"`git sup recover {task}` completes it" in told.stderr
    doc = json.loads(run_sup(repo, "doctor", "--json").stdout)
    (orphan,) = [f for f in doc if f["kind"] == "orphaned-task"]
    assert "ended (ready) before its record was completed" in orphan["detail"], orphan
    if via == "doctor":
        res = run_sup(repo, "doctor", "--fix", "--json")
        assert res.returncode == 0, res.stderr
        fixed = [f["fixed"] for f in json.loads(res.stdout) if f["kind"] == "orphaned-task"]
        assert fixed == ["record completed (ready)"]
    elif via == "recover":
        res = run_sup(repo, "recover", task, "--json", "-q")
        assert res.returncode == 0, res.stderr
    else:
        argv = [sys.executable, "-m", "gitsup", "recover", task, "-q"]
        both = [subprocess.Popen(argv, cwd=repo, stderr=subprocess.PIPE) for _ in range(2)]
        codes = sorted(p.wait(timeout=60) for p in both)
        # one completes it; the other finds it completed (or already ended): never twice
        assert codes[0] == 0, codes
    rec = _check_after_recovery(repo, task)
    assert (rec["state"], rec["status"], rec["exit_code"]) == ("completed", "ready", 0)
    assert rec["candidate"] == git(repo, "rev-parse", f"refs/sup/{task}/candidate")
    assert "a + b" in git(repo, "show", f"{rec['candidate']}:calc.py")
    assert "`git sup recover` completed its record" in rec["reasons"][-1]
    events = _events(repo, task)
    assert [e.type for e in events].count("task_finished") == 1
    assert events[-1].type == "task_finished" and events[-1].data["status"] == "ready"
    sealed = git(repo, "log", "-1", "--format=%B", f"refs/sup/{task}/log")
    assert f"Sup-Sealed: seq={events[-1].seq} " in sealed
    # the staged record became the record: nothing is left to complete
    again = run_sup(repo, "recover", task, "--takeover")
    assert again.returncode != 0 and "already ended" in again.stderr


def _events(repo: Path, task: str) -> list[Any]:
    common = Path(git(repo, "rev-parse", "--git-common-dir"))
    if not common.is_absolute():
        common = repo / common
    return list(EventLog(Layout(common).events(TaskId(task)), TaskId(task)).read())


def test_recover_refuses_a_live_owner_and_continues_a_dead_one(repo: Path, tmp_path: Path) -> None:
    w = _script(
        tmp_path / "w.sh",
        "if [ -f .second ]; then git add -A && git commit -qm done; exit 0; fi\nsleep 300\n",
    )
    spec = _spec(tmp_path / "t.toml", w)
    p = _start_bg(repo, spec)
    task = _wait_for(lambda: (_task_ids(repo) or [None])[0])
    _wait_for(lambda: _record(repo, task)["state"] == "running")
    res = run_sup(repo, "recover", task, "--takeover")
    assert res.returncode == 2 and "live supervisor" in res.stderr
    res = run_sup(repo, "discard", task)
    assert res.returncode == 2 and "running supervisor" in res.stderr
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    wt = Path(_record(repo, task)["worktree"])
    (wt / ".second").write_text("x\n")
    res = run_sup(repo, "recover", task, "--takeover", "--json", "-q")
    rec = json.loads(res.stdout)
    assert res.returncode == 0, (res.stderr, rec["reasons"])
    assert rec["status"] == "ready"
    events = [json.loads(x) for x in run_sup(repo, "log", task, "--json").stdout.splitlines()]
    rec_ev = [e["data"] for e in events if e["type"] == "recovered"]
    assert len(rec_ev) == 1 and rec_ev[0]["action"] == "new worker turn"
    assert len([e for e in events if e["type"] == "worker_started"]) == 2
    _check_after_recovery(repo, task)


def test_detach_and_wait_return_the_start_exit_code(repo: Path, tmp_path: Path) -> None:
    w = _script(
        tmp_path / "w.sh",
        "echo 'def add(a, b):\n    return a + b' > calc.py\ngit commit -qam fix\n",
    )
    spec = _spec(
        tmp_path / "t.toml",
        w,
        f'[[checks]]\nname = "t"\nargv = ["{sys.executable}", "-m", "pytest", "-q", "-p", "no:cacheprovider"]\n',
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--detach")
    assert res.returncode == 0, res.stderr
    task = res.stdout.strip()
    rec = _record(repo, task)
    assert rec["supervisor"]["pid"] != os.getpid()
    res = run_sup(repo, "wait", task, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["status"] == "ready"
    log = _record(repo, task)
    assert log["events"] > 5


def test_sixteen_concurrent_tasks(repo: Path, tmp_path: Path) -> None:
    w = _script(
        tmp_path / "w.sh",
        'echo "$GITSUP_TASK" > done.txt\ngit add done.txt\ngit commit -qm done\necho ok\n',
    )
    spec = _spec(tmp_path / "t.toml", w, '[[checks]]\nname = "t"\nargv = ["true"]\n')
    t0 = time.monotonic()
    procs = [_start_bg(repo, spec) for _ in range(16)]
    codes = [p.wait(timeout=300) for p in procs]
    elapsed = time.monotonic() - t0
    assert codes == [0] * 16, [p.stderr.read() if p.stderr else "" for p in procs]
    ids = _task_ids(repo)
    assert len(ids) == 16
    for t in ids:
        seqs = _seqs(repo, t)
        assert seqs == list(range(1, len(seqs) + 1))
        assert _record(repo, t)["status"] == "ready"
    print(f"16 concurrent tasks: {elapsed:.1f}s total, {elapsed / 16:.2f}s per task")
