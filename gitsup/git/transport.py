"""Talking to another repository: `git push` and `git fetch` of named refs, run as the Git
CLI (its transports, credentials helpers and the remote's gate are the user's own)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gitsup.errors import Exit, GitsupError
from gitsup.host import proc


def _git(
    cwd: Path, verb: str, remote: str, refspecs: Sequence[str], timeout: float, *opts: str
) -> str:
    argv = ["git", verb, "--quiet", *opts, remote, *refspecs]
    res = proc.run(argv, cwd=cwd, env=proc.child_env(), timeout=timeout, redact=True)
    if not res.ok:
        tail = res.output.strip().splitlines()[-3:]
        raise GitsupError(
            f"git {verb} {remote} failed: {' / '.join(tail) or res.returncode}",
            exit_code=Exit.INTERNAL,
        )
    return res.output


def push(cwd: Path, remote: str, refspecs: Sequence[str], *, timeout: float = 300.0) -> None:
    """Push `refspecs` to `remote` (a remote's name or URL); a refusal is a GitsupError with
    the remote's last words."""
    _git(cwd, "push", remote, list(refspecs), timeout)


def fetch(cwd: Path, remote: str, refspecs: Sequence[str], *, timeout: float = 300.0) -> None:
    """Fetch `refspecs` from `remote`."""
    _git(cwd, "fetch", remote, list(refspecs), timeout, "--no-tags")
