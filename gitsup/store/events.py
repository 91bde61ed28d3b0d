"""The per-task event log: an append-only JSONL write-ahead log, sealed into Git.

Records are `{seq, ts, task, type, data}`. `seq` is strictly increasing even
with several processes appending: each append takes an exclusive `flock` on
the log and reads only its tail to learn the last seq, so an append costs
O(1) in the size of the log. A torn last line (a writer killed mid-write) is
moved aside to `events.torn` and cut off before the next append.
Credential-shaped strings are redacted; one record is capped in size.

Sealing writes the events since the last seal as one segment blob in a new
commit on `refs/sup/<id>/log` (see `seal`). The seal position lives in the
sealed commit's message, so a crash between writing the commit and anything
else can never seal the same events twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitsup import jsonio
from gitsup.errors import GitsupError
from gitsup.faults import append_fault, fault
from gitsup.git import GitRepo
from gitsup.ids import Oid, TaskId
from gitsup.layout import task_refs
from gitsup.redact import Redacted, needs_redaction, redact
from gitsup.store import eventtypes  # noqa: F401 (registers every payload class)
from gitsup.store.payload import REGISTRY, Payload, PayloadError, Seq, Untyped, payload_of

# Every type with a payload class; other types are kept as they are. The classes register
# themselves in REGISTRY when gitsup/store/eventtypes.py is imported, which the import above
# makes sure of wherever the log is read or written.
EVENT_TYPES = frozenset(REGISTRY)

_TAIL_BLOCK = 64 * 1024
# json.dumps(obj, separators=(",", ":"), default=str), prebuilt (the event append runs for every
# worker record). Event data comes from JSON or from gitsup's own dicts.
_dumps = jsonio.compact_encoder(ensure_ascii=True, default=str)


_SEAL_TRAILER = re.compile(r"^Sup-Sealed: seq=(\d+) offset=(\d+)(?: file=(\d+))?$", re.M)


@dataclass(frozen=True)
class Event:
    """One record of the log. `data` is the record's data as written; `payload` reads it as
    its type's payload class (`Untyped` for a type without one or a record that does not fit)."""

    seq: Seq
    ts: float
    task: TaskId
    type: str
    data: dict[str, Any]
    # the worker the record belongs to: the task's spawn number when written (0 before
    # its first worker); None in a record written without one (older logs, other writers)
    worker: int | None = None

    @property
    def payload(self) -> Payload:
        return payload_of(self.type, self.data)

    def as_dict(self) -> dict[str, Any]:
        if self.worker is None:
            return {
                "seq": self.seq,
                "ts": self.ts,
                "task": self.task,
                "type": self.type,
                "data": self.data,
            }
        return {
            "seq": self.seq,
            "ts": self.ts,
            "task": self.task,
            "worker": self.worker,
            "type": self.type,
            "data": self.data,
        }


_new_event = object.__new__
# The append's system calls and clock, bound once (it runs for every worker record).
_flock, _LOCK_EX, _LOCK_UN = fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN
_lseek, _SEEK_END, _os_write = os.lseek, os.SEEK_END, os.write
_time_ns = time.time_ns


