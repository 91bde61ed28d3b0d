"""The task machine alone (gitsup/supervision/machine.py): every transition, every timer, stop in
every phase, the budget and repair rules — driven by a scripted world and a fake clock,
no process, no Git (milliseconds)."""

from __future__ import annotations

import pytest

from gitsup.state import TRANSITIONS, State
from gitsup.store.payload import Untyped
from gitsup.supervision.machine import TaskMachine
from gitsup.supervision.taskio import (
    Abandon,
    Adopted,
    Begin,
    Close,
    Finish,
    Gated,
    LimitHit,
    Recover,
    ResumeAuto,
    SendTurn,
    Spawn,
    StopRequest,
    StopWorker,
    TurnSent,
    Verified,
    Verify,
)
from gitsup.verification.decider import TurnDecision
from gitsup.workers.base import (
    HumanInput,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    WorkerExited,
    WorkerNote,
    WorkerOutput,
)
from tests.fakes import FakeWorld, make_spec, park, ready, repair, turn

LIVE = [State.STARTING, State.RUNNING, State.WAITING, State.PAUSED, State.VERIFYING]


def running(**kw: object) -> FakeWorld:
    spec = kw.pop("spec", None)
    w = FakeWorld.new(spec, **kw)  # type: ignore[arg-type]
    return w.feed(Begin())


# --- the happy path and the start -----------------------------------------------------------


def test_a_turn_verified_ready_walks_the_design_path() -> None:
    w = running().feed(turn())
    assert w.path() == ["starting", "running", "waiting", "verifying", "completed"]
    assert w.closed == [State.COMPLETED]
    assert w.machine.terminal and w.machine.turns == 1
    assert w.types()[:2] == ["turn_completed", "decision"]
    assert w.decisions_recorded[0]["action"] == "verify"
    spawn = w.of(Spawn)[0]
    assert spawn.prompt.startswith("fix add")
    # the finaliser gets the head that was verified
    assert w.of(Finish)[0].verified_head == "c0ffee"


def test_a_worker_that_cannot_start_fails_directly() -> None:
    w = running(spawn_failure=("preflight: sandbox: no landlock",))
    assert w.path() == ["starting", "failed"]
    assert w.reasons == ["preflight: sandbox: no landlock"]


def test_a_stop_that_arrived_while_spawning_stops() -> None:
    w = running(spawn_aborted="signal SIGTERM")
    assert w.path() == ["starting", "stopped"]
    assert w.reasons == ["stopped: signal SIGTERM"]
    assert w.of(StopWorker)[0].announce  # the worker had started


def test_worker_events_are_recorded_and_output_is_progress() -> None:
    w = running(spec=make_spec(budget={"no_output_timeout": "10s"}))
    w.clock.advance(8)
    w.feed(
        WorkerOutput("stdout", "hi"),
        ProtocolNoise("x" * 3000, "bad"),
        WorkerNote(Untyped("n", {"a": 1})),
    )
    assert w.types() == ["worker_output", "protocol_noise", "n"]
    assert len(w.events[1][1]["line"]) == 2000
    assert w.machine.next_timer() == (w.clock.now + 10, "no_output")


def test_unknown_inputs_are_a_bug_and_a_finished_task_ignores_everything() -> None:
    w = running()
    with pytest.raises(TypeError):
        w.feed(object())
    w.feed(turn())
    assert w.machine.terminal
    before = len(w.effects)
    w.feed(StopRequest("late"), turn(), Abandon(), WorkerExited(1))
    assert len(w.effects) == before and w.machine.next_timer() is None


# --- turns and the decider ------------------------------------------------------------------


def test_continue_sends_a_turn_and_a_new_turn_is_decided_again() -> None:
    w = running(decisions=[TurnDecision("continue", message="go on")])
    w.feed(turn(num_turns=3, cost_usd=0.5))
    sends = w.of(SendTurn)
    assert [(s.message, s.key, s.purpose) for s in sends] == [("go on", "continue-3", "continue")]
    assert w.state == State.WAITING and w.machine.turn_active
    w.feed(turn(cost_usd=0.25))
    assert w.state == State.COMPLETED
    assert (w.machine.turns, w.machine.cost_usd) == (4, 0.75)


