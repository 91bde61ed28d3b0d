"""What the attention fold makes of a person in the loop: an open ask and a spent budget need
a human (with the command that answers), until answered, timed out, or a new worker."""

from __future__ import annotations

from typing import Any

from gitsup.attention.fold import Tracker


def ev(seq: int, type: str, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "ts": 1000.0 + seq, "type": type, "data": data}


ASK = ev(
    3,
    "human_ask",
    request_id="r1",
    tool="Bash",
    summary="curl x",
    rule="ask.network",
    timeout=600.0,
    fallback="deny",
)
PAUSE = ev(4, "state_changed", to="paused", reason="needs human: Bash curl x")


def fold(*events: dict[str, Any]) -> Tracker:
    tr = Tracker("20260101-abcdef")
    for e in [ev(1, "state_changed", to="running"), *events]:
        tr.feed(e)
    return tr


def test_an_open_ask_needs_a_human_until_it_is_answered() -> None:
    tr = fold(ASK, PAUSE)
    assert tr.attention() == ["needs human: Bash curl x"]
    assert tr.asks["r1"] == {
        "request_id": "r1",
        "tool": "Bash",
        "summary": "curl x",
        "since": 1003.0,
    }
    assert "git sup answer 20260101-abcdef r1" in tr.waiting_for()
    tr.feed(
        ev(
            5,
            "human_answer",
            request_id="r1",
            decision="allow",
            message="",
            by="a",
            via="cli",
            ref="x",
        )
    )
    assert tr.attention() == [] and not tr.asks  # not "paused for human input" either
    tr.feed(ev(6, "state_changed", to="running", reason="answered"))
    assert tr.attention() == []


def test_an_ask_closes_by_timeout_cancel_or_a_new_worker() -> None:
    assert not fold(
        ASK, PAUSE, ev(5, "human_timeout", request_id="r1", waited=600.0, fallback="deny")
    ).asks
    assert not fold(ASK, PAUSE, ev(5, "permission_decided", request_id="r1", cancelled=True)).asks
    assert not fold(ASK, PAUSE, ev(5, "recovered", state="paused")).asks
    assert not fold(ASK, PAUSE, ev(5, "task_finished", state="stopped", status="stopped")).asks


def test_a_budget_pause_needs_a_human_until_continue_covers_it() -> None:
    paused = ev(
        3,
        "budget_paused",
        reason="budget: 3 turns exceed max_turns 1",
        resume_with="git sup continue 20260101-abcdef",
    )
    tr = fold(paused)
    assert tr.attention() == [
        "needs human: budget: 3 turns exceed max_turns 1 (`git sup continue 20260101-abcdef`)"
    ]
    tr.feed(
        ev(4, "budget_continued", max_turns=2, still_exceeded="budget: 3 turns exceed max_turns 2")
    )
    assert tr.budget_paused == "budget: 3 turns exceed max_turns 2"
    tr.feed(ev(5, "budget_continued", max_turns=3))
    assert tr.attention() == []