def _cap(data: dict[str, Any], limit: int) -> dict[str, Any]:
    """Shrink the longest strings of `data` so its JSON fits in about `limit` bytes."""
    budget = max(256, limit // 2)
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, str) and len(v) > budget // max(1, len(data)):
            keep = max(64, budget // max(1, len(data)))
            out[k] = v[:keep] + f"… [{len(v) - keep} chars cut]"
        elif isinstance(v, dict | list) and len(json.dumps(v, default=str)) > budget:
            out[k] = "[cut: too large]"
        else:
            out[k] = v
    out["_truncated"] = True
    if len(json.dumps(out, separators=(",", ":"), default=str)) > limit:
        # Too many keys for per-value cuts to help: keep only what the record was.
        keys = [str(k)[:40] for k in list(data)[:10]]
        out = {"_truncated": True, "_cut": f"{len(data)} keys over the size cap", "keys": keys}
    return out


class EventLog:
    def __init__(
        self,
        path: Path,
        task: TaskId,
        *,
        max_record_bytes: int = 64 * 1024,
        rotate_bytes: int = 64 * 1024 * 1024,
        keep_files: int = 5,
    ) -> None:
        self.path = path
        self.task = task
        self.max_record_bytes = max_record_bytes
        self.rotate_bytes = rotate_bytes
        self.keep_files = keep_files
        self._fd: int | None = None
        self._known_seq: int | None = None  # seq and file size right after our last append
        self._known_size = -1
        self.last_bytes = 0  # the size of the record this log appended last
        self._locked_size = 0
        self._heads: dict[tuple[str, int | None], str] = {}
        # The spawn number every record this log writes carries (None: no `worker` key).
        self.worker: int | None = None

    # --- file handling ----------------------------------------------------------------

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def locked(self) -> Iterator[int]:
        """The log file, exclusively locked. If another process rotated the file while we
        waited for the lock, reopen the new one (the classic rotate-safe lock pattern)."""
        while True:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            self._locked_size = st.st_size
            if st.st_size == self._known_size:
                # Unchanged since our own last append: not rotated either, because a
                # rotation always appends a marker line to the file it renames away.
                break
            try:
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                current = -1
            if current == st.st_ino:
                break
            fcntl.flock(fd, fcntl.LOCK_UN)
            self.close()
            self._known_seq, self._known_size = None, -1
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def rotated(self) -> list[Path]:
        """Rotated files, oldest first (events.N.jsonl … events.1.jsonl)."""
        out = []
        for i in range(1, self.keep_files + 1):
            p = self.path.with_name(f"events.{i}.jsonl")
            if p.exists():
                out.append(p)
        return list(reversed(out))

    def _rotate(self) -> None:
        """Under the lock, right after a seal that covers the whole file. The marker line
        (not an event: no seq) tells other writers holding this file that it moved."""
        with open(self.path, "ab") as fh:
            fh.write(b'{"rotated":true}\n')
        for i in range(self.keep_files, 0, -1):
            src = self.path.with_name(f"events.{i}.jsonl")
            if src.exists():
                if i == self.keep_files:
                    src.unlink()
                else:
                    os.replace(src, self.path.with_name(f"events.{i + 1}.jsonl"))
        os.replace(self.path, self.path.with_name("events.1.jsonl"))
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))

    def _last_seq_and_repair(self, fd: int) -> int:
        """Read the tail (under the lock) and return the last seq; cut a torn last line."""
        size = os.fstat(fd).st_size
        if size == 0:
            return self._last_rotated_seq()
        if os.pread(fd, 1, size - 1) != b"\n":
            end = _rfind_newline(fd, size) + 1
            self._move_torn(fd, end, size)
            size = end
        pos, partial, block = size, b"", 4096
        while pos > 0:
            start = max(0, pos - block)
            block = min(block * 4, _TAIL_BLOCK)
            chunk = os.pread(fd, pos - start, start) + partial
            # Fast path: the last complete line is a well-formed record.
            nl = chunk.rfind(b"\n", 0, len(chunk) - 1)
            if nl >= 0 or start == 0:
                seq = _seq_of(chunk[nl + 1 :].rstrip(b"\n"))
                if seq is not None:
                    return seq
            lines = chunk.split(b"\n")
            pos = start
            partial = lines[0] if pos > 0 else b""
            for line in reversed(lines[1:] if pos > 0 else lines):
                if line:
                    seq = _seq_of(line)
                    if seq is not None:
                        return seq
        return 0

    def _last_rotated_seq(self) -> int:
        """After a rotation the current file is empty; seq goes on from the last file."""
        newest = self.path.with_name("events.1.jsonl")
        if not newest.exists():
            return 0
        with open(newest, "rb") as fh:
            fh.seek(max(0, newest.stat().st_size - _TAIL_BLOCK))
            lines = fh.read().rstrip(b"\n").split(b"\n")
        for line in reversed(lines):
            seq = _seq_of(line)
            if seq is not None:
                return seq
        return 0

    def _move_torn(self, fd: int, start: int, end: int) -> None:
        fragment = os.pread(fd, end - start, start)
        torn = self.path.with_name(self.path.name.replace(".jsonl", "") + ".torn")
        with open(torn, "ab") as fh:
            fh.write(fragment + b"\n")
        os.ftruncate(fd, start)

    # --- API --------------------------------------------------------------------------

    def append(self, payload: Payload) -> Event:
        """Append one event: its type and data are the payload's. A type with a payload
        class is written only through that class, never as `Untyped` data."""
        if isinstance(payload, Untyped) and payload.type in REGISTRY:
            raise PayloadError(f"{payload.type} has a payload class: {REGISTRY[payload.type]}")
        return self._append(payload.event_type, payload.to_data(), payload.PRE_REDACTED)

    def append_raw(self, type: str, data: Mapping[str, Any] | None = None) -> Event:
        """Append a record of `type` with `data` as given (the log's own mechanics; events
        are written with `append` and their payload class)."""
        return self._append(type, dict(data or {}), isinstance(data, Redacted))

    def _append(self, type: str, payload: dict[str, Any], screened: bool) -> Event:
        """Append `payload`, a dict of the caller's own; `screened`: redacted where it was read."""
        append_fault(type)
        body = _dumps(payload)
        if not screened and needs_redaction(body):
            payload = redact(payload)
            body = _dumps(payload)
        if len(body) > self.max_record_bytes:
            payload = _cap(payload, self.max_record_bytes)
            body = _dumps(payload)
        worker = self.worker
        head = self._heads.get((type, worker))
        if head is None:
            w = "" if worker is None else f',"worker":{int(worker)}'
            head = self._heads[(type, worker)] = (
                f',"task":{json.dumps(self.task)}{w},"type":{json.dumps(type)},"data":'
            )
        fd = self._fd
        seq = self._known_seq
        if fd is not None and seq is not None:
            # The common case, without the general lock loop of `locked()`: the file is the
            # one we last appended to and nobody wrote since (its size is ours, and a
            # rotation always appends a marker line to the file it renames away).
            _flock(fd, _LOCK_EX)
            try:
                size = _lseek(fd, 0, _SEEK_END)  # the file's size (appends ignore offsets)
                if size == self._known_size:
                    return self._write(fd, size, seq + 1, type, head, body, payload)
            finally:
                _flock(fd, _LOCK_UN)
        with self.locked() as fd:
            size = self._locked_size
            if size == self._known_size and self._known_seq is not None:
                # Nobody wrote since our own last append (we hold the lock): no tail read.
                seq = self._known_seq + 1
            else:
                seq = self._last_seq_and_repair(fd) + 1
                size = os.fstat(fd).st_size  # the repair may have cut a torn line
            return self._write(fd, size, seq, type, head, body, payload)

    def _write(
        self, fd: int, size: int, seq: int, type: str, head: str, body: str, payload: dict[str, Any]
    ) -> Event:
        """Append record `seq` to the locked file of `size` bytes."""
        # Under the lock: ts never goes back as seq goes up. Whole microseconds, written as
        # seconds with six decimals; as a float, the double nearest to the written number
        # (an exact integer divided by an exact power of ten rounds once, as parsing does).
        us = _time_ns() // 1000
        digits = str(us)
        if us < 1_000_000:  # pragma: no cover - a clock before 1970-01-01T00:00:01
            digits = f"{us // 1_000_000}{us % 1_000_000:06d}"
        line = f'{{"seq":{seq},"ts":{digits[:-6]}.{digits[-6:]}{head}{body}}}\n'.encode()
        written = _os_write(fd, line)
        # O_APPEND under our lock: the file is exactly `line` longer (a short write
        # would leave a torn line, repaired by the next append's tail read).
        self._known_seq = seq if written == len(line) else None
        self._known_size = size + written
        self.last_bytes = written
        # frozen: its fields set once, without the per-field setattr (as stream_json's
        # `_worker_output`)
        ev = _new_event(Event)
        fields = ev.__dict__
        fields["seq"] = seq
        fields["ts"] = us / 1e6
        fields["task"] = self.task
        fields["type"] = type
        fields["data"] = payload
        fields["worker"] = self.worker
        return ev

    def last_seq(self) -> int:
        with self.locked() as fd:
            return self._last_seq_and_repair(fd)

    def read(self, *, offset: int = 0) -> Iterator[Event]:
        """Every complete, well-formed record: the rotated files, then the current one
        from byte `offset` on (an offset applies to the current file only)."""
        files = ([] if offset else self.rotated()) + [self.path]
        for path in files:
            if not path.exists():
                continue
            with open(path, "rb") as fh:
                if path == self.path:
                    fh.seek(offset)
                for line in fh:
                    if not line.endswith(b"\n"):
                        break
                    ev = _parse(line)
                    if ev is not None:
                        yield ev

    def recent(self, nbytes: int = 1 << 20) -> list[Event]:
        """The complete records in the last `nbytes` of the current file (a record cut by
        the start is left out)."""
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            return []
        out = []
        with fh:
            start = max(0, os.fstat(fh.fileno()).st_size - nbytes)
            if start:
                fh.seek(start - 1)
                fh.readline()  # up to the end of the record the start cuts
            for line in fh:
                if not line.endswith(b"\n"):
                    break
                ev = _parse(line)
                if ev is not None:
                    out.append(ev)
        return out

    def count(self) -> int:
        return self.last_seq() if self.path.exists() else 0

    # --- sealing into Git -------------------------------------------------------------

    def size(self) -> int:
        """The current file's size (as of our last append when nobody wrote since)."""
        if self._known_size >= 0:
            return self._known_size
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def room(self) -> int:
        """What the current file can still take before it passes `rotate_bytes`, keeping
        one record of the largest size (`max_record_bytes` and its head) in reserve."""
        return self.rotate_bytes - self.size() - self.max_record_bytes - 512

    def seal(self, repo: GitRepo, reason: str, *, rotate: bool = False) -> Oid | None:
        """Seal the events since the last seal into `refs/sup/<id>/log`; `rotate`: then
        rotate the file (once all of it is sealed) however small it is.

        Returns the new log commit, or None when there was nothing new.
        """
        ref = task_refs(self.task)["log"]
        with self.locked() as fd:
            size = os.fstat(fd).st_size
            tip = repo.ref_target(ref)
            inode = os.fstat(fd).st_ino
            sealed_seq, sealed_offset = 0, 0
            if tip is not None:
                m = _SEAL_TRAILER.search(repo.commit_message(tip))
                if m is None:
                    raise GitsupError(
                        f"{ref} has a commit without a seal trailer; not sealing onto it"
                    )
                sealed_seq, sealed_offset = int(m.group(1)), int(m.group(2))
                if m.group(3) is not None and int(m.group(3)) != inode:
                    # The file was rotated after that seal (rotation happens only when
                    # everything in it is sealed): this file is new, seal it from 0.
                    sealed_offset = 0
            if sealed_offset > size:
                raise GitsupError(
                    f"{self.path} is shorter than what {ref} says was sealed; refusing to seal",
                    hint="the event log was truncated or replaced; `git sup doctor` reports it",
                )
            data = os.pread(fd, size - sealed_offset, sealed_offset)
            end = data.rfind(b"\n") + 1
            data = data[:end]
            if not data:
                self._maybe_rotate(size, sealed_offset, rotate)
                return None
            first = _seq_of(data.split(b"\n", 1)[0]) or sealed_seq + 1
            last = _seq_of(data.rstrip(b"\n").rsplit(b"\n", 1)[-1]) or first
            name = f"{first:09d}-{last:09d}.jsonl"
            message = (
                f"{reason}\n\nevents {first}..{last} of task {self.task}\n\n"
                f"Sup-Task: {self.task}\n"
                f"Sup-Sealed: seq={last} offset={sealed_offset + end} file={inode}\n"
            )
            fault("during_seal")
            commit = repo.append_segment(
                ref, name=name, data=data, message=message, expected_old=tip
            )
            self._maybe_rotate(size, sealed_offset + end, rotate)
            return commit

    def restore_sealed(self, repo: GitRepo, reason: str) -> int:
        """Rebuild this log, which must be absent or empty, from the sealed segments of
        `refs/sup/<id>/log` (fetched: the task ran in another clone), then record on that
        chain, in a commit that adds no segment, that everything in this file is sealed, so
        the next seal here continues the chain with the events appended after. Events the
        other clone never sealed are not there. Returns the last seq (0: nothing sealed)."""
        ref = task_refs(self.task)["log"]
        tip = repo.ref_target(ref)
        if tip is None:
            return 0
        with self.locked() as fd:
            if os.fstat(fd).st_size:
                raise GitsupError(f"{self.path} is not empty; not restoring it from {ref}")
            data = b"".join(
                blob for name, blob in repo.read_tree_blobs(tip) if name.endswith(".jsonl")
            )
            os.write(fd, data)
            size, inode = os.fstat(fd).st_size, os.fstat(fd).st_ino
            last = self._last_seq_and_repair(fd)
            message = (
                f"{reason}\n\nevents 1..{last} of task {self.task} restored from this log\n\n"
                f"Sup-Task: {self.task}\n"
                f"Sup-Sealed: seq={last} offset={size} file={inode}\n"
            )
            commit = repo.commit_tree(repo.tree_of(tip), [tip], message)
            repo.update_ref(ref, commit, old=tip, message=reason)
            self._known_seq, self._known_size = None, -1
        return last

    def _maybe_rotate(self, size: int, sealed_to: int, rotate: bool = False) -> None:
        if (rotate or size > self.rotate_bytes) and sealed_to == size and size > 0:
            self._rotate()
            self._known_seq, self._known_size = None, -1


def _rfind_newline(fd: int, size: int) -> int:
    pos = size
    while pos > 0:
        start = max(0, pos - _TAIL_BLOCK)
        i = os.pread(fd, pos - start, start).rfind(b"\n")
        if i >= 0:
            return start + i
        pos = start
    return -1


def _seq_of(line: bytes) -> int | None:
    # Fast path: records start with {"seq":N,
    if line.startswith(b'{"seq":'):
        end = line.find(b",", 7)
        if end > 7:
            with contextlib.suppress(ValueError):
                return int(line[7:end])
    ev = _parse(line)
    return ev.seq if ev else None


def _parse(line: bytes) -> Event | None:
    try:
        obj = jsonio.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("seq"), int):
        return None
    data = obj.get("data")
    worker = obj.get("worker")
    return Event(
        seq=Seq(obj["seq"]),
        ts=float(obj.get("ts", 0.0)),
        task=TaskId(str(obj.get("task", ""))),
        type=str(obj.get("type", "")),
        data=data if isinstance(data, dict) else {},
        worker=worker if isinstance(worker, int) and not isinstance(worker, bool) else None,
    )
