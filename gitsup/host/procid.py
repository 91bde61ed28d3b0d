"""Process identities that survive pid reuse: pid + start time (psutil)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# psutil is imported where it is used: reading a task list needs no process table.


def pid_alive(pid: int) -> bool:
    """A process with this pid exists and has not exited (a zombie has: only its parent has
    not collected it yet, and a detached process's parent may take its time)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def same_start(recorded: float, now: float) -> bool:
    """Whether a process's start time read now (`now`, psutil's `create_time()`) is the one
    recorded for it. Linux gives a start time as ticks since boot, which psutil adds to the
    boot time; the kernel reports the boot time in whole seconds and moves it when the clock
    is set or slewed across a second boundary. So the same process can read a whole number
    of seconds (a couple at most) off what was recorded, and never a fraction: that is
    still the same process, while pid reuse gives a start time off by any amount."""
    d = now - recorded
    if abs(d) <= 0.01:
        return True
    k = round(d)
    return abs(k) <= 2 and abs(d - k) <= 0.01


@dataclass(frozen=True)
class ProcessId:
    pid: int
    start_time: float

    @classmethod
    def current(cls) -> ProcessId:
        return cls.of(os.getpid())

    @classmethod
    def of(cls, pid: int) -> ProcessId:
        import psutil

        return cls(pid, psutil.Process(pid).create_time())

    def alive(self) -> bool:
        """True only if a process with this pid AND this start time exists."""
        import psutil

        try:
            p = psutil.Process(self.pid)
            if not same_start(self.start_time, p.create_time()):
                return False
            return p.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            return False

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time}

    @classmethod
    def from_dict(cls, d: Any) -> ProcessId | None:
        if isinstance(d, dict) and isinstance(d.get("pid"), int):
            try:
                return cls(int(d["pid"]), float(d.get("start_time", 0.0)))
            except (TypeError, ValueError):
                return None
        return None
