"""The event log: a JSONL write-ahead log with strictly increasing seqs under concurrent
writers, torn-line repair, redaction, a size cap per record, and sealing into Git that costs
O(new events) and can never seal the same events twice."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path

import pygit2
import pytest

from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.ids import TaskId
from gitsup.store.events import EventLog
from tests.conftest import git

TASK = TaskId("20260101-abcdef")
LOG_REF = f"refs/sup/{TASK}/log"


def _lines(path: Path) -> list[dict]:
    raw = path.read_bytes()
    assert raw == b"" or raw.endswith(b"\n")
    return [json.loads(line) for line in raw.splitlines()]


# --- concurrent appends -------------------------------------------------------------------


def _append_many(path: str, n: int, who: int, barrier: mp.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    barrier.wait()
    log = EventLog(Path(path), TASK)
    for i in range(n):
        # a new EventLog now and then: appends must not depend on one open file description
        if i % 97 == 0:
            log.close()
            log = EventLog(Path(path), TASK)
        log.append_raw("worker_output", {"who": who, "i": i, "text": "x" * (i % 50)})
    log.close()


def test_concurrent_appends_from_8_processes_get_seqs_1_to_4000(tmp: Path) -> None:
    path = tmp / "events.jsonl"
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(8)
    procs = [ctx.Process(target=_append_many, args=(str(path), 500, w, barrier)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    recs = _lines(path)
    seqs = [r["seq"] for r in recs]
    assert seqs == list(range(1, 4001))  # in file order, no gap, no duplicate
    # every writer's own events are in its own order, and all are there
    for w in range(8):
        mine = [r["data"]["i"] for r in recs if r["data"]["who"] == w]
        assert mine == list(range(500))
    ts = [r["ts"] for r in recs]
    assert ts == sorted(ts)  # time never goes back as seq goes up
    assert EventLog(path, TASK).last_seq() == 4000
    assert not (tmp / "events.torn").exists()


def test_append_returns_what_was_written(tmp: Path) -> None:
    log = EventLog(tmp / "events.jsonl", TASK)
    evs = [log.append_raw("decision", {"n": n, "nested": {"a": [1, 2]}}) for n in range(3)]
    assert [e.as_dict() for e in log.read()] == [e.as_dict() for e in evs]
    assert [e.seq for e in evs] == [1, 2, 3]
    assert log.count() == 3


# --- torn lines ----------------------------------------------------------------------------


def test_torn_last_line_is_moved_aside_and_appends_continue(tmp: Path) -> None:
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    for n in range(3):
        log.append_raw("decision", {"n": n})
    log.close()
    fragment = b'{"seq":4,"ts":1.0,"task":"' + TASK.encode() + b'","type":"dec'
    with open(path, "ab") as fh:
        fh.write(fragment)  # a writer killed mid-line
    # a reader never yields the fragment
    assert [e.seq for e in EventLog(path, TASK).read()] == [1, 2, 3]
    log = EventLog(path, TASK)
    ev = log.append_raw("decision", {"n": 3})
    assert ev.seq == 4
    assert (tmp / "events.torn").read_bytes() == fragment + b"\n"
    assert [r["seq"] for r in _lines(path)] == [1, 2, 3, 4]
    assert log.append_raw("decision", {}).seq == 5
    assert (tmp / "events.torn").read_bytes() == fragment + b"\n"  # moved once


def test_log_that_is_only_a_fragment(tmp: Path) -> None:
    path = tmp / "events.jsonl"
    path.write_bytes(b'{"seq":1,"ts":1.0,"ta')
    log = EventLog(path, TASK)
    assert log.last_seq() == 0
    assert log.append_raw("decision", {}).seq == 1
    assert (tmp / "events.torn").read_bytes() == b'{"seq":1,"ts":1.0,"ta\n'
    assert [r["seq"] for r in _lines(path)] == [1]


def test_garbage_complete_last_line_does_not_reset_seq(tmp: Path) -> None:
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    log.append_raw("decision", {})
    log.append_raw("decision", {})
    with open(path, "ab") as fh:
        fh.write(b"not json at all\n")
    assert log.append_raw("decision", {}).seq == 3
    assert [e.seq for e in log.read()] == [1, 2, 3]


def test_last_seq_found_behind_a_long_last_record(tmp: Path) -> None:
    """The tail scan reads blocks backwards; a last line longer than one block still works."""
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK, max_record_bytes=1024 * 1024)
    log.append_raw("decision", {})
    log.append_raw("worker_output", {"text": "y" * 300_000})
    assert log.append_raw("decision", {}).seq == 3
    assert EventLog(path, TASK).last_seq() == 3


# --- redaction and size cap -----------------------------------------------------------------

SECRETS = {
    "anthropic": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "github": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "password": "hunter2hunter2",
    "url_pw": "s3cr3tpw99",
}


def test_credentials_are_redacted_before_they_reach_the_file(tmp: Path) -> None:
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    ev = log.append_raw(
        "worker_output",
        {
            "text": f"export ANTHROPIC_API_KEY={SECRETS['anthropic']} then push with {SECRETS['github']}",
            "cmd": f"mysql -u root password={SECRETS['password']}",
            "nested": {
                "list": [f"git clone https://bob:{SECRETS['url_pw']}@example.invalid/r.git"]
            },
            "api_key": "short1",
        },
    )
    raw = path.read_text()
    for s in SECRETS.values():
        assert s not in raw
        assert s not in json.dumps(ev.as_dict())
    assert "short1" not in raw
    assert raw.count("[REDACTED]") >= 5
    # what is not a secret stays readable
    data = _lines(path)[0]["data"]
    assert data["cmd"].startswith("mysql -u root password=")
    assert "example.invalid/r.git" in data["nested"]["list"][0]


@pytest.mark.parametrize(
    "data",
    [
        {"text": "z" * 200_000},
        {"a": "z" * 50_000, "b": "q" * 50_000, "c": 1},
        {f"k{i}": "v" * 100 for i in range(2000)},  # many medium strings
        {f"k{i}": i for i in range(20_000)},  # many small values
        {"list": ["w" * 10] * 20_000},
        {"deep": {"deeper": {"text": "d" * 100_000}}},
    ],
    ids=["one_long", "two_long", "many_keys", "many_ints", "long_list", "nested"],
)
def test_record_size_is_capped(tmp: Path, data: dict) -> None:
    cap = 4096
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK, max_record_bytes=cap)
    ev = log.append_raw("worker_output", data)
    line = path.read_bytes()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    rec = json.loads(line)
    assert len(json.dumps(rec["data"], separators=(",", ":"))) <= cap, len(line)
    assert len(line) <= cap + 200
    assert rec["data"].get("_truncated") is True
    assert ev.seq == 1
    assert log.append_raw("decision", {"after": True}).seq == 2


def test_small_record_is_not_marked_truncated(tmp: Path) -> None:
    log = EventLog(tmp / "events.jsonl", TASK, max_record_bytes=4096)
    log.append_raw("decision", {"text": "fine"})
    assert "_truncated" not in _lines(tmp / "events.jsonl")[0]["data"]


# --- sealing -------------------------------------------------------------------------------


def _segments(repo_path: Path, commit: str | None = None) -> dict[str, bytes]:
    r = GitRepo.open(repo_path)
    tip = commit or r.ref_target(LOG_REF)
    assert tip is not None
    return dict(r.read_tree_blobs(tip))


def _chain(repo_path: Path) -> list[str]:
    out = git(repo_path, "rev-list", "--reverse", LOG_REF)
    return out.split() if out else []


def _new_segment(repo_path: Path, commit: str) -> tuple[str, bytes]:
    """The one blob a seal commit added compared to its parent."""
    r = pygit2.Repository(str(repo_path))
    c = r[commit]
    mine = {e.name: e.id for e in c.tree}
    theirs = {e.name: e.id for e in c.parents[0].tree} if c.parents else {}
    added = [n for n in mine if n not in theirs]
    assert len(added) == 1, added
    assert all(theirs[n] == mine[n] for n in theirs)  # earlier segments untouched
    return added[0], r[mine[added[0]]].data


def _seqs(blob: bytes) -> list[int]:
    return [json.loads(line)["seq"] for line in blob.splitlines()]


def test_each_seal_writes_only_the_events_since_the_last_seal(repo: Path, tmp: Path) -> None:
    r = GitRepo.open(repo)
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    for n in range(3):
        log.append_raw("decision", {"n": n})
    c1 = log.seal(r, "idle -> starting")
    for n in range(3, 7):
        log.append_raw("decision", {"n": n})
    c2 = log.seal(r, "starting -> running")
    log.append_raw("decision", {"n": 7})
    c3 = log.seal(r, "running -> waiting: turn completed")
    assert c1 and c2 and c3
    assert _chain(repo) == [c1, c2, c3]
    assert _new_segment(repo, c1)[0] == "000000001-000000003.jsonl"
    name2, blob2 = _new_segment(repo, c2)
    assert name2 == "000000004-000000007.jsonl" and _seqs(blob2) == [4, 5, 6, 7]
    _, blob3 = _new_segment(repo, c3)
    assert _seqs(blob3) == [8]
    # the segments, in order, are the WAL byte for byte
    segs = _segments(repo)
    assert b"".join(segs[k] for k in sorted(segs)) == path.read_bytes()
    # each commit says what it sealed, and git log reads as the lifecycle
    msg = git(repo, "log", "-1", "--format=%B", c2)
    assert msg.startswith("starting -> running")
    assert f"Sup-Sealed: seq=7 offset={len(b''.join(segs[k] for k in sorted(segs)[:2]))}" in msg
    subjects = git(repo, "log", "--format=%s", LOG_REF).splitlines()
    assert subjects == [
        "running -> waiting: turn completed",
        "starting -> running",
        "idle -> starting",
    ]


def test_sealing_reads_only_the_new_bytes(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = GitRepo.open(repo)
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    for n in range(2000):
        log.append_raw("worker_output", {"text": f"line {n} " + "p" * 200})
    log.seal(r, "first")
    big = path.stat().st_size
    assert big > 400_000
    log.append_raw("decision", {"last": True})
    new_bytes = path.stat().st_size - big
    read: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, off: int) -> bytes:
        data = real_pread(fd, n, off)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting_pread)
    c = log.seal(r, "second")
    monkeypatch.undo()
    assert c is not None
    assert sum(read) <= new_bytes + 4096, (sum(read), new_bytes)
    assert _seqs(_new_segment(repo, c)[1]) == [2001]


def _object_count(repo: Path) -> int:
    objs = repo / ".git" / "objects"
    return sum(1 for d in objs.iterdir() if len(d.name) == 2 for _ in d.iterdir())


def test_resealing_with_nothing_new_writes_nothing(repo: Path, tmp: Path) -> None:
    r = GitRepo.open(repo)
    log = EventLog(tmp / "events.jsonl", TASK)
    assert log.seal(r, "empty log") is None
    assert r.ref_target(LOG_REF) is None
    log.append_raw("decision", {})
    tip = log.seal(r, "one")
    before = _object_count(repo)
    assert log.seal(r, "again") is None
    assert EventLog(tmp / "events.jsonl", TASK).seal(r, "from another process") is None
    assert r.ref_target(LOG_REF) == tip
    assert _object_count(repo) == before


def test_a_torn_tail_is_not_sealed(repo: Path, tmp: Path) -> None:
    r = GitRepo.open(repo)
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    log.append_raw("decision", {})
    with open(path, "ab") as fh:
        fh.write(b'{"seq":2,"ts":1,"ta')
    c = log.seal(r, "with torn tail")
    assert c is not None
    assert _seqs(_new_segment(repo, c)[1]) == [1]
    log.append_raw("decision", {})  # repairs the tail: seq 2
    c2 = log.seal(r, "after repair")
    assert c2 is not None
    assert _seqs(_new_segment(repo, c2)[1]) == [2]


def test_crash_after_writing_objects_before_moving_the_ref_does_not_double_seal(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = GitRepo.open(repo)
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    log.append_raw("decision", {"n": 1})
    log.seal(r, "first")
    log.append_raw("decision", {"n": 2})
    log.append_raw("decision", {"n": 3})

    class Crash(Exception):
        pass

    def crash(*a: object, **k: object) -> None:
        raise Crash("killed between the commit and the ref update")

    monkeypatch.setattr(GitRepo, "update_ref", crash)
    with pytest.raises(Crash):
        log.seal(r, "second (crashes)")
    monkeypatch.undo()
    log.close()
    # a new process picks up: the seal position comes from the ref's trailer
    log2 = EventLog(path, TASK)
    c = log2.seal(r, "second (retried)")
    assert c is not None
    assert _seqs(_new_segment(repo, c)[1]) == [2, 3]
    assert log2.seal(r, "third") is None
    all_seqs = [s for k, v in sorted(_segments(repo).items()) for s in _seqs(v)]
    assert all_seqs == [1, 2, 3]


def test_seal_position_comes_from_the_commit_trailer(repo: Path, tmp: Path) -> None:
    """Whatever a process remembers, the next seal starts where the ref's trailer says."""
    r = GitRepo.open(repo)
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    for n in range(4):
        log.append_raw("decision", {"n": n})
    offset_after_2 = len(b"".join(path.read_bytes().splitlines(keepends=True)[:2]))
    # a seal commit written by "someone else" that covered events 1..2
    first_two = path.read_bytes()[:offset_after_2]
    r.append_segment(
        LOG_REF,
        name="000000001-000000002.jsonl",
        data=first_two,
        message=f"manual\n\nSup-Task: {TASK}\nSup-Sealed: seq=2 offset={offset_after_2}\n",
        expected_old=None,
    )
    c = log.seal(r, "next")
    assert c is not None
    assert _seqs(_new_segment(repo, c)[1]) == [3, 4]


