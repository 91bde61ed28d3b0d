"""Leases: one supervisor owns one canonical worktree path.

A path conflicts with itself, its parents and its children. Acquisition is
atomic across processes: one `flock` on `leases/.lock` serializes the check
and the write. A lease records the owner's pid and process start time so a
dead owner is provable; a corrupt lease file is quarantined (renamed aside),
never fatal to unrelated paths.

A takeover is a transaction on the lease: the taker writes the lease in the state
`cleanup-pending` (naming the owner it takes over from) before it cleans up what the old
owner left, and settles it (`held`) once the cleanup is done, before its worker starts. A
`cleanup-pending` lease whose owner is dead is a takeover interrupted half-way, which the
next reader reconciles (gitsup/supervision/recovery.py `reconcile_takeovers`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitsup.errors import GitsupError
from gitsup.host.fsutil import atomic_write, locked
from gitsup.host.procid import ProcessId

HELD = "held"
CLEANUP_PENDING = "cleanup-pending"


@dataclass(frozen=True)
class Lease:
    path: str
    task: str
    owner: ProcessId
    acquired_at: float
    extra: dict[str, Any] = field(default_factory=dict)
    state: str = HELD  # or CLEANUP_PENDING: a takeover that has not finished its cleanup

    @property
    def owner_alive(self) -> bool:
        return self.owner.alive()

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "path": self.path,
            "task": self.task,
            "owner": self.owner.as_dict(),
            "acquired_at": self.acquired_at,
            **({"extra": self.extra} if self.extra else {}),
            **({"state": self.state} if self.state != HELD else {}),
        }


class LeaseConflict(GitsupError):
    def __init__(self, wanted: str, held: Lease) -> None:
        state = "alive" if held.owner_alive else "dead (stale lease)"
        super().__init__(
            f"{wanted} overlaps {held.path}, leased by task {held.task} "
            f"(supervisor pid {held.owner.pid}, {state})",
            hint=(
                "wait for that task, or `git sup stop " + held.task + "`"
                if held.owner_alive
                else "`git sup doctor --fix` releases stale leases; `git sup recover --takeover` continues the task"
            ),
        )
        self.held = held


def canonical(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def overlaps(a: str, b: str) -> bool:
    if a == b:
        return True
    a_s, b_s = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a_s.startswith(b_s) or b_s.startswith(a_s)


class LeaseStore:
    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def _file(self, path: str) -> Path:
        return self.dir / (hashlib.sha256(path.encode()).hexdigest()[:32] + ".json")

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.dir / ".lock")

    def _read(self, f: Path) -> Lease | None:
        try:
            raw = json.loads(f.read_text())
            owner = ProcessId.from_dict(raw["owner"])
            if owner is None or not isinstance(raw["path"], str):
                raise ValueError("bad owner or path")
            return Lease(
                path=raw["path"],
                task=str(raw.get("task", "")),
                owner=owner,
                acquired_at=float(raw.get("acquired_at", 0.0)),
                extra=dict(raw.get("extra") or {}),
                state=str(raw.get("state") or HELD),
            )
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, OSError):
            # Quarantine: keep the bytes for a person, out of everyone's way.
            with contextlib.suppress(OSError):
                f.rename(f.with_name(f"{f.name}.corrupt-{int(time.time() * 1000)}"))
            return None

    def all(self) -> list[Lease]:
        if not self.dir.exists():
            return []
        out = []
        for f in sorted(self.dir.glob("*.json")):
            lease = self._read(f)
            if lease is not None:
                out.append(lease)
        return out

    def quarantined(self) -> list[Path]:
        """Lease files set aside as unreadable (`*.json.corrupt-<ms>`), oldest first."""
        if not self.dir.exists():
            return []
        return sorted(self.dir.glob("*.json.corrupt-*"), key=lambda p: p.name.rsplit("-", 1)[-1])

    def acquire(
        self,
        path: str | os.PathLike[str],
        task: str,
        *,
        owner: ProcessId | None = None,
        steal_dead: bool = False,
        extra: dict[str, Any] | None = None,
        state: str = HELD,
    ) -> Lease:
        """Take the lease on `path`, or raise LeaseConflict naming the holder.

        With `steal_dead`, overlapping leases whose owner is provably dead are
        replaced (used by recover --takeover and doctor --fix). A takeover takes it in
        `state` CLEANUP_PENDING and `settle`s it when its cleanup is done.
        """
        want = canonical(path)
        me = owner or ProcessId.current()
        with self._locked():
            for held in self.all():
                if not overlaps(want, held.path):
                    continue
                if held.owner == me and held.path == want:
                    continue
                if steal_dead and not held.owner_alive:
                    self._file(held.path).unlink(missing_ok=True)
                    continue
                raise LeaseConflict(want, held)
            lease = Lease(want, task, me, time.time(), dict(extra or {}), state)
            atomic_write(self._file(want), json.dumps(lease.as_dict(), indent=1).encode())
            return lease

    def get(self, path: str | os.PathLike[str]) -> Lease | None:
        return self._read(self._file(canonical(path)))

    def release(self, lease: Lease) -> bool:
        """Remove the lease if it is still this owner's. Returns whether it was removed."""
        with self._locked():
            current = self._read(self._file(lease.path))
            if current is None or current.owner != lease.owner:
                return False
            self._file(lease.path).unlink(missing_ok=True)
            return True

    def update_extra(self, lease: Lease, extra: dict[str, Any]) -> Lease:
        with self._locked():
            new = Lease(
                lease.path,
                lease.task,
                lease.owner,
                lease.acquired_at,
                {**lease.extra, **extra},
                lease.state,
            )
            atomic_write(self._file(lease.path), json.dumps(new.as_dict(), indent=1).encode())
            return new

    def transfer(self, lease: Lease, to: ProcessId) -> Lease:
        """Hand a lease to another process (the detached supervisor), atomically."""
        with self._locked():
            current = self._read(self._file(lease.path))
            if current is None or current.owner != lease.owner:
                raise GitsupError(
                    f"lease on {lease.path} is no longer held by pid {lease.owner.pid}"
                )
            new = Lease(lease.path, lease.task, to, time.time(), lease.extra, lease.state)
            atomic_write(self._file(lease.path), json.dumps(new.as_dict(), indent=1).encode())
            return new

    def settle(self, lease: Lease) -> Lease:
        """A takeover's cleanup is done: its lease is `held`, still by the same owner."""
        with self._locked():
            current = self._read(self._file(lease.path))
            if current is None or current.owner != lease.owner:
                raise GitsupError(
                    f"lease on {lease.path} is no longer held by pid {lease.owner.pid}"
                )
            new = Lease(lease.path, lease.task, lease.owner, lease.acquired_at, current.extra)
            atomic_write(self._file(lease.path), json.dumps(new.as_dict(), indent=1).encode())
            return new

    def break_lease(self, path: str) -> None:
        with self._locked():
            self._file(path).unlink(missing_ok=True)
