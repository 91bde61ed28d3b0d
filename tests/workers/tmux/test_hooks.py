"""The hook endpoint and the command relay, without a TUI: secret, fail-open bound, no owner."""

from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from gitsup.workers.base import PermissionAnswer, PermissionRequest, TurnCompleted
from gitsup.workers.claude.hooks import SECRET_HEADER, HookBridge, HookServer
from gitsup.workers.claude.relay import locate, socket_path_for
from tests.conftest import GIT_SUP, git

PYTHON = sys.executable
PUSH: dict[str, object] = {
    "session_id": "s1",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "git push origin HEAD:main"},
    "tool_use_id": "toolu_1",
}


def post(port: int, body: Mapping[str, object], headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST", "/hook", json.dumps(body), {"Content-Type": "application/json", **headers}
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def deny_pushes(
    inbox: queue.SimpleQueue[object], bridge: HookBridge, stop: threading.Event
) -> None:
    """A stand-in supervisor: deny commands mentioning push, allow the rest."""
    while not stop.is_set():
        try:
            item = inbox.get(timeout=0.1)
        except queue.Empty:
            continue
        if isinstance(item, PermissionRequest):
            push = "push" in json.dumps(dict(item.tool_input))
            bridge.answer(item.request_id, PermissionAnswer(not push, "pushing is not allowed"))


@pytest.fixture
def worktree(tmp: Path) -> Path:
    repo = tmp / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "init")
    wt = tmp / "wt"
    git(repo, "worktree", "add", "-q", "-b", "side", str(wt))
    return wt


@pytest.fixture
def served(worktree: Path) -> Iterator[tuple[HookServer, HookBridge, queue.SimpleQueue[object]]]:
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    bridge = HookBridge(inbox, bound=5.0)
    common, root = locate(str(worktree)) or ("", "")
    server = HookServer(
        bridge.handle, secret="s3cret", unix_path=socket_path_for(common, root)
    ).start()
    stop = threading.Event()
    t = threading.Thread(target=deny_pushes, args=(inbox, bridge, stop), daemon=True)
    t.start()
    yield server, bridge, inbox
    stop.set()
    server.close()


def relay(
    cwd: Path, payload: Mapping[str, object], *argv: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[bytes], float]:
    cmd = list(argv) or [PYTHON, "-m", "gitsup.workers.claude.relay"]
    t0 = time.monotonic()
    res = subprocess.run(
        cmd,
        input=json.dumps({**payload, "cwd": str(cwd)}).encode(),
        capture_output=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=60,
    )
    return res, time.monotonic() - t0


def test_locate_finds_worktree_and_common_dir(worktree: Path, tmp: Path) -> None:
    (worktree / "sub").mkdir()
    common, root = locate(str(worktree / "sub")) or ("", "")
    assert root == os.path.realpath(worktree)
    assert common == os.path.realpath(tmp / "r" / ".git")
    assert locate("/") is None


def test_request_without_the_secret_is_refused(
    served: tuple[HookServer, HookBridge, queue.SimpleQueue[object]],
) -> None:
    server, _bridge, inbox = served
    assert post(server.port, PUSH, {})[0] == 403
    assert post(server.port, PUSH, {SECRET_HEADER: "wrong"})[0] == 403
    assert inbox.empty()  # nothing reached the supervisor
    status, body = post(server.port, PUSH, {SECRET_HEADER: "s3cret"})
    assert status == 200
    out = json.loads(body)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny" and "push" in out["permissionDecisionReason"]
    # allowed: no decision (Claude Code's own mode applies)
    ok = {**PUSH, "tool_input": {"command": "ls"}}
    assert post(server.port, ok, {SECRET_HEADER: "s3cret"}) == (200, b"")


def test_hung_supervisor_fails_open_within_the_bound() -> None:
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()  # nobody answers
    bridge = HookBridge(inbox, bound=0.5)
    server = HookServer(bridge.handle, secret="x").start()
    try:
        t0 = time.monotonic()
        status, body = post(server.port, PUSH, {SECRET_HEADER: "x"})
        took = time.monotonic() - t0
    finally:
        server.close()
    assert (status, body) == (200, b"")
    assert took > 0.45  # it waited the bound (and then answered: post() would time out)
    kinds = []
    while not inbox.empty():
        kinds.append(type(inbox.get()).__name__)
    assert kinds[:2] == ["PermissionRequest", "PermissionCancelled"]


