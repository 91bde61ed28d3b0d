"""`git sup demo`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gitsup.cli.main import app
from gitsup.cli.output import emit_json, out, progress
from gitsup.cli.task_render import ProgressRenderer


@app.command("demo")
def demo_cmd(
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Where to create the throwaway repository.")
    ] = None,
    worker: Annotated[str, typer.Option("--worker", help="auto | claude | process")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run one scripted task through the whole loop in a throwaway repo (no network, no API key)."""
    from gitsup.demo.run import run_demo
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import show_dict, status_exit

    if directory is not None:
        directory = directory.resolve()
    if not quiet:
        progress("creating a throwaway repository with a broken add() and a failing test")
    res = run_demo(directory, worker=worker, on_event=None if quiet else ProgressRenderer())
    rec = res.record
    if json_out:
        d = show_dict(SupRepo.discover(res.repo), rec)
        d["demo"] = {"repo": str(res.repo), "worker": res.worker}
        emit_json(d)
        raise typer.Exit(status_exit(rec))
    out(f"demo repository: {res.repo}")
    out(f"worker: {res.worker}")
    out(f"task {rec.id}: {rec.status.value}")
    for r in rec.reasons:
        out(f"  reason: {r}")
    if rec.candidate:
        r = f"refs/sup/{rec.id}"
        out("")
        out("Inspect the candidate with plain Git:")
        out(f"  cd {res.repo}")
        for comment, cmd in (
            ("the work, with its note", f"git log --notes=sup {r}/baseline..{r}/candidate"),
            ("what changed", f"git diff {r}/baseline {r}/candidate"),
            ("checks, turns, cost, status", f"git notes --ref=sup show {r}/candidate"),
            ("the sealed lifecycle", f"git log --format='%h %s' {r}/log"),
            ("the task record and its events", f"git sup show {rec.id}; git sup log {rec.id}"),
        ):
            out(f"  # {comment}")
            out(f"  {cmd}")
    raise typer.Exit(status_exit(rec))
