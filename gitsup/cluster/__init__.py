"""Tasks across many clones (hosts): what runs where is an engine's business; what a task
produced is kept on the review remote (`record.py`: publish, fetch, adopt), so any clone
can show a task and another host can continue it. Importing this package imports no
engine.

The engine is Temporal (docs/cluster.md): `workflow.py`, `hostwork.py`, `submit.py` and
`control.py`, the only modules that import `temporalio` (the `cluster` extra), and only when a cluster command
runs: `settings.require_sdk()` says how to get it when it is missing."""

from __future__ import annotations

from gitsup.layout import Layout


def submitted_here(layout: Layout, task: str) -> bool:
    """Was `task` submitted to the cluster from this clone, and does the cluster say more of
    it than this clone knows: no record here, or a copy fetched while it ran? Cheap: read
    commands ask it before they load anything of the cluster."""
    import json

    from gitsup.ids import TaskId

    tid = TaskId(task)
    if not (layout.root / "cluster" / f"{task}.json").is_file():
        return False
    if not layout.record(tid).exists():
        return True
    if not layout.fetched(tid).exists():
        return False  # it lives here (never so for a task this clone submitted)
    try:
        state = json.loads(layout.record(tid).read_text(encoding="utf-8")).get("state")
    except (OSError, ValueError, AttributeError):
        return True
    from gitsup.state import TERMINAL

    return state not in {s.value for s in TERMINAL}
