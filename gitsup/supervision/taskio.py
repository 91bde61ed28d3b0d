"""The inputs and effects of the task machine (gitsup/supervision/machine.py): plain immutable data.

Inputs are the worker events of gitsup.workers.base plus the ones below; an input named
after an effect (Spawned, WorkImported, Decided, Gated, TurnSent, Verified, Finished)
carries what the supervisor found when it carried that effect out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gitsup.state import State
from gitsup.store.payload import Payload
from gitsup.store.record import CheckResult
from gitsup.verification.decider import TurnDecision
from gitsup.verification.review import ReviewFinding
from gitsup.workers.base import PermissionRequest, TurnCompleted

# --- inputs (besides the worker events of gitsup.workers.base) ------------------------


@dataclass(frozen=True)
class StopRequest:
    reason: str


@dataclass(frozen=True)
class LimitHit:
    """The worker's cgroup ran into one of its limits: `kind` pids or memory, each reported
    once however often it is seen."""

    kind: str
    reason: str


@dataclass(frozen=True)
class ResumeAuto:
    """`git sup resume-auto`: automatic turns continue after a human takeover."""


@dataclass(frozen=True)
class Begin:
    """A new task starts: spawn its first worker."""


@dataclass(frozen=True)
class Recover:
    """The supervisor died; its old worker is provably gone. `park`: park instead of going on
    (`worktree_missing` parks too)."""

    park: bool = False
    worktree_missing: bool = False


@dataclass(frozen=True)
class Reopen:
    """A parked task goes on as the same task (gitsup/tasks/reopen.py): `extend` seconds
    more (0: close out now, verifying what is there), or a repair round with `message`
    (`rounds`: repair rounds allowed from now on, None: the spec's budget)."""

    how: Literal["extend", "repair"]
    extend: float = 0.0
    message: str = ""
    rounds: int | None = None


@dataclass(frozen=True)
class Spawned:
    """What came of a Spawn: `failure` (the task failed to start, reasons given) or
    `aborted` (a stop arrived meanwhile), else the worker runs."""

    repairable: bool = False
    failure: tuple[str, ...] = ()
    aborted: str | None = None


@dataclass(frozen=True)
class Adopted:
    """A persistent worker that survived its supervisor was taken over."""

    repairable: bool


@dataclass(frozen=True)
class TimerFired:
    name: str


@dataclass(frozen=True)
class WorkImported:
    """After ImportWork: `refused` says why the worker's commits were refused."""

    refused: str | None = None


@dataclass(frozen=True)
class Decided:
    """After Decide: the decider's answer (None: it failed every attempt)."""

    decision: TurnDecision | None
    decider_kind: str
    worker_alive: bool


@dataclass(frozen=True)
class PendingAsk:
    """A call the policy sent to `ask`, waiting for a person (a human decider): the
    request, the policy's decision (opaque here), a one-line `summary` and the `denial`
    the worker gets unless someone allows it."""

    request: PermissionRequest
    decision: Any
    summary: str
    denial: str
    rule: str = ""


@dataclass(frozen=True)
class Gated:
    """After AnswerPermission or ResolveAsk: `park` when the decider could not answer,
    `stalled` when the worker did not take the answer, `ask` when it waits for a person."""

    park: str | None = None
    stalled: str | None = None
    ask: PendingAsk | None = None


@dataclass(frozen=True)
class HumanDecision:
    """`git sup answer`: a person allows or denies an open ask (`ref` the control request)."""

    request_id: str
    allow: bool
    message: str
    by: str
    via: str
    ref: str


@dataclass(frozen=True)
class HumanMessage:
    """`git sup send`: a person's message for the worker's next turn."""

    text: str
    by: str
    via: str
    ref: str


@dataclass(frozen=True)
class ContinueBudget:
    """`git sup continue`: raise the budget of a task paused on it."""

    add_turns: int
    add_cost_usd: float
    extend: float
    by: str
    via: str
    ref: str


@dataclass(frozen=True)
class UserPause:
    """`git sup pause` (`on`) or `git sup resume`: a person freezes or thaws the task."""

    on: bool
    by: str
    via: str
    ref: str


@dataclass(frozen=True)
class UserPaused:
    """After HoldByUser: whether the worker was frozen/thawed, how, and how many processes."""

    request: UserPause
    ok: bool
    how: str
    processes: int = 0


@dataclass(frozen=True)
class TurnSent:
    """After SendTurn. `ok`: the worker takes turns and got the message (or had it already);
    `sent`: a new turn started; `stalled`: its input is stuck."""

    purpose: Literal["continue", "repair", "deadline", "message"]
    ok: bool
    sent: bool = False
    stalled: str | None = None


@dataclass(frozen=True)
class Verified:
    """After Verify: `outcome` is ready, repair (`problems` the worker can fix) or park."""

    outcome: Literal["ready", "repair", "park", "stop"]
    reasons: tuple[str, ...] = ()
    results: tuple[CheckResult, ...] = ()
    findings: tuple[ReviewFinding, ...] = ()
    head: str | None = None
    worker_alive: bool = False


@dataclass(frozen=True)
class Finished:
    """After Finish: the state the finaliser settled on (a ready task whose branch moved
    parks) and the reason the transition records."""

    final: State
    reason: str


@dataclass(frozen=True)
class Abandon:
    """An internal error: end the task (parked when verifying, else failed)."""


# --- effects ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Transition:
    target: State
    reason: str = ""


@dataclass(frozen=True)
class Emit:
    payload: Payload


@dataclass(frozen=True)
class AddReason:
    """Append to the record's reasons (`once`: unless it is there already)."""

    text: str
    once: bool = False


@dataclass(frozen=True)
class RecordDecision:
    decision: Mapping[str, Any]


@dataclass(frozen=True)
class Spawn:
    prompt: str
    # the text a new worker is started for (a repair round's message): a process worker
    # reads it in GITSUP_MESSAGE, an agent in its prompt
    message: str | None = None


@dataclass(frozen=True)
class ImportWork:
    pass


@dataclass(frozen=True)
class Decide:
    turn: TurnCompleted


@dataclass(frozen=True)
class AnswerPermission:
    request: PermissionRequest


@dataclass(frozen=True)
class ResolveAsk:
    """Answer a pending ask: a person's `allow`/`message`, or its `fallback` decider."""

    ask: PendingAsk
    allow: bool
    message: str = ""
    fallback: bool = False


@dataclass(frozen=True)
class SendTurn:
    message: str
    key: str
    purpose: Literal["continue", "repair", "deadline", "message"]


@dataclass(frozen=True)
class StopWorker:
    """Stop the worker. `announce`: it was not known gone, so its stop is an event."""

    why: str
    announce: bool


@dataclass(frozen=True)
class Verify:
    """Run the checks and the review. `park_reason`: the task parks whatever they find."""

    park_reason: str | None


@dataclass(frozen=True)
class Finish:
    """The finaliser: wip, candidate and note, `candidate_*`; then `Finished` comes back."""

    final: State
    verified_head: str | None


@dataclass(frozen=True)
class Close:
    """The end: `task_finished`, final seal, the lease."""

    final: State


@dataclass(frozen=True)
class HoldByUser:
    """Freeze (`request.on`) or thaw the worker for a person; what happened comes back as
    UserPaused."""

    request: UserPause


Effect = (
    Transition
    | Emit
    | AddReason
    | RecordDecision
    | Spawn
    | ImportWork
    | Decide
    | AnswerPermission
    | ResolveAsk
    | SendTurn
    | StopWorker
    | Verify
    | Finish
    | Close
    | HoldByUser
)
