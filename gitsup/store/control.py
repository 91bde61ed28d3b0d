"""Control requests: how a person's command reaches a running supervisor.

`git sup answer`, `send`, `continue`, `pause` and `resume` write one request file into the task's
`control/` directory (`<task dir>/control/<ref>.json`, mode 0600, written under a
temporary name and renamed into place, so the supervisor never reads half a request)
and signal the supervisor (SIGUSR2). The supervisor takes every request it finds,
removes its file, and answers with an event naming `ref` in the task's event log:
what it did (`human_answer`, `worker_message_sent`, `budget_continued`, `task_paused`,
`task_resumed`) or
`control_refused` with why. The command waits for that event.

The task dir is outside everything a sandboxed worker may write (docs/sandbox.md), and
the supervisor takes only regular files, not links, that its own user owns and nobody
else can read or write: a file planted by anything else is refused and removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitsup import jsonio

CONTROL_DIR = "control"
MAX_REQUEST_BYTES = 256 * 1024
KINDS = ("answer", "send", "continue", "pause", "resume")


@dataclass(frozen=True)
class ControlRequest:
    """One request as the supervisor read it: `data` the fields, or `refused` why not."""

    ref: str
    kind: str
    data: Mapping[str, Any]
    refused: str | None = None

    @property
    def by(self) -> str:
        return str(self.data.get("by") or "unknown")

    @property
    def via(self) -> str:
        return str(self.data.get("via") or "cli")


def control_dir(task_dir: Path) -> Path:
    return task_dir / CONTROL_DIR


def new_ref() -> str:
    """A request's unique name: time-ordered, then random."""
    return f"{time.time_ns():x}-{secrets.token_hex(6)}"


def submit(task_dir: Path, kind: str, data: Mapping[str, Any]) -> str:
    """Write one request (atomically, 0600) and return its ref."""
    if kind not in KINDS:
        raise ValueError(f"unknown control request {kind!r}")
    d = control_dir(task_dir)
    d.mkdir(mode=0o700, exist_ok=True)
    ref = new_ref()
    body = json.dumps({"kind": kind, "ref": ref, **data}).encode("utf-8")
    tmp = d / f".{ref}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, d / f"{ref}.json")
    return ref


def take(task_dir: Path) -> list[ControlRequest]:
    """Every request waiting, oldest first, each file removed as it is read."""
    d = control_dir(task_dir)
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".json") and not n.startswith("."))
    except OSError:
        return []
    return [_read_one(d / name) for name in names]


def _read_one(path: Path) -> ControlRequest:
    ref = path.name[: -len(".json")]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return ControlRequest(ref, "?", {}, refused=f"cannot open the request: {exc.strerror}")
    try:
        st = os.fstat(fd)
        why = _untrusted(st)
        raw = b"" if why else os.read(fd, MAX_REQUEST_BYTES + 1)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
    if why:
        return ControlRequest(ref, "?", {}, refused=why)
    if len(raw) > MAX_REQUEST_BYTES:
        return ControlRequest(ref, "?", {}, refused="the request is too large")
    try:
        data = jsonio.loads(raw)
    except ValueError:
        return ControlRequest(ref, "?", {}, refused="the request is not JSON")
    if not isinstance(data, dict) or data.get("ref") != ref or data.get("kind") not in KINDS:
        return ControlRequest(ref, "?", {}, refused="the request is malformed")
    return ControlRequest(ref, str(data["kind"]), data)


def _untrusted(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "the request is not a regular file"
    if st.st_uid != os.geteuid():
        return f"the request is owned by uid {st.st_uid}, not the supervisor's"
    if st.st_mode & 0o077:
        return "the request is readable or writable by others"
    if st.st_nlink != 1:
        return "the request has other links"
    return None
