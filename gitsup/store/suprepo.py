"""The repository a command works on, and where gitsup keeps its state for it.

Below the use cases (gitsup/tasks/lifecycle.py and its callers): the pool, the preflight checks and the
cost ledger take a `SupRepo` without importing the commands that make one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gitsup.git import GitRepo
from gitsup.layout import Layout
from gitsup.store.lease import LeaseStore
from gitsup.store.records import TaskStore


@dataclass(frozen=True)
class SupRepo:
    """The repository a command works on, and where gitsup keeps its state for it."""

    repo: GitRepo
    layout: Layout

    @classmethod
    def discover(cls, cwd: str | os.PathLike[str] = ".") -> SupRepo:
        repo = GitRepo.discover(cwd)
        repo.require_checkout()
        return cls(repo, Layout(repo.common_dir))

    @property
    def store(self) -> TaskStore:
        return TaskStore(self.layout)

    @property
    def leases(self) -> LeaseStore:
        return LeaseStore(self.layout.leases)


def worktree_root(ctx: SupRepo) -> Path:
    """Where task worktrees go: `sup.worktreeRoot`, else `<checkout>.sup` next to the checkout."""
    configured = ctx.repo.config_get("sup.worktreeRoot")
    main = ctx.repo.main_workdir
    if configured:
        root = Path(os.path.expanduser(configured))
        return root if root.is_absolute() else (main / root)
    return main.parent / f"{main.name}.sup"
