"""Identifiers: task ids are short, sortable and unique."""

from __future__ import annotations

import os
import re
import time
from typing import NewType

from gitsup.errors import GitsupError

TaskId = NewType("TaskId", str)
Oid = NewType("Oid", str)

_TASK_ID_RE = re.compile(r"^[0-9]{8}-[0-9a-f]{6}$")


def new_task_id(now: float | None = None) -> TaskId:
    """`YYYYMMDD-xxxxxx`: the UTC date sorts, 24 random bits make it unique.

    The caller claims the id by creating its task directory exclusively and
    draws again on a collision.
    """
    t = time.gmtime(now if now is not None else time.time())
    day = time.strftime("%Y%m%d", t)
    return TaskId(f"{day}-{os.urandom(3).hex()}")


def is_task_id(value: str) -> bool:
    return bool(_TASK_ID_RE.match(value))


def parse_task_id(value: str) -> TaskId:
    if not _TASK_ID_RE.match(value):
        raise GitsupError(
            f"not a task id: {value!r}",
            hint="task ids look like 20261129-a1b2c3; `git sup ls` lists them",
        )
    return TaskId(value)
