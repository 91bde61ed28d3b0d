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
            if abs(p.create_time() - self.start_time) > 0.01:
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
