"""A person in the loop, in the task machine alone: an ask that waits for `git sup answer`
(the task paused, its deadline clock held), the timeout's fallback, a budget that pauses
until `git sup continue`, and messages for the worker's next turn (fake clock, no process)."""

from __future__ import annotations

from typing import Any

import pytest

from gitsup.errors import GitsupError
from gitsup.state import State
from gitsup.supervision.taskio import (
    Begin,
    ContinueBudget,
    Decide,
    Gated,
    HumanDecision,
    HumanMessage,
    PendingAsk,
    ResolveAsk,
    SendTurn,
    StopRequest,
    TurnSent,
    Verify,
)
from gitsup.verification.decider import ClaudeDecider, RulesDecider, make_decider
from gitsup.workers.base import PermissionCancelled, PermissionRequest, WorkerExited
from tests.fakes import FakeWorld, make_spec, turn

REQ = PermissionRequest("r1", "Bash", {"command": "curl --version"})
ASK = PendingAsk(REQ, decision=None, summary="curl --version", denial="no network", rule="ask.n")


def human(**over: Any) -> FakeWorld:
    spec = make_spec(
        decider={"kind": "human", "human_timeout": "10m"},
        budget={"deadline": "1h", "deadline_warning": 0, "no_output_timeout": "20m"},
        **over,
    )
    return FakeWorld.new(spec, gates=[Gated(ask=ASK)]).feed(Begin())


def answer(allow: bool, rid: str = "r1", message: str = "") -> HumanDecision:
    return HumanDecision(rid, allow, message, "a@example.invalid", "cli", "ref1")


def test_an_ask_pauses_the_task_until_a_person_answers() -> None:
    w = human().feed(REQ)
    assert w.state == State.PAUSED
    assert w.transitions[-1][2] == "needs human: Bash curl --version"
    assert (
        "human_ask",
        {
            "request_id": "r1",
            "tool": "Bash",
            "summary": "curl --version",
            "rule": "ask.n",
            "timeout": 600.0,
            "fallback": "deny",
            "phase": "turn",
        },
    ) in w.events
    assert w.machine.next_timer() == (w.clock.now + 600.0, "human_timeout")
    w.feed(answer(True))
    assert w.state == State.RUNNING
    [resolved] = w.resolved
    assert resolved.allow and resolved.ask is ASK and not resolved.fallback
    assert w.types()[-1] == "human_answer"
    # answered once: a second answer is refused, with the request's ref
    w.feed(answer(False))
    assert w.events[-1][0] == "control_refused" and w.events[-1][1]["ref"] == "ref1"
    assert len(w.resolved) == 1
    assert w.feed(turn()).state == State.COMPLETED


def test_a_denial_carries_the_persons_message() -> None:
    w = human().feed(REQ, answer(False, message="use X instead"))
    [resolved] = w.resolved
    assert not resolved.allow and resolved.message == "use X instead"
    assert w.events[-1] == (
        "human_answer",
        {
            "request_id": "r1",
            "decision": "deny",
            "message": "use X instead",
            "by": "a@example.invalid",
            "via": "cli",
            "ref": "ref1",
        },
    )


def test_the_deadline_clock_does_not_run_while_a_person_is_waited_for() -> None:
    w = human().feed(REQ)
    start = w.machine.deadline_at()
    assert start is not None
    w.clock.now += 300  # five minutes of waiting for a person
    w.feed(answer(True))
    assert w.machine.deadline_at() == start + 300
    assert w.machine.next_timer() is not None
    assert w.machine.next_timer()[1] in ("no_output", "deadline_reached")  # type: ignore[index]


def test_nobody_answers_then_the_fallback_does() -> None:
    w = human().feed(REQ)
    assert w.tick() == "human_timeout"
    [resolved] = w.resolved
    assert resolved.fallback and not resolved.allow
    assert ("human_timeout", {"request_id": "r1", "waited": 600.0, "fallback": "deny"}) in w.events
    assert w.state == State.RUNNING


def test_asks_end_with_the_worker() -> None:
    w = human().feed(REQ, PermissionCancelled("r1"))
    assert w.state == State.RUNNING and not w.machine.asks
    w = FakeWorld.new(human().machine.spec, gates=[Gated(ask=ASK)]).feed(Begin(), REQ)
    w.feed(WorkerExited(1))
    assert w.path()[-5:] == ["paused", "running", "waiting", "verifying", "completed"]
    assert not w.machine.asks
    w = human().feed(REQ, StopRequest("stop"))
    assert w.state == State.STOPPED


