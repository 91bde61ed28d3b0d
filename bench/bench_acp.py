"""Supervisor overhead per ACP record (the `acp` worker).

    .venv/bin/python bench/bench_acp.py [--records N]

Replays a recorded ACP stream of Claude Code's ACP adapter
(tests/workers/acp/data/transcript-0.101.0.ndjson), repeated to N records (default 100,000),
through the supervisor's per-record path: framing, decoding and mapping in the acp
worker (with the redaction screen), the policy decision for permission requests, and the
event append (what `Supervisor._dispatch` does for each event). Prints mean µs per
record (goal < 50 µs) next to a baseline measured in the same run: `json.loads` of the
same lines.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gitsup.ids import TaskId  # noqa: E402
from gitsup.policy import decide_tool, load_policy  # noqa: E402
from gitsup.redact import Redacted  # noqa: E402
from gitsup.store.events import EventLog  # noqa: E402
from gitsup.workers.acp.worker import AcpWorker  # noqa: E402
from gitsup.workers.base import (  # noqa: E402
    PermissionRequest,
    TurnCompleted,
    WorkerOutput,
    WorkerSetup,
)
from gitsup.workers.stream_json import LineFramer  # noqa: E402

PROMPT_ID = 3


def load_stream(n: int) -> bytes:
    src = REPO / "tests" / "workers" / "acp" / "data" / "transcript-0.101.0.ndjson"
    lines = []
    for ln in src.read_bytes().splitlines():
        m = json.loads(ln)
        if "method" not in m and m.get("id") in (1, 2):
            continue  # the handshake: answered by the worker itself
        lines.append(ln)
    out: list[bytes] = []
    while len(out) < n:
        out.extend(lines)
    return b"\n".join(out[:n]) + b"\n"


def bench_records(n: int) -> None:
    data = load_stream(n)
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    t = time.perf_counter()
    for line in data.splitlines():
        json.loads(line)
    base = time.perf_counter() - t

    d = Path(tempfile.mkdtemp())
    log = EventLog(d / "events.jsonl", TaskId("20260101-000000"))
    policy = load_policy(None)
    wt = str(d)
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    w = AcpWorker(WorkerSetup("20260101-000000", d, d, {}, (), inbox))
    w._session_id = "bench"
    framer = LineFramer()
    counts = {"records": 0, "permission": 0, "output": 0, "turns": 0}
    t = time.perf_counter()
    for chunk in chunks:
        for line in framer.feed(chunk):
            counts["records"] += 1
            w._calls[PROMPT_ID] = "prompt"  # each replayed turn answers a prompt
            w.on_line(line)
            while not inbox.empty():
                ev = inbox.get_nowait()
                if isinstance(ev, PermissionRequest):
                    counts["permission"] += 1
                    dec = decide_tool(ev.tool_name, ev.tool_input, worktree=wt, policy=policy)
                    log.append_raw("permission_decided", {"tool": ev.tool_name, **dec.as_dict()})
                elif isinstance(ev, WorkerOutput):
                    counts["output"] += 1
                    log.append_raw(
                        "worker_output",
                        Redacted({"stream": ev.stream, "text": ev.text, **dict(ev.data)}),
                    )
                elif isinstance(ev, TurnCompleted):
                    counts["turns"] += 1
                    log.append_raw(
                        "turn_completed", {"subtype": ev.subtype, "cost_usd": ev.cost_usd}
                    )
    total = time.perf_counter() - t
    n_rec = counts["records"]
    print(f"records replayed            {n_rec:,} ({counts})")
    print(f"baseline json.loads          {base / n_rec * 1e6:8.2f} µs/record")
    print(f"supervisor per-record path   {total / n_rec * 1e6:8.2f} µs/record  (goal < 50)")
    print(f"ratio to json.loads          {total / base:8.1f}x")
    print(f"event log size               {log.path.stat().st_size / 1e6:.1f} MB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    a = ap.parse_args()
    bench_records(a.records)


if __name__ == "__main__":
    main()
