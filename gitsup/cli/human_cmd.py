"""A person in the loop of a running task: answer, send, continue, pause, resume
(gitsup/tasks/human.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt, TaskArg
from gitsup.cli.output import emit_json, out

if TYPE_CHECKING:
    from gitsup.store.suprepo import SupRepo


def _on_cluster(ctx: SupRepo, task: str) -> bool:
    """A task this clone submitted to the cluster, running there: its requests go to its host."""
    from gitsup.cluster import submitted_here

    return submitted_here(ctx.layout, task)


@app.command("answer")
def answer_cmd(
    task: TaskArg,
    request_id: Annotated[str, typer.Argument(help="The request (`show --json`: pending).")],
    decision: Annotated[str, typer.Argument(help="allow or deny.")],
    message: Annotated[
        str, typer.Option("--message", "-m", help="With deny: what the worker is told.")
    ] = "",
    json_out: JsonOpt = False,
) -> None:
    """Allow or deny a call that waits for a person (`[decider] kind = "human"`)."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.human import answer, check_answer

    ctx = SupRepo.discover()
    if _on_cluster(ctx, task):
        from gitsup.cli.cluster_cmd import control_cluster

        check_answer(decision, message)
        data = {"request_id": request_id, "decision": decision, "message": message}
        taken = control_cluster(ctx, task, "answer", data)
    else:
        taken = answer(ctx, task, request_id, decision, message)
    if json_out:
        emit_json(taken.as_dict())
    else:
        out(f"task {taken.task}: {request_id} {decision} (by {taken.data.get('by', '?')})")


@app.command("send")
def send_cmd(
    task: TaskArg,
    message: Annotated[str, typer.Argument(help="What the worker reads as its next turn.")],
    json_out: JsonOpt = False,
) -> None:
    """Send a running agent worker a message: its next turn, once the current one ends."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.human import check_send, send

    ctx = SupRepo.discover()
    if _on_cluster(ctx, task):
        from gitsup.cli.cluster_cmd import control_cluster

        check_send(message)
        taken = control_cluster(ctx, task, "send", {"text": message})
    else:
        taken = send(ctx, task, message)
    if json_out:
        emit_json(taken.as_dict())
    else:
        out(f"task {taken.task}: message queued for the worker's next turn")


@app.command("continue")
def continue_cmd(
    task: TaskArg,
    add_cost: Annotated[
        float, typer.Option("--add-cost", help="USD to add to max_cost_usd.")
    ] = 0.0,
    add_turns: Annotated[int, typer.Option("--add-turns", help="Turns to add to max_turns.")] = 0,
    extend: Annotated[
        str, typer.Option("--extend", help="Time to add to the deadline (e.g. 30m).")
    ] = "0",
    json_out: JsonOpt = False,
) -> None:
    """Let a task paused on its budget (`on_exhausted = "pause"`) continue with more."""
    from gitsup.durations import parse_duration, require_unit
    from gitsup.errors import GitsupError
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.human import check_continue, continue_task

    try:
        seconds = parse_duration(require_unit(extend, "--extend"))
    except ValueError as exc:
        raise GitsupError(f"--extend: {exc}" if "--extend" not in str(exc) else str(exc)) from None
    if add_turns < 0:
        raise GitsupError(f"--add-turns must be 0 or more, not {add_turns}")
    ctx = SupRepo.discover()
    if _on_cluster(ctx, task):
        from gitsup.cli.cluster_cmd import control_cluster

        check_continue(add_cost, add_turns, seconds)
        data = {"add_cost_usd": add_cost, "add_turns": add_turns, "extend": seconds}
        taken = control_cluster(ctx, task, "continue", data)
    else:
        taken = continue_task(ctx, task, add_cost_usd=add_cost, add_turns=add_turns, extend=seconds)
    if json_out:
        emit_json(taken.as_dict())
        return
    d = taken.data
    still = d.get("still_exceeded")
    out(
        f"task {taken.task}: max_turns {d.get('max_turns')}, max_cost_usd "
        f"{d.get('max_cost_usd')}, deadline {d.get('deadline')}s"
        + (f"; still paused: {still}" if still else "; continuing")
    )


@app.command("pause")
def pause_cmd(task: TaskArg, json_out: JsonOpt = False) -> None:
    """Freeze a running task (its whole cgroup); its deadline and watchdog stop meanwhile."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.human import pause

    taken = pause(SupRepo.discover(), task)
    if json_out:
        emit_json(taken.as_dict())
    else:
        d = taken.data
        out(f"task {taken.task}: paused ({d.get('how')}, {d.get('processes')} process(es))")


@app.command("resume")
def resume_cmd(task: TaskArg, json_out: JsonOpt = False) -> None:
    """Let a task paused by `git sup pause` run again; its deadline moves by the time paused."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.human import resume

    taken = resume(SupRepo.discover(), task)
    if json_out:
        emit_json(taken.as_dict())
    else:
        d = taken.data
        out(f"task {taken.task}: resumed after {d.get('paused')}s ({d.get('how')})")
