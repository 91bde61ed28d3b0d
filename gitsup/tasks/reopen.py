"""A parked task goes on as the same task: same id, same event log, same worktree with its
wip and candidate. `extend_task` (`git sup recover ID --extend D`) gives a task the deadline
or a watchdog ended more time (0: close out now, verifying what it left); `repair_round`
(`git sup repair ID`) starts a new repair round on a parked candidate, within the repair
budget or an explicit new one. Both run the task's supervisor in the foreground and return
its final record; nothing here prints.

`repair_round` is the one entry point for a new repair round on an ended task: a front end
that turns other input into a repair (a reviewer's comments, say) calls it with its message.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from gitsup.errors import GitsupError
from gitsup.host.procid import ProcessId
from gitsup.ids import TaskId
from gitsup.spec import TaskSpec
from gitsup.state import State, Status
from gitsup.store.events import Event, EventLog
from gitsup.store.record import TaskRecord
from gitsup.store.suprepo import SupRepo
from gitsup.supervision.taskio import Reopen

# The events that say the deadline or a watchdog ended a task's last round.
_TIME_ENDED = frozenset({"deadline_reached", "watchdog_timeout"})


def extend_task(
    ctx: SupRepo,
    task: str,
    seconds: float,
    *,
    by: str,
    on_event: Callable[[Event], None] | None = None,
    allow_new_binary: bool = False,
) -> TaskRecord:
    """More time for a task the deadline (or the no-output watchdog) parked: a new worker
    in its worktree with `seconds` until its deadline; with 0, what it left is verified now
    and the verdict stands (ready when its checks pass), no new turn."""
    if seconds < 0:
        raise GitsupError("--extend takes a duration of 0 or more")
    record = _parked(ctx, task, "recover --extend")
    if not _ended_by_time(ctx, record):
        raise GitsupError(
            f"task {record.id} was not ended by its deadline or a watchdog; "
            "--extend gives such a task more time",
            hint=f"`git sup repair {record.id}` starts a repair round on a parked candidate",
        )
    return _run(ctx, record, Reopen("extend", extend=seconds), by, on_event, allow_new_binary)


def repair_round(
    ctx: SupRepo,
    task: str,
    message: str = "",
    *,
    by: str,
    rounds: int | None = None,
    on_event: Callable[[Event], None] | None = None,
    allow_new_binary: bool = False,
) -> TaskRecord:
    """A new repair round on a parked candidate: a new worker in the task's worktree, told
    what the last verification found (its failing checks and review findings) and
    `message`. Within the spec's `max_repair_rounds`, or `rounds` more from now."""
    if rounds is not None and rounds < 1:
        raise GitsupError("--rounds takes a number of repair rounds, 1 or more")
    record = _parked(ctx, task, "repair")
    spec = _spec_of(ctx, record.id)
    limit = spec.autonomy.max_repair_rounds
    if rounds is None and record.repair_rounds >= limit:
        raise GitsupError(
            f"task {record.id} has used its repair rounds ({record.repair_rounds} of {limit})",
            hint=f"`git sup repair {record.id} --rounds N` allows N more",
        )
    text = _repair_text(record, message)
    reopen = Reopen("repair", message=text, rounds=rounds)
    return _run(ctx, record, reopen, by, on_event, allow_new_binary)


def _parked(ctx: SupRepo, task: str, command: str) -> TaskRecord:
    record = ctx.store.load(task)
    if record.state != State.BLOCKED or record.status != Status.PARKED:
        raise GitsupError(
            f"task {record.id} is {record.state.value} ({record.status.value}); "
            f"`git sup {command}` goes on with a parked task",
            hint=None if record.state != State.BLOCKED else "an integrated task stays as it is",
        )
    if record.discarded_at is not None:
        raise GitsupError(f"task {record.id} was discarded; its worktree is gone")
    if not record.worktree or not os.path.isdir(record.worktree):
        raise GitsupError(
            f"the worktree of task {record.id} is gone ({record.worktree})",
            hint="its work is kept in refs/sup/<id>/wip and refs/sup/<id>/candidate",
        )
    if record.left_behind:
        raise GitsupError(
            f"task {record.id} left processes its cleanup could not prove gone: "
            + "; ".join(record.left_behind),
            hint="`git sup doctor --fix` ends them and releases the lease",
        )
    owner = ProcessId.from_dict(record.supervisor)
    if owner is not None and owner.alive() and owner != ProcessId.current():
        raise GitsupError(f"task {record.id} is owned by a live process (pid {owner.pid})")
    return record


def _ended_by_time(ctx: SupRepo, record: TaskRecord) -> bool:
    """Whether the deadline or a watchdog ended the task's last round (since it was last
    reopened)."""
    tid = TaskId(record.id)
    ended = False
    for ev in EventLog(ctx.layout.events(tid), tid).read():
        if ev.type in _TIME_ENDED:
            ended = True
        elif ev.type == "task_reopened":
            ended = False
    return ended


def _repair_text(record: TaskRecord, message: str) -> str:
    """What the new round is told: the failing required checks and the review's findings of
    the last verification, the reasons it parked, and the person's message."""
    from gitsup.supervision.prompts import repair_message
    from gitsup.verification.review import ReviewFinding

    last = max((c.repair_round for c in record.checks), default=0)
    results = [c for c in record.checks if c.repair_round == last]
    findings = []
    if record.review is not None:
        for f in record.review.findings:
            with contextlib.suppress(ValueError):
                findings.append(ReviewFinding.model_validate(f))
    problems = [r for r in record.reasons[-6:] if not r.startswith("reopened by ")]
    text = repair_message(problems, results, findings)
    if message.strip():
        text += "\n\nA person adds:\n" + message.strip()
    return text


def _spec_of(ctx: SupRepo, task: str) -> TaskSpec:
    return ctx.store.load_spec(TaskId(task))


def _run(
    ctx: SupRepo,
    record: TaskRecord,
    reopen: Reopen,
    by: str,
    on_event: Callable[[Event], None] | None,
    allow_new_binary: bool,
) -> TaskRecord:
    from gitsup.supervision.recovery import same_agent_binary
    from gitsup.supervision.supervisor import Supervisor

    spec = _spec_of(ctx, record.id)
    if not (reopen.how == "extend" and reopen.extend <= 0):
        same_agent_binary(ctx, record, spec, allow_new_binary)
    with ctx.store.lock(TaskId(record.id)):
        fresh = ctx.store.load(record.id)
        if fresh.state != State.BLOCKED or fresh.updated_at != record.updated_at:
            raise GitsupError(f"task {record.id} changed meanwhile; try again")
        lease = ctx.leases.acquire(record.worktree, record.id, steal_dead=True)
    sup = Supervisor(ctx.repo, ctx.layout, record, spec, lease, on_event=on_event)
    return sup.reopen(reopen, by=by)
