"""Every tmux call is bounded; a tmux start that fails half-way leaves nothing running: real tmux, the real TUI.

The adapter itself cleans up (the first test, with no cgroup or sweep behind it); the
supervisor's cgroup or sweep is a second line (the second test, through the CLI)."""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from gitsup import faults
from gitsup.demo.scripted_model import ScriptedModel
from gitsup.store.suprepo import SupRepo
from gitsup.workers.base import WorkerError, WorkerSetup
from gitsup.workers.claude import tmux as tmux_adapter
from gitsup.workers.claude.tmux import TmuxWorker
from gitsup.workers.claude.tmux_setup import tmux_socket_path
from tests.conftest import run_sup
from tests.helpers.require import require
from tests.workers.tmux.conftest import claude_env, seed_config
from tests.workers.tmux.test_tmux_worker import COMMIT_STEPS, events_of, inline_toml, tmux_spec


def processes_naming(text: str) -> list[str]:
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(text in part for part in cmd):
            found.append(f"{p.pid} {' '.join(cmd)[:200]}")
    return found


def processes_of_task(task: str) -> list[str]:
    """Processes whose environment names the task (the pane's and its children's)."""
    found = []
    for p in psutil.process_iter(["pid", "environ", "cmdline"]):
        if (p.info["environ"] or {}).get("GITSUP_TASK") == task:
            found.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:200]}")
    return found


def test_a_start_failing_after_the_server_started_leaves_no_tmux_server(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    model = scripted_model({"default": {"steps": COMMIT_STEPS}})
    config = seed_config(tmp / "claude-config")
    spec = tmux_spec(claude_bin, model, config)
    toml = tmp / "task.toml"
    toml.write_text("".join(f"{json.dumps(k)} = {inline_toml(v)}\n" for k, v in spec.items()))
    res = run_sup(
        repo,
        "start",
        "--spec",
        str(toml),
        timeout=120,
        env={"GITSUP_FAULT": "fail:tmux_server_started"},
    )
    listed = json.loads(run_sup(repo, "ls", "--json").stdout)
    tasks = listed["tasks"] if isinstance(listed, dict) else listed
    assert len(tasks) == 1, (res.stdout, res.stderr)
    task = tasks[0]["id"]
    ctx = SupRepo.discover(repo)
    sock = tmux_socket_path(ctx.layout.task_dir(task), task)
    tmux_sockets.append(sock)
    evs = events_of(repo, task)
    types = [e["type"] for e in evs]
    assert "worker_started" not in types, types
    assert "injected failure at tmux_server_started" in json.dumps(evs), evs[-5:]
    assert res.returncode != 0
    # From outside: no socket, no tmux server on it, no process left in the worktree.
    assert not sock.exists()
    assert processes_naming(str(sock)) == []
    assert processes_of_task(task) == []


def test_the_adapter_stops_its_tmux_server_when_start_fails_half_way(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = scripted_model({"default": {"steps": COMMIT_STEPS}})
    config = seed_config(tmp / "claude-config")
    task = "t" + secrets.token_hex(4)
    task_dir = tmp / "task"
    task_dir.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), **claude_env(model.url, config)}
    inbox: queue.Queue[object] = queue.Queue()
    worker = TmuxWorker(WorkerSetup(task, repo, task_dir, env, (claude_bin,), inbox))  # type: ignore[arg-type]
    sock = tmux_socket_path(task_dir, task)
    tmux_sockets.append(sock)
    monkeypatch.setattr(faults, "_POINT", "fail:tmux_server_started")
    with pytest.raises(WorkerError, match="injected failure at tmux_server_started"):
        worker.start("Fix add.")
    # From outside: no socket, no tmux server on it, no pane process of the task.
    assert not sock.exists()
    assert processes_naming(str(sock)) == []
    assert processes_of_task(task) == []


def test_a_tmux_server_that_does_not_answer_is_an_error_not_a_hang(
    repo: Path, tmp: Path, tmux_sockets: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frozen tmux server: the adapter's calls end at their deadline with an error."""
    require("tmux", "the TUI worker")
    sock = tmp / "frozen.sock"
    tmux_sockets.append(sock)
    subprocess.run(
        [
            "tmux",
            "-S",
            str(sock),
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "gitsup",
            "sleep 600",
        ],
        check=True,
        timeout=20,
    )
    server = int(
        subprocess.run(
            ["tmux", "-S", str(sock), "display-message", "-p", "#{pid}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    )
    task_dir = tmp / "task"
    task_dir.mkdir()
    inbox: queue.Queue[object] = queue.Queue()
    worker = TmuxWorker(WorkerSetup("t1", repo, task_dir, {}, (), inbox))  # type: ignore[arg-type]
    monkeypatch.setattr(tmux_adapter, "TMUX_TIMEOUT", 1.0)
    identity = {"pid": 1, "extra": {"socket": str(sock), "pane_id": "%0"}}
    outcome: list[BaseException | None] = []

    def adopt() -> None:
        try:
            worker.adopt(identity)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    os.kill(server, signal.SIGSTOP)
    try:
        t = threading.Thread(target=adopt, daemon=True)
        t.start()
        t.join(120)  # a generous hang detector, not a timing assertion
        hung = t.is_alive()
    finally:
        os.kill(server, signal.SIGCONT)
    assert not hung, "a tmux call on a frozen server did not end at its deadline"
    assert outcome and isinstance(outcome[0], WorkerError), outcome
    assert "no tmux server answers" in str(outcome[0])