def test_no_new_turn_after_the_deadline() -> None:
    w = running(
        spec=make_spec(budget={"deadline": "60s"}),
        decisions=[TurnDecision("continue", message="go on")],
    )
    w.clock.advance(61)
    w.feed(turn())
    assert not w.of(SendTurn) and w.of(Verify)[0].park_reason is None


def test_a_worker_that_cannot_take_the_turn_parks() -> None:
    w = running(
        decisions=[TurnDecision("continue", message="go on")],
        sends=[TurnSent("continue", ok=False)],
        verdicts=[park("worker cannot take another turn")],
    )
    w.feed(turn())
    assert w.of(Verify)[0].park_reason == "worker cannot take another turn"
    assert w.state == State.BLOCKED


def test_a_failed_decider_parks_and_a_park_decision_parks() -> None:
    w = running(decisions=[None], verdicts=[park("decider failed; parking")]).feed(turn())
    assert w.decisions_recorded[0] == {
        "on": "turn_completed",
        "action": "park",
        "message": "",
        "reason": "decider failed; parking",
        "source": "rules",
    }
    assert w.of(Verify)[0].park_reason == "decider failed; parking"
    w = running(decisions=[TurnDecision("park")], verdicts=[park("x")]).feed(turn())
    assert w.of(Verify)[0].park_reason == "decider parked the task"


def test_a_noop_decision_after_a_clean_exit_verifies() -> None:
    noop = TurnDecision("continue", message="", noop=True)
    w = running(decisions=[noop], worker_alive=False).feed(turn(subtype="exit"))
    assert w.decisions_recorded[0]["action"] == "verify"
    assert w.of(Verify)[0].park_reason is None
    # not after an error, nor while the worker lives
    for t, alive in ((turn(subtype="exit", is_error=True), False), (turn(subtype="exit"), True)):
        w = running(decisions=[noop], worker_alive=alive, verdicts=[park("p")]).feed(t)
        assert w.decisions_recorded[0]["action"] == "continue"
        assert w.of(Verify)[0].park_reason == "decider parked the task"


@pytest.mark.parametrize(
    ("status", "final", "reason"),
    [
        (401, State.FAILED, "model API authentication failed"),
        (529, State.BLOCKED, "model API unreachable"),
        (400, State.BLOCKED, "model API error"),
    ],
)
def test_a_model_failure_ends_the_task_directly(status: int, final: State, reason: str) -> None:
    t = turn("API Error: boom", is_error=True, data={"api_error_status": status})
    w = running().feed(t)
    assert w.path() == ["starting", "running", "waiting", final.value]
    assert w.reasons[0].startswith(reason) and w.reasons[1].startswith("what to do: ")
    assert "model_error" in w.types() and not w.of(Verify)


def test_a_model_failure_over_the_budget_names_both() -> None:
    """The turn spent past max_cost_usd and then ended with an API error: the task parks on
    the model failure, and the record also says the budget was exceeded."""
    t = turn("API Error: boom", is_error=True, cost_usd=0.5, data={"api_error_status": 529})
    w = running(spec=make_spec(budget={"max_cost_usd": 0.1})).feed(t)
    why = "budget: cost $0.5000 exceeds max_cost_usd $0.1"
    assert w.path() == ["starting", "running", "waiting", "blocked"]
    assert w.reasons[0].startswith("model API unreachable") and why in w.reasons
    assert ("budget_exceeded", {"reason": why}) in w.events
    within = running(spec=make_spec(budget={"max_cost_usd": 1.0})).feed(t)
    assert not any(r.startswith("budget") for r in within.reasons)
    assert "budget_exceeded" not in within.types()


def test_a_refused_import_parks_directly_from_waiting() -> None:
    w = running(imports=["import refused: forged object"]).feed(turn())
    assert w.path() == ["starting", "running", "waiting", "blocked"]


