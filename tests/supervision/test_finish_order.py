"""The end of a task, in order: a record that says the task ended finds `task_finished` in its
event log (the terminal record is staged, `task_finished` appended, then the staged record
renamed into place). Readers rely on it: `git sup watch --json --until-done` reads a task's record, then
its log, and stops streaming the task once the record is terminal."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gitsup.ids import TaskId
from gitsup.spec import spec_from_mapping
from gitsup.state import TERMINAL, State
from gitsup.store.records import TaskStore
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import run_task

FIX = "printf 'def add(a, b):\\n    return a + b\\n' > calc.py && git commit -qam fix"
CHECK = [sys.executable, "-c", "from calc import add; assert add(1, 2) == 3"]


@pytest.mark.parametrize(
    ("worker", "budget", "final"),
    [
        (FIX, {}, State.COMPLETED),  # ready
        ("git commit -q --allow-empty -m nothing", {}, State.BLOCKED),  # parked: the check fails
        ("sleep 30", {"deadline": "2s"}, State.BLOCKED),  # the deadline ends the worker
    ],
    ids=["ready", "parked", "deadline"],
)
def test_a_terminal_record_finds_task_finished_in_its_log(
    repo: Path, monkeypatch: pytest.MonkeyPatch, worker: str, budget: dict[str, Any], final: State
) -> None:
    ctx = SupRepo.discover(repo)
    seen: list[tuple[str, list[str]]] = []
    save, commit_final = TaskStore.save, TaskStore.commit_final

    def observe(task: str, state: str) -> None:
        """Each time the record is written, what its log holds at that moment (from disk)."""
        log = ctx.layout.events(TaskId(task))
        types = []
        if log.exists():
            types = [json.loads(line)["type"] for line in log.read_text().splitlines() if line]
        seen.append((str(State(state).value), types))

    def saving(self: TaskStore, record: Any) -> None:
        observe(record.id, record.state)
        save(self, record)

    def committing(self: TaskStore, task: TaskId) -> None:
        observe(task, json.loads(ctx.layout.final_record(task).read_text())["state"])
        commit_final(self, task)

    monkeypatch.setattr(TaskStore, "save", saving)
    monkeypatch.setattr(TaskStore, "commit_final", committing)
    spec = spec_from_mapping(
        {
            "goal": "fix add",
            "worker": {"kind": "process", "argv": ["sh", "-c", worker]},
            "review": {"kind": "none"},
            "checks": [{"name": "add", "argv": CHECK}],
            "autonomy": {"max_repair_rounds": 0},
            "budget": budget,
        }
    )
    rec = run_task(ctx, spec)
    assert State(rec.state) == final, rec.reasons
    terminal = [(state, types) for state, types in seen if State(state) in TERMINAL]
    assert terminal, seen
    for state, types in terminal:
        assert "task_finished" in types, (state, types[-4:])
    # and the record said its state only after the log had said it
    before = [s for s, _ in seen[: seen.index(terminal[0])]]
    assert all(State(s) not in TERMINAL for s in before)
