"""Which tasks change the same paths: seen while they run, before they collide.

For every task that is still running or holds a ready candidate, the paths it changed
since its baseline (its branch tip, or its candidate) plus, while it runs, its worktree's
uncommitted changes; two tasks overlap when they share a path. `git sup ls` shows it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gitsup.git import GitRepo
from gitsup.ids import Oid, TaskId
from gitsup.tasks import SupRepo

_LIVE = {"starting", "running", "waiting", "paused", "verifying"}


def changed_paths(ctx: SupRepo, rec: dict[str, Any]) -> set[str]:
    baseline = rec.get("baseline")
    if not baseline:
        return set()
    state = str(rec.get("state", ""))
    tip = rec.get("candidate") or ctx.repo.branch_target(str(rec.get("branch", "")))
    paths: set[str] = set()
    try:
        if tip and tip != baseline:
            paths |= ctx.repo.changed_paths(Oid(baseline), Oid(tip))
    except Exception:  # a pruned or foreign object: nothing to compare
        pass
    wt = rec.get("worktree")
    if state in _LIVE and wt and Path(wt).is_dir():
        git_dir = ctx.layout.task_git_dir(TaskId(rec["id"]))
        try:
            repo = GitRepo.open_task(git_dir, Path(wt)) if git_dir.is_dir() else GitRepo.open(wt)
            head = repo.head_commit()
            if head != baseline:
                paths |= repo.changed_paths(Oid(baseline), head)
            paths |= repo.dirty_paths()
        except Exception:  # the worker is changing it right now; next listing sees it
            pass
    return paths


def overlaps(ctx: SupRepo, records: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """task id -> ids of the other tasks whose changed paths meet its own."""
    changed: dict[str, set[str]] = {}
    for rec in records:
        status = str(rec.get("status", ""))
        if str(rec.get("state", "")) in _LIVE or status == "ready":
            if rec.get("discarded_at"):
                continue
            changed[str(rec["id"])] = changed_paths(ctx, rec)
    out: dict[str, list[str]] = {}
    ids = list(changed)
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            if changed[a] & changed[b]:
                out.setdefault(a, []).append(b)
                out.setdefault(b, []).append(a)
    return {k: sorted(v) for k, v in out.items()}
