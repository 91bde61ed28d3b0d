"""Where gitsup keeps its files: `$GIT_COMMON_DIR/sup/`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gitsup.ids import TaskId, is_task_id
from gitsup.names import RECORD_FILE, SPEC_FILE


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

    @property
    def notes_pushed(self) -> Path:
        """What this clone's supervisors pushed of `refs/notes/sup` last, by review remote:
        a hint only (a push made from it is a fast-forward or refused, never a rewrite;
        gitsup/supervision/publisher.py)."""
        return self.root / "notes-pushed.json"

    def task_dir(self, task: TaskId) -> Path:
        return self.tasks / task

    def task_git_dir(self, task: TaskId) -> Path:
        """The task's private Git dir: the worker's only writable Git state."""
        return self.task_dir(task) / "git"

    def events(self, task: TaskId) -> Path:
        return self.task_dir(task) / "events.jsonl"

    def record(self, task: TaskId) -> Path:
        return self.task_dir(task) / RECORD_FILE

    def spec(self, task: TaskId) -> Path:
        """The task's spec (`TaskSpec`), written once when the task is created."""
        return self.task_dir(task) / SPEC_FILE

    def final_record(self, task: TaskId) -> Path:
        """The terminal record, written before `task_finished` and renamed to the record
        after it (gitsup/supervision/journal.py `finish`)."""
        return self.task_dir(task) / "task.final.json"

    def fetched(self, task: TaskId) -> Path:
        """Marks a task dir rebuilt from the review remote's refs (a task that runs or ran
        in another clone): its record is a copy, no supervisor of this clone owns it."""
        return self.task_dir(task) / "fetched.json"

    def published(self, task: TaskId) -> Path:
        """Written by the task's supervisor once its last publication to the review remote
        is done (or its failure recorded), removed when a supervisor takes the task: the
        task's end is on the remote before the supervisor process has exited
        (gitsup/supervision/publisher.py)."""
        return self.task_dir(task) / "published"

    def ensure(self) -> None:
        for d in (self.root, self.tasks, self.leases):
            d.mkdir(parents=True, exist_ok=True)


def owning_task(git_dir: Path) -> tuple[Path, TaskId] | None:
    """The repository's common dir and the task whose private Git dir `git_dir` is
    (`<common>/sup/tasks/<id>/git`), or None for any other Git dir."""
    parts = git_dir.resolve().parts
    if len(parts) < 5 or parts[-1] != "git" or parts[-3] != "tasks" or parts[-4] != "sup":
        return None
    task = parts[-2]
    if not is_task_id(task):
        return None
    common = Path(*parts[:-4])
    if not (common / "sup" / "tasks" / task / RECORD_FILE).is_file():
        return None
    return common, TaskId(task)


# A repository's own gitsup settings (its policy file: sandbox, shell policy, protected
# branches): a candidate that changes anything here changes what every later task may do.
REPO_POLICY_DIR = ".gitsup"


def task_refs(task: TaskId) -> dict[str, str]:
    base = f"refs/sup/{task}"
    return {
        "baseline": f"{base}/baseline",
        "candidate": f"{base}/candidate",
        "log": f"{base}/log",
        "wip": f"{base}/wip",
    }


def task_record_ref(task: TaskId) -> str:
    """The task's record and spec as published to the review remote (a commit chain whose
    tree is `task.json` and `spec.json`): what another clone needs to show or continue it."""
    return f"refs/sup/{task}/record"


def task_branch(task: TaskId) -> str:
    return f"sup/{task}"


# The shell of a task's private Git dir (gitsup/store/taskgit.py `seal`): the entries gitsup
# writes and the sandbox binds read-only over themselves, so that no task writes them.
TASK_GIT_SHELL = ("config", "commondir", "hooks", "info")
