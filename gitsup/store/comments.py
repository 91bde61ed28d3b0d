"""Review comments: what a person said about a line of a task's work, and whether the next
candidate addressed it.

A comment is recorded in the task's event log (`review_comment_added`: the source of truth,
sealed into Git with the rest of the log) and copied into the candidate's note in
`refs/notes/sup` (`comments`). `git sup revise` records `revision_requested` with the comments
it sent, in the task's log and, when it starts a revision task, in that task's log too: so a
revision task's candidate note lists the comments it was asked to address.

The status of a comment against a commit `head` (the candidate, or a running task's branch
tip) is decided from Git alone, the same every time it is asked:

- `addressed`: `head` is not the commit the comment was made on, and `head` changes the
  commented file within CONTEXT lines of the comment's line (or no longer has the file);
- `not addressed`: `head` is another commit and leaves those lines as they were;
- `sent`: made on `head` itself and sent to a revision (`revise`), which has not produced
  another candidate here (once the task that revised it ends with `head` itself as its
  candidate, the comment is `not addressed`);
- `open`: made on `head` itself and not sent yet.

Comments are a person's words and nothing more: nothing here is read by the policy, the
decider or the integration; they are shown escaped and given to the agent as quoted data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitsup.ids import Oid

if TYPE_CHECKING:
    from gitsup.git import GitRepo
    from gitsup.store.events import EventLog

CONTEXT = 3  # lines either side of the comment's line that count as "at the comment"
MAX_MESSAGE_CHARS = 4000
MAX_COMMENTS = 500  # per task
MAX_LINE_TEXT = 300
# What one `revision_requested` may carry (its JSON, in bytes): the rest wait for the next.
MAX_REVISION_BYTES = 48 * 1024

OPEN, SENT, ADDRESSED, NOT_ADDRESSED = "open", "sent", "addressed", "not addressed"
TYPES = ("review_comment_added", "revision_requested")


def read(log: EventLog) -> list[dict[str, Any]]:
    """The events of `log` that concern comments; a log that names neither type is not
    parsed at all (`show` and every task's end ask this)."""
    if not any(_mentions(p) for p in [*log.rotated(), log.path]):
        return []
    return [e.as_dict() for e in log.read() if e.type in TYPES]


def _mentions(path: Any) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return any(f'"{t}"'.encode() in data for t in TYPES)


@dataclass
class Comments:
    """The comments a task's event log holds: its own (`own`, oldest first, each with its
    `revision` once sent) and those of another task it was started to address (`revises`,
    from `revision_of`)."""

    task: str
    own: list[dict[str, Any]] = field(default_factory=list)
    revises: list[dict[str, Any]] = field(default_factory=list)
    revision_of: str | None = None

    def find(self, cid: str) -> dict[str, Any] | None:
        return next((c for c in self.own if c.get("id") == cid), None)

    def open(self) -> list[dict[str, Any]]:
        return [c for c in self.own if not c.get("revision")]


def fold(task: str, events: Iterable[Mapping[str, Any]]) -> Comments:
    """The comments of `task` from its events (each `{"type", "ts", "data"}`)."""
    out = Comments(task)
    for ev in events:
        kind, data = ev.get("type"), ev.get("data")
        if not isinstance(data, Mapping):
            continue
        if kind == "review_comment_added":
            c = {k: data.get(k) for k in _FIELDS}
            c["task"] = task
            out.own.append(c)
        elif kind == "revision_requested":
            sent = [c for c in data.get("comments") or [] if isinstance(c, Mapping)]
            if data.get("task") == task:
                rev = {
                    "how": data.get("how"),
                    "task": data.get("revision_task") or task,
                    "by": data.get("by"),
                    "at": ev.get("ts"),
                }
                for s in sent:
                    mine = out.find(str(s.get("id")))
                    if mine is not None and not mine.get("revision"):
                        mine["revision"] = rev
            else:
                out.revision_of = str(data.get("task") or "") or out.revision_of
                rev = {"how": "task", "task": task, "by": data.get("by"), "at": ev.get("ts")}
                out.revises.extend(
                    {**{k: s.get(k) for k in _FIELDS}, "task": data.get("task"), "revision": rev}
                    for s in sent
                )
    return out


_FIELDS = ("id", "commit", "path", "line", "message", "by", "via", "at", "line_text")


def status(
    repo: GitRepo, comment: Mapping[str, Any], head: str | None, final_of: str | None = None
) -> tuple[str, str]:
    """(status, why) of one comment against `head` (module docstring). `final_of`: the task
    whose final candidate `head` is; a comment that task revised (in a turn, or as the
    revision task) and that candidate left as it was is not addressed."""
    commit, path, line = comment.get("commit"), comment.get("path"), comment.get("line")
    if not head or not isinstance(commit, str) or head == commit:
        rev = comment.get("revision") or {}
        if head and final_of and rev.get("task") == final_of:
            return NOT_ADDRESSED, "the revision left the commit commented on as it was"
        return (SENT, "sent to a revision") if rev else (OPEN, "not sent yet")
    if not isinstance(path, str) or not isinstance(line, int):
        return NOT_ADDRESSED, "the comment names no line"
    try:
        changed = repo.changed_old_lines(Oid(commit), Oid(head), path)
    except (KeyError, ValueError) as exc:  # an object gone (a pruned task)
        return NOT_ADDRESSED, f"cannot compare: {exc}"
    if changed is None:
        return ADDRESSED, f"{path} is no longer in {head[:12]}"
    lo, hi = line - CONTEXT, line + CONTEXT
    for first, last in changed:
        if first <= hi and last >= lo:
            return ADDRESSED, f"lines {first}-{last} of {path} changed"
    return NOT_ADDRESSED, f"no change within {CONTEXT} lines of line {line}"


def with_status(
    repo: GitRepo,
    comments: Iterable[Mapping[str, Any]],
    head: str | None,
    final_of: str | None = None,
) -> list[dict[str, Any]]:
    out = []
    for c in comments:
        st, why = status(repo, c, head, final_of)
        out.append({**c, "status": st, "why": why, "against": head})
    return out


def note_fields(
    repo: GitRepo, task: str, events: Iterable[Mapping[str, Any]], head: str
) -> dict[str, Any]:
    """What a candidate note on `head` says of comments: `comments` (the task's own and
    those it was started to address, each with its status against `head`) and
    `revision_of`; nothing when there are none."""
    got = fold(task, events)
    if not got.own and not got.revises:
        return {}
    out: dict[str, Any] = {
        "comments": with_status(repo, [*got.revises, *got.own], head, final_of=task)
    }
    if got.revision_of:
        out["revision_of"] = got.revision_of
    return out


def fit_revision(comments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The oldest comments whose JSON fits in MAX_REVISION_BYTES (at least one)."""
    out: list[dict[str, Any]] = []
    size = 0
    for c in comments:
        n = len(json.dumps(c))  # ASCII escapes: what the event log writes
        if out and size + n > MAX_REVISION_BYTES:
            break
        out.append(c)
        size += n
    return out
