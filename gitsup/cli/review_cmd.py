"""Review comments back to the agent: comment, revise (gitsup/tasks/comments.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt, TaskArg
from gitsup.cli.output import emit_json, out
from gitsup.cli.task_render import comment_lines, safe_text


@app.command("comment")
def comment_cmd(
    task: TaskArg,
    location: Annotated[
        str | None, typer.Argument(help="PATH:LINE in the task's candidate.", show_default=False)
    ] = None,
    message: Annotated[str | None, typer.Argument(help="The comment.", show_default=False)] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="List the task's comments with their status.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Comment on a line of a task's candidate (or a running task's work); `git sup revise`
    sends the open comments back to the agent."""
    from gitsup.errors import GitsupError
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks import comments as tc

    ctx = SupRepo.discover()
    if list_:
        if location is not None or message is not None:
            raise GitsupError("--list takes no PATH:LINE or MESSAGE")
        listed = tc.list_comments(ctx, task)
        if json_out:
            emit_json(listed)
            return
        for text in comment_lines(listed):
            out(text)
        return
    if location is None or message is None:
        raise GitsupError("give PATH:LINE and MESSAGE (or --list)")
    path, line = tc.parse_location(location)
    added = tc.add_comment(ctx, task, path, line, message)
    if json_out:
        emit_json(added)
    else:
        out(f"task {task}: comment {added['id']} on {safe_text(added['path'])}:{added['line']}")


@app.command("revise")
def revise_cmd(
    task: TaskArg,
    message: Annotated[
        str, typer.Option("--message", "-m", help="Words for the agent besides the comments.")
    ] = "",
    json_out: JsonOpt = False,
) -> None:
    """Send a task's open review comments back to the agent: the running worker's next
    turn, else a revision task on its candidate."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.revise import revise

    done = revise(SupRepo.discover(), task, message)
    if json_out:
        emit_json(done)
    elif done["how"] == "turn":
        out(f"task {task}: {len(done['comments'])} comment(s) queued for the worker's next turn")
    else:
        out(
            f"task {task}: {len(done['comments'])} comment(s) sent to revision task "
            f"{done['revision_task']}"
        )
