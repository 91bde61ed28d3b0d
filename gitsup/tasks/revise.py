"""`git sup revise`: a task's open review comments sent back to an agent
(gitsup/tasks/comments.py has the comments themselves).

- While the task's worker runs: its next turn, through the channel of `git sup send`
  (gitsup/tasks/human.py).
- Once the task has ended with a candidate: a revision task (`start_revision_task`), the
  way the integration queue sends a candidate back (gitsup/tasks/queue.py).

Nothing here prints; it returns plain data or raises GitsupError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gitsup.errors import GitsupError
from gitsup.ids import TaskId
from gitsup.state import TERMINAL
from gitsup.store import comments as cm
from gitsup.store.events import EventLog
from gitsup.tasks.comments import append_event, code_contexts, events_of, load_record, sync_note

if TYPE_CHECKING:
    from gitsup.store.record import TaskRecord
    from gitsup.store.suprepo import SupRepo


def revise(
    ctx: SupRepo, task: str, message: str = "", *, by: str | None = None, via: str = "cli"
) -> dict[str, Any]:
    """Send the task's open comments (and `message`) back: the running worker's next turn,
    else a revision task on the candidate. Returns `{"task", "how", "comments": [ids],
    "ref" | "revision_task"}`."""
    from gitsup.tasks.human import who

    if len(message) > cm.MAX_MESSAGE_CHARS:
        raise GitsupError(
            f"the message has {len(message)} characters; at most {cm.MAX_MESSAGE_CHARS}"
        )
    record = load_record(ctx, task)
    tid = TaskId(record.id)
    author = (by or who(ctx))[:200]
    with ctx.store.lock(tid):
        got = cm.fold(record.id, events_of(ctx, tid))
        todo = cm.fit_revision(got.open())
        if not todo and not message.strip():
            raise GitsupError(
                f"task {record.id} has no open comments to send back",
                hint=f"`git sup comment {record.id} PATH:LINE MESSAGE` first, or -m MESSAGE",
            )
        if record.state not in TERMINAL:
            return _revise_live(ctx, record, todo, message, author, via)
        if not record.candidate:
            raise GitsupError(f"task {record.id} ended without a candidate to revise")
        return start_revision_task(ctx, record, todo, message, author, via)


def _revise_live(
    ctx: SupRepo,
    record: TaskRecord,
    todo: list[dict[str, Any]],
    message: str,
    by: str,
    via: str,
) -> dict[str, Any]:
    """The running worker's next turn (`git sup send`'s channel)."""
    from gitsup.store import eventtypes as et
    from gitsup.supervision.prompts import revision_prompt
    from gitsup.tasks.human import send

    tid = TaskId(record.id)
    prompt = revision_prompt(todo, message, code_contexts(ctx, todo))
    taken = send(ctx, record.id, prompt)
    payload = et.RevisionRequested(
        task=record.id,
        how="turn",
        comments=todo,
        message=message,
        by=by,
        via=via,
        ref=taken.ref,
    )
    append_event(ctx, tid, payload, None)
    sync_note(ctx, tid)
    return {"task": record.id, "how": "turn", "comments": [c["id"] for c in todo], "ref": taken.ref}


def start_revision_task(
    ctx: SupRepo,
    record: TaskRecord,
    todo: list[dict[str, Any]],
    message: str,
    by: str,
    via: str,
) -> dict[str, Any]:
    """A task that revises an ended task's candidate: the same spec, based on the task's
    baseline (so its candidate integrates as any other), its goal the task's goal, the
    fast-forward to the candidate and the comments. The new task's log holds the comments
    (`revision_requested`) before its supervisor starts, so its candidate's note lists them
    with their status."""
    from gitsup.store import eventtypes as et
    from gitsup.supervision.prompts import revision_prompt
    from gitsup.tasks.detach import start_detached

    tid = TaskId(record.id)
    cand = str(record.candidate)
    try:
        spec = ctx.store.load_spec(tid)
    except (OSError, ValueError) as exc:
        raise GitsupError(f"task {record.id}'s spec cannot be read: {exc}") from None
    goal = "\n".join(
        [
            spec.goal,
            "",
            f"Revision of task {record.id}: its candidate is commit {cand}. This worktree "
            f"starts at that task's baseline {record.baseline}; first bring the candidate in "
            f"with `git merge --ff-only {cand}`, then address the review below.",
            "",
            revision_prompt(todo, message, code_contexts(ctx, todo), candidate=cand),
        ]
    )

    def data(**more: str) -> et.RevisionRequested:
        return et.RevisionRequested(
            task=record.id, how="task", comments=todo, message=message, by=by, via=via, **more
        )

    def prepared(new: TaskRecord) -> None:
        nid = TaskId(new.id)
        with EventLog(ctx.layout.events(nid), nid) as log:
            log.append(data(revision_task=new.id))

    new = start_detached(
        ctx,
        spec.model_copy(update={"base": str(record.baseline), "goal": goal}),
        source=record.source_branch,
        prepared=prepared,
    )
    append_event(ctx, tid, data(revision_task=new.id), f"revision task {new.id}")
    sync_note(ctx, tid)
    return {
        "task": record.id,
        "how": "task",
        "comments": [c["id"] for c in todo],
        "revision_task": new.id,
    }
