"""A person in the loop of a running task: answer an ask, send the worker a message, let a
task paused on its budget continue, pause and resume the whole task.

Each call writes one control request into the task dir and signals the supervisor
(gitsup/store/control.py), then waits, bounded, for the supervisor's answer in the event
log: the event that names the request (taken) or `control_refused` (not taken, and why).
Nothing here prints; the CLI (and any other front end) calls these and shows the result.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitsup import jsonio
from gitsup.errors import Exit, GitsupError
from gitsup.host.procid import ProcessId
from gitsup.ids import TaskId
from gitsup.state import TERMINAL
from gitsup.store.events import EventLog
from gitsup.store.suprepo import SupRepo
from gitsup.workers.kinds import repairable_kinds

if TYPE_CHECKING:
    from gitsup.store.record import TaskRecord

ACK_TIMEOUT = 10.0
# The events that say a request was taken, by command.
TAKEN = {
    "answer": ("human_answer",),
    "send": ("worker_message_sent",),
    "continue": ("budget_continued",),
    "pause": ("task_paused",),
    "resume": ("task_resumed",),
}


@dataclass(frozen=True)
class Taken:
    """What the supervisor recorded for a request: its event type and data."""

    task: str
    ref: str
    type: str
    data: Mapping[str, Any]
    host: str | None = None  # the cluster host whose supervisor took it (docs/cluster.md)

    def as_dict(self) -> dict[str, Any]:
        d = {"task": self.task, "ref": self.ref, "event": self.type, "data": dict(self.data)}
        return d if self.host is None else {**d, "host": self.host}


def who(ctx: SupRepo) -> str:
    """Who answers: `user.email` of the repository's config, else $USER."""
    try:
        email = ctx.repo.config_get("user.email")
    except GitsupError:
        email = None
    return str(email or os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown")


@dataclass(frozen=True)
class _Live:
    """What these commands need of a live task's record (read as plain JSON: no model)."""

    id: str
    state: str
    worker_kind: str
    owner: ProcessId
    paused_by_user: Mapping[str, Any] | None = None


def tracker(ctx: SupRepo, task: str) -> Any:
    """The attention fold over the task's whole event log."""
    from gitsup.attention.fold import Tracker

    tid = TaskId(task)
    tr = Tracker(task)
    for ev in EventLog(ctx.layout.events(tid), tid).read():
        tr.feed(ev.as_dict())
    return tr


def pending(ctx: SupRepo, record: TaskRecord) -> list[dict[str, Any]]:
    """The asks waiting for a person: `request_id`, `tool`, `summary`, `since` (Unix time)."""
    if record.state in TERMINAL:
        return []
    return [dict(a) for a in tracker(ctx, record.id).asks.values()]


def check_answer(decision: str, message: str) -> None:
    """An answer's own input, refused before anything is sent anywhere."""
    if decision not in ("allow", "deny"):
        raise GitsupError(f"the decision is allow or deny, not {decision!r}")
    if message and decision == "allow":
        raise GitsupError("-m goes with deny: an allowed call runs as it was asked")


def check_send(text: str) -> None:
    if not text.strip():
        raise GitsupError("the message is empty")


def check_continue(add_cost_usd: float, add_turns: int, extend: float) -> None:
    import math

    for name, v in (("--add-cost", add_cost_usd), ("--add-turns", add_turns), ("--extend", extend)):
        if not math.isfinite(v) or v < 0:
            raise GitsupError(f"{name} must be 0 or more, not {v:g}")


def answer(
    ctx: SupRepo,
    task: str,
    request_id: str,
    decision: str,
    message: str = "",
    *,
    via: str = "cli",
    by: str | None = None,
) -> Taken:
    """Allow or deny an open ask. A denial's `message` is what the worker is told. `by`: who
    answers (default `who(ctx)`; a cluster host passes the submitter's)."""
    check_answer(decision, message)
    record = _live(ctx, task)
    open_asks = tracker(ctx, record.id).asks
    if request_id not in open_asks:
        hint = (
            "open requests: " + ", ".join(open_asks)
            if open_asks
            else "nothing waits for an answer; `git sup show ID --json` lists `pending`"
        )
        raise GitsupError(
            f"task {record.id} has no open request {request_id!r} (unknown, or already answered)",
            hint=hint,
        )
    data = {"request_id": request_id, "decision": decision, "message": message}
    return _submit(ctx, record, "answer", data, via=via, by=by)


def send(ctx: SupRepo, task: str, text: str, *, via: str = "cli", by: str | None = None) -> Taken:
    """A message for the worker: its next turn (sent when the current one ends)."""
    check_send(text)
    record = _live(ctx, task)
    if record.worker_kind not in repairable_kinds():
        raise GitsupError(
            f"task {record.id} runs a {record.worker_kind} worker, which cannot take messages",
            hint="only agent workers (" + ", ".join(repairable_kinds()) + ") take another turn",
        )
    return _submit(ctx, record, "send", {"text": text}, via=via, by=by)


def continue_task(
    ctx: SupRepo,
    task: str,
    *,
    add_cost_usd: float = 0.0,
    add_turns: int = 0,
    extend: float = 0.0,
    via: str = "cli",
    by: str | None = None,
) -> Taken:
    """Raise the budget of a task paused on it (`[budget] on_exhausted = "pause"`)."""
    check_continue(add_cost_usd, add_turns, extend)
    record = _live(ctx, task)
    if not tracker(ctx, record.id).budget_paused:
        raise GitsupError(
            f"task {record.id} is not paused on its budget (state {record.state})",
            hint='`[budget] on_exhausted = "pause"` pauses a task whose budget is spent',
        )
    data = {"add_cost_usd": add_cost_usd, "add_turns": add_turns, "extend": extend}
    return _submit(ctx, record, "continue", data, via=via, by=by)


def pause(ctx: SupRepo, task: str) -> Taken:
    """Freeze the whole task (its worker's cgroup, else its process group) until `resume`;
    its deadline and no-output clocks stop meanwhile."""
    record = _live(ctx, task)
    if record.paused_by_user:
        raise GitsupError(
            f"task {record.id} is already paused (by {record.paused_by_user.get('by', '?')})",
            hint=f"`git sup resume {record.id}`",
        )
    return _submit(ctx, record, "pause", {})


def resume(ctx: SupRepo, task: str) -> Taken:
    """Let a task paused by `git sup pause` run again (a worker held for verification stays
    held until its next turn)."""
    record = _live(ctx, task)
    if not record.paused_by_user:
        raise GitsupError(f"task {record.id} is not paused (state {record.state})")
    return _submit(ctx, record, "resume", {})


def resume_auto(ctx: SupRepo, task: str) -> None:
    """Let automatic turns continue after a person typed into the worker (the supervisor
    takes SIGUSR1 for it)."""
    from gitsup.state import State

    record = ctx.store.load(task)
    owner = ProcessId.from_dict(record.supervisor)
    if owner is None or not owner.alive():
        raise GitsupError(
            f"task {task} has no running supervisor", hint=f"`git sup recover {task} --takeover`"
        )
    if record.state != State.PAUSED:
        raise GitsupError(f"task {task} is {record.state.value}, not paused")
    try:
        os.kill(owner.pid, signal.SIGUSR1)
    except ProcessLookupError:
        raise GitsupError(f"task {task}'s supervisor is gone") from None


def _live(ctx: SupRepo, task: str) -> _Live:
    tid = ctx.store.resolve(task)
    try:
        raw = jsonio.loads(ctx.layout.record(tid).read_bytes())
    except FileNotFoundError:
        raise GitsupError(f"no task {task} in this repository") from None
    except ValueError as exc:
        raise GitsupError(f"task record of {task} is corrupt: {exc}") from None
    if not isinstance(raw, dict):
        raise GitsupError(f"task record of {task} is corrupt")
    state = str(raw.get("state") or "")
    if state in TERMINAL:
        raise GitsupError(f"task {tid} already ended ({state}, {raw.get('status')})")
    sup = raw.get("supervisor")
    owner = ProcessId.from_dict(sup) if isinstance(sup, dict) else None
    if owner is None or not owner.alive():
        raise GitsupError(
            f"task {tid} is {state} but its supervisor is not running",
            hint=f"`git sup recover {tid} --takeover` first",
        )
    paused = raw.get("paused_by_user")
    return _Live(
        str(tid),
        state,
        str(raw.get("worker_kind") or ""),
        owner,
        paused if isinstance(paused, dict) else None,
    )


def _submit(
    ctx: SupRepo,
    record: _Live,
    kind: str,
    data: Mapping[str, Any],
    *,
    via: str = "cli",
    by: str | None = None,
) -> Taken:
    """`via`: the front end the request came through (`cli`, `web`: the page, `api`,
    `cluster`: the clone that submitted a cluster task)."""
    from gitsup.store import control

    tid = TaskId(record.id)
    log = EventLog(ctx.layout.events(tid), tid)
    try:
        start = os.path.getsize(log.path)
    except OSError:
        start = 0
    owner = record.owner
    ref = control.submit(ctx.layout.task_dir(tid), kind, {**data, "by": by or who(ctx), "via": via})
    try:
        os.kill(owner.pid, signal.SIGUSR2)
    except ProcessLookupError:
        raise GitsupError(f"task {record.id}'s supervisor is gone") from None
    deadline = time.monotonic() + ACK_TIMEOUT
    while True:
        for ev in log.read(offset=start):
            if ev.data.get("ref") != ref:
                continue
            if ev.type == "control_refused":
                raise GitsupError(f"task {record.id}: {kind} refused: {ev.data.get('reason', '')}")
            if ev.type in TAKEN[kind]:
                return Taken(record.id, ref, ev.type, ev.data)
        if time.monotonic() > deadline or not owner.alive():
            raise GitsupError(
                f"task {record.id}: the supervisor did not take the {kind} request within "
                f"{ACK_TIMEOUT:g}s (request {ref})",
                hint="it may be busy (checks, review) or ending; `git sup log ID` shows it",
                exit_code=Exit.INTERNAL,
            )
        time.sleep(0.01)
