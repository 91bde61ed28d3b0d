"""What `git sup ls` shows, read without libgit2 when nothing needs it.

The task records are read in one pass as plain JSON. Branch tips come from the repository's
files (gitsup/store/gitfiles.py). How far a baseline is behind a tip, and which paths differ
between two commits, depend only on the two commit ids: they are kept in a cache keyed by
the pair (`$GIT_COMMON_DIR/sup/cache/graph.json`), computed with the Git gateway the first
time a pair is seen, so an entry is never stale and a listing whose pairs are known does
not load libgit2 at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitsup import jsonio
from gitsup.host.fsutil import atomic_write
from gitsup.layout import Layout, owning_task
from gitsup.state import TERMINAL
from gitsup.store.gitfiles import BranchReader, Unsure, locate
from gitsup.store.records import TaskStore

if TYPE_CHECKING:
    from gitsup.store.suprepo import SupRepo

_OID = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
CACHE_VERSION = 1
CACHE_MAX_ENTRIES = 20_000  # per kind; the oldest go first


class GraphCache:
    """Facts two commit ids fix for good: `behind` (commits of the tip the baseline lacks)
    and `paths` (paths that differ between their trees). A file that is missing, unreadable
    or of another version is an empty cache; writes replace it whole (a concurrent writer's
    entries may be lost and are computed again)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._data: dict[str, dict[str, Any]] | None = None
        self._dirty = False
        self._used: dict[str, set[str]] = {"behind": set(), "paths": set()}

    def _kinds(self) -> dict[str, dict[str, Any]]:
        if self._data is None:
            data: Any = None
            with contextlib.suppress(OSError, ValueError), open(self.path, "rb") as f:
                data = jsonio.loads(f.read())
            ok = (
                isinstance(data, dict)
                and data.get("version") == CACHE_VERSION
                and isinstance(data.get("behind"), dict)
                and isinstance(data.get("paths"), dict)
            )
            self._data = (
                {"behind": data["behind"], "paths": data["paths"]}
                if ok
                else {"behind": {}, "paths": {}}
            )
        return self._data

    def get(self, kind: str, key: str) -> Any:
        self._used[kind].add(key)
        return self._kinds()[kind].get(key)

    def put(self, kind: str, key: str, value: Any) -> None:
        self._used[kind].add(key)
        self._kinds()[kind][key] = value
        self._dirty = True

    def save(self) -> None:
        """Write what was added (nothing when nothing was), keeping of each kind this run
        asked for only the pairs it asked for: a listing asks for every pair it shows, so
        pairs of tips that moved on go (and are computed again should they come back). A
        failure to write is no error: the next listing computes the same again."""
        if not self._dirty or self._data is None:
            return
        self._dirty = False
        body: dict[str, Any] = {"version": CACHE_VERSION}
        for kind, entries in self._data.items():
            used = self._used[kind]
            keys = [k for k in entries if k in used] if used else list(entries)
            body[kind] = {k: entries[k] for k in keys[-CACHE_MAX_ENTRIES:]}
        with contextlib.suppress(OSError):
            atomic_write(Path(self.path), json.dumps(body, separators=(",", ":")).encode())