@pytest.mark.parametrize(
    ("budget", "t", "why"),
    [
        ({"max_turns": 2}, turn(num_turns=3), "budget: 3 turns exceed max_turns 2"),
        (
            {"max_cost_usd": 1.0},
            turn(cost_usd=1.5),
            "budget: cost $1.5000 exceeds max_cost_usd $1",
        ),
    ],
)
def test_a_turn_over_budget_parks(budget: dict[str, object], t: object, why: str) -> None:
    w = running(spec=make_spec(budget=budget), verdicts=[park(why)]).feed(t)
    assert w.reasons[0] == why
    assert ("budget_exceeded", {"reason": why}) in w.events
    assert w.of(StopWorker)[0].why == why and w.of(Verify)[0].park_reason == why
    assert w.state == State.BLOCKED


def test_a_turn_at_the_budget_is_not_over_it() -> None:
    spec = make_spec(budget={"max_turns": 3, "max_cost_usd": 1.0})
    w = running(spec=spec).feed(turn(num_turns=3, cost_usd=1.0))
    assert w.state == State.COMPLETED and "budget_exceeded" not in w.types()


def test_a_limit_reached_while_running_parks_naming_it() -> None:
    why = "limit: the task reached pids.max 64 (the kernel refused 3 fork(s))"
    w = running(verdicts=[park(why)]).feed(LimitHit("pids", why))
    assert w.reasons[0] == why and ("limit_reached", {"reason": why}) in w.events
    assert w.of(StopWorker)[0].why == why and w.of(Verify)[0].park_reason == why
    assert w.state == State.BLOCKED


def test_a_limit_reached_between_turns_parks_even_a_ready_verdict() -> None:
    """Found when the turn ended (the worker killed by the kernel): verified, never ready; a
    limit seen again (the watcher's report arriving late) counts once."""
    why = "limit: the task reached its memory limit 128 MiB (memory.max; the kernel killed 1)"
    w = running()
    w.machine.state = State.WAITING  # as when the supervisor holds the worker for the import
    w._state = State.WAITING
    w.feed(LimitHit("memory", why), LimitHit("memory", why + " again"))
    assert w.reasons == [why] and w.types().count("limit_reached") == 1
    w.machine.state = w._state = State.RUNNING
    w.feed(turn())
    assert w.state == State.BLOCKED and w.reasons == [why], w.reasons


# --- permissions ---------------------------------------------------------------------------


def test_permissions_go_to_the_gate_and_a_gate_that_cannot_decide_parks() -> None:
    req = PermissionRequest("r1", "Bash", {"command": "ls"})
    w = running(gates=[Gated()]).feed(req, PermissionCancelled("r2"))
    assert w.state == State.RUNNING and w.types() == ["permission_decided"]
    why = "decider failed to answer a permission request"
    w = running(gates=[Gated(park=why)], verdicts=[park(why)]).feed(req)
    assert w.path() == ["starting", "running", "waiting", "verifying", "blocked"]
    assert w.reasons == [why] and w.of(Verify)[0].park_reason == why


def test_a_stalled_worker_input_parks() -> None:
    req = PermissionRequest("r1", "Bash", {"command": "ls"})
    w = running(gates=[Gated(stalled="pane busy")], verdicts=[park("x")]).feed(req)
    assert ("worker_input_stalled", {"reason": "pane busy"}) in w.events
    assert w.of(Verify)[0].park_reason == "worker input stalled: pane busy"


# --- the worker going away, a person taking over -------------------------------------------------


def test_a_worker_gone_mid_turn_is_never_a_completion() -> None:
    w = running(verdicts=[park("x")]).feed(WorkerExited(137, 9, "killed"))
    why = "worker exited without completing its turn (killed, rc=137)"
    assert w.reasons[0] == why and w.of(Verify)[0].park_reason == why
    assert w.path()[-3:] == ["waiting", "verifying", "blocked"]
    # once it is waiting, an exit is only recorded
    w = running(decisions=[TurnDecision("continue", message="go")]).feed(turn())
    w.feed(WorkerExited(0))
    assert w.state == State.WAITING and w.types()[-1] == "worker_stopped"


