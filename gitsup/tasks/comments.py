"""Review comments back to the agent: `git sup comment` and `git sup revise`.

A comment names a line of a file in the commit a reviewer sees: the task's candidate, or,
while the task runs, its branch tip (the work imported so far). It is recorded in the task's
event log and copied into the candidate's note (gitsup/store/comments.py: the data, and
the rule that says whether a later candidate addressed it).

`revise` sends the open comments back to an agent:

- while the task's worker runs, as its next turn, through the same channel as
  `git sup send` (gitsup/tasks/human.py);
- once the task has ended with a candidate, as a revision task (`start_revision_task`):
  the same spec on the task's baseline, whose goal asks the agent to fast-forward to the
  candidate and address the comments, the way the integration queue sends a candidate back
  (gitsup/tasks/queue.py).

`revise` is gitsup/tasks/revise.py. Nothing here prints: the CLI and any other front end
(an HTTP API) call `add_comment`, `list_comments` and `revise`, which return plain data or
raise GitsupError.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from gitsup.errors import GitsupError
from gitsup.ids import Oid, TaskId
from gitsup.state import TERMINAL
from gitsup.store import comments as cm
from gitsup.store.events import EventLog

if TYPE_CHECKING:
    from gitsup.store.record import TaskRecord
    from gitsup.store.suprepo import SupRepo


def parse_location(text: str) -> tuple[str, int]:
    """`PATH:LINE` as the CLI takes it: (path, line)."""
    path, sep, line = text.rpartition(":")
    if not sep or not path:
        raise GitsupError(f"not PATH:LINE: {_shown(text)}")
    if not line.isdigit() or int(line) < 1:
        raise GitsupError(f"the line is a number from 1: {_shown(line)}")
    return path, int(line)


def target(ctx: SupRepo, record: TaskRecord) -> Oid:
    """The commit a comment on the task refers to: its candidate, else (running) its branch
    tip."""
    if record.candidate:
        return Oid(record.candidate)
    if record.state not in TERMINAL:
        tip = ctx.repo.branch_target(record.branch) if record.branch else None
        if tip:
            return tip
    raise GitsupError(f"task {record.id} has no candidate to comment on ({record.state.value})")


def add_comment(
    ctx: SupRepo,
    task: str,
    path: str,
    line: int,
    message: str,
    *,
    by: str | None = None,
    via: str = "cli",
) -> dict[str, Any]:
    """Record a comment on `line` of `path` in the task's candidate (or running tip).
    Returns it as `list_comments` shows it."""
    from gitsup.store import eventtypes as et
    from gitsup.tasks.human import who

    if not message.strip():
        raise GitsupError("the comment is empty")
    if len(message) > cm.MAX_MESSAGE_CHARS:
        raise GitsupError(
            f"the comment has {len(message)} characters; at most {cm.MAX_MESSAGE_CHARS}"
        )
    record = load_record(ctx, task)
    commit = target(ctx, record)
    path = _clean_path(path)
    lines = _lines_of(ctx, commit, path)
    if isinstance(line, bool) or not isinstance(line, int) or line < 1 or line > len(lines):
        raise GitsupError(
            f"{_shown(path)} has {len(lines)} line(s) in {commit[:12]}: no line {_shown(str(line))}"
        )
    tid = TaskId(record.id)
    with ctx.store.lock(tid):
        got = cm.fold(record.id, events_of(ctx, tid))
        if len(got.own) >= cm.MAX_COMMENTS:
            raise GitsupError(f"task {record.id} has {len(got.own)} comments: no more are taken")
        cid = f"c{len(got.own) + 1}"
        payload = et.ReviewCommentAdded(
            id=cid,
            commit=commit,
            path=path,
            line=line,
            message=message,
            by=(by or who(ctx))[:200],
            via=via[:40],
            at=time.time(),
            line_text=lines[line - 1][: cm.MAX_LINE_TEXT],
        )
        append_event(ctx, tid, payload, f"review comment {cid}")
        sync_note(ctx, tid)
    shown = list_comments(ctx, record.id)
    return next(c for c in shown["comments"] if c["id"] == cid)


def list_comments(ctx: SupRepo, task: str) -> dict[str, Any]:
    """The task's comments, each with its status against the task's candidate (or running
    tip), and, once sent to a revision task that has a candidate, `outcome` there; `revises`:
    the comments of another task this one was started to address."""
    record = load_record(ctx, task)
    return comments_of(ctx, record)


def comments_of(ctx: SupRepo, record: TaskRecord) -> dict[str, Any]:
    """`list_comments` for a record already loaded (`show --json`: `comments`)."""
    tid = TaskId(record.id)
    got = cm.fold(record.id, events_of(ctx, tid))
    out: dict[str, Any] = {"task": record.id, "against": None, "comments": [], "revises": []}
    if not got.own and not got.revises:
        return out
    try:
        head: str | None = target(ctx, record)
    except GitsupError:
        head = None
    out["against"] = head
    final = record.id if record.candidate and record.state in TERMINAL else None
    own = cm.with_status(ctx.repo, got.own, head, final)
    for c in own:
        rev = c.get("revision") or {}
        other = rev.get("task")
        if rev.get("how") == "task" and other and other != record.id:
            c["outcome"] = _outcome(ctx, c, str(other))
    out["comments"] = own
    out["revises"] = cm.with_status(ctx.repo, got.revises, head, final)
    out["revision_of"] = got.revision_of
    return out


def _outcome(ctx: SupRepo, comment: dict[str, Any], task: str) -> dict[str, Any]:
    try:
        rec = ctx.store.load(task)
    except GitsupError:
        return {"task": task, "status": "unknown", "why": "the revision task is gone"}
    if not rec.candidate:
        state = rec.state.value if rec.state not in TERMINAL else f"{rec.state.value}, no candidate"
        return {"task": task, "status": cm.SENT, "why": f"revision task {state}"}
    final = task if rec.state in TERMINAL else None
    st, why = cm.status(ctx.repo, {**comment, "revision": {"task": task}}, rec.candidate, final)
    return {"task": task, "status": st, "why": why, "against": rec.candidate}


# --- helpers ----------------------------------------------------------------------------------


def load_record(ctx: SupRepo, task: str) -> TaskRecord:
    tid = ctx.store.resolve(task)
    if not ctx.store.exists(tid):
        raise GitsupError(f"no task {_shown(task)} in this repository")
    return ctx.store.load(tid)


def events_of(ctx: SupRepo, tid: TaskId) -> list[dict[str, Any]]:
    """The task's events that concern comments."""
    return cm.read(EventLog(ctx.layout.events(tid), tid))


