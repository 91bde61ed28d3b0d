"""Supervisor overhead per stream-json record, and supervisor CPU while the worker is idle.

    .venv/bin/python bench/bench_worker.py [--records N]

1. Replays a recorded Claude Code transcript (tests/workers/claude/data/transcript-2.1.328.ndjson),
   repeated to N records (default 100,000), through the supervisor's per-record path:
   framing, parsing (with the redaction screen) and the event append (what
   `Supervisor._dispatch` does for each record): µs per record (goal <= 25 µs), then the
   same with the policy decision for each permission request, next to a baseline measured
   in the same run: `json.loads` of the same lines.
2. Runs a real supervisor with a process worker that sleeps silently for a few seconds and
   reports the supervisor's CPU time over that idle window (goal ≈ 0: no busy polling).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gitsup.ids import TaskId  # noqa: E402
from gitsup.policy import decide_tool, load_policy  # noqa: E402
from gitsup.store import eventtypes as et  # noqa: E402
from gitsup.store.events import EventLog  # noqa: E402
from gitsup.supervision.gate import summarize_input  # noqa: E402
from gitsup.workers import stream_json as sj  # noqa: E402
from gitsup.workers.base import PermissionRequest, TurnCompleted, WorkerOutput  # noqa: E402

# What an allow decision records (the classifier's own cost is measured separately).
DECISION = {"verdict": "allow", "rule": "git.commit", "reason": "commits inside the worktree"}


def load_stream(n: int) -> bytes:
    src = REPO / "tests" / "workers" / "claude" / "data" / "transcript-2.1.328.ndjson"
    lines = [ln for ln in src.read_bytes().splitlines() if ln.strip()]
    # Add permission requests like the ones a real turn carries.
    perm = json.dumps(
        {
            "type": "control_request",
            "request_id": "r1",
            "request": {
                "subtype": "can_use_tool",
                "tool_name": "Bash",
                "input": {"command": "git add -A && git commit -m 'x'", "description": "c"},
            },
        }
    ).encode()
    base = [*lines, perm]
    out = []
    while len(out) < n:
        out.extend(base)
    return b"\n".join(out[:n]) + b"\n"


def bench_records(n: int, rounds: int = 3) -> dict[str, float]:
    """µs per record: json.loads alone (the baseline), the supervisor's parse + event append
    (the record overhead, without the policy classifier), and the whole per-record path with
    the classifier's decision for each permission request. Best of `rounds`, interleaved;
    CPU time of this process (user + system), which other load on the machine disturbs less
    than wall time."""
    data = load_stream(n)
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    policy = load_policy(None)
    counts = {"records": 0, "permission": 0, "output": 0, "turns": 0}

    def baseline() -> float:
        t = time.process_time()
        for line in data.splitlines():
            json.loads(line)
        return time.process_time() - t

    def replay(decide: bool) -> float:
        d = Path(tempfile.mkdtemp())
        log = EventLog(d / "events.jsonl", TaskId("20260101-000000"))
        wt = str(d)
        framer = sj.LineFramer()
        counts.update(records=0, permission=0, output=0, turns=0)
        t = time.process_time()
        for chunk in chunks:
            for line in framer.feed(chunk):
                counts["records"] += 1
                ev = sj.parse_record(line)
                # The payloads the supervisor builds for these records (machine.py, gate.py).
                if isinstance(ev, PermissionRequest):
                    counts["permission"] += 1
                    if decide:
                        dec = decide_tool(ev.tool_name, ev.tool_input, worktree=wt, policy=policy)
                        fields = {"verdict": dec.verdict, "rule": dec.rule, "reason": dec.reason}
                    else:
                        fields = DECISION
                    log.append(
                        et.PermissionDecided(
                            request_id=ev.request_id,
                            tool=ev.tool_name,
                            input=summarize_input(ev.tool_input),
                            answer="allow",
                            **fields,
                        )
                    )
                elif isinstance(ev, WorkerOutput):
                    counts["output"] += 1
                    # parse_record redacted it, as the adapter does (WorkerOutput is pre-redacted)
                    log.append(et.WorkerOutput(stream=ev.stream, text=ev.text, more=ev.data))
                elif isinstance(ev, TurnCompleted):
                    counts["turns"] += 1
                    log.append(
                        et.TurnCompleted(
                            subtype=ev.subtype,
                            result=(ev.result or "")[:4000],
                            cost_usd=ev.cost_usd,
                        )
                    )
        total = time.process_time() - t
        log.close()
        for p in d.iterdir():
            p.unlink()
        d.rmdir()
        return total

    base, record, full = [], [], []
    for _ in range(rounds):
        base.append(baseline())
        record.append(replay(decide=False))
        full.append(replay(decide=True))
    n_rec = counts["records"]
    us = {
        "json_loads_us": min(base) / n_rec * 1e6,
        "record_us": min(record) / n_rec * 1e6,
        "full_us": min(full) / n_rec * 1e6,
    }
    print(f"records replayed            {n_rec:,} ({counts}), best of {rounds}")
    print(f"baseline json.loads          {us['json_loads_us']:8.2f} µs/record")
    print(
        f"parse + event append         {us['record_us']:8.2f} µs/record  (goal <= 25)   "
        f"{us['record_us'] / us['json_loads_us']:.1f}x json.loads"
    )
    print(
        f"with the policy decisions    {us['full_us']:8.2f} µs/record  "
        f"{us['full_us'] / us['json_loads_us']:.1f}x json.loads"
    )
    return us


def bench_idle(seconds: float) -> None:
    import psutil

    d = Path(tempfile.mkdtemp())
    repo = d / "repo"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@x",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@x",
    }
    for cmd in (["git", "init", "-q"], ["git", "commit", "-q", "--allow-empty", "-m", "i"]):
        subprocess.run(cmd, cwd=repo, check=True, env=env)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gitsup",
            "start",
            "idle",
            "--worker",
            f"sleep {seconds + 3}",
            "--review",
            "none",
            "--no-commit-required",
            "-q",
        ],
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    p = psutil.Process(proc.pid)
    time.sleep(1.5)  # start-up (imports, worktree, spawn)
    c0 = p.cpu_times()
    t0 = time.monotonic()
    time.sleep(seconds)
    c1 = p.cpu_times()
    wall = time.monotonic() - t0
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    proc.wait(timeout=60)
    print(
        f"supervisor CPU while idle    {cpu * 1000:.1f} ms over {wall:.1f} s  ({cpu / wall * 100:.3f}% of a core)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--idle", type=float, default=5.0)
    a = ap.parse_args()
    bench_records(a.records)
    bench_idle(a.idle)


if __name__ == "__main__":
    main()
