"""One task's context: what every collaborator of its supervisor (launcher, gate, verifier,
finaliser, publisher, the task's network) works with, made once by the supervisor and
handed to each. A collaborator takes from it what it needs; what only one of them needs
(the lease, the worker factory, the inbox) is its own argument."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gitsup.git import GitRepo
from gitsup.ids import TaskId
from gitsup.layout import Layout
from gitsup.spec import TaskSpec
from gitsup.store.ledger import CallSink
from gitsup.store.payload import EmitFn
from gitsup.store.record import TaskRecord
from gitsup.supervision.journal import Journal
from gitsup.verification.decider import DecisionTime

__all__ = ["TaskContext"]


@dataclass(frozen=True)
class TaskContext:
    repo: GitRepo
    layout: Layout
    spec: TaskSpec
    journal: Journal  # the task's event log and record (gitsup/supervision/journal.py)
    emit: EmitFn  # every event of the task (the supervisor's: through the journal)
    save: Callable[[], None]  # the record, with the task machine's counters
    abort: threading.Event  # set on a stop request: what runs ends early
    abort_reason: Callable[[], str]  # why it was set
    clock: Callable[[], DecisionTime]  # the deadline and time left, for a decision
    on_call: CallSink | None  # the cost ledger: each reviewer and decider model call

    @property
    def task(self) -> TaskId:
        return TaskId(self.journal.record.id)

    @property
    def worktree(self) -> Path:
        return Path(self.journal.record.worktree)

    @property
    def record(self) -> TaskRecord:
        return self.journal.record

    @property
    def task_dir(self) -> Path:
        return self.layout.task_dir(self.task)
