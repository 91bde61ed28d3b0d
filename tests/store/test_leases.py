"""Leases: one owner per canonical worktree path; a path conflicts with itself, its parents
and its children; acquisition is atomic across processes; dead owners are provable; corrupt
lease files are quarantined without blocking anyone else."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from gitsup.host.procid import ProcessId
from gitsup.store.lease import LeaseConflict, LeaseStore, canonical, overlaps


def _race(lease_dir: str, path: str, task: str, barrier, results, hold) -> None:  # type: ignore[no-untyped-def]
    store = LeaseStore(Path(lease_dir))
    barrier.wait()
    try:
        store.acquire(path, task)
        results.put((task, path, "won"))
    except LeaseConflict as exc:
        results.put((task, path, f"lost: {exc.held.task}"))
    hold.wait(30)  # stay alive (an owner that is alive) until everyone has tried


def _run_race(lease_dir: Path, wanted: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(wanted))
    results = ctx.Queue()
    hold = ctx.Event()
    procs = [
        ctx.Process(target=_race, args=(str(lease_dir), p, t, barrier, results, hold))
        for t, p in wanted
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=30) for _ in procs]
    hold.set()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return out


def test_twelve_processes_racing_for_overlapping_paths_one_wins(tmp: Path) -> None:
    root = tmp / "wt"
    family = [str(root / "a"), str(root / "a" / "b"), str(root), str(root / "a" / "b" / "c")]
    wanted = [(f"t{i:02d}", family[i % len(family)]) for i in range(12)]
    out = _run_race(tmp / "leases", wanted)
    winners = [o for o in out if o[2] == "won"]
    assert len(winners) == 1, out
    winner_task = winners[0][0]
    assert all(o[2] == f"lost: {winner_task}" for o in out if o[2] != "won")
    leases = LeaseStore(tmp / "leases").all()
    assert [(lease.task, lease.path) for lease in leases] == [
        (winner_task, canonical(winners[0][1]))
    ]


def test_racing_for_several_independent_families(tmp: Path) -> None:
    """Non-overlapping paths do not block each other: one winner per family."""
    fams = {name: [str(tmp / name), str(tmp / name / "sub")] for name in ("x", "y", "z")}
    wanted = [(f"{name}{i}", paths[i % 2]) for name, paths in fams.items() for i in range(4)]
    out = _run_race(tmp / "leases", wanted)
    for name in fams:
        mine = [o for o in out if o[0].startswith(name)]
        assert sum(o[2] == "won" for o in mine) == 1, mine
    assert len(LeaseStore(tmp / "leases").all()) == 3


def test_non_overlapping_paths_both_win(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    a = store.acquire(tmp / "wt" / "one", "t1")
    b = store.acquire(tmp / "wt" / "one-more", "t2")  # a prefix as a string, not as a path
    c = store.acquire(tmp / "wt" / "two", "t3")
    assert {x.task for x in store.all()} == {"t1", "t2", "t3"}
    assert a.path != b.path != c.path


@pytest.mark.parametrize(
    ("held", "wanted"),
    [("a", "a"), ("a", "a/b"), ("a/b", "a"), ("a/b/c", "a"), ("a", "a/b/c/d")],
)
def test_overlaps(tmp: Path, held: str, wanted: str) -> None:
    store = LeaseStore(tmp / "leases")
    store.acquire(tmp / held, "holder", owner=ProcessId.current())
    other = _other_live_process()
    try:
        with pytest.raises(LeaseConflict) as ei:
            store.acquire(tmp / wanted, "wanter", owner=ProcessId.of(other.pid))
        assert "holder" in str(ei.value) and "alive" in str(ei.value)
    finally:
        other.kill()
        other.wait()


def test_overlaps_function() -> None:
    assert overlaps("/a", "/a")
    assert overlaps("/a", "/a/b") and overlaps("/a/b", "/a")
    assert not overlaps("/a", "/ab") and not overlaps("/ab", "/a")
    assert not overlaps("/a/b", "/a/c")
    assert overlaps("/", "/anything")


def test_symlinked_path_is_the_same_path(tmp: Path) -> None:
    (tmp / "real").mkdir()
    (tmp / "link").symlink_to(tmp / "real")
    store = LeaseStore(tmp / "leases")
    store.acquire(tmp / "real", "t1")
    other = _other_live_process()
    try:
        with pytest.raises(LeaseConflict):
            store.acquire(tmp / "link" / "sub", "t2", owner=ProcessId.of(other.pid))
    finally:
        other.kill()
        other.wait()


def _other_live_process():  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _dead_process_id() -> ProcessId:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pid = ProcessId.of(p.pid)
    p.kill()
    p.wait()
    return pid


def test_same_owner_reacquiring_its_own_path_is_fine(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    store.acquire(tmp / "a", "t1")
    store.acquire(tmp / "a", "t1")
    assert len(store.all()) == 1


def test_dead_owner_is_reported_stale_and_stolen_only_with_steal_dead(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    dead = _dead_process_id()
    store.acquire(tmp / "wt", "old", owner=dead)
    held = store.get(tmp / "wt")
    assert held is not None and not held.owner_alive
    with pytest.raises(LeaseConflict) as ei:
        store.acquire(tmp / "wt" / "inner", "new")
    assert "dead" in str(ei.value) and "stale" in str(ei.value)
    assert ei.value.held.task == "old"
    assert "doctor" in (ei.value.hint or "")
    new = store.acquire(tmp / "wt" / "inner", "new", steal_dead=True)
    assert [lease.task for lease in store.all()] == ["new"]
    assert new.owner == ProcessId.current()


def test_steal_dead_never_steals_from_a_live_owner(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    other = _other_live_process()
    try:
        store.acquire(tmp / "wt", "live", owner=ProcessId.of(other.pid))
        with pytest.raises(LeaseConflict):
            store.acquire(tmp / "wt", "thief", steal_dead=True)
        assert [lease.task for lease in store.all()] == ["live"]
    finally:
        other.kill()
        other.wait()


def test_pid_reuse_is_not_mistaken_for_the_owner(tmp: Path) -> None:
    """A live pid with another start time is a different process: the owner is dead."""
    me = ProcessId.current()
    impostor = ProcessId(me.pid, me.start_time - 1000.0)
    assert me.alive() and not impostor.alive()
    store = LeaseStore(tmp / "leases")
    store.acquire(tmp / "wt", "old", owner=impostor)
    assert store.acquire(tmp / "wt", "new", steal_dead=True).task == "new"


def test_corrupt_lease_is_quarantined_and_does_not_block_unrelated_paths(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    store.acquire(tmp / "good", "t1")
    bad = tmp / "leases" / ("f" * 32 + ".json")
    bad.write_bytes(b'{"version": 1, "path": ')  # truncated JSON
    wrong = tmp / "leases" / ("e" * 32 + ".json")
    wrong.write_text('{"version": 1, "path": 5, "owner": {"pid": "x"}}')
    lease = store.acquire(tmp / "unrelated", "t2")
    assert lease.task == "t2"
    assert not bad.exists() and not wrong.exists()
    quarantined = sorted(p.name for p in (tmp / "leases").iterdir() if ".corrupt-" in p.name)
    assert len(quarantined) == 2
    assert any(q.startswith("f" * 32 + ".json.corrupt-") for q in quarantined)
    # the bytes are kept for a person
    kept = next(
        p for p in (tmp / "leases").iterdir() if p.name.startswith("f" * 32 + ".json.corrupt-")
    )
    assert kept.read_bytes() == b'{"version": 1, "path": '
    assert {x.task for x in store.all()} == {"t1", "t2"}


def test_release_only_by_the_owner(tmp: Path) -> None:
    store = LeaseStore(tmp / "leases")
    mine = store.acquire(tmp / "wt", "t1")
    dead = _dead_process_id()
    from dataclasses import replace

    assert store.release(replace(mine, owner=dead)) is False
    assert store.get(tmp / "wt") is not None
    assert store.release(mine) is True
    assert store.get(tmp / "wt") is None
    assert store.release(mine) is False


def test_lease_file_records_owner_identity(tmp: Path) -> None:
    import json

    store = LeaseStore(tmp / "leases")
    store.acquire(tmp / "wt", "t1", extra={"k": "v"})
    files = list((tmp / "leases").glob("*.json"))
    assert len(files) == 1
    raw = json.loads(files[0].read_text())
    assert raw["owner"]["pid"] == os.getpid()
    assert abs(raw["owner"]["start_time"] - ProcessId.current().start_time) < 0.01
    assert (
        raw["path"] == canonical(tmp / "wt") and raw["task"] == "t1" and raw["extra"] == {"k": "v"}
    )
    assert raw["acquired_at"] <= time.time()


def test_an_exited_process_its_parent_has_not_collected_is_not_alive() -> None:
    # a detached supervisor that died stays a zombie until init collects it; it holds nothing
    import subprocess

    from gitsup.host.procid import pid_alive

    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not pid_alive(child.pid)  # exited, not yet reaped: a zombie
        assert ProcessId.of(child.pid).alive() is False
        assert pid_alive(os.getpid())
    finally:
        child.wait()
    assert not pid_alive(child.pid)


def test_doctor_lists_quarantined_lease_files(repo: Path) -> None:
    """An unreadable lease file is set aside, and `git sup doctor` says so (it never
    removes it: which worktree it held is for a person to find out)."""
    import json

    from tests.conftest import run_sup
    from tests.helpers.sup import common_dir

    assert run_sup(repo, "init").returncode == 0
    leases = common_dir(repo) / "sup" / "leases"
    leases.mkdir(parents=True, exist_ok=True)
    (leases / "abc.json").write_text("{not json")
    res = run_sup(repo, "doctor", "--fix", "--json")
    assert res.returncode == 0, res.stderr
    found = [f for f in json.loads(res.stdout) if f["kind"] == "quarantined-lease"]
    kept = list(leases.glob("abc.json.corrupt-*"))
    assert len(kept) == 1 and not (leases / "abc.json").exists()
    assert len(found) == 1 and str(kept[0]) in found[0]["detail"] and found[0]["fixed"] is None
    res = run_sup(repo, "doctor")
    assert "quarantined-lease" in res.stdout and kept[0].exists()


def test_a_start_time_a_whole_second_off_is_the_same_process() -> None:
    # the kernel's boot time is whole seconds and moves when the clock is adjusted: the same
    # live process then reads a start time a whole second off; pid reuse is any amount off
    from gitsup.host.procid import same_start

    me = ProcessId.current()
    assert ProcessId(me.pid, me.start_time - 1.0).alive()
    assert ProcessId(me.pid, me.start_time + 2.0).alive()
    assert not ProcessId(me.pid, me.start_time - 0.5).alive()
    assert not ProcessId(me.pid, me.start_time + 3.0).alive()
    assert same_start(100.0, 101.004) and same_start(100.0, 99.0)
    assert not same_start(100.0, 100.3) and not same_start(100.0, 103.0)
