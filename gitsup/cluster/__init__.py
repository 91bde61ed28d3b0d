"""Many machines: tasks as Temporal workflows, run by hosts (docs/cluster.md).

Only this package imports `temporalio` (the `cluster` extra), and only when a cluster
command runs: `settings.require_sdk()` says how to get it when it is missing."""

from __future__ import annotations

from gitsup.layout import Layout


def submitted_here(layout: Layout, task: str) -> bool:
    """Was `task` submitted to the cluster from this clone (and has no local record)? Cheap:
    read commands ask it before they load anything of the cluster."""
    from gitsup.ids import TaskId

    marker = layout.root / "cluster" / f"{task}.json"
    return marker.is_file() and not layout.record(TaskId(task)).exists()
