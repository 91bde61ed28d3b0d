"""Event log rotation: only after a seal covers the whole file; seq goes on; nothing sealed twice."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gitsup.git import GitRepo
from gitsup.ids import TaskId
from gitsup.store.events import EventLog
from tests.conftest import git

TASK = TaskId("20260101-a1b2c3")


def test_rotation_keeps_seq_and_seals_each_event_once(repo: Path, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, TASK, rotate_bytes=2000, keep_files=2)
    r = GitRepo.discover(repo)
    for round_ in range(5):
        for i in range(20):
            log.append_raw("worker_output", {"text": f"r{round_} line {i} " + "x" * 40})
        log.seal(r, f"round {round_}")
    # rotated: the current file is small, two rotated files are kept, older ones dropped
    assert path.stat().st_size < 2000
    assert [p.name for p in log.rotated()] == ["events.2.jsonl", "events.1.jsonl"]
    log.append_raw("task_finished", {})
    assert log.last_seq() == 101
    seqs = [e.seq for e in log.read()]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs)) and seqs[-1] == 101
    log.seal(r, "end")
    # every event is sealed exactly once, in order, across rotations
    sealed: list[int] = []
    tip = git(repo, "rev-parse", f"refs/sup/{TASK}/log")
    for name in git(repo, "ls-tree", "--name-only", tip).splitlines():
        blob = git(repo, "show", f"{tip}:{name}")
        sealed += [json.loads(line)["seq"] for line in blob.splitlines()]
    assert sealed == list(range(1, 102))
    trailers = re.findall(r"Sup-Sealed: seq=(\d+)", git(repo, "log", "--format=%B", tip))
    assert len(trailers) == len(set(trailers))


def test_no_rotation_while_unsealed(repo: Path, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, TASK, rotate_bytes=1000, keep_files=3)
    for i in range(50):
        log.append_raw("worker_output", {"text": "y" * 50, "i": i})
    assert log.rotated() == []  # appends never rotate; only a complete seal does
    assert path.stat().st_size > 1000
    log.seal(GitRepo.discover(repo), "seal")
    assert len(log.rotated()) == 1 and path.stat().st_size == 0
    other = EventLog(path, TASK)  # another process's view continues the seq
    assert other.append_raw("x").seq == 51