def test_seal_refuses_a_log_shorter_than_what_was_sealed(repo: Path, tmp: Path) -> None:
    r = GitRepo.open(repo)
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    for n in range(3):
        log.append_raw("decision", {"n": n})
    tip = log.seal(r, "sealed")
    log.close()
    path.write_bytes(b"")  # the WAL was replaced
    with pytest.raises(GitsupError, match="shorter"):
        EventLog(path, TASK).seal(r, "again")
    assert r.ref_target(LOG_REF) == tip


def test_seal_refuses_a_foreign_commit_on_the_log_ref(repo: Path, tmp: Path) -> None:
    r = GitRepo.open(repo)
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", LOG_REF, head)
    log = EventLog(tmp / "events.jsonl", TASK)
    log.append_raw("decision", {})
    with pytest.raises(GitsupError, match="trailer"):
        log.seal(r, "x")
    assert r.ref_target(LOG_REF) == head


def _append_and_seal(path: str, repo: str, who: int, barrier: mp.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    r = GitRepo.open(repo)
    barrier.wait()
    log = EventLog(Path(path), TASK)
    for i in range(120):
        log.append_raw("decision", {"who": who, "i": i})
        if i % 15 == who % 15:
            log.seal(r, f"seal by {who} at {i}")
    log.seal(r, f"final by {who}")


def test_concurrent_sealers_partition_the_log_exactly(repo: Path, tmp: Path) -> None:
    path = tmp / "events.jsonl"
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(4)
    procs = [
        ctx.Process(target=_append_and_seal, args=(str(path), str(repo), w, barrier))
        for w in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    chain = _chain(repo)
    seen: list[int] = []
    for c in chain:
        seen += _seqs(_new_segment(repo, c)[1])
    assert seen == list(range(1, 481))
    segs = _segments(repo)
    assert b"".join(segs[k] for k in sorted(segs)) == path.read_bytes()
    assert len(git(repo, "fsck", "--no-dangling", "--connectivity-only")) == 0


def _append_seal_rotate(path: str, repo: str, who: int, barrier: mp.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    r = GitRepo.open(repo)
    barrier.wait()
    log = EventLog(Path(path), TASK, rotate_bytes=8 * 1024, keep_files=50)
    for i in range(150):
        log.append_raw("decision", {"who": who, "i": i, "pad": "r" * 40})
        if i % 10 == who % 10:
            log.seal(r, f"seal by {who} at {i}")
    log.seal(r, f"final by {who}")


def test_concurrent_appends_seals_and_rotations_lose_nothing(repo: Path, tmp: Path) -> None:
    path = tmp / "events.jsonl"
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(4)
    procs = [
        ctx.Process(target=_append_seal_rotate, args=(str(path), str(repo), w, barrier))
        for w in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    log = EventLog(path, TASK, rotate_bytes=8 * 1024, keep_files=50)
    assert len(log.rotated()) >= 3  # it did rotate, several times
    assert [e.seq for e in log.read()] == list(range(1, 601))
    sealed: list[int] = []
    for c in _chain(repo):
        sealed += _seqs(_new_segment(repo, c)[1])
    assert sealed == list(range(1, 601))
    assert log.append_raw("decision", {}).seq == 601


def test_a_record_is_written_as_the_standard_encoder_writes_it(tmp: Path) -> None:
    """The append's prebuilt encoder writes what json's compact encoder writes (non-ASCII
    escaped, odd values through str), with `ts` as round(time, 6) and the same number in the
    line; a payload that contains itself fails instead of looping."""
    data = {
        "text": 'é ✓ \x00 "q" \\',
        "n": [1, 2.5, -0.0, 10**30, None, True, False, float("inf")],
        "nested": {"k": {"deeper": []}, "when": Path("/x")},
        7: "int key",
    }
    with EventLog(tmp / "events.jsonl", TASK) as log:
        ev = log.append_raw("x", data)
    line = (tmp / "events.jsonl").read_text().rstrip("\n")
    expected = json.JSONEncoder(separators=(",", ":"), default=str).encode(data)
    assert line.endswith(f',"task":"{TASK}","type":"x","data":{expected}}}')
    assert ev.ts == round(ev.ts, 6) and f'"ts":{ev.ts:.6f},' in line
    assert [e.ts for e in EventLog(tmp / "events.jsonl", TASK).read()] == [ev.ts]
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    with EventLog(tmp / "events.jsonl", TASK) as log, pytest.raises(RecursionError):
        log.append_raw("x", cyclic)
    assert len(_lines(tmp / "events.jsonl")) == 1  # nothing half-written
