"""Supervisor overhead per Codex app-server record.

    .venv/bin/python bench/bench_codex.py [--records N]

Replays a recorded `codex app-server` session (tests/workers/codex/data/app-server-0.171.0.jsonl:
a write-test-commit turn with its approvals, items, output deltas and token usage),
repeated to N records (default 100,000), through the supervisor's per-record path:
framing, the app-server session (parsing, redaction, approval bookkeeping), the policy
decision for permission requests, answering them, and the event append. Prints mean µs
per record (goal < 50 µs) next to a baseline measured in the same run: `json.loads` of
the same lines.

With `--startup K` (and the Codex CLI installed: GITSUP_CODEX_BIN or .tools/codex), it
also measures K times the agent's own start-up (`codex --version`) against the adapter's
start to first turn: spawn, initialize, thread/start, turn/start, until the first model
request reaches the Responses stand-in on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
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
from gitsup.workers.base import (  # noqa: E402
    PermissionAnswer,
    PermissionRequest,
    TurnCompleted,
    WorkerOutput,
)
from gitsup.workers.codex.app_server import AppServerSession  # noqa: E402
from gitsup.workers.stream_json import LineFramer  # noqa: E402

TRANSCRIPT = REPO / "tests" / "workers" / "codex" / "data" / "app-server-0.171.0.jsonl"


def load_stream(n: int) -> bytes:
    lines = [ln for ln in TRANSCRIPT.read_bytes().splitlines() if ln.strip()]
    # the responses answer the opening requests of one session; the rest repeats per turn
    body = [ln for ln in lines if b'"method"' in ln]
    out: list[bytes] = []
    while len(out) < n:
        out.extend(body)
    return b"\n".join(out[:n]) + b"\n"


def opened_session(cwd: str) -> AppServerSession:
    s = AppServerSession(cwd=cwd)
    for m in s.open():
        rid = json.loads(m)["id"]
    s.feed(json.dumps({"id": rid, "result": {"userAgent": "gitsup/0.171.0"}}))
    s.feed(
        json.dumps(
            {
                "id": rid + 1,
                "result": {
                    "thread": {"id": "t"},
                    "approvalPolicy": "untrusted",
                    "approvalsReviewer": "user",
                },
            }
        )
    )
    return s


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
    session = opened_session("/work/tree")
    framer = LineFramer()
    counts = {"records": 0, "permission": 0, "output": 0, "turns": 0, "written": 0}
    t = time.perf_counter()
    for chunk in chunks:
        for line in framer.feed(chunk):
            counts["records"] += 1
            fed = session.feed(line)
            counts["written"] += len(fed.out)
            for ev in fed.events:
                if isinstance(ev, PermissionRequest):
                    counts["permission"] += 1
                    dec = decide_tool(
                        ev.tool_name, ev.tool_input, worktree="/work/tree", policy=policy
                    )
                    log.append_raw("permission_decided", {"tool": ev.tool_name, **dec.as_dict()})
                    counts["written"] += len(
                        session.answer(ev.request_id, PermissionAnswer(dec.verdict == "allow"))
                    )
                elif isinstance(ev, WorkerOutput):
                    counts["output"] += 1
                    out = {"stream": ev.stream, "text": ev.text, **dict(ev.data)}
                    log.append_raw("worker_output", Redacted(out))
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


def bench_startup(k: int) -> None:
    import os
    import queue
    import statistics
    import subprocess

    from gitsup.demo.scripted_openai import ScriptedResponses
    from gitsup.workers.base import WorkerSetup
    from gitsup.workers.codex.worker import CodexWorker, find_codex

    env = {**os.environ, "OPENAI_API_KEY": "sk-scripted"}
    binary = find_codex([], env)[0]
    own: list[float] = []
    first: list[float] = []
    for _ in range(k):
        with tempfile.TemporaryDirectory() as home:
            t = time.perf_counter()
            subprocess.run(
                [binary, "--version"],
                env={**env, "CODEX_HOME": home},
                check=True,
                capture_output=True,
            )
            own.append(time.perf_counter() - t)
        with (
            ScriptedResponses({"default": [{"text": "hi"}]}) as model,
            tempfile.TemporaryDirectory() as d,
        ):
            ctx = WorkerSetup(
                task_id="bench",
                worktree=Path(d),
                task_dir=Path(d) / "task",
                env={**env, "OPENAI_BASE_URL": model.url},
                argv=(binary,),
                inbox=queue.SimpleQueue(),
            )
            worker = CodexWorker(ctx)
            t = time.perf_counter()
            worker.start("hello")
            while not model.step_requests() and time.perf_counter() - t < 60:
                time.sleep(0.002)
            first.append(time.perf_counter() - t)
            worker.stop(grace=2.0)
    print(f"codex --version (own start)  {statistics.median(own) * 1000:8.0f} ms median of {k}")
    print(f"adapter start to first turn  {statistics.median(first) * 1000:8.0f} ms median of {k}")
    print(f"ratio                        {statistics.median(first) / statistics.median(own):8.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--startup", type=int, default=0)
    args = ap.parse_args()
    bench_records(args.records)
    if args.startup:
        bench_startup(args.startup)


if __name__ == "__main__":
    main()
