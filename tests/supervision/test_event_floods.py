"""What a worker can cause at will is bounded in its task's event log: its output past
`[events] max_output_bytes` and refused connections past `[events] max_refused` distinct
ones are dropped and counted, repeats of a refusal are folded into a count, and
`events_dropped` says what was dropped. Real `git sup start` with real process workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers.sup import common_dir, start_json, write_spec, write_worker

MiB = 1024 * 1024


def _log_files(repo: Path, task: str) -> list[Path]:
    """The log and its rotated files (events.N.jsonl)."""
    return sorted((common_dir(repo) / "sup" / "tasks" / task).glob("events*.jsonl"))


def _records(repo: Path, task: str) -> list[dict[str, Any]]:
    out = []
    for f in _log_files(repo, task):
        for line in f.read_bytes().splitlines():
            rec = json.loads(line)
            if "seq" in rec:
                out.append(rec)
    return sorted(out, key=lambda r: int(r["seq"]))


def _spec(tmp: Path, worker: str, extra: str) -> Path:
    return write_spec(
        tmp,
        f"""
        goal = "g"
        [worker]
        kind = "process"
        argv = {json.dumps(worker)}
        [review]
        kind = "none"
        {extra}
        """,
    )


def test_200mib_of_output_keeps_the_log_under_its_cap_and_counts_the_rest(
    repo: Path, tmp: Path
) -> None:
    worker = write_worker(
        tmp,
        """
        import sys
        block = (b"x" * 1023 + b"\\n") * 1024
        for _ in range(200):
            sys.stdout.buffer.write(block)
        sys.stdout.flush()
        """,
    )
    spec = _spec(tmp, worker, "[events]\nmax_output_bytes = 1048576")
    _rc, rec, err = start_json(repo, "--spec", str(spec), timeout=600)
    tid = rec["id"]
    assert rec["state"] in ("blocked", "completed", "failed"), err
    size = sum(f.stat().st_size for f in _log_files(repo, tid))
    # the bound: 1 MiB of output records, plus one record (64 KiB), plus the task's own
    assert size < 2 * MiB, f"the event log is {size} bytes"
    records = _records(repo, tid)
    written = sum(len(r["data"]["text"]) for r in records if r["type"] == "worker_output")
    dropped = [r["data"] for r in records if r["type"] == "events_dropped"]
    assert [d["final"] for d in dropped] == [False, True], dropped
    out = dropped[-1]["dropped"]["worker_output"]
    # nothing vanished: what was written and what was counted as dropped is all of it
    assert written + out["bytes"] == 200 * MiB, (written, out)
    assert out["events"] > 0 and dropped[-1]["limits"]["max_output_bytes"] == MiB
    # said before the end
    types = [r["type"] for r in records]
    assert types.index("events_dropped") < types.index("task_finished")


def test_50k_refused_connections_are_folded_and_counted(repo: Path, tmp: Path) -> None:
    """CONNECT requests to endpoints the egress gate does not allow: 1,500 distinct
    ports (500 more than `max_refused`), 50,000 requests in all."""
    worker = write_worker(
        tmp,
        """
        import os, socket
        from urllib.parse import urlsplit
        proxy = urlsplit(os.environ["HTTPS_PROXY"])
        for i in range(50_000):
            s = socket.create_connection((proxy.hostname, proxy.port))
            s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" % (1 + i % 1500))
            while s.recv(4096):
                pass
            s.close()
        """,
    )
    spec = _spec(tmp, worker, '[isolation]\nnetwork = "none"\negress = ["allowed.invalid:443"]')
    _rc, rec, err = start_json(repo, "--spec", str(spec), timeout=900)
    tid = rec["id"]
    assert rec["state"] in ("blocked", "completed", "failed"), err
    records = _records(repo, tid)
    refused = [r["data"] for r in records if r["type"] == "egress_refused"]
    assert {r["who"] for r in refused} == {"worker"}
    summary = [
        r["data"] for r in records if r["type"] == "egress_summary" and r["data"]["who"] == "worker"
    ]
    assert summary and summary[0]["refused"] == 50_000, summary
    # the bound: 1,000 distinct refusals, then one folded count each, then the summary
    assert len(refused) <= 2 * 1000 + 50_000 // 10_000, len(refused)
    dropped = [r["data"] for r in records if r["type"] == "events_dropped"]
    assert dropped and dropped[-1]["final"], dropped
    n_dropped = dropped[-1]["dropped"]["egress_refused"]["events"]
    # every refusal is a record of its own, one of the `repeats` a record folds, or
    # counted as dropped
    assert sum(r.get("repeats", 1) for r in refused) + n_dropped == 50_000
    assert dropped[-1]["limits"]["folded_repeats"] == sum(r.get("repeats", 0) for r in refused)
    assert n_dropped == 500 * (50_000 // 1500) + sum(
        1 for i in range(50_000 - 50_000 % 1500, 50_000) if 1 + i % 1500 > 1000
    )
    size = sum(f.stat().st_size for f in _log_files(repo, tid))
    assert size < 2 * MiB, f"the event log is {size} bytes"
