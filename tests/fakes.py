"""Fakes for the task machine and the supervisor loop: a fake clock, a scripted world that
carries out the machine's effects (`FakeWorld`), and a scripted worker adapter that plays a
worker for the real Supervisor without any process (`ScriptedWorker`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsup.spec import TaskSpec, spec_from_mapping
from gitsup.state import TRANSITIONS, State
from gitsup.supervision.machine import TaskMachine
from gitsup.supervision.taskio import (
    AddReason,
    AnswerPermission,
    Close,
    Decide,
    Decided,
    Effect,
    Emit,
    Finish,
    Finished,
    Gated,
    HoldByUser,
    ImportWork,
    RecordDecision,
    ResolveAsk,
    SendTurn,
    Spawn,
    Spawned,
    StopWorker,
    Transition,
    TurnSent,
    UserPaused,
    Verified,
    Verify,
    WorkImported,
)
from gitsup.verification.decider import TurnDecision
from gitsup.workers.base import (
    Capabilities,
    PermissionAnswer,
    TurnCompleted,
    WorkerAdapter,
    WorkerIdentity,
    WorkerSetup,
)


class FakeClock:
    """Monotonic seconds that move only when told."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def make_spec(**over: Any) -> TaskSpec:
    data: dict[str, Any] = {
        "goal": "fix add",
        "worker": {"kind": "process", "argv": ["true"]},
        "review": {"kind": "none"},
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return spec_from_mapping(data)


def ready() -> Verified:
    return Verified("ready", head="c0ffee")


def repair(*problems: str, alive: bool = True) -> Verified:
    return Verified("repair", problems or ("required checks failed: tests",), worker_alive=alive)


def park(*reasons: str) -> Verified:
    return Verified("park", reasons or ("review: a person must decide (verdict human)",))


@dataclass
class FakeWorld:
    """Carries out the machine's effects the way a scripted world answers them, and keeps
    what happened: transitions, events, reasons, effects. Outcomes are taken from the
    lists in order; when a list runs out, the default (a clean answer) is given."""

    machine: TaskMachine
    clock: FakeClock
    repairable: bool = True
    spawn_failure: tuple[str, ...] = ()
    spawn_aborted: str | None = None
    imports: list[str | None] = field(default_factory=list)  # refused reasons
    decisions: list[TurnDecision | None] = field(default_factory=list)
    worker_alive: bool = True
    gates: list[Gated] = field(default_factory=list)
    sends: list[TurnSent] = field(default_factory=list)
    verdicts: list[Verified] = field(default_factory=list)
    branch_moved: bool = False
    transitions: list[tuple[State, State, str]] = field(default_factory=list)
    events: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    decisions_recorded: list[Mapping[str, Any]] = field(default_factory=list)
    closed: list[State] = field(default_factory=list)
    resolved: list[ResolveAsk] = field(default_factory=list)
    _state: State = State.IDLE

    @classmethod
    def new(
        cls, spec: TaskSpec | None = None, *, state: State = State.IDLE, **kw: Any
    ) -> FakeWorld:
        clock = FakeClock()
        m = TaskMachine(spec or make_spec(), "20260101-abcdef", state=state, now=clock.now)
        return cls(machine=m, clock=clock, _state=state, **kw)

    # --- driving -----------------------------------------------------------------------

    def feed(self, *items: object) -> FakeWorld:
        for item in items:
            todo = [item]
            while todo:
                for e in self.machine.on(todo.pop(0), self.clock.now):
                    self.effects.append(e)
                    nxt = self._do(e)
                    if nxt is not None:
                        todo.append(nxt)
        return self

    def tick(self) -> str | None:
        """Move the clock to the next timer and fire it; its name, or None."""
        from gitsup.supervision.taskio import TimerFired

        nxt = self.machine.next_timer()
        if nxt is None:
            return None
        self.clock.now = max(self.clock.now, nxt[0])
        self.feed(TimerFired(nxt[1]))
        return nxt[1]

    def _do(self, e: Effect) -> object | None:
        if isinstance(e, Transition):
            # every step is one edge of the table: no invented intermediate states
            assert e.target in TRANSITIONS[self._state], (self._state, e.target)
            self.transitions.append((self._state, e.target, e.reason))
            self._state = e.target
        elif isinstance(e, Emit):
            self.events.append((e.payload.event_type, e.payload.to_data()))
        elif isinstance(e, AddReason):
            if not e.once or e.text not in self.reasons:
                self.reasons.append(e.text)
        elif isinstance(e, RecordDecision):
            self.decisions_recorded.append(e.decision)
        elif isinstance(e, Spawn):
            return Spawned(self.repairable, self.spawn_failure, self.spawn_aborted)
        elif isinstance(e, ImportWork):
            return WorkImported(self.imports.pop(0) if self.imports else None)
        elif isinstance(e, Decide):
            d = self.decisions.pop(0) if self.decisions else TurnDecision("verify", reason="done")
            return Decided(d, "rules", self.worker_alive)
        elif isinstance(e, AnswerPermission):
            return self.gates.pop(0) if self.gates else Gated()
        elif isinstance(e, ResolveAsk):
            self.resolved.append(e)
            return Gated()
        elif isinstance(e, SendTurn):
            return self.sends.pop(0) if self.sends else TurnSent(e.purpose, ok=True, sent=True)
        elif isinstance(e, Verify):
            return self.verdicts.pop(0) if self.verdicts else ready()
        elif isinstance(e, Finish):
            final = e.final
            if final == State.COMPLETED and self.branch_moved:
                final = State.BLOCKED
            return Finished(final, "; ".join(self.reasons[-3:]))
        elif isinstance(e, Close):
            self.closed.append(e.final)
        elif isinstance(e, StopWorker):
            pass
        elif isinstance(e, HoldByUser):
            how = "cgroup frozen" if e.request.on else "cgroup thawed"
            return UserPaused(e.request, True, how, 1)
        return None

    # --- reading -------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    def path(self) -> list[str]:
        """The states entered, in order."""
        return [t.value for _, t, _ in self.transitions]

    def types(self) -> list[str]:
        return [t for t, _ in self.events]

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.effects if isinstance(e, kind)]


