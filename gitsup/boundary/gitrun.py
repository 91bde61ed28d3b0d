"""The hook path's own process runner (standard library only; gitsup/host/proc.py is the runner
everywhere else, but it is not for a path that must not import psutil or pay its start-up).

`GitCli` runs plain `git` in the hook's environment, so in a `pre-receive` hook it sees the
quarantined objects of the push under way; `start` starts any other program the hook path needs
(`git cat-file --batch`, `ssh-keygen -Y verify`) with the caller's pipes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from typing import IO, Any

Popen = subprocess.Popen
CompletedProcess = subprocess.CompletedProcess
PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL


def start(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
) -> subprocess.Popen[bytes]:
    """Start argv (never through a shell); stderr is discarded. OSError when it cannot start."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=stdin,
        stdout=stdout,
        stderr=subprocess.DEVNULL,
    )


class GitCli:
    def __init__(self, cwd: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.cwd = cwd
        self.env = env

    def run(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["git", *args],
            cwd=self.cwd,
            env=None if self.env is None else dict(self.env),
            input=input,
            capture_output=True,
            check=False,
        )

    def out(self, *args: str) -> str | None:
        """stdout of a successful command (stripped), or None."""
        res = self.run(*args)
        if res.returncode != 0:
            return None
        return res.stdout.decode("utf-8", "replace").strip()

    def config(self, pattern: str) -> dict[str, list[str]]:
        """All config values whose key matches `pattern` (lower-cased keys), one process."""
        res = self.run("config", "-z", "--get-regexp", pattern)
        values: dict[str, list[str]] = {}
        if res.returncode != 0:
            return values
        for entry in res.stdout.decode("utf-8", "replace").split("\0"):
            if not entry:
                continue
            key, _, value = entry.partition("\n")
            values.setdefault(key.lower(), []).append(value)
        return values
