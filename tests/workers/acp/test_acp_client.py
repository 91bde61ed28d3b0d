"""The ACP client against a hostile ACP agent: a real process (a Python script written
here) that speaks ACP and tries what a malicious or careless agent would: start in a mode
that does not ask, offer only "always" options, read and write files through the client
outside the worktree, open a terminal, print garbage."""

from __future__ import annotations

import json
import os
import queue
import sys
from pathlib import Path
from typing import Any

import pytest

from gitsup.workers.acp.worker import AcpWorker
from gitsup.workers.base import (
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerError,
    WorkerExited,
    WorkerOutput,
    WorkerSetup,
)

AGENT = r"""
import json, os, sys
log = open(os.environ["AGENT_LOG"], "a")
def send(o):
    sys.stdout.write(json.dumps(o) + "\n"); sys.stdout.flush()
def recv():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    log.write(line); log.flush()
    return json.loads(line)
mode = os.environ["AGENT_MODE"]
avail = json.loads(os.environ["AGENT_MODES"])
plan = json.loads(os.environ["AGENT_PLAN"])
nid = 100
while True:
    m = recv()
    meth = m.get("method")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": 1,
              "agentCapabilities": {}, "agentInfo": {"name": "hostile", "version": "1"}}})
    elif meth == "session/new":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"sessionId": "s1", "modes": {
            "currentModeId": mode, "availableModes": [{"id": a, "name": a} for a in avail]}}})
    elif meth == "session/set_mode":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {}})
    elif meth == "session/prompt":
        for req in plan:
            nid += 1
            send({"jsonrpc": "2.0", "id": nid, "method": req["method"], "params": req["params"]})
            if req.get("twice"):  # the same request delivered again
                send({"jsonrpc": "2.0", "id": nid, "method": req["method"], "params": req["params"]})
            while True:
                r = recv()
                if r.get("id") == nid and "method" not in r:
                    break
        sys.stdout.write("this is not json\n")
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1",
              "update": {"sessionUpdate": "agent_message_chunk", "messageId": "m1",
                         "content": {"type": "text",
                                     "text": "IS_SANDBOX=" + os.environ.get("IS_SANDBOX", "-")}}}})
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"stopReason": "end_turn"}})
"""


def run_agent(
    tmp_path: Path,
    plan: list[dict[str, Any]],
    *,
    mode: str = "default",
    modes: tuple[str, ...] = ("default", "acceptEdits", "bypassPermissions"),
    allow: bool = True,
    interrupt: bool = False,
) -> tuple[list[object], list[dict[str, Any]], Path]:
    """Run one turn; every PermissionRequest is answered `allow` (or deny). Returns the
    events, the messages the agent received, and the worktree."""
    worktree = tmp_path / "wt"
    worktree.mkdir(exist_ok=True)
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    log = tmp_path / "agent.log"
    env = {
        **{k: v for k, v in os.environ.items() if k != "GITSUP_CLAUDE_BIN"},
        "IS_SANDBOX": "1",
        "AGENT_LOG": str(log),
        "AGENT_MODE": mode,
        "AGENT_MODES": json.dumps(list(modes)),
        "AGENT_PLAN": json.dumps(plan),
    }
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    ctx = WorkerSetup(
        "20260101-acp000", worktree, tmp_path, env, (sys.executable, str(script)), inbox
    )
    w = AcpWorker(ctx)
    w.start("go")
    events: list[object] = []
    try:
        while True:
            ev = inbox.get(timeout=30)
            events.append(ev)
            if isinstance(ev, PermissionRequest) and interrupt:
                w.interrupt()
                w.answer(ev.request_id, PermissionAnswer(True))  # too late: ignored
            elif isinstance(ev, PermissionRequest):
                w.answer(ev.request_id, PermissionAnswer(allow, "" if allow else "no: rule X"))
            if isinstance(ev, TurnCompleted | WorkerExited):
                break
    finally:
        w.stop(grace=2.0)
    received = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return events, received, worktree


