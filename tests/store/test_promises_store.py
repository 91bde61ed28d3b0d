"""Task store promises a mutation run of gitsup/store/records.py showed untested in-process: a record
reads back as saved, every unreadable record is a one-line refusal naming it (unknown, corrupt,
newer, invalid), listings skip what cannot be read, and the task lock excludes other processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gitsup.errors import GitsupError
from gitsup.layout import Layout
from gitsup.state import State, Status
from gitsup.store.record import TaskRecord
from gitsup.store.records import TaskStore


def _store(tmp: Path) -> TaskStore:
    return TaskStore(Layout(tmp / "common"))


def test_a_record_reads_back_as_saved(tmp: Path) -> None:
    store = _store(tmp)
    tid = store.create()
    assert store.layout.task_dir(tid).is_dir() and not store.exists(tid)
    rec = TaskRecord(id=tid, goal="g", state=State.RUNNING, status=Status.PENDING)
    store.save(rec)
    assert store.exists(tid)
    got = store.load(tid)
    assert got == rec and got.updated_at > 0
    assert [r.id for r in store.iter_records()] == [tid]
    assert [r["id"] for r in store.iter_raw()] == [tid]
    assert json.loads(store.layout.record(tid).read_text())["goal"] == "g"


def test_unreadable_records_are_refused_by_name(tmp: Path) -> None:
    store = _store(tmp)
    good, corrupt, newer, invalid = (store.create() for _ in range(4))
    store.save(TaskRecord(id=good))
    with pytest.raises(GitsupError) as ei:
        store.load("20200101-000000")
    assert ei.value.message == "no task 20200101-000000 in this repository"
    assert ei.value.hint == "`git sup ls` lists the tasks"
    with pytest.raises(GitsupError):
        store.load("../../etc")

    store.layout.record(corrupt).write_text("{not json")
    with pytest.raises(GitsupError, match=r"task record .*task\.json is corrupt"):
        store.load(corrupt)
    store.layout.record(newer).write_text(json.dumps({"id": newer, "version": 99}))
    with pytest.raises(GitsupError) as ei:
        store.load(newer)
    assert ei.value.message == f"task {newer} was written by a newer gitsup (record version 99)"
    assert ei.value.hint == "upgrade gitsup"
    store.layout.record(invalid).write_text(json.dumps({"id": invalid, "state": "dancing"}))
    with pytest.raises(GitsupError, match=r"task record .*task\.json is invalid: "):
        store.load(invalid)

    # listings skip what cannot be read (and raw listings what has no id)
    assert [r.id for r in store.iter_records()] == [good]
    assert sorted(r["id"] for r in store.iter_raw()) == sorted([good, newer, invalid])
    (store.layout.tasks / "20200101-aaaaaa").mkdir()
    (store.layout.tasks / "20200101-aaaaaa" / "task.json").write_text('["no", "id"]')
    (store.layout.tasks / "stray-file").write_text("x")
    assert sorted(r["id"] for r in store.iter_raw()) == sorted([good, newer, invalid])
    assert store.ids() == sorted([good, corrupt, newer, invalid, "20200101-aaaaaa"])


def test_records_over_64kib_are_read_whole(tmp: Path) -> None:
    """The listing reads a record in one system call when it can: a bigger one (a long goal,
    many reasons) is read on to its end, at the size of that first read and past it."""
    store = _store(tmp)
    big = store.create()
    rec = TaskRecord(id=big, goal="g" * 200_000, reasons=[f"reason {i}" for i in range(2000)])
    store.save(rec)
    assert store.layout.record(big).stat().st_size > 1 << 17
    assert store.load(big) == rec
    (raw,) = store.iter_raw()
    assert raw["goal"] == rec.goal and raw["reasons"] == rec.reasons
    text = store.layout.record(big).read_text()
    for size in ((1 << 16) - 1, 1 << 16, (1 << 16) + 1):
        trimmed = json.loads(text) | {"goal": "", "reasons": []}
        short = json.dumps(trimmed)
        # the JSON text padded to `size` bytes by the goal, then read back by the listing
        trimmed["goal"] = "x" * (size - len(short.encode()))
        store.layout.record(big).write_text(json.dumps(trimmed))
        assert store.layout.record(big).stat().st_size == size
        (raw,) = store.iter_raw()
        assert raw["goal"] == trimmed["goal"], size


def test_empty_store_lists_nothing(tmp: Path) -> None:
    store = _store(tmp)
    assert store.ids() == [] and list(store.iter_raw()) == [] and list(store.iter_records()) == []


LOCKER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(3)
sys.exit(0)
"""


def test_the_task_lock_excludes_other_processes_until_released(tmp: Path) -> None:
    store = _store(tmp)
    tid = store.create()
    lock = store.lock(tid)
    assert lock.path == store.layout.task_dir(tid) / "lock"

    def other_can_lock() -> bool:
        res = subprocess.run([sys.executable, "-c", LOCKER, str(lock.path)], timeout=60)
        assert res.returncode in (0, 3)
        return res.returncode == 0

    with lock:
        assert lock.path.exists()
        assert not other_can_lock()
    assert other_can_lock()
    with lock:  # re-entered after release
        assert not other_can_lock()
    # a lock whose task directory does not exist yet creates it
    fresh = store.lock(tid.__class__("20200101-bbbbbb"))
    with fresh:
        assert fresh.path.exists()