class ScriptedWorker(WorkerAdapter):
    """A worker without a process: `start` and every `send_turn` run the next step of the
    script, a callable given the worktree and returning the events the worker reports
    (put on the supervisor's inbox). `answers` keeps the permission answers it got."""

    kind = "scripted"
    capabilities = Capabilities(repairable=True, persistent=False)

    def __init__(
        self, ctx: WorkerSetup, steps: Iterable[Callable[[WorkerSetup], list[object]]]
    ) -> None:
        super().__init__(ctx)
        self.steps = list(steps)
        self.answers: list[tuple[str, PermissionAnswer]] = []
        self.sent: list[str] = []
        self.stopped = False

    def _step(self) -> None:
        if self.steps:
            for item in self.steps.pop(0)(self.ctx):
                self.ctx.inbox.put(item)

    def start(self, goal: str) -> WorkerIdentity:
        self.sent.append(goal)
        self._step()
        # this process's pid with a start time it never had: provably not alive
        return WorkerIdentity(pid=os.getpid(), start_time=1.0, pgid=os.getpgid(0))

    def send_turn(self, message: str, *, key: str) -> bool:
        self.sent.append(message)
        self._step()
        return True

    def answer(self, request_id: str, answer: PermissionAnswer) -> None:
        self.answers.append((request_id, answer))

    def stop(self, *, grace: float = 5.0) -> str:
        self.stopped = True
        return "scripted"

    @property
    def alive(self) -> bool:
        return not self.stopped


class OneShotWorker(ScriptedWorker):
    """A scripted worker that takes no further turn (like a plain process)."""

    capabilities = Capabilities(repairable=False, persistent=False)


def turn(result: str = "done", **kw: Any) -> TurnCompleted:
    return TurnCompleted(result=result, **kw)