def _replies(received: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {m["id"]: m for m in received if "method" not in m and isinstance(m.get("id"), int)}


def test_a_session_in_a_mode_that_does_not_ask_is_set_to_default_first(tmp_path: Path) -> None:
    events, received, _ = run_agent(tmp_path, [], mode="bypassPermissions")
    methods = [m.get("method") for m in received if "method" in m]
    assert methods[:4] == ["initialize", "session/new", "session/set_mode", "session/prompt"]
    modes = [m["params"]["modeId"] for m in received if m.get("method") == "session/set_mode"]
    assert modes == ["default"]
    new = next(m for m in received if m.get("method") == "session/new")
    opts = new["params"]["_meta"]["claudeCode"]["options"]
    assert opts["settingSources"] == [] and opts["allowDangerouslySkipPermissions"] is False
    assert "Bash" in opts["settings"]["permissions"]["ask"]
    done = [e for e in events if isinstance(e, TurnCompleted)]
    assert done and done[0].subtype == "success"
    # IS_SANDBOX in the supervisor's environment did not reach the agent
    said = [e.text for e in events if isinstance(e, WorkerOutput) and e.stream == "assistant"]
    assert said == ["IS_SANDBOX=-"]
    assert done[0].result == "IS_SANDBOX=-"
    assert any(isinstance(e, ProtocolNoise) for e in events)


def test_no_safe_mode_offered_fails_the_start(tmp_path: Path) -> None:
    events, received, _ = run_agent(
        tmp_path, [], mode="bypassPermissions", modes=("bypassPermissions",)
    )
    assert not any(m.get("method") == "session/prompt" for m in received)
    done = [e for e in events if isinstance(e, TurnCompleted)]
    assert done and done[0].is_error and "does not ask" in (done[0].result or "")


def _perm(options: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "method": "session/request_permission",
        "params": {
            "sessionId": "s1",
            "toolCall": {"toolCallId": "t1", "kind": "execute", "rawInput": {"command": "ls"}},
            "options": options,
        },
    }


def test_permission_answers_are_once_never_always(tmp_path: Path) -> None:
    plan = [
        _perm(
            [
                {"optionId": "always", "kind": "allow_always", "name": "Always"},
                {"optionId": "once", "kind": "allow_once", "name": "Yes"},
                {"optionId": "no", "kind": "reject_once", "name": "No"},
            ]
        ),
        # only "always" choices: allowing it must not pick allow_always
        _perm(
            [
                {"optionId": "always", "kind": "allow_always", "name": "Always"},
                {"optionId": "never", "kind": "reject_always", "name": "Never"},
            ]
        ),
    ]
    events, received, _ = run_agent(tmp_path, plan)
    reqs = [e for e in events if isinstance(e, PermissionRequest)]
    assert [(r.tool_name, dict(r.tool_input)) for r in reqs] == [("Bash", {"command": "ls"})] * 2
    replies = _replies(received)
    assert replies[101]["result"]["outcome"] == {"outcome": "selected", "optionId": "once"}
    assert replies[102]["result"]["outcome"] == {"outcome": "cancelled"}


def test_a_denial_is_reject_once_with_the_reason(tmp_path: Path) -> None:
    plan = [
        _perm(
            [
                {"optionId": "once", "kind": "allow_once", "name": "Yes"},
                {"optionId": "no", "kind": "reject_once", "name": "No"},
                {"optionId": "never", "kind": "reject_always", "name": "Never"},
            ]
        )
    ]
    _, received, _ = run_agent(tmp_path, plan, allow=False)
    reply = _replies(received)[101]["result"]
    assert reply["outcome"] == {"outcome": "selected", "optionId": "no"}
    assert reply["_meta"]["gitsup"]["message"] == "no: rule X"


def _fs(method: str, path: str, **extra: Any) -> dict[str, Any]:
    return {"method": method, "params": {"sessionId": "s1", "path": path, **extra}}


def test_fs_requests_go_through_the_gate_and_stay_inside_the_worktree(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "link").symlink_to(outside)
    (wt / "in.txt").write_text("one\ntwo\nthree\n")
    plan = [
        _fs("fs/write_text_file", str(wt / "new.txt"), content="hello\n"),
        _fs("fs/write_text_file", str(outside), content="pwned\n"),
        _fs("fs/write_text_file", str(wt / "link"), content="pwned\n"),
        _fs("fs/write_text_file", str(wt / ".." / "outside.txt"), content="pwned\n"),
        _fs("fs/read_text_file", str(wt / "in.txt"), line=2, limit=1),
        _fs("fs/read_text_file", str(wt / "link")),
        _fs("fs/write_text_file", "relative.txt", content="x"),
        {"method": "terminal/create", "params": {"sessionId": "s1", "command": "sh"}},
        {"method": "fs/delete", "params": {"sessionId": "s1", "path": str(outside)}},
    ]
    events, received, _ = run_agent(tmp_path, plan)
    reqs = [e for e in events if isinstance(e, PermissionRequest)]
    # every fs call reached the gate as the tool it stands for (the relative path did not)
    assert [r.tool_name for r in reqs] == ["Write", "Write", "Write", "Write", "Read", "Read"]
    assert reqs[0].tool_input == {"file_path": str(wt / "new.txt"), "content": "hello\n"}
    r = _replies(received)
    assert r[101]["result"] == {} and (wt / "new.txt").read_text() == "hello\n"
    # allowed by the (here permissive) supervisor, still refused: outside the worktree
    for i in (102, 103, 104, 106):
        assert "inside the worktree" in r[i]["error"]["message"], r[i]
    assert outside.read_text() == "secret\n"
    assert r[105]["result"] == {"content": "two\n"}
    assert r[107]["error"]["code"] == -32602
    assert r[108]["error"]["code"] == -32601 and "terminal/create" in r[108]["error"]["message"]
    assert r[109]["error"]["code"] == -32601
    refused = [e.text for e in events if isinstance(e, WorkerOutput) and e.stream == "control"]
    assert any("terminal/create" in t for t in refused)


def test_a_denied_fs_write_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    _, received, _ = run_agent(
        tmp_path, [_fs("fs/write_text_file", str(wt / "a.txt"), content="x")], allow=False
    )
    assert _replies(received)[101]["error"]["message"] == "no: rule X"
    assert not (wt / "a.txt").exists()


def test_bypass_arguments_are_refused(tmp_path: Path) -> None:
    for argv in (
        (sys.executable, "-c", "", "--yolo"),
        (sys.executable, "--approval-mode", "yolo"),
        (sys.executable, "--approval-mode=auto_edit"),
    ):
        ctx = WorkerSetup(
            "20260101-acp000", tmp_path, tmp_path, dict(os.environ), argv, queue.SimpleQueue()
        )
        with pytest.raises(WorkerError, match="refused"):
            AcpWorker(ctx).start("go")


def test_cancel_answers_the_open_permission_request_cancelled(tmp_path: Path) -> None:
    plan = [_perm([{"optionId": "once", "kind": "allow_once", "name": "Yes"}])]
    events, received, _ = run_agent(tmp_path, plan, interrupt=True)
    assert [e.request_id for e in events if isinstance(e, PermissionCancelled)] == ["acp-101"]
    replies = [m for m in received if m.get("id") == 101 and "method" not in m]
    assert [r["result"]["outcome"] for r in replies] == [{"outcome": "cancelled"}]  # once
    assert any(m.get("method") == "session/cancel" for m in received)


def test_a_request_delivered_twice_is_asked_recorded_and_answered_once(tmp_path: Path) -> None:
    options = [
        {"optionId": "once", "kind": "allow_once", "name": "Yes"},
        {"optionId": "no", "kind": "reject_once", "name": "No"},
    ]
    # the next request makes the agent read (and log) anything answered to the first
    plan = [{**_perm(options), "twice": True}, _perm(options)]
    events, received, _ = run_agent(tmp_path, plan)
    reqs = [e.request_id for e in events if isinstance(e, PermissionRequest)]
    assert reqs == ["acp-101", "acp-102"], reqs
    noise = [e for e in events if isinstance(e, ProtocolNoise) and "duplicate" in e.error]
    assert len(noise) == 1, events
    assert [m["id"] for m in received if "method" not in m and m.get("id") == 101] == [101]
