"""The task state machine (docs/design.md, "The task state machine"), and how a final state maps to a candidate status.

    idle -> starting -> running <-> waiting -> verifying -> completed   (candidate ready)
                          |   ^        |          |  |
                          v   |        v          |  +--> running        (repair round)
                        paused+      failed       +-----> blocked        (candidate parked)
       stop from starting | running | waiting | paused | verifying -> stopped

Additions, so that the log never shows a state the task did not pass through: every
live state may end directly in failed or blocked (a worker that cannot be spawned, a model
failure, an internal error, a refused import, a recovery that parks), and paused goes
straight to verifying when the task is verified while a person drives the worker.
Invalid transitions raise; a terminal state is entered once per round. A parked task
(blocked) can be reopened as the same task (`git sup recover --extend`, `git sup repair`):
`blocked -> starting` (a new worker) or `blocked -> verifying` (close out now), edges of
their own (`REOPENS`, `check_reopen`), never taken by the ordinary flow.
"""

from __future__ import annotations

from enum import StrEnum

from gitsup.errors import Exit


class State(StrEnum):
    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    WAITING = "waiting"
    PAUSED = "paused"
    VERIFYING = "verifying"
    COMPLETED = "completed"
    BLOCKED = "blocked"
    FAILED = "failed"
    STOPPED = "stopped"


class Status(StrEnum):
    """A candidate's status (the user-facing outcome)."""

    PENDING = "pending"
    READY = "ready"
    PARKED = "parked"
    FAILED = "failed"
    STOPPED = "stopped"
    INTEGRATED = "integrated"


TERMINAL = frozenset({State.COMPLETED, State.BLOCKED, State.FAILED, State.STOPPED})

_STOPPABLE = {State.STARTING, State.RUNNING, State.WAITING, State.PAUSED, State.VERIFYING}

TRANSITIONS: dict[State, frozenset[State]] = {
    State.IDLE: frozenset({State.STARTING}),
    State.STARTING: frozenset({State.RUNNING, State.FAILED, State.BLOCKED, State.STOPPED}),
    State.RUNNING: frozenset(
        {State.WAITING, State.PAUSED, State.FAILED, State.BLOCKED, State.STOPPED}
    ),
    State.WAITING: frozenset(
        {State.RUNNING, State.VERIFYING, State.FAILED, State.BLOCKED, State.STOPPED}
    ),
    State.PAUSED: frozenset(
        {State.RUNNING, State.VERIFYING, State.FAILED, State.BLOCKED, State.STOPPED}
    ),
    State.VERIFYING: frozenset(
        {State.COMPLETED, State.RUNNING, State.BLOCKED, State.FAILED, State.STOPPED}
    ),
    State.COMPLETED: frozenset(),
    State.BLOCKED: frozenset(),
    State.FAILED: frozenset(),
    State.STOPPED: frozenset(),
}
assert all({State.STOPPED, State.FAILED, State.BLOCKED} <= TRANSITIONS[s] for s in _STOPPABLE)

# A parked task reopened as the same task: a new worker (more time, a repair round) or a
# verification of what it left (`recover --extend 0`). Only through `check_reopen`.
REOPENS: dict[State, frozenset[State]] = {
    State.BLOCKED: frozenset({State.STARTING, State.VERIFYING}),
}

STATUS_OF: dict[State, Status] = {
    State.COMPLETED: Status.READY,
    State.BLOCKED: Status.PARKED,
    State.FAILED: Status.FAILED,
    State.STOPPED: Status.STOPPED,
}

EXIT_OF: dict[Status, int] = {
    Status.READY: Exit.READY,
    Status.INTEGRATED: Exit.READY,
    Status.PARKED: Exit.PARKED,
    Status.FAILED: Exit.FAILED,
    Status.STOPPED: Exit.STOPPED,
}


class InvalidTransition(Exception):
    """A bug: the supervisor asked for a transition the state machine does not have."""


def check_transition(current: State, target: State) -> None:
    """Raises InvalidTransition unless the state machine has the edge `current -> target`."""
    if target not in TRANSITIONS[current]:
        raise InvalidTransition(f"{current} -> {target} is not a valid transition")


def check_reopen(current: State, target: State) -> None:
    """Raises InvalidTransition unless a task in `current` may be reopened into `target`."""
    if target not in REOPENS.get(current, frozenset()):
        raise InvalidTransition(f"{current} -> {target} is not a way to reopen a task")
