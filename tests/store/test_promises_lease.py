"""Lease promises a mutation run of gitsup/store/lease.py showed untested: every held lease is
checked (not only those before the first unrelated, own or stolen one), what a lease file
holds survives a read, corrupt files are quarantined, the conflict names the way out, and
`transfer`/`update_extra` (the detached supervisor's hand-over) keep the lease exclusive."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gitsup.errors import GitsupError
from gitsup.host.fsutil import atomic_write
from gitsup.host.procid import ProcessId
from gitsup.store.lease import Lease, LeaseConflict, LeaseStore, canonical

ME = ProcessId.current()
DEAD = ProcessId(ME.pid, ME.start_time - 1000.0)  # same pid, another start time: gone
OTHER = ProcessId.of(os.getppid())  # alive, not this process


def _plant(store: LeaseStore, path: Path, task: str, owner: ProcessId) -> Lease:
    """Write a lease file as another supervisor would have (no overlap check)."""
    lease = Lease(canonical(path), task, owner, 1.0)
    store.dir.mkdir(parents=True, exist_ok=True)
    atomic_write(store._file(lease.path), json.dumps(lease.as_dict()).encode())
    return lease


def _sorted_first(store: LeaseStore, base: Path, prefix: str, before: str) -> Path:
    """A path under `base` whose lease file sorts before the lease file of `before`."""
    limit = store._file(canonical(before)).name
    for i in range(10_000):
        p = base / f"{prefix}{i}"
        if store._file(canonical(p)).name < limit:
            return p
    raise AssertionError("no path sorts first")


def test_an_overlapping_lease_is_found_behind_unrelated_ones(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    held = tmp / "wt"
    _plant(store, held, "holder", OTHER)
    for i in range(3):
        store.acquire(_sorted_first(store, tmp, f"unrelated{i}-", str(held)), f"u{i}")
    with pytest.raises(LeaseConflict) as ei:
        store.acquire(held / "sub", "intruder")
    assert ei.value.held.task == "holder"


def test_reacquiring_ones_own_path_still_checks_the_rest(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")

    def name(p: Path) -> str:
        return store._file(canonical(p)).name

    # my own lease on a directory, sorted before another task's lease on its child
    mine = next(
        tmp / f"wt{i}" for i in range(10_000) if name(tmp / f"wt{i}") < name(tmp / f"wt{i}" / "c")
    )
    _plant(store, mine / "c", "other", OTHER)
    _plant(store, mine, "me", ME)
    with pytest.raises(LeaseConflict) as ei:
        store.acquire(mine, "me")
    assert ei.value.held.task == "other"


def test_stealing_a_dead_lease_still_checks_the_rest(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    live = tmp / "wt" / "live"
    dead = _sorted_first(store, tmp / "wt", "dead", str(live))
    _plant(store, live, "alive", OTHER)
    _plant(store, dead, "gone", DEAD)
    with pytest.raises(LeaseConflict) as ei:
        store.acquire(tmp / "wt", "thief", steal_dead=True)
    assert ei.value.held.task == "alive"
    assert {lease.task for lease in store.all()} >= {"alive"}


def test_a_lease_file_reads_back_as_written(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    lease = store.acquire(tmp / "wt", "t1", extra={"tmux": "sess"})
    got = store.get(tmp / "wt")
    assert got == lease
    assert got.task == "t1" and got.extra == {"tmux": "sess"} and got.acquired_at > 0
    raw = json.loads(store._file(lease.path).read_text())
    assert raw["version"] == 1 and raw["path"] == canonical(tmp / "wt")
    assert "extra" not in json.loads(
        store._file(store.acquire(tmp / "other", "t2").path).read_text()
    )


@pytest.mark.parametrize(
    "raw",
    [
        {"path": "/x", "task": "t", "owner": None},
        {"path": 7, "task": "t", "owner": ME.as_dict()},
        {"task": "t", "owner": ME.as_dict()},
        "not an object",
    ],
)
def test_a_corrupt_lease_file_is_quarantined(tmp: Path, raw: object) -> None:
    store = LeaseStore(tmp / "leases")
    store.dir.mkdir(parents=True)
    f = store._file(canonical(tmp / "wt"))
    f.write_text(json.dumps(raw))
    assert store.get(tmp / "wt") is None
    assert not f.exists()
    (kept,) = store.dir.glob(f"{f.name}.corrupt-*")
    assert json.loads(kept.read_text()) == raw
    assert store.acquire(tmp / "wt", "t").task == "t"


def test_the_conflict_says_whose_lease_and_what_to_do(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    _plant(store, tmp / "a", "live-task", OTHER)
    _plant(store, tmp / "b", "dead-task", DEAD)
    with pytest.raises(LeaseConflict) as live:
        store.acquire(tmp / "a", "t")
    assert live.value.message == (
        f"{canonical(tmp / 'a')} overlaps {canonical(tmp / 'a')}, leased by task live-task "
        f"(supervisor pid {OTHER.pid}, alive)"
    )
    assert live.value.hint == "wait for that task, or `git sup stop live-task`"
    with pytest.raises(LeaseConflict) as dead:
        store.acquire(tmp / "b", "t")
    assert dead.value.message.endswith(f"(supervisor pid {DEAD.pid}, dead (stale lease))")
    assert "`git sup doctor --fix` releases stale leases" in (dead.value.hint or "")


def test_transfer_and_update_extra(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    lease = store.acquire(tmp / "wt", "t1", extra={"a": 1})
    moved = store.transfer(lease, OTHER)
    assert moved.owner == OTHER and moved.task == "t1" and moved.extra == {"a": 1}
    assert store.get(tmp / "wt") == moved
    # the old owner no longer holds it: it can neither hand it over again nor release it
    with pytest.raises(GitsupError, match=f"no longer held by pid {ME.pid}"):
        store.transfer(lease, ME)
    assert store.release(lease) is False
    assert store.get(tmp / "wt") == moved
    # a lease broken meanwhile cannot be handed over either
    store.break_lease(moved.path)
    with pytest.raises(GitsupError):
        store.transfer(moved, ME)
    assert store.get(tmp / "wt") is None

    again = store.acquire(tmp / "wt", "t2", extra={"a": 1, "b": 2})
    updated = store.update_extra(again, {"b": 3, "c": 4})
    assert updated.extra == {"a": 1, "b": 3, "c": 4}
    assert store.get(tmp / "wt") == updated
    assert updated.owner == again.owner and updated.acquired_at == again.acquired_at
    assert store.release(updated) is True and store.get(tmp / "wt") is None
