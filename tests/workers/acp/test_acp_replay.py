"""A real stdout capture of Claude Code's ACP adapter (0.101.0, CLI 2.1.328, scripted
model; the temporary cwd replaced by /work/REPO) replayed through the acp worker's
record path: what the gate and the event log get from each record."""

from __future__ import annotations

import json
import queue
from pathlib import Path

from gitsup.workers.acp.worker import AcpWorker
from gitsup.workers.base import (
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerOutput,
    WorkerSetup,
)

TRANSCRIPT = Path(__file__).parent / "data" / "transcript-0.101.0.ndjson"


def replay_lines() -> list[str]:
    """The records after the handshake (the worker itself answers those)."""
    out = []
    for line in TRANSCRIPT.read_text().splitlines():
        m = json.loads(line)
        if "method" not in m and m.get("id") in (1, 2):
            continue
        out.append(line)
    return out


def replayer(tmp_path: Path) -> tuple[AcpWorker, queue.SimpleQueue[object]]:
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    w = AcpWorker(WorkerSetup("20260101-acp000", tmp_path, tmp_path, {}, (), inbox))
    w._session_id = "4f80dd6b"
    w._calls[3] = "prompt"  # the session/prompt this capture answers
    w._turn_active = True
    return w, inbox


def test_the_captured_turn_maps_to_gate_requests_output_and_one_completion(
    tmp_path: Path,
) -> None:
    w, inbox = replayer(tmp_path)
    for line in replay_lines():
        w.on_line(line)
    events = []
    while not inbox.empty():
        events.append(inbox.get())
    reqs = [e for e in events if isinstance(e, PermissionRequest)]
    assert [(r.request_id, r.tool_name) for r in reqs] == [
        ("acp-0", "Write"),
        ("acp-1", "Bash"),
        ("acp-2", "Bash"),
    ]
    assert reqs[0].tool_input == {"file_path": "/work/REPO/a.txt", "content": "hi\n"}
    assert [r.tool_input["command"] for r in reqs[1:]] == ["ls", "git status"]
    assert not any(isinstance(e, ProtocolNoise) for e in events)
    done = [e for e in events if isinstance(e, TurnCompleted)]
    assert len(done) == 1 and done[0].subtype == "success" and not done[0].is_error
    assert done[0].result == "done all"
    assert done[0].cost_usd == 0.214808
    assert done[0].usage["outputTokens"] == 34
    out = [e for e in events if isinstance(e, WorkerOutput)]
    assert [e.text for e in out if e.stream == "assistant"] == ["I'll write.", "done all"]
    tools = [e for e in out if e.stream == "tool"]
    assert {e.data.get("toolCallId") for e in tools} == {
        "toolu_0104cc7a01e6d70b4b123109",
        "toolu_0176f7fe916fdaf02f700c4b",
        "toolu_01b972c9e0cf518b839a41c5",
    }
    assert any(e.data.get("status") == "completed" and "a.txt" in e.text for e in tools)
    # the bookkeeping updates (available commands: ~13 kB of skill text) are not logged
    assert all(len(e.text) < 2000 for e in out)
