"""Fault injection for crash tests: `GITSUP_FAULT=<point>` makes the process SIGKILL
itself when it reaches that point. Points: before_spawn, after_spawn, during_seal,
after_checks, before_task_finished, after_task_finished, queue_before_move,
queue_after_move, takeover_cleanup_pending, takeover_worker_proven, takeover_cleaned. Unset in normal use; costs one comparison.

`GITSUP_FAULT=append:<type>[:<n>]` makes the first n (default 1) appends of an event of
that type in this process fail as a full disk would (OSError ENOSPC), before anything is
written: the test of what the supervisor does when its log cannot be written.

`GITSUP_FAULT=fail:<point>` makes `fail(point)` raise OSError (EIO) there: a step that
fails half-way, for the tests of what a start leaves behind. Points: tmux_server_started."""

from __future__ import annotations

import errno
import os
import signal

_POINT = os.environ.get("GITSUP_FAULT")
_APPEND_TYPE: str | None = None
_append_left = 0
if _POINT is not None and _POINT.startswith("append:"):
    _APPEND_TYPE, _, _n = _POINT.removeprefix("append:").partition(":")
    _append_left = int(_n) if _n.isdigit() else 1


def fault(point: str) -> None:
    if _POINT is not None and point == _POINT:
        os.kill(os.getpid(), signal.SIGKILL)


def fail(point: str) -> None:
    """Raise OSError (EIO) when `GITSUP_FAULT=fail:<point>`."""
    if _POINT is not None and f"fail:{point}" == _POINT:
        raise OSError(errno.EIO, f"injected failure at {point} (GITSUP_FAULT)")


def append_fault(type: str) -> None:
    """Raise ENOSPC for an append of `type` while `GITSUP_FAULT=append:<type>:<n>` has
    failures left."""
    global _append_left
    if _APPEND_TYPE is not None and type == _APPEND_TYPE and _append_left > 0:
        _append_left -= 1
        raise OSError(errno.ENOSPC, f"No space left on device (GITSUP_FAULT, {type})")