def test_human_takeover_pauses_and_resume_auto_goes_on() -> None:
    w = running().feed(HumanInput("let me"))
    assert w.path()[-1] == "paused" and "human_takeover" in w.types()
    w.feed(turn(num_turns=2))  # a person's turn: counted, nothing decided
    assert w.state == State.PAUSED and w.machine.turns == 2 and not w.decisions_recorded
    w.feed(ResumeAuto())  # no turn running: decided as a finished one
    assert w.state == State.COMPLETED
    assert w.path()[2:] == ["paused", "running", "waiting", "verifying", "completed"]


def test_human_input_while_waiting_and_resume_auto_when_not_paused() -> None:
    w = running(decisions=[TurnDecision("continue", message="go")]).feed(turn())
    w.feed(HumanInput("hello"))
    assert w.path()[-2:] == ["running", "paused"]
    w = running().feed(ResumeAuto())
    assert ("resume_auto", {"ignored": True, "state": "running"}) in w.events


def test_verifying_while_paused_goes_straight_to_verifying() -> None:
    w = running(spec=make_spec(budget={"deadline": "60s", "deadline_warning": "0s"}))
    w.feed(HumanInput("me"), turn())
    w.clock.advance(60)
    assert w.tick() == "deadline_reached"  # idle at the deadline: verified
    assert w.path()[-3:] == ["paused", "verifying", "completed"]


# --- timers ----------------------------------------------------------------------------------


def test_no_output_fires_only_while_running() -> None:
    spec = make_spec(budget={"no_output_timeout": "30s"})
    w = running(spec=spec, verdicts=[park("x")])
    assert w.machine.next_timer() == (w.clock.now + 30, "no_output")
    w.clock.advance(20)
    w.feed(WorkerOutput("stdout", "x"))  # progress moves it
    assert w.machine.next_timer() == (w.clock.now + 30, "no_output")
    assert w.tick() == "no_output"
    assert w.reasons[0] == "watchdog: no output for 30s"
    assert ("watchdog_timeout", {"kind": "no_output", "limit": 30.0}) in w.events
    assert w.state == State.BLOCKED
    paused = running(spec=spec).feed(HumanInput("me"))
    nxt = paused.machine.next_timer()
    assert nxt is None or nxt[1] != "no_output"


def test_timers_set_to_zero_never_fire() -> None:
    spec = make_spec(budget={"no_output_timeout": "0s", "deadline": "0s"})
    assert running(spec=spec).machine.next_timer() is None


def test_deadline_warning_is_sent_to_an_idle_worker_only() -> None:
    spec = make_spec(budget={"deadline": "100s", "deadline_warning": "30s"})
    w = running(spec=spec, decisions=[TurnDecision("continue", message="go")])
    busy = w.machine.next_timer()
    assert busy == (w.clock.now + 70, "deadline_approaching")
    assert w.tick() == "deadline_approaching"
    assert not w.of(SendTurn)  # the worker was in a turn
    assert ("deadline_approaching", {"seconds_left": 30.0}) in w.events
    w = running(spec=spec, decisions=[TurnDecision("continue", message="go")])
    w.feed(turn())
    w.feed(TurnSent("continue", ok=True, sent=False))  # duplicate key: no new turn
    w.machine.turn_active = False
    w.tick()
    sent = [s for s in w.of(SendTurn) if s.purpose == "deadline"]
    assert sent and sent[0].message.startswith("30 seconds are left")


def test_deadline_busy_gets_the_closeout_then_the_watchdog() -> None:
    spec = make_spec(budget={"deadline": "100s", "deadline_warning": "0s", "closeout_grace": "10s"})
    w = running(spec=spec, verdicts=[park("x")])
    assert w.tick() == "deadline_reached"
    assert ("deadline_reached", {"closeout_grace": 10.0, "busy": True}) in w.events
    assert w.state == State.RUNNING
    assert w.machine.next_timer() == (w.machine.started + 110, "deadline_closeout")
    assert w.tick() == "deadline_closeout"
    assert w.reasons[0] == "watchdog: deadline of 100s reached"
    assert w.state == State.BLOCKED


