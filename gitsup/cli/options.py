"""Options several commands share (typer annotations)."""

from __future__ import annotations

from typing import Annotated

import typer

from gitsup.protected import DEFAULT_PROTECTED

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

ProtectedOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--protected",
        help=f"A protected branch to add to {' '.join(DEFAULT_PROTECTED)} (repeat).",
    ),
]


def resolve_task(value: str) -> str:
    """A task argument as the command gets it: the full id of the task a unique prefix
    names (in the repository that owns the worktree the command runs in). Best-of-N group
    ids (`g…`) pass through."""
    if value.startswith("g"):
        return value
    from gitsup.store.suprepo import SupRepo

    return SupRepo.discover().store.resolve(value)


def _resolve_tasks(values: list[str] | None) -> list[str] | None:
    if not values:
        return values
    from gitsup.store.suprepo import SupRepo

    store = SupRepo.discover().store  # once for all of them
    return [v if v.startswith("g") else store.resolve(v) for v in values]


def complete_task(incomplete: str) -> list[str]:
    """Shell completion: the ids that start with what was typed (or whose random part does)."""
    try:
        from gitsup.store.suprepo import SupRepo

        ids = SupRepo.discover().store.ids()
    except Exception:  # completion never fails loudly
        return []
    return [t for t in ids if t.startswith(incomplete) or t[9:].startswith(incomplete)]


_TASK_HELP = "Task id, or a unique prefix of it (or of its part after the dash)."
TaskArg = Annotated[
    str,
    typer.Argument(help=_TASK_HELP, callback=resolve_task, autocompletion=complete_task),
]
TaskListArg = Annotated[
    list[str],
    typer.Argument(
        help="Task ids (or unique prefixes) with ready candidates, in order.",
        callback=_resolve_tasks,
        autocompletion=complete_task,
    ),
]
