"""Tasks across many clones (hosts): what runs where is an engine's business; what a task
produced is kept on the review remote (`record.py`: publish, fetch, adopt), so any clone
can show a task and another host can continue it. Importing this package imports no
engine.

The engine is Temporal (docs/cluster.md): `workflow.py`, `hostwork.py` and `submit.py`, the
only modules that import `temporalio` (the `cluster` extra), and only when a cluster command
runs: `settings.require_sdk()` says how to get it when it is missing."""

from __future__ import annotations

from gitsup.layout import Layout


def submitted_here(layout: Layout, task: str) -> bool:
    """Was `task` submitted to the cluster from this clone (and has no local record)? Cheap:
    read commands ask it before they load anything of the cluster."""
    from gitsup.ids import TaskId

    marker = layout.root / "cluster" / f"{task}.json"
    return marker.is_file() and not layout.record(TaskId(task)).exists()