def test_deadline_busy_without_closeout_is_the_watchdog_at_once() -> None:
    spec = make_spec(budget={"deadline": "100s", "deadline_warning": "0s", "closeout_grace": "0s"})
    w = running(spec=spec, verdicts=[park("x")])
    w.tick()
    assert w.types()[:2] == ["deadline_reached", "watchdog_timeout"]
    assert w.of(Verify)[0].park_reason == "watchdog: deadline of 100s reached"


def test_deadline_idle_is_verified_without_a_park_reason_nor_a_repair() -> None:
    spec = make_spec(budget={"deadline": "100s", "deadline_warning": "0s"})
    w = running(
        spec=spec, decisions=[TurnDecision("continue", message="go")], verdicts=[repair()]
    ).feed(turn(), TurnSent("continue", ok=True, sent=False))
    w.machine.turn_active = False
    assert w.tick() == "deadline_reached"
    assert w.of(StopWorker)[0].why == "deadline reached; the worker was idle"
    assert w.of(Verify)[0].park_reason is None
    assert "deadline reached; no repair round starts after it" in w.reasons
    assert w.state == State.BLOCKED and w.machine.next_timer() is None


# --- stop in every phase ---------------------------------------------------------------------


@pytest.mark.parametrize("state", LIVE)
def test_stop_from_every_live_state_goes_straight_to_stopped(state: State) -> None:
    w = FakeWorld.new(state=state)
    w.feed(StopRequest("requested by me"))
    assert w.transitions == [(state, State.STOPPED, "stopped: requested by me")]
    assert w.types()[0] == "stop_requested" and w.reasons == ["stopped: requested by me"]
    assert w.closed == [State.STOPPED]


def test_a_stop_during_verification_stops() -> None:
    w = running(verdicts=[Verified("stop", ("signal SIGINT",))]).feed(turn())
    assert w.path()[-2:] == ["verifying", "stopped"]
    assert w.reasons == ["stopped: signal SIGINT"]


# --- repair rounds --------------------------------------------------------------------------------


def test_a_repair_round_goes_back_to_the_same_worker() -> None:
    w = running(verdicts=[repair("required checks failed: tests"), ready()]).feed(turn())
    (req,) = [d for t, d in w.events if t == "repair_requested"]
    assert req["round"] == 1 and req["problems"] == ["required checks failed: tests"]
    send = next(s for s in w.of(SendTurn) if s.purpose == "repair")
    assert send.key == "repair-1" and "required checks failed: tests" in send.message
    assert w.transitions[-1] == (State.VERIFYING, State.RUNNING, "repair round 1")
    w.feed(turn())
    assert w.state == State.COMPLETED and w.machine.repair_rounds == 1
    assert ("turn_completed" in w.types()) and w.events[-1][0] == "decision"


def test_repair_rounds_are_bounded() -> None:
    spec = make_spec(autonomy={"max_repair_rounds": 1})
    w = running(spec=spec, verdicts=[repair("a"), repair("b")]).feed(turn(), turn())
    assert w.reasons == ["repair rounds exhausted (1)", "b"]
    assert w.state == State.BLOCKED


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"repairable": False}, "worker (process) cannot take a repair turn"),
        ({"verdicts": [repair(alive=False)]}, "worker is gone; a non-persistent worker is never"),
    ],
)
def test_no_repair_for_a_worker_that_cannot_take_it(kw: dict[str, object], why: str) -> None:
    kw.setdefault("verdicts", [repair()])
    w = running(**kw).feed(turn())
    assert w.reasons[0].startswith(why) and w.state == State.BLOCKED
    assert w.transitions[-1][:2] == (State.VERIFYING, State.BLOCKED)


def test_a_repair_turn_that_cannot_be_sent_parks_from_verifying() -> None:
    w = running(verdicts=[repair("a")], sends=[TurnSent("repair", ok=False, stalled="stuck")])
    w.feed(turn())
    assert w.reasons == [
        "worker input stalled: stuck",
        "repair turn could not be sent to the worker",
        "a",
    ]
    assert w.transitions[-1][:2] == (State.VERIFYING, State.BLOCKED)