def test_a_spent_budget_pauses_until_continue() -> None:
    w = FakeWorld.new(make_spec(budget={"max_turns": 1, "on_exhausted": "pause"})).feed(Begin())
    w.feed(turn(num_turns=3))
    assert w.state == State.WAITING and not w.of(Decide)
    assert w.types()[-1] == "budget_paused"
    assert w.machine.next_timer() is None  # held: no deadline, no watchdog while it waits
    w.feed(ContinueBudget(1, 0.0, 0.0, "a", "cli", "c1"))  # not enough: still paused
    assert w.events[-1][1]["still_exceeded"] == "budget: 3 turns exceed max_turns 2"
    assert not w.of(Decide)
    w.feed(ContinueBudget(1, 0.0, 60.0, "a", "cli", "c2"))
    cont = [d for t, d in w.events if t == "budget_continued"]
    assert cont[-1]["max_turns"] == 3 and "still_exceeded" not in cont[-1]
    assert w.of(Decide)
    assert w.state == State.COMPLETED


def test_continue_is_refused_unless_paused_on_the_budget() -> None:
    w = FakeWorld.new(make_spec()).feed(Begin())
    w.feed(ContinueBudget(1, 0.0, 0.0, "a", "cli", "c1"))
    assert w.events[-1][0] == "control_refused"
    w = FakeWorld.new(make_spec(budget={"max_turns": 1})).feed(Begin(), turn(num_turns=3))
    # park is the default: verified, parked whatever the checks say
    assert w.of(Verify)[0].park_reason == "budget: 3 turns exceed max_turns 1"
    assert "budget_paused" not in w.types()


def test_a_message_is_the_workers_next_turn() -> None:
    w = FakeWorld.new(make_spec()).feed(Begin())
    w.feed(HumanMessage("mention the date", "a", "cli", "m1"))
    assert w.events[-1] == (
        "worker_message_sent",
        {"text": "mention the date", "by": "a", "via": "cli", "ref": "m1", "status": "queued"},
    )
    w.feed(turn())
    [send] = w.of(SendTurn)
    assert send.purpose == "message" and send.message == "mention the date"
    assert w.state == State.RUNNING and w.events[-1][1]["status"] == "delivered"
    assert not w.of(Decide)
    w.feed(turn())
    assert w.state == State.COMPLETED


def test_a_message_a_worker_cannot_take() -> None:
    w = FakeWorld.new(make_spec(), repairable=False).feed(Begin())
    w.feed(HumanMessage("hi", "a", "cli", "m1"))
    assert w.events[-1][0] == "control_refused"
    w = FakeWorld.new(make_spec(), sends=[TurnSent("message", ok=False)]).feed(Begin())
    w.feed(HumanMessage("hi", "a", "cli", "m1"), turn())
    statuses = [d.get("status") for t, d in w.events if t == "worker_message_sent"]
    assert statuses == ["queued", "dropped"]
    assert w.state == State.COMPLETED  # the turn before it went to the decider
    w = FakeWorld.new(make_spec()).feed(Begin(), HumanMessage("hi", "a", "cli", "m1"))
    w.feed(StopRequest("stop"))
    assert ("worker_message_sent", "dropped") in [(t, d.get("status")) for t, d in w.events]


def test_resolve_is_the_last_effect() -> None:
    w = human().feed(REQ, answer(True))
    effects = w.machine.on(answer(True, rid="r9"), w.clock.now)
    assert not any(isinstance(e, ResolveAsk) for e in effects)


def test_the_human_deciders_settings() -> None:
    spec = make_spec(decider={"kind": "human"})
    assert spec.decider.human_timeout == 1800 and spec.decider.fallback == "deny"
    assert spec.budget.on_exhausted == "park"
    assert type(make_decider(spec, cwd=".", env={})) is RulesDecider
    spec = make_spec(decider={"kind": "human", "fallback": "claude"})
    d = make_decider(spec, cwd=".", env={})
    assert isinstance(d, ClaudeDecider) and d.kind == "claude"
    for bad in (
        {"decider": {"kind": "human", "human_timeout": 0}},
        {"decider": {"kind": "human", "fallback": "human"}},
        {"budget": {"on_exhausted": "wait"}},
    ):
        with pytest.raises(GitsupError):
            make_spec(**bad)