class Listing:
    """A repository as a listing reads it: its state directory, its branch tips, the graph
    cache, and the Git gateway opened only when one of them needs it."""

    def __init__(self, layout: Layout, cwd: str = ".", ctx: SupRepo | None = None) -> None:
        self.layout = layout
        self.store = TaskStore(layout)
        self._cwd = cwd
        self._ctx = ctx
        self._refs = BranchReader(str(layout.common_dir))
        self._tips: dict[str, str | None] = {}
        self.cache = GraphCache(str(layout.root / "cache" / "graph.json"))
        # A shallow history or grafts can change what a pair of commits says: no cache then.
        self._cacheable = not any(
            os.path.exists(os.path.join(layout.common_dir, p)) for p in ("shallow", "info/grafts")
        )

    @classmethod
    def discover(cls, cwd: str = ".") -> Listing:
        common = locate(cwd)
        if common is None:
            from gitsup.store.suprepo import SupRepo

            ctx = SupRepo.discover(cwd)
            return cls(ctx.layout, cwd, ctx)
        owner = owning_task(Path(common))  # a task's worktree: the repository owning it
        return cls(Layout(owner[0] if owner else Path(common)), cwd)

    @classmethod
    def of(cls, ctx: SupRepo) -> Listing:
        return cls(ctx.layout, ".", ctx)

    @property
    def ctx(self) -> SupRepo:
        """The repository through the Git gateway (loads libgit2 on first use)."""
        if self._ctx is None:
            from gitsup.store.suprepo import SupRepo

            self._ctx = SupRepo.discover(self._cwd)
        return self._ctx

    def branch_target(self, name: str) -> str | None:
        if name not in self._tips:
            try:
                tip = self._refs.read_branch(name)
            except Unsure:
                tip = self.ctx.repo.branch_target(name)
            self._tips[name] = tip
        return self._tips[name]

    def _key(self, a: str, b: str) -> str | None:
        if self._cacheable and _OID.fullmatch(a) and _OID.fullmatch(b):
            return f"{a}..{b}"
        return None

    def behind(self, baseline: str, tip: str) -> int | None:
        """How many commits of `tip` `baseline` lacks; None when Git cannot say."""
        key = self._key(baseline, tip)
        hit = self.cache.get("behind", key) if key else None
        if isinstance(hit, int) and not isinstance(hit, bool):
            return hit
        from gitsup.ids import Oid

        try:
            n = self.ctx.repo.ahead_behind(Oid(baseline), Oid(tip))[1]
        except Exception:
            return None
        if key:
            self.cache.put("behind", key, n)
        return n

    def changed_paths(self, base: str, head: str) -> set[str]:
        """Paths that differ between two commits' trees; empty when Git cannot say."""
        key = self._key(base, head)
        hit = self.cache.get("paths", key) if key else None
        if isinstance(hit, list):
            return {str(p) for p in hit}
        from gitsup.ids import Oid

        try:
            paths = self.ctx.repo.changed_paths(Oid(base), Oid(head))
        except Exception:  # a pruned or foreign object: nothing to compare
            return set()
        if key:
            self.cache.put("paths", key, sorted(paths))
        return paths

    def save(self) -> None:
        self.cache.save()


@dataclass(frozen=True)
class LsRow:
    id: str
    state: str
    status: str
    age: float
    branch: str
    source_branch: str | None
    behind: int | None
    goal: str
    candidate: str | None
    discarded: bool = False
    queue_repair: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def reconcile_interrupted(layout: Layout) -> None:
    """Takeovers a taker left half-way (a `cleanup-pending` lease of a dead owner), finished
    or rolled back before the tasks are read (gitsup/supervision/recovery.py)."""
    from gitsup.store.lease import CLEANUP_PENDING, LeaseStore

    if any(
        x.state == CLEANUP_PENDING and not x.owner_alive for x in LeaseStore(layout.leases).all()
    ):
        from gitsup.supervision.recovery import reconcile_takeovers

        reconcile_takeovers(layout)


def list_tasks(listing: Listing, records: list[dict[str, Any]] | None = None) -> list[LsRow]:
    """One row per task, from `records` (the raw task records) when the caller read them."""
    now = time.time()
    rows: list[LsRow] = []
    seen: dict[tuple[str, str], int | None] = {}
    # A listing reads only the fields it shows (plain JSON, no model validation). Ids sort
    # by day only: list by creation.
    raw = listing.store.iter_raw() if records is None else records
    for rec in sorted(raw, key=lambda r: (r.get("created_at", 0.0), r["id"])):
        behind: int | None = None
        source = rec.get("source_branch")
        baseline = rec.get("baseline")
        if source:
            tip = listing.branch_target(source)
            if tip is not None and baseline:
                key = (baseline, tip)
                if key not in seen:
                    seen[key] = listing.behind(baseline, tip)
                behind = seen[key]
        goal = str(rec.get("goal") or "")
        rows.append(
            LsRow(
                id=rec["id"],
                state=(
                    "paused"  # `git sup pause` holds it (the record's state is under it)
                    if rec.get("paused_by_user")
                    and rec.get("state") not in {t.value for t in TERMINAL}
                    else str(rec.get("state", ""))
                ),
                status=str(rec.get("status", "")),
                age=round(now - float(rec.get("created_at", now)), 1),
                branch=str(rec.get("branch", "")),
                source_branch=source,
                behind=behind,
                goal=goal.splitlines()[0][:80] if goal else "",
                candidate=rec.get("candidate"),
                discarded=bool(rec.get("discarded_at")),
                queue_repair=rec.get("queue_repair") or None,
            )
        )
    return rows
