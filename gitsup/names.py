"""The names of a task's files and of its environment marker, spelled once.

Standard library only and importing nothing of gitsup: the hook path (gitsup/boundary/hook.py,
which may import neither pydantic nor gitsup.errors) reads them too. Where the files live is
gitsup/layout.py's `Layout`.
"""

from __future__ import annotations

# A task dir's files (`<common>/sup/tasks/<id>/`): its record and its spec.
RECORD_FILE = "task.json"
SPEC_FILE = "spec.json"

# The environment variable the supervisor sets to the task's id on every worker: it marks
# the worker's processes (a push or an integration from one is refused; cleanup finds and
# kills what carries it) and is dropped from what checks and reviews run.
TASK_MARKER = "GITSUP_TASK"
