"""What the pages and the API show, built from the same data as `git sup show --json`, `ls`
and `report` (gitsup/tasks/report.py collects it); nothing here changes anything."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

if TYPE_CHECKING:
    from gitsup.attention.fold import TaskStatus
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.report import PageData

# A timeline cell longer than this is cut, with a link to the whole event.
CUT = 600
# Events whose data is a tool's output or a worker's text: folded on the timeline.
FOLDED = ("worker_output", "tool_result", "permission_decided", "turn_completed")


def row_dict(r: TaskStatus) -> dict[str, Any]:
    """One task of the index (and of `GET /api/tasks`): `ls`'s status fields."""
    return r.as_dict()


@dataclass
class DiffLine:
    cls: str  # "a" added, "d" deleted, "h" hunk header, "" context
    text: str
    new_line: int | None
    findings: list[Mapping[str, Any]] = field(default_factory=list)


@dataclass
class DiffFile:
    path: str
    anchor: str
    header: list[str]
    lines: list[DiffLine]
    added: int = 0
    deleted: int = 0
    findings: list[Mapping[str, Any]] = field(default_factory=list)  # at no line of the diff


def diff_files(diff: str, findings: list[Mapping[str, Any]]) -> list[DiffFile]:
    """The diff split by file, each line with its number in the new file, and each review
    finding (`path`, `line`) placed under the line it names (else at the file's top)."""
    files: list[DiffFile] = []
    cur: DiffFile | None = None
    new_no = 0
    for raw in diff.split("\n"):
        if raw.startswith("diff --git "):
            path = raw.split(" b/", 1)[-1] if " b/" in raw else raw[11:]
            cur = DiffFile(path, f"file-{len(files) + 1}", [raw], [])
            files.append(cur)
            continue
        if cur is None:
            continue
        if raw.startswith("@@"):
            try:
                new_no = int(raw.split("+", 1)[1].split(" ", 1)[0].split(",", 1)[0])
            except (IndexError, ValueError):
                new_no = 0
            cur.lines.append(DiffLine("h", raw, None))
        elif not cur.lines:
            cur.header.append(raw)
        elif raw.startswith("+"):
            cur.lines.append(DiffLine("a", raw, new_no))
            cur.added += 1
            new_no += 1
        elif raw.startswith("-"):
            cur.lines.append(DiffLine("d", raw, None))
            cur.deleted += 1
        elif raw.startswith("\\"):
            cur.lines.append(DiffLine("", raw, None))
        elif raw:
            cur.lines.append(DiffLine("", raw, new_no))
            new_no += 1
    by_path = {f.path: f for f in files}
    for fd in findings:
        f = by_path.get(str(fd.get("path") or ""))
        if f is None:
            continue
        line = fd.get("line")
        at = next((dl for dl in f.lines if dl.new_line is not None and dl.new_line == line), None)
        (at.findings if at is not None else f.findings).append(fd)
    return files


def tree(files: list[DiffFile]) -> list[tuple[str, list[DiffFile]]]:
    """The changed files grouped by directory, directories in order."""
    dirs: dict[str, list[DiffFile]] = {}
    for f in files:
        d, _, _ = f.path.rpartition("/")
        dirs.setdefault(d or ".", []).append(f)
    return sorted(dirs.items())


@dataclass
class TimelineItem:
    seq: Any
    when: str
    type: str
    summary: Markup
    folded: bool
    cut: bool


def timeline(data: PageData) -> list[TimelineItem]:
    """The events, oldest first: each one's summary (escaped HTML, as in the report), long
    ones cut (the link shows the whole event), tool results and outputs folded."""
    from gitsup.tasks.report import _summary, _when

    items = []
    for ev in data.events:
        t = str(ev.get("type"))
        d = ev.get("data") or {}
        d = d if isinstance(d, Mapping) else {}
        size = len(json.dumps(d, ensure_ascii=False, default=str))
        cut = size > CUT
        if cut:
            text = json.dumps(d, ensure_ascii=False, default=str)[:CUT] + "…"
            summary = _summary_short(t, d, text)
        else:
            summary = _summary(t, d)
        items.append(
            TimelineItem(ev.get("seq"), _when(ev.get("ts")), t, Markup(summary), t in FOLDED, cut)
        )
    return items


def _summary_short(t: str, d: Mapping[str, Any], text: str) -> str:
    from gitsup.tasks.report import _summary, e

    if t in ("state_changed", "decision", "model_call", "repair_requested"):
        return _summary(t, d)
    return f"<pre>{e(text)}</pre>"


def integration(data: PageData) -> list[tuple[str, Any]]:
    from gitsup.tasks.report import _integration_rows

    return _integration_rows(data)


def verdict(show: Mapping[str, Any]) -> tuple[str, str]:
    """The page's first line: (class, words)."""
    status = str(show.get("status"))
    state = str(show.get("state"))
    if show.get("pending"):
        return "warn", "needs a human: a call waits for an answer"
    words = {
        "ready": "ready to integrate",
        "integrated": "integrated",
        "parked": "parked: needs a human",
        "failed": "failed",
        "stopped": "stopped",
    }.get(status)
    cls = {"ready": "ok", "integrated": "ok", "failed": "bad"}.get(status, "warn")
    return cls, words or f"{state} ({status})"


def event_of(data: PageData, seq: int) -> dict[str, Any] | None:
    return next((ev for ev in data.events if ev.get("seq") == seq), None)


def groups(ctx: SupRepo) -> list[str]:
    """The best-of-N groups of the repository (`refs/sup/<group>/group`), newest first."""
    from gitsup.tasks.attempts import is_group_id

    names = [n.split("/")[2] for n, _ in ctx.repo.direct_refs(["refs/sup/g"])]
    return sorted({g for g in names if is_group_id(g)}, reverse=True)


def group(ctx: SupRepo, gid: str) -> dict[str, Any]:
    """A group's attempts side by side, ranked by the same evidence as `git sup compare`, read
    only (the ranking is recorded in Git by `compare`, not by looking at it here)."""
    from dataclasses import asdict

    from gitsup.tasks.attempts import evidence, read_group

    data, tip = read_group(ctx, gid)
    ranked = sorted(
        (evidence(ctx, t, data["baseline"]) for t in data["members"]), key=lambda r: r.key()
    )
    recorded = ctx.repo.read_note(tip)
    chosen = None
    if recorded:
        try:
            chosen = json.loads(recorded).get("chosen")
        except ValueError:
            chosen = None
    return {
        "group": gid,
        "goal": data.get("goal", ""),
        "baseline": data["baseline"],
        "members": [asdict(r) for r in ranked],
        "chosen": chosen,
    }
