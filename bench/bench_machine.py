"""The supervisor loop's cost per worker event, against the event append it always does.

    .venv/bin/python bench/bench_machine.py [--events N]

Prepares a real task in a temporary repository and feeds N worker events (output lines with
a finished turn's worth of permission cancellations and notes among them) through the
supervisor's dispatch (`Supervisor._drive`: the task machine, then its effects), and,
in the same run, appends the same events to an event log directly (the baseline: what any
dispatch must do). Prints µs per event and the ratio (goal < 1.5: the decision layer costs
less than half an append). Also times `TaskMachine.on` alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gitsup.ids import TaskId  # noqa: E402
from gitsup.spec import spec_from_mapping  # noqa: E402
from gitsup.store.events import EventLog  # noqa: E402
from gitsup.store.payload import Untyped  # noqa: E402
from gitsup.workers.base import PermissionCancelled, WorkerNote, WorkerOutput  # noqa: E402


def events(n: int) -> list[object]:
    out: list[object] = []
    for i in range(n):
        if i % 50 == 0:
            out.append(PermissionCancelled(f"r{i}"))
        elif i % 50 == 1:
            out.append(WorkerNote(Untyped("hook", {"i": i})))
        else:
            out.append(WorkerOutput("assistant", f"line {i} " + "x" * 80))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20000)
    n = ap.parse_args().events
    root = Path(tempfile.mkdtemp())
    env = {**os.environ, "GIT_CONFIG_GLOBAL": str(root / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1"}
    (root / "gitconfig").write_text("[user]\n\tname = b\n\temail = b@example.invalid\n")
    repo = root / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "i"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    os.environ.update(env)
    from gitsup.state import State
    from gitsup.store.suprepo import SupRepo
    from gitsup.supervision.supervisor import Supervisor
    from gitsup.tasks.lifecycle import prepare_task

    spec = spec_from_mapping(
        {"goal": "g", "worker": {"kind": "process", "argv": ["true"]}, "review": {"kind": "none"}}
    )
    ctx = SupRepo.discover(repo)
    record, lease = prepare_task(ctx, spec)
    record.state = State.RUNNING
    sup = Supervisor(ctx.repo, ctx.layout, record, spec, lease)
    items = events(n)

    base_log = EventLog(root / "base.jsonl", TaskId(record.id))
    t = time.perf_counter()
    for it in items:
        if isinstance(it, WorkerOutput):
            base_log.append_raw("worker_output", {"stream": it.stream, "text": it.text})
        else:
            base_log.append_raw("protocol_noise", {"x": 1})
    base = (time.perf_counter() - t) / n * 1e6

    dispatch = getattr(sup, "_drive", None) or sup._dispatch  # type: ignore[attr-defined]
    t = time.perf_counter()
    for it in items:
        dispatch(it)
    loop = (time.perf_counter() - t) / n * 1e6
    print(f"event append alone (baseline)  {base:8.2f} µs/event")
    print(f"supervisor dispatch            {loop:8.2f} µs/event  ({loop / base:.2f}x baseline)")

    machine = getattr(sup, "machine", None)
    if machine is not None:
        t = time.perf_counter()
        for it in items:
            machine.on(it, 0.0)
        pure = (time.perf_counter() - t) / n * 1e6
        print(f"TaskMachine.on alone           {pure:8.2f} µs/event  ({pure / base:.3f}x baseline)")


if __name__ == "__main__":
    main()
