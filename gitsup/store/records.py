"""Task directories under `$GIT_COMMON_DIR/sup/tasks/`: create, load, save, list.

Models (pydantic) are imported only when a record is loaded or saved, so a listing
(`iter_raw`) costs neither the import nor the validation.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitsup import jsonio
from gitsup.errors import GitsupError
from gitsup.host.fsutil import atomic_write
from gitsup.ids import TaskId, is_task_id, new_task_id, parse_task_id
from gitsup.layout import Layout
from gitsup.names import RECORD_FILE

if TYPE_CHECKING:
    from gitsup.spec import TaskSpec
    from gitsup.store.record import TaskRecord

# As `git rev-parse` takes abbreviated SHAs: a prefix this long at least, unique.
MIN_ID_PREFIX = 4
_PREFIX_RE = re.compile(r"[0-9a-f-]+")


class TaskStore:
    """Task directories under `$GIT_COMMON_DIR/sup/tasks/`."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def create(self, task: TaskId | None = None) -> TaskId:
        """A new task's directory: under a fresh id, or under `task` (a cluster task, whose
        id its submitter chose) when no task of that id exists here."""
        self.layout.ensure()
        if task is not None:
            try:
                self.layout.task_dir(task).mkdir()
            except FileExistsError:
                raise GitsupError(f"task {task} already exists in this repository") from None
            return task
        for _ in range(64):
            tid = new_task_id()
            try:
                self.layout.task_dir(tid).mkdir()
            except FileExistsError:
                continue
            return tid
        raise GitsupError("could not allocate a unique task id")

    def exists(self, task: TaskId) -> bool:
        return self.layout.record(task).exists()

    def load(self, task: str) -> TaskRecord:
        from pydantic import ValidationError

        from gitsup.store.record import RECORD_VERSION, TaskRecord

        tid = parse_task_id(task)
        path = self.layout.record(tid)
        try:
            raw = jsonio.loads(path.read_bytes())
        except FileNotFoundError:
            raise GitsupError(
                f"no task {task} in this repository", hint="`git sup ls` lists the tasks"
            ) from None
        except ValueError as exc:
            raise GitsupError(f"task record {path} is corrupt: {exc}") from None
        if isinstance(raw, dict) and int(raw.get("version", 1)) > RECORD_VERSION:
            raise GitsupError(
                f"task {task} was written by a newer gitsup (record version {raw['version']})",
                hint="upgrade gitsup",
            )
        try:
            return TaskRecord.model_validate(raw)
        except ValidationError as exc:
            raise GitsupError(f"task record {path} is invalid: {exc.errors()[0]['msg']}") from None

    def load_spec(self, task: TaskId) -> TaskSpec:
        """The task's spec (`Layout.spec`). OSError when it is absent, ValueError when it
        does not validate."""
        from gitsup.spec import TaskSpec

        return TaskSpec.model_validate_json(self.layout.spec(task).read_bytes())

    def save_spec(self, task: TaskId, spec: TaskSpec) -> None:
        self.layout.spec(task).write_text(spec.model_dump_json(indent=1))

    def save(self, record: TaskRecord) -> None:
        _write(self.layout.record(TaskId(record.id)), record)

    def stage_final(self, record: TaskRecord) -> None:
        """Write the terminal `record` beside the record; `commit_final` makes it the record."""
        _write(self.layout.final_record(TaskId(record.id)), record)

    def commit_final(self, task: TaskId) -> None:
        os.replace(self.layout.final_record(task), self.layout.record(task))

    def staged_final(self, task: TaskId) -> TaskRecord | None:
        """The terminal record a supervisor staged and did not commit (it died in between)."""
        from gitsup.store.record import TaskRecord

        try:
            return TaskRecord.model_validate_json(self.layout.final_record(task).read_bytes())
        except FileNotFoundError:
            return None
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise GitsupError(f"staged task record of {task} is invalid: {exc}") from None

    def resolve(self, value: str) -> TaskId:
        """The task `value` names: its id, a unique prefix of it, or a unique prefix of its
        random part (`cfe195` for `20261201-cfe195`), as Git takes abbreviated SHAs."""
        if is_task_id(value):
            return TaskId(value)
        text = value.strip().lower()
        if len(text) < MIN_ID_PREFIX or not _PREFIX_RE.fullmatch(text):
            raise GitsupError(
                f"not a task id: {value!r}",
                hint=f"give the id or at least {MIN_ID_PREFIX} of its first characters "
                "(or of its part after the dash); `git sup ls` lists them",
            )
        names = self._names()
        found = sorted(n for n in names if n.startswith(text) or n[9:].startswith(text))
        if len(found) == 1:
            return TaskId(found[0])
        if not found:
            raise GitsupError(
                f"no task {value} in this repository", hint="`git sup ls` lists the tasks"
            )
        shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise GitsupError(
            f"task id {value!r} is ambiguous: {len(found)} tasks match ({shown})",
            hint="give more characters",
        )

    def _names(self) -> list[str]:
        try:
            with os.scandir(self.layout.tasks) as it:
                return [e.name for e in it if is_task_id(e.name)]
        except FileNotFoundError:
            return []

    def ids(self) -> list[TaskId]:
        if not self.layout.tasks.exists():
            return []
        return sorted(
            TaskId(p.name) for p in self.layout.tasks.iterdir() if (p / RECORD_FILE).exists()
        )

    def iter_raw(self) -> Iterator[dict[str, Any]]:
        """Each task record as plain JSON (unreadable ones skipped), for fast listings."""
        try:
            names = os.listdir(self.layout.tasks)
        except FileNotFoundError:
            return
        base = os.fspath(self.layout.tasks)
        loads, read = jsonio.loads, _read_small
        for name in names:
            try:
                raw = loads(read(f"{base}/{name}/task.json"))
            except (OSError, ValueError):
                continue
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                yield raw

    def iter_records(self) -> Iterator[TaskRecord]:
        for tid in self.ids():
            try:
                yield self.load(tid)
            except GitsupError:
                continue

    def lock(self, task: TaskId) -> TaskLock:
        return TaskLock(self.layout.task_dir(task) / "lock")


def _write(path: Path, record: TaskRecord) -> None:
    record.touch()
    atomic_write(path, record.model_dump_json(indent=1).encode())


def _read_small(path: str) -> bytes:
    """A whole small file in as few system calls as there can be (open, read, close)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 1 << 16)
        if len(data) == 1 << 16:  # larger than most records: read on to the end
            parts = [data]
            while chunk := os.read(fd, 1 << 20):
                parts.append(chunk)
            data = b"".join(parts)
        return data
    finally:
        os.close(fd)


class TaskLock:
    """Serializes lifecycle operations on one task across processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> TaskLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
