"""Where gitsup keeps its files: `$GIT_COMMON_DIR/sup/`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gitsup.ids import TaskId


@dataclass(frozen=True)
class Layout:
    common_dir: Path

    @property
    def root(self) -> Path:
        return self.common_dir / "sup"

    @property
    def tasks(self) -> Path:
        return self.root / "tasks"

    @property
    def leases(self) -> Path:
        return self.root / "leases"

    def task_dir(self, task: TaskId) -> Path:
        return self.tasks / task

    def task_git_dir(self, task: TaskId) -> Path:
        """The task's private Git dir: the worker's only writable Git state."""
        return self.task_dir(task) / "git"

    def events(self, task: TaskId) -> Path:
        return self.task_dir(task) / "events.jsonl"

    def record(self, task: TaskId) -> Path:
        return self.task_dir(task) / "task.json"

    def final_record(self, task: TaskId) -> Path:
        """The terminal record, written before `task_finished` and renamed to the record
        after it (gitsup/supervision/journal.py `finish`)."""
        return self.task_dir(task) / "task.final.json"

    def ensure(self) -> None:
        for d in (self.root, self.tasks, self.leases):
            d.mkdir(parents=True, exist_ok=True)


def task_refs(task: TaskId) -> dict[str, str]:
    base = f"refs/sup/{task}"
    return {
        "baseline": f"{base}/baseline",
        "candidate": f"{base}/candidate",
        "log": f"{base}/log",
        "wip": f"{base}/wip",
    }


def task_branch(task: TaskId) -> str:
    return f"sup/{task}"


# The shell of a task's private Git dir (gitsup/git/taskgit.py `seal`): the entries gitsup
# writes and the sandbox binds read-only over themselves, so that no task writes them.
TASK_GIT_SHELL = ("config", "commondir", "hooks", "info")
