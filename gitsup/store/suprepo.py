"""The repository a command works on, and where gitsup keeps its state for it.

Below the use cases (gitsup/tasks/lifecycle.py and its callers): the pool, the preflight checks and the
cost ledger take a `SupRepo` without importing the commands that make one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.ids import TaskId
from gitsup.layout import Layout, owning_task
from gitsup.store.lease import LeaseStore
from gitsup.store.records import TaskStore


@dataclass(frozen=True)
class SupRepo:
    """The repository a command works on, and where gitsup keeps its state for it."""

    repo: GitRepo
    layout: Layout

    # Set when the command was run in a task's worktree: the task it belongs to.
    in_task: TaskId | None = None

    @classmethod
    def discover(cls, cwd: str | os.PathLike[str] = ".") -> SupRepo:
        """The repository at `cwd`. In a task's worktree (whose Git dir is the task's
        private one) that is the repository that owns the task, as Git answers for the
        repository of a linked worktree."""
        repo = GitRepo.discover(cwd)
        owner = owning_task(Path(repo.common_dir))
        in_task = None
        if owner is not None:
            repo, in_task = GitRepo.discover(owner[0]), owner[1]
        repo.require_checkout()
        return cls(repo, Layout(repo.common_dir), in_task)

    def refuse_in_task(self, what: str) -> None:
        """Exit 2 when run in a task's worktree: `what` sets something up where it runs."""
        if self.in_task is not None:
            raise GitsupError(
                f"this is the worktree of task {self.in_task}; {what} runs in the repository's "
                f"checkout, not in a task's",
                hint=f"cd {self.repo.main_workdir}",
            )

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
