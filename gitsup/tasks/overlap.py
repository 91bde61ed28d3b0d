"""Which tasks change the same paths: seen while they run, before they collide.

For every task that is still running or holds a ready candidate, the paths it changed
since its baseline (its branch tip, or its candidate) plus, while it runs, its worktree's
uncommitted changes; two tasks overlap when they share a path. `git sup ls` shows it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gitsup.ids import Oid, TaskId
from gitsup.tasks.listing import Listing

_LIVE = {"starting", "running", "waiting", "paused", "verifying"}


def changed_paths(ls: Listing, rec: dict[str, Any]) -> set[str]:
    baseline = rec.get("baseline")
    if not baseline:
        return set()
    state = str(rec.get("state", ""))
    tip = rec.get("candidate") or ls.branch_target(str(rec.get("branch", "")))
    paths: set[str] = set()
    if tip and tip != baseline:
        paths |= ls.changed_paths(str(baseline), str(tip))  # cached by the pair
    wt = rec.get("worktree")
    if state in _LIVE and wt and Path(wt).is_dir():
        from gitsup.git import GitRepo

        git_dir = ls.layout.task_git_dir(TaskId(rec["id"]))
        try:
            repo = GitRepo.open_task(git_dir, Path(wt)) if git_dir.is_dir() else GitRepo.open(wt)
            head = repo.head_commit()
            if head != baseline:
                paths |= repo.changed_paths(Oid(baseline), head)
            paths |= repo.dirty_paths()
        except Exception:  # the worker is changing it right now; next listing sees it
            pass
    return paths


def overlaps(ls: Listing, records: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """task id -> ids of the other tasks whose changed paths meet its own."""
    changed: dict[str, set[str]] = {}
    for rec in records:
        status = str(rec.get("status", ""))
        if str(rec.get("state", "")) in _LIVE or status == "ready":
            if rec.get("discarded_at"):
                continue
            changed[str(rec["id"])] = changed_paths(ls, rec)
    return meeting(changed)


def meeting(changed: dict[str, set[str]]) -> dict[str, list[str]]:
    """id -> the other ids whose path sets share a path with its own (sorted), through an
    index by path: as many steps as paths, not one per pair of tasks."""
    by_path: dict[str, list[str]] = {}
    for tid, paths in changed.items():
        for path in paths:
            by_path.setdefault(path, []).append(tid)
    met: dict[str, set[str]] = {}
    for ids in by_path.values():
        if len(ids) > 1:
            for a in ids:
                met.setdefault(a, set()).update(b for b in ids if b != a)
    return {k: sorted(v) for k, v in met.items() if v}
