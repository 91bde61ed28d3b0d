"""Liveness from the supervisor's side: the worker's recorded identity (pid and start time,
its cgroup) is polled in every live state, so a worker that vanished without its adapter
reporting an exit is noticed in `waiting` too. The adapter here is the process worker with
its exit report lost (what a transport that missed the end would do); the worker is a real
process in a real repository, killed from outside while its task waits for a person to
continue its spent budget."""

from __future__ import annotations

import os
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tests.helpers.sup import check_cmd, write_worker

SLEEPER = """
import time
print("turn done; staying alive", flush=True)
time.sleep(300)
"""


def test_a_worker_that_vanished_is_noticed_while_waiting(repo: Path, tmp: Path) -> None:
    from gitsup.spec import spec_from_mapping
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.human import continue_task
    from gitsup.tasks.lifecycle import run_task
    from gitsup.workers.base import TurnCompleted, WorkerIdentity
    from gitsup.workers.process import ProcessWorker

    pids: list[int] = []

    class LostExit(ProcessWorker):
        """Ends its turn at once and never reports the process's exit."""

        def start(self, goal: str) -> WorkerIdentity:
            ident = super().start(goal)
            pids.append(ident.pid)
            self._stopping = True  # the exit's TurnCompleted is not reported either
            self.ctx.inbox.put(TurnCompleted(subtype="success", result="done", num_turns=2))
            return ident

        def _wait(self, done: list[threading.Event]) -> None:
            assert self._proc is not None
            self._proc.wait()  # reaped, and nothing said

    spec = spec_from_mapping(
        {
            "goal": "wait",
            "checks": [{"name": "ok", "argv": shlex.split(check_cmd("pass"))}],
            "worker": {"kind": "process", "argv": shlex.split(write_worker(tmp, SLEEPER))},
            "review": {"kind": "none"},
            "budget": {"max_turns": 1, "on_exhausted": "pause"},
        }
    )
    ctx = SupRepo.discover(repo)
    events: list[Any] = []
    seen = threading.Event()

    def on_event(ev: Any) -> None:
        events.append(ev)
        if ev.type == "budget_paused":
            os.kill(pids[0], signal.SIGKILL)  # gone, and its adapter says nothing
        if ev.type == "worker_stopped" and ev.data.get("classification") == "vanished":
            seen.set()

    def go_on() -> None:
        seen.wait(60)  # then the task goes on either way (the assertions say what was seen)
        task = next(e.task for e in events)
        time.sleep(0.2)
        continue_task(ctx, task, add_turns=1)

    threading.Thread(target=go_on, daemon=True).start()
    rec = run_task(ctx, spec, on_event=on_event, worker_factory=lambda s, c: LostExit(c))
    assert seen.is_set(), [e.type for e in events]
    types = [e.type for e in events]
    i = next(i for i, e in enumerate(events) if e.data.get("classification") == "vanished")
    states = [e.data["to"] for e in events[:i] if e.type == "state_changed"]
    assert states[-1] == "waiting"  # noticed while waiting, not at the end
    assert types.index("budget_paused") < i
    assert any("vanished without an exit event" in r for r in rec.reasons), rec.reasons
    assert "repair_requested" not in types and "turn_sent" not in types
    assert rec.state.value in ("completed", "blocked")