def test_a_park_verdict_and_a_ready_task_whose_branch_moved() -> None:
    w = running(verdicts=[park("review: P1 finding: x", "worktree has uncommitted changes")])
    w.feed(turn())
    assert w.reasons == ["review: P1 finding: x", "worktree has uncommitted changes"]
    w = running(branch_moved=True).feed(turn())
    assert w.of(Finish)[0].final == State.COMPLETED and w.state == State.BLOCKED


# --- recovery, adoption, internal errors ----------------------------------------------------


@pytest.mark.parametrize(
    ("state", "final"), [(State.STARTING, State.FAILED), (State.RUNNING, State.BLOCKED)]
)
def test_recovery_that_parks(state: State, final: State) -> None:
    w = FakeWorld.new(state=state).feed(Recover(park=True))
    assert w.transitions == [(state, final, "recovered: parked on request")]
    w = FakeWorld.new(state=state).feed(Recover(worktree_missing=True))
    assert w.reasons == ["recovered: worktree is missing"] and w.state == final
    assert not w.of(StopWorker)[0].announce  # the old worker is gone already


def test_recovery_verifies_or_spawns_a_new_worker() -> None:
    w = FakeWorld.new(state=State.VERIFYING).feed(Recover())
    assert w.of(Verify) and not w.of(Spawn) and w.state == State.COMPLETED
    w = FakeWorld.new(state=State.WAITING, verdicts=[repair()]).feed(Recover())
    assert w.transitions[0] == (State.WAITING, State.RUNNING, "recovery: new worker")
    assert "interrupted" in w.of(Spawn)[0].prompt
    w.feed(turn())  # a recovered task never takes a repair round
    assert w.reasons[0].startswith("worker is gone")
    w = FakeWorld.new(state=State.STARTING).feed(Recover())
    assert "interrupted" not in w.of(Spawn)[0].prompt
    assert w.transitions == [(State.STARTING, State.RUNNING, "worker started")]


def test_an_adopted_worker_is_supervised_on() -> None:
    spec = make_spec(budget={"no_output_timeout": "5s"})
    m = TaskMachine(spec, "t", state=State.RUNNING, now=0.0)
    assert m.on(Adopted(repairable=True), 50.0) == []
    assert m.turn_active and m.next_timer() == (55.0, "no_output")


@pytest.mark.parametrize("state", LIVE)
def test_an_internal_error_ends_the_task_directly(state: State) -> None:
    w = FakeWorld.new(state=state).feed(Abandon())
    final = State.BLOCKED if state == State.VERIFYING else State.FAILED
    assert [t[1] for t in w.transitions] == [final]


def test_an_internal_error_in_the_finaliser_finishes_again() -> None:
    m = TaskMachine(make_spec(), "t", state=State.RUNNING)
    first = m.on(StopRequest("x"), 0.0)
    assert isinstance(first[-1], Finish) and m.finishing
    again = m.on(Abandon(), 0.0)
    assert isinstance(again[-1], Finish) and again[-1].final == State.FAILED
    assert isinstance(again[0], StopWorker) and not again[0].announce


def test_every_edge_the_machine_takes_is_in_the_table() -> None:
    """FakeWorld asserts each transition; this walks many scripts through it."""
    scripts = [
        running().feed(turn()),
        running(verdicts=[repair(), repair(), park("x")]).feed(turn(), turn(), turn()),
        running(gates=[Gated(park="p")], verdicts=[park("p")]).feed(
            PermissionRequest("r", "Bash", {})
        ),
        running().feed(HumanInput("h"), StopRequest("s")),
    ]
    for w in scripts:
        prev = State.IDLE
        for a, b, _ in w.transitions:
            assert a == prev and b in TRANSITIONS[a]
            prev = b
        assert w.closed == [w.state]
    assert Close in {type(e) for e in scripts[0].effects}