def append_event(ctx: SupRepo, tid: TaskId, payload: Any, seal: str | None) -> None:
    """Append to the task's log; an ended task's log is sealed into Git at once (a running
    task's supervisor seals it)."""
    with EventLog(ctx.layout.events(tid), tid) as log:
        log.append(payload)
        if seal is not None and ctx.store.load(tid).state in TERMINAL:
            log.seal(ctx.repo, seal)


def sync_note(ctx: SupRepo, tid: TaskId) -> None:
    """The candidate note's `comments` as the log says (an ended task's; a running task's
    note is written by its supervisor when it ends). The caller holds the task lock."""
    record = ctx.store.load(tid)
    if record.state not in TERMINAL or not record.candidate:
        return
    cand = Oid(record.candidate)
    text = ctx.repo.read_note(cand)
    if not text:
        return
    try:
        data = json.loads(text)
    except ValueError:
        return
    if not isinstance(data, dict):
        return
    fields = cm.note_fields(ctx.repo, record.id, events_of(ctx, tid), cand)
    if all(data.get(k) == v for k, v in fields.items()):
        return
    data.update(fields)
    ctx.repo.write_note(cand, json.dumps(data, indent=2) + "\n")


def _clean_path(path: str) -> str:
    p = path.strip().removeprefix("./")
    parts = p.split("/")
    if not p or p.startswith("/") or any(x in ("", ".", "..") for x in parts) or "\0" in p:
        raise GitsupError(f"not a path in the repository: {_shown(path)}")
    return p


def _lines_of(ctx: SupRepo, commit: Oid, path: str) -> list[str]:
    data = ctx.repo.file_at(commit, path)
    if data is None:
        raise GitsupError(f"{_shown(path)} is not a file in {commit[:12]}")
    if b"\0" in data[:8192]:
        raise GitsupError(f"{_shown(path)} is a binary file in {commit[:12]}: no lines")
    return data.decode("utf-8", "replace").splitlines()


def code_contexts(ctx: SupRepo, comments: list[dict[str, Any]]) -> dict[str, list[tuple[int, str]]]:
    """The code around each comment's line, in the commit it was made on."""
    out: dict[str, list[tuple[int, str]]] = {}
    for c in comments:
        try:
            lines = _lines_of(ctx, Oid(str(c["commit"])), str(c["path"]))
        except (GitsupError, KeyError, ValueError):
            continue
        n = int(c.get("line") or 0)
        lo, hi = max(1, n - cm.CONTEXT), min(len(lines), n + cm.CONTEXT)
        out[str(c["id"])] = [(i, lines[i - 1]) for i in range(lo, hi + 1)]
    return out


def _shown(text: str, limit: int = 200) -> str:
    """User input in an error message: printable, bounded, quoted."""
    from gitsup.supervision.prompts import printable

    s = printable(text)
    return repr(s[:limit] + ("…" if len(s) > limit else ""))
