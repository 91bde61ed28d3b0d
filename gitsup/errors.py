"""The one error type shown to users, and the exit codes of the CLI contract."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """Exit codes of every `git sup` command (stable contract)."""

    OK = 0
    READY = 0
    INTERNAL = 1
    BAD_INPUT = 2
    PARKED = 3
    FAILED = 4
    STOPPED = 5
    INTERRUPTED = 130


class GitsupError(Exception):
    """A problem the user can act on.

    `message` says what was refused and why; `hint` says what to do next.
    The CLI prints both and exits with `exit_code` (bad input by default).
    """

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = Exit.BAD_INPUT):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = int(exit_code)

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"
