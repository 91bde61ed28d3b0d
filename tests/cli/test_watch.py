"""`git sup watch` on a real terminal (tmux capture-pane), its JSON stream, `ls --attention`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GIT_SUP, run_sup
from tests.helpers.require import require
from tests.helpers.sup import (
    COMMIT_WITHOUT_FIX,
    FIX_AND_COMMIT,
    PYTEST_CHECK,
    kill_tree,
    read_record,
    task_ids,
    wait_for,
    write_worker,
)

GATED_FIX = """
import pathlib, subprocess, time
gate = pathlib.Path({gate!r})
while not gate.exists():
    time.sleep(0.05)
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
print("fixed after the gate opened")
"""


def _start(repo: Path, worker: str, *extra: str) -> str:
    before = set(task_ids(repo))
    res = run_sup(
        repo,
        "start",
        "fix add",
        "--worker",
        worker,
        "--check",
        PYTEST_CHECK,
        "--review",
        "none",
        *extra,
    )
    if "--detach" in extra:
        assert res.returncode == 0, res.stderr
    (new,) = set(task_ids(repo)) - before
    return new


@pytest.fixture
def three_tasks(repo: Path, tmp: Path) -> Iterator[tuple[Path, dict[str, str], Path]]:
    """One ready, one parked, one running (its worker waits for a gate file)."""
    ready = _start(repo, write_worker(tmp, FIX_AND_COMMIT, "fix.py"))
    parked = _start(repo, write_worker(tmp, COMMIT_WITHOUT_FIX, "nofix.py"))
    gate = tmp / f"gate-{uuid.uuid4().hex}"
    running = _start(
        repo, write_worker(tmp, GATED_FIX.format(gate=str(gate)), "gated.py"), "--detach"
    )
    wait_for(lambda: read_record(repo, running)["state"] == "running", 30, what="running task")
    ids = {"ready": ready, "parked": parked, "running": running}
    yield repo, ids, gate
    gate.touch()
    rec = read_record(repo, running)
    pid = (rec.get("supervisor") or {}).get("pid")
    if pid and rec["state"] not in ("completed", "blocked", "failed", "stopped"):
        kill_tree(pid)


def _pane(sock: str) -> list[str]:
    out = subprocess.run(
        ["tmux", "-L", sock, "capture-pane", "-p", "-t", "watch"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.rstrip() for line in out.splitlines() if line.strip()]


def test_watch_in_tmux_shows_three_tasks_live(
    three_tasks: tuple[Path, dict[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    require("tmux", "a real terminal")
    repo, ids, gate = three_tasks
    # The pane's own size and colours, not those of the test runner.
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    sock = f"gitsup-watch-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [
            "tmux",
            "-L",
            sock,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "watch",
            "-x",
            "220",
            "-y",
            "40",
            "-c",
            str(repo),
            f"{GIT_SUP} watch --interval 0.2; echo watch-ended-$?; sleep 30",
        ],
        check=True,
        env=env,
    )
    try:
        lines = wait_for(
            lambda: (p := _pane(sock)) and any("3 task(s)" in x for x in p) and p,
            20,
            what="the watch screen",
        )
        header = next(x for x in lines if "gitsup watch" in x)
        assert "3 task(s), 1 running, 1 need a human" in header, lines
        rows = [x for x in lines if x.startswith("20")]
        assert rows[0].split()[0] == ids["parked"], rows  # needs a human: first
        by_id = {r.split()[0]: r for r in rows}
        assert set(by_id) == set(ids.values()), rows
        assert "! parked" in by_id[ids["parked"]]
        assert "running" in by_id[ids["running"]] and "the worker" in by_id[ids["running"]]
        assert "ready" in by_id[ids["ready"]] and "completed" in by_id[ids["ready"]]
        assert "/4h00m" in by_id[ids["running"]]  # elapsed / deadline
        # The running task ends: the same screen updates in place.
        gate.touch()
        lines = wait_for(
            lambda: (p := _pane(sock)) and any("0 running" in x for x in p) and p,
            30,
            what="the running task to end on screen",
        )
        assert sum("gitsup watch" in x for x in lines) == 1, lines  # redrawn, not scrolled
        row = next(x for x in lines if x.startswith(ids["running"]))
        assert "ready" in row, lines
        # `q` quits, and the terminal is given back as it was
        subprocess.run(["tmux", "-L", sock, "send-keys", "-t", "watch", "q"], check=True)
        wait_for(
            lambda: any("watch-ended-0" in x for x in _pane(sock)),
            10,
            what="watch to end on q",
        )
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


def test_watch_json_stream_and_ls_attention(repo: Path, tmp: Path) -> None:
    parked = _start(repo, write_worker(tmp, COMMIT_WITHOUT_FIX, "nofix.py"))
    gate = tmp / "gate"
    running = _start(
        repo, write_worker(tmp, GATED_FIX.format(gate=str(gate)), "gated.py"), "--detach"
    )
    wait_for(lambda: read_record(repo, running)["state"] == "running", 30, what="running task")
    proc = subprocess.Popen(
        [GIT_SUP, "watch", "--json", "--until-done", "--interval", "0.1"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # the gate opens only once watch has said the running task is running
        items: list[dict[str, Any]] = []
        while not any(i["kind"] == "status" and i["id"] == running for i in items):
            line = proc.stdout.readline()
            assert line, "watch ended before it showed the running task"
            items.append(json.loads(line))
        gate.touch()
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    assert proc.returncode == 0, err
    items += [json.loads(x) for x in rest.splitlines() if x]
    statuses = [i for i in items if i["kind"] == "status"]
    events = [i for i in items if i["kind"] == "event"]
    assert statuses[0]["id"] == parked and statuses[0]["attention"], statuses[0]
    mine = [s for s in statuses if s["id"] == running]
    assert mine[0]["state"] == "running" and mine[-1]["status"] == "ready", mine
    assert {"elapsed", "deadline", "turns", "cost_usd", "waiting_for", "last_activity"} <= set(
        mine[0]
    )
    types = [e["type"] for e in events if e["task"] == running]
    assert "task_finished" in types and types.index("turn_completed") < types.index("task_finished")
    seqs = [e["seq"] for e in events if e["task"] == running]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    # ls puts the parked task first and --attention lists only it
    res = run_sup(repo, "ls", "--attention", "--json")
    assert res.returncode == 0, res.stderr
    listed = json.loads(res.stdout)
    assert [r["id"] for r in listed] == [parked] and listed[0]["attention"][0].startswith("parked")
    res = run_sup(repo, "ls")
    assert res.stdout.splitlines()[1].startswith(parked) and "needs a human" in res.stdout


def test_watch_once_plain_lines(repo: Path, tmp: Path) -> None:
    _start(repo, write_worker(tmp, FIX_AND_COMMIT, "fix.py"))
    t0 = time.monotonic()
    res = run_sup(repo, "watch", "--once")
    assert res.returncode == 0, res.stderr
    (line,) = res.stdout.splitlines()
    assert "completed" in line and "ready" in line and "\x1b[" not in line
    assert time.monotonic() - t0 < 10


def test_foreground_start_keeps_a_status_line_on_a_terminal(repo: Path, tmp: Path) -> None:
    require("tmux", "a real terminal")
    gate = tmp / "gate"
    worker = write_worker(tmp, GATED_FIX.format(gate=str(gate)), "gated.py")
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    sock = f"gitsup-start-{uuid.uuid4().hex[:8]}"
    cmd = shlex.join(
        [
            GIT_SUP,
            "start",
            "fix add",
            "--worker",
            worker,
            "--check",
            PYTEST_CHECK,
            "--review",
            "none",
        ]
    )
    subprocess.run(
        [
            "tmux",
            "-L",
            sock,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "watch",
            "-x",
            "200",
            "-y",
            "40",
            "-c",
            str(repo),
            f"{cmd}; sleep 30",
        ],
        check=True,
        env=env,
    )
    try:
        lines = wait_for(
            lambda: (p := _pane(sock)) and any(x.startswith("[running]") for x in p) and p,
            30,
            what="the status line",
        )
        status = next(x for x in lines if x.startswith("[running]"))
        assert "waiting for the worker" in status and "/4h00m" in status and "turns 0/100" in status
        gate.touch()
        lines = wait_for(
            lambda: (p := _pane(sock)) and any(": ready (completed)" in x for x in p) and p,
            30,
            what="the task to end",
        )
        # the status line was replaced by each new progress line, never left in between
        assert sum("waiting for the worker" in x for x in lines) <= 1, lines
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
