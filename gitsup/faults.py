"""Fault injection for crash tests: `GITSUP_FAULT=<point>` makes the process SIGKILL
itself when it reaches that point. Points: before_spawn, after_spawn, during_seal,
after_checks. Unset in normal use; costs one dict lookup."""

from __future__ import annotations

import os
import signal

_POINT = os.environ.get("GITSUP_FAULT")


def fault(point: str) -> None:
    if _POINT is not None and point == _POINT:
        os.kill(os.getpid(), signal.SIGKILL)