def test_stop_and_prompts_become_events() -> None:
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    bridge = HookBridge(inbox)
    bridge.expect_prompt("line one\r\nline two")
    base = {"session_id": "s", "transcript_path": "/t"}
    long_paste = '<pasted_content id="ab">\nline one\nline two\n</pasted_content id="ab">'
    assert (
        bridge.handle({**base, "hook_event_name": "UserPromptSubmit", "prompt": long_paste}, "http")
        is None
    )
    bridge.handle(
        {**base, "hook_event_name": "UserPromptSubmit", "prompt": "typed by a person"}, "http"
    )
    bridge.handle({**base, "hook_event_name": "Stop", "last_assistant_message": "all done"}, "http")
    got = [inbox.get() for _ in range(3)]
    assert type(got[0]).__name__ == "WorkerOutput"
    assert type(got[1]).__name__ == "HumanInput" and got[1].text == "typed by a person"  # type: ignore[attr-defined]
    assert (
        isinstance(got[2], TurnCompleted)
        and got[2].result == "all done"
        and got[2].session_id == "s"
    )


def test_relay_without_owner_is_an_immediate_noop(tmp: Path, worktree: Path) -> None:
    for where in (tmp, worktree):  # outside any checkout; a checkout nobody supervises
        res, _ = relay(where, PUSH)
        assert (res.returncode, res.stdout) == (0, b""), res.stderr
    res, _ = relay(worktree, PUSH, GIT_SUP, "hook", "claude")
    assert (res.returncode, res.stdout) == (0, b""), res.stderr


def test_relay_forwards_to_the_owner(
    served: tuple[HookServer, HookBridge, queue.SimpleQueue[object]], worktree: Path
) -> None:
    res, _ = relay(worktree, PUSH)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    res, _ = relay(worktree, {**PUSH, "tool_input": {"command": "ls"}})
    assert (res.returncode, res.stdout) == (0, b"")
    res, _ = relay(worktree, PUSH, GIT_SUP, "hook", "claude")
    assert json.loads(res.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    # The name registered in settings (docs/tmux.md) reaches the same relay.
    res, _ = relay(worktree, PUSH, PYTHON, "-m", "gitsup.hookrelay")
    assert json.loads(res.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    # A gitsup-run TUI (secret in its env) already reaches the supervisor over http.
    res, _ = relay(worktree, PUSH, env={"GITSUP_HOOK_SECRET": "x"})
    assert (res.returncode, res.stdout) == (0, b"")


def test_relay_fails_open_when_the_owner_hangs(worktree: Path) -> None:
    common, root = locate(str(worktree)) or ("", "")
    path = socket_path_for(common, root)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(8)  # accepts (backlog), never answers
    try:
        res, _ = relay(worktree, PUSH, env={"GITSUP_HOOK_TIMEOUT": "0.5"})
    finally:
        s.close()
        os.unlink(path)
    assert (res.returncode, res.stdout) == (0, b"")  # a hang would hit relay()'s timeout


def test_attach_command_line() -> None:
    from gitsup.cli.tmux_cmd import attach_argv

    assert attach_argv("/s.sock", read_only=True)[1:] == [
        "-S",
        "/s.sock",
        "attach-session",
        "-t",
        "gitsup",
        "-r",
    ]
    assert attach_argv("/s.sock", read_only=False)[-1] == "gitsup"


def test_task_input_is_checked() -> None:
    from gitsup.workers.base import WorkerError
    from gitsup.workers.claude.tmux_setup import clean_input

    assert clean_input("a\r\nb\rc\td") == "a\nb\nc\td"
    for bad in ("\x1b[31m", "a\x00b", "\x9b", "x\x7f"):
        with pytest.raises(WorkerError):
            clean_input(bad)
