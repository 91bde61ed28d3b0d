"""Fault injection for crash tests: `GITSUP_FAULT=<point>` makes the process SIGKILL
itself when it reaches that point. Points: before_spawn, after_spawn, during_seal,
after_checks, before_task_finished, after_task_finished, queue_before_move,
queue_after_move. Unset in normal use; costs one comparison."""

from __future__ import annotations

import os
import signal

_POINT = os.environ.get("GITSUP_FAULT")


def fault(point: str) -> None:
    if _POINT is not None and point == _POINT:
        os.kill(os.getpid(), signal.SIGKILL)
