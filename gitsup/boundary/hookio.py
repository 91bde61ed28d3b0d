"""What Git hands a hook on stdin, parsed into `RefUpdate`s. Standard library only.

pre-push:    `<local ref> SP <local sha> SP <remote ref> SP <remote sha> LF`
pre-receive: `<old sha> SP <new sha> SP <ref name> LF`
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from gitsup.boundary.evaluate import ZERO, RefUpdate


class HookInputError(ValueError):
    """A line of hook input that does not have the documented shape."""


def _is_oid(s: str) -> bool:
    return len(s) in (40, 64) and all(c in "0123456789abcdef" for c in s)


def parse_pre_push(lines: Iterable[str]) -> list[RefUpdate]:
    return _each_line(lines, _pre_push_line)


def parse_pre_receive(lines: Iterable[str]) -> list[RefUpdate]:
    return _each_line(lines, _pre_receive_line)


def _each_line(lines: Iterable[str], parse: Callable[[str], RefUpdate]) -> list[RefUpdate]:
    """Each line that is not blank, stripped and parsed."""
    return [parse(line) for line in (raw.strip() for raw in lines) if line]


def _pre_push_line(line: str) -> RefUpdate:
    # A local ref may be an expression with spaces in odd cases; the last three fields are fixed.
    parts = line.rsplit(" ", 3)
    if len(parts) != 4 or not _is_oid(parts[1]) or not _is_oid(parts[3]):
        raise HookInputError(f"unexpected pre-push input line: {line!r}")
    local_ref, local_sha, remote_ref, remote_sha = parts
    return RefUpdate(ref=remote_ref, old=remote_sha, new=local_sha, local_ref=local_ref)


def _pre_receive_line(line: str) -> RefUpdate:
    parts = line.split(" ", 2)
    if len(parts) != 3 or not _is_oid(parts[0]) or not _is_oid(parts[1]):
        raise HookInputError(f"unexpected pre-receive input line: {line!r}")
    old, new, ref = parts
    return RefUpdate(ref=ref, old=old, new=new)


def pre_commit_update(env: Mapping[str, str] = os.environ) -> RefUpdate | None:
    """The one ref the pre-commit framework describes in its environment.

    pre-commit consumes the pre-push stdin itself and exports only the first ref
    that has something to push (PRE_COMMIT_TO_REF, PRE_COMMIT_REMOTE_BRANCH, ...).
    Deletions are not passed on; the server-side gate still sees them.
    """
    new = env.get("PRE_COMMIT_TO_REF", "")
    ref = env.get("PRE_COMMIT_REMOTE_BRANCH", "")
    if not _is_oid(new) or not ref:
        return None
    old = env.get("PRE_COMMIT_FROM_REF", "")
    return RefUpdate(
        ref=ref,
        old=old if _is_oid(old) else ZERO,
        new=new,
        local_ref=env.get("PRE_COMMIT_LOCAL_BRANCH") or None,
    )


def format_rejection(ref: str, reason: str) -> str:
    return f"gitsup: rejected {ref}: {reason}"
