"""A task on the review remote: publish, fetch-task, adopt-remote (gitsup/cluster/record.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt
from gitsup.cli.output import emit_json, out
from gitsup.cli.task_render import ProgressRenderer, print_summary
from gitsup.errors import GitsupError

IdArg = Annotated[str, typer.Argument(help="The task's id (it may live in another clone).")]
RemoteOpt = Annotated[
    str | None,
    typer.Option("--remote", help="The review remote (default: git config sup.reviewRemote)."),
]


@app.command("publish")
def publish_cmd(task: IdArg, remote: RemoteOpt = None, json_out: JsonOpt = False) -> None:
    """Push a task's refs (refs/sup/<id>/*) and notes to the review remote now."""
    from gitsup.cluster.record import publish
    from gitsup.store.suprepo import SupRepo

    ctx = SupRepo.discover()
    res = publish(ctx, ctx.store.resolve(task), remote=remote)
    if json_out:
        emit_json({"remote": res.remote, "refs": res.refs, "notes": res.notes})
        return
    for ref, oid in res.refs.items():
        out(f"{ref} {oid[:12]} -> {res.remote}")
    if res.notes:
        out(f"refs/notes/sup {res.notes[:12]} -> {res.remote}")


@app.command("fetch-task")
def fetch_task_cmd(task: IdArg, remote: RemoteOpt = None, json_out: JsonOpt = False) -> None:
    """Fetch a task's refs and notes from the review remote; a task that runs (or ran) in
    another clone becomes readable here (`show`, `log`, `report`, `wait`)."""
    from gitsup.cluster.record import fetch_task
    from gitsup.store.suprepo import SupRepo

    ctx = SupRepo.discover()
    res = fetch_task(ctx, task, remote=remote)
    rec = res.record
    if json_out:
        emit_json(
            {
                "task": res.task,
                "remote": res.remote,
                "local": res.local,
                "refs": res.refs,
                "state": rec.state.value if rec else None,
                "status": rec.status.value if rec else None,
            }
        )
        return
    where = "lives in this clone" if res.local else "fetched"
    state = f": {rec.state.value} ({rec.status.value})" if rec else ": no record published yet"
    out(f"{res.task} from {res.remote}, {where}{state}")


@app.command("adopt-remote")
def adopt_remote_cmd(
    task: IdArg,
    remote: RemoteOpt = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="This host's name in the log (default: sup.cluster.host, else the host name).",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    spec_file: Annotated[
        Path | None,
        typer.Option(
            "--spec",
            help="The task's spec as submitted (JSON): the published one must be the same.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Continue here a task another clone ran and published, whose host is gone: from its
    last published wip (else its candidate, else its baseline), with a new worker told it
    takes over; supervised in the foreground until it ends."""
    from gitsup.cluster.record import adopt
    from gitsup.spec import TaskSpec
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import show_dict, status_exit

    spec = None
    if spec_file is not None:
        try:
            spec = TaskSpec.model_validate_json(spec_file.read_bytes())
        except (OSError, ValueError) as exc:
            why = (str(exc).splitlines() or ["?"])[0]
            raise GitsupError(f"--spec {spec_file}: not a task spec: {why}") from None
    ctx = SupRepo.discover()
    record = adopt(
        ctx,
        task,
        host=host,
        remote=remote,
        on_event=None if quiet else ProgressRenderer(),
        spec=spec,
    )
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        print_summary(ctx, record)
    raise typer.Exit(status_exit(record))
