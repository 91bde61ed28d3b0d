"""The policy as `git sup policy check|explain|show` sees it from a directory: the top of
its worktree and the policy loaded there (with `git config sup.protected`). Never prints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from gitsup.errors import GitsupError
from gitsup.git.repo import config_values_at

if TYPE_CHECKING:
    from gitsup.policy import Policy


def find_worktree(start: Path) -> Path:
    """The top of the worktree containing `start` (walk up to a `.git` file or directory),
    else `start` itself."""
    start = start.absolute()
    for d in (start, *start.parents):
        if (d / ".git").exists():
            return d
    return start


def worktree_policy(cwd: Path | None) -> tuple[str, Policy]:
    """The worktree to judge against (`cwd`, else the top of the current one) and its policy."""
    from gitsup.policy import load_policy

    if cwd is not None:
        if not cwd.is_dir():
            raise GitsupError(f"--cwd {cwd}: not a directory")
        worktree = cwd.absolute()
    else:
        worktree = find_worktree(Path.cwd())
    policy = load_policy(worktree, extra_protected=config_values_at(worktree, "sup.protected"))
    return os.path.normpath(str(worktree)), policy
