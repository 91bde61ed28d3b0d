"""Who needs a human, folded from events; the board reads logs incrementally."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from gitsup.attention.fold import Board, BudgetLimits, Tracker
from gitsup.layout import Layout


def ev(seq: int, type: str, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "ts": time.time(), "task": "t", "type": type, "data": data}


def test_reasons_and_waiting_for() -> None:
    tr = Tracker("t", budget=BudgetLimits(max_turns=10, max_cost_usd=1.0, deadline=3600))
    tr.feed(ev(1, "task_started", goal="g", checks=["a", "b"]))
    tr.feed(ev(2, "state_changed", to="running"))
    assert tr.attention() == [] and tr.waiting_for() == "the worker"
    tr.feed(ev(21, "permission_pending", request_id="r1", tool="Bash"))
    assert tr.waiting_for() == "a permission being decided (Bash)"
    tr.feed(ev(22, "permission_decided", request_id="r1", tool="Bash", answer="deny"))
    assert tr.waiting_for() == "the worker"
    tr.feed(ev(3, "turn_completed", cost_usd=0.5, num_turns=7))
    assert tr.attention() == []  # 7/10 turns, $0.50/$1: not yet
    tr.feed(ev(4, "turn_completed", cost_usd=0.35, num_turns=1))
    (reason,) = tr.attention()
    assert (
        reason.startswith("budget nearly spent") and "turns 8/10" in reason and "$0.85/$1" in reason
    )
    tr.feed(ev(5, "state_changed", to="verifying"))
    tr.feed(ev(6, "acceptance_result", passed=True))
    assert tr.waiting_for() == "checks 1/2"
    tr.feed(ev(7, "review_started"))
    assert tr.waiting_for() == "review"
    tr.feed(ev(8, "decision", on="turn_completed", attempt=1, error="bad JSON"))
    assert any("decider failed" in r for r in tr.attention())
    tr.feed(ev(9, "decision", action="verify"))
    assert not any("decider failed" in r for r in tr.attention())
    tr.feed(ev(10, "state_changed", to="paused"))
    assert "paused for human input" in tr.attention()
    tr.feed(ev(11, "task_finished", state="blocked", status="parked"))
    assert tr.attention()[0].startswith("parked") and tr.waiting_for().startswith("a human")


def _task(tasks: Path, tid: str, rec: dict[str, Any], events: list[dict[str, Any]]) -> Path:
    d = tasks / tid
    d.mkdir(parents=True)
    (d / "task.json").write_text(json.dumps({"id": tid, "created_at": time.time(), **rec}))
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return d


def test_board_incremental_rotation_and_lost_supervisor(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    # a supervisor that is certainly gone: a process that exited
    p = subprocess.Popen(["true"])
    p.wait()
    d = _task(
        layout.tasks,
        "20260101-aaaaaa",
        {"state": "running", "status": "pending", "supervisor": {"pid": p.pid, "start_time": 1.0}},
        [ev(1, "task_started", checks=[]), ev(2, "state_changed", to="running")],
    )
    board = Board(layout)
    (row,) = board.refresh()
    assert any("supervisor is not running" in r for r in row.attention)
    # appended events are folded, a torn last line waits for its end
    with (d / "events.jsonl").open("a") as f:
        f.write(json.dumps(ev(3, "turn_completed", cost_usd=0.25)) + "\n" + '{"seq": 4, "ty')
    (row,) = board.refresh(keep_events=True)
    assert row.turns == 1 and [e["seq"] for e in board.new_events] == [3]
    with (d / "events.jsonl").open("a") as f:
        f.write(
            'pe": "model_call", "ts": 1, "task": "t", "data": {"role": "reviewer", "cost_usd": 0.5}}\n'
        )
    (row,) = board.refresh(keep_events=True)
    assert [e["seq"] for e in board.new_events] == [4] and row.cost_usd == 0.75
    # rotation: a new file, seq goes on; nothing is folded twice
    (d / "events.jsonl").rename(d / "events.1.jsonl")
    (d / "events.jsonl").write_text(json.dumps(ev(5, "turn_completed", cost_usd=0.25)) + "\n")
    (row,) = board.refresh(keep_events=True)
    assert [e["seq"] for e in board.new_events] == [5] and row.cost_usd == 1.0
