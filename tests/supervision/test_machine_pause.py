"""`git sup pause`/`resume` in the task machine alone (fake clock, no process): the deadline
and no-output clocks stop while paused, the deadline moves by the time paused, a pause and an
ask hold the clocks together, and what is refused is answered with `control_refused`."""

from __future__ import annotations

from gitsup.state import State
from gitsup.supervision.taskio import Begin, Gated, HumanDecision, PendingAsk, UserPause
from gitsup.workers.base import PermissionRequest
from tests.fakes import FakeWorld, make_spec

REQ = PermissionRequest("r1", "Bash", {"command": "curl --version"})
ASK = PendingAsk(REQ, decision=None, summary="curl --version", denial="no network", rule="ask.n")


def _world(**over: object) -> FakeWorld:
    spec = make_spec(
        decider={"kind": "human", "human_timeout": "10h"},
        budget={"deadline": "1h", "deadline_warning": 0, "no_output_timeout": "20m"},
        **over,
    )
    return FakeWorld.new(spec, gates=[Gated(ask=ASK)]).feed(Begin())


def pause(on: bool = True, ref: str = "p1") -> UserPause:
    return UserPause(on, "a@example.invalid", "cli", ref)


def test_a_pause_stops_the_clocks_and_moves_the_deadline() -> None:
    w = _world()
    assert w.state == State.RUNNING
    start_deadline = w.machine.deadline_at()
    assert start_deadline is not None
    w.clock.advance(100)
    w.feed(pause())
    assert w.types()[-1] == "task_paused"
    assert w.machine.next_timer() is None  # neither the deadline nor the watchdog runs
    w.clock.advance(7200)  # past the deadline, paused
    w.feed(pause(False, "p2"))
    resumed_at = w.clock.now
    kind, data = w.events[-1]
    assert kind == "task_resumed" and data["paused"] == 7200 and data["how"] == "cgroup thawed"
    assert w.machine.deadline_at() == start_deadline + 7200
    # the watchdog starts over at the resume; the deadline comes later
    assert w.tick() == "no_output"
    assert w.clock.now == resumed_at + 1200


def test_a_pause_and_an_ask_hold_the_clocks_together() -> None:
    w = _world()
    start_deadline = w.machine.deadline_at()
    assert start_deadline is not None
    w.feed(pause())
    w.clock.advance(60)
    w.feed(REQ)  # an ask: the task pauses for a person too
    assert w.state == State.PAUSED
    w.clock.advance(60)
    w.feed(HumanDecision("r1", True, "", "a@example.invalid", "cli", "ref1"))
    # the ask is answered, the person's pause still holds the clocks
    assert w.machine.held
    w.clock.advance(60)
    w.feed(pause(False, "p2"))
    assert not w.machine.held
    dl = w.machine.deadline_at()
    assert dl == start_deadline + 180


def test_what_is_refused() -> None:
    w = _world()
    w.feed(pause(False))
    w.feed(pause(True, "p2"), pause(True, "p3"))
    refused = [d for t, d in w.events if t == "control_refused"]
    assert [(d["ref"], d["command"]) for d in refused] == [("p1", "resume"), ("p3", "pause")]
    assert "not paused" in refused[0]["reason"] and "already paused" in refused[1]["reason"]
    idle = FakeWorld.new(make_spec())
    idle.feed(pause())
    assert idle.types() == ["control_refused"]
    assert "no worker is running" in idle.events[0][1]["reason"]
