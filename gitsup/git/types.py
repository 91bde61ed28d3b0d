"""What the Git gateway hands out: commit summaries, a candidate's bounded evidence, the
ref-conflict error, and the names of gitsup's refs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pygit2

from gitsup.errors import GitsupError
from gitsup.ids import Oid

NOTES_REF = "refs/notes/sup"
SUP_REF_PREFIX = "refs/sup/"
_ZERO = "0" * 40


class RefConflict(GitsupError):
    """A compare-and-swap ref update found another value than expected."""


@dataclass(frozen=True)
class CommitInfo:
    oid: Oid
    summary: str
    author: str
    time: int
    parents: tuple[Oid, ...]


@dataclass(frozen=True)
class UntrackedFile:
    path: str
    size: int
    content: str | None  # None when skipped (too big, binary, not a regular file)
    skipped: str | None = None


@dataclass
class Evidence:
    """What a reviewer needs to judge a task's work, bounded."""

    baseline: Oid
    head: Oid | None
    diff: str
    diff_stat: str
    commits: list[CommitInfo]
    untracked: list[UntrackedFile]
    complete: bool
    truncated: list[str] = field(default_factory=list)


def _sig(repo: pygit2.Repository) -> pygit2.Signature:
    try:
        return repo.default_signature
    except (KeyError, pygit2.GitError):
        return pygit2.Signature("gitsup", "gitsup@localhost", int(time.time()), 0)


def is_zero(oid: str) -> bool:
    return oid == _ZERO
