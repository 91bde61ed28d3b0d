"""`git sup cluster dev` (Temporal's dev server on this machine) and `git sup host run` (a
machine that runs the cluster's tasks of this repository): docs/cluster.md."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gitsup.cli.main import app
from gitsup.cli.output import out, progress
from gitsup.errors import GitsupError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gitsup.cluster.settings import ClusterSettings
    from gitsup.tasks.human import Taken

cluster_app = typer.Typer(no_args_is_help=True, help="The Temporal cluster tasks run on.")
app.add_typer(cluster_app, name="cluster")
host_app = typer.Typer(no_args_is_help=True, help="Run the cluster's tasks on this machine.")
app.add_typer(host_app, name="host")

ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster", help="The Temporal frontend HOST:PORT (default sup.cluster.address)."
    ),
]


@cluster_app.command("dev")
def dev_cmd(
    port: Annotated[int, typer.Option("--port", help="The frontend's port.")] = 7233,
    db: Annotated[
        Path | None,
        typer.Option("--db", help="Its state (SQLite); default ~/.local/share/gitsup/."),
    ] = None,
) -> None:
    """Run Temporal's development server on 127.0.0.1 in the foreground (Ctrl-C ends it)."""
    from gitsup.cluster.settings import require_sdk

    require_sdk()
    from gitsup.cluster.devserver import LOOPBACK, default_db, run_dev

    path = (db or default_db()).absolute()
    out(f"{LOOPBACK}:{port}")
    progress(
        f"Temporal dev server on {LOOPBACK}:{port}, state in {path}; "
        f"`git config sup.cluster.address {LOOPBACK}:{port}` points clones at it"
    )
    sys.stdout.flush()
    raise typer.Exit(run_dev(port, path))


@host_app.command("run")
def host_run_cmd(
    cluster: ClusterOpt = None,
    name: Annotated[
        str | None, typer.Option("--name", help="This host's name (default: the hostname).")
    ] = None,
    slots: Annotated[
        int, typer.Option("--slots", min=1, max=256, help="Tasks run here at once.")
    ] = 2,
    integrator: Annotated[
        bool,
        typer.Option(
            "--integrator",
            help="Also run the queue's signed integrations (the machine that holds the "
            "signing key; task hosts never get them).",
        ),
    ] = False,
    drain_timeout: Annotated[
        float,
        typer.Option(
            "--drain-timeout",
            min=0.0,
            help="Seconds a stopped host may take to hand its tasks over (default 60); "
            "a second SIGTERM or Ctrl-C also ends the wait.",
        ),
    ] = 60.0,
) -> None:
    """Serve this repository's cluster tasks from this clone until stopped (SIGTERM, Ctrl-C:
    running tasks are handed over: stopped here, their state published, and another host
    continues them)."""
    from gitsup.cluster.settings import require_sdk

    require_sdk()
    from gitsup.cluster.hostwork import serve
    from gitsup.cluster.settings import load
    from gitsup.store.suprepo import SupRepo

    ctx = SupRepo.discover()
    ctx.refuse_in_task("host run")
    settings = load(ctx.repo, cluster)
    host = name if name is not None else socket.gethostname()
    if not host or len(host) > 200 or not host.isprintable() or host.strip() != host:
        raise GitsupError(f"--name: not a host name: {host!r}")

    def ready() -> None:
        progress(f"host {host} serves {settings.describe()} with {slots} slot(s)")
        if integrator:
            progress(f"host {host} integrates for queue {settings.queue}")

    def abandoned(why: str) -> None:
        import os

        progress(why)
        sys.stderr.flush()
        os._exit(1)  # the hand-overs still running are not waited for

    serve(
        ctx,
        settings,
        name=host,
        slots=slots,
        integrator=integrator,
        drain=drain_timeout,
        on_ready=ready,
        on_abandon=abandoned,
    )


# --- a cluster task, from the clone that submitted it (`show`, `wait`, `stop`) -------------


def _settings_of(ctx: object, task: str) -> ClusterSettings:
    from gitsup.cluster.settings import require_sdk

    require_sdk()
    from gitsup.cluster.submit import cluster_task
    from gitsup.store.suprepo import SupRepo

    assert isinstance(ctx, SupRepo)
    settings = cluster_task(ctx, task)
    if settings is None:
        raise GitsupError(f"task {task}: its cluster record in this clone is unreadable")
    return settings


def fetch_after(ctx: object, task: str) -> None:
    """An ended cluster task's record comes into this clone (`log`, `report`, `show` read it
    here from then on); a failure to fetch it is said, not fatal."""
    from gitsup.cluster.submit import fetch_result
    from gitsup.store.suprepo import SupRepo

    assert isinstance(ctx, SupRepo)
    why = fetch_result(ctx, task)
    if why is not None:
        progress(f"task {task}: its record is not in this clone yet ({why})")


def control_cluster(ctx: object, task: str, kind: str, data: Mapping[str, object]) -> Taken:
    """`answer`, `send`, `continue` for a task this clone submitted to the cluster: to the host
    that runs it (gitsup/cluster/control.py)."""
    from gitsup.cluster.control import request
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.human import who

    settings = _settings_of(ctx, task)
    assert isinstance(ctx, SupRepo)
    return request(settings, task, kind, dict(data), by=who(ctx))


def show_cluster(ctx: object, task: str, *, json_out: bool) -> None:
    from gitsup.cli.output import emit_json
    from gitsup.cli.task_render import print_cluster_result
    from gitsup.cluster.submit import describe

    settings = _settings_of(ctx, task)
    res = describe(settings, task)
    res["cluster"] = settings.address
    if json_out:
        emit_json(res)
    elif res.get("state") == "running":
        out(f"task {task}: {res.get('where')} (cluster {settings.address})")
        for ask in res.get("pending") or []:
            out(f"needs human: {ask.get('tool')} {ask.get('summary')}")
            out(f"  git sup answer {task} {ask.get('request_id')} allow|deny [-m MESSAGE]")
    else:
        print_cluster_result(res)


def wait_cluster(ctx: object, task: str, *, timeout: float | None, json_out: bool) -> None:
    from gitsup.cli.output import emit_json
    from gitsup.cli.task_render import print_cluster_result
    from gitsup.cluster.submit import follow

    settings = _settings_of(ctx, task)
    res = follow(settings, task, timeout=timeout)
    fetch_after(ctx, task)
    if json_out:
        emit_json(res)
    else:
        print_cluster_result(res)
    raise typer.Exit(int(res.get("exit", 1)))


def stop_cluster(ctx: object, task: str, *, wait: float, json_out: bool) -> None:
    from gitsup.cli.output import emit_json
    from gitsup.cluster.submit import stop

    settings = _settings_of(ctx, task)
    res = stop(settings, task, wait=wait)
    fetch_after(ctx, task)
    if json_out:
        emit_json(res)
        return
    out(f"task {task}: {res.get('state')}")
    if res.get("wip"):
        out(f"uncommitted work saved in refs/sup/{task}/wip")
