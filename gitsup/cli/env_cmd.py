"""`git sup env`: a repository's task environment (docs/environments.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gitsup.cli.main import app
from gitsup.cli.output import emit_json, out

env_app = typer.Typer(
    no_args_is_help=True,
    help="The task environment: what a task's worktree gets besides its checkout "
    "(.gitsup/environment.toml).",
)
app.add_typer(env_app, name="env")


@env_app.command("show")
def show_cmd(
    spec: Annotated[
        Path | None,
        typer.Option("--spec", help="A task spec whose [environment] keys replace the file's."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print the environment recipe (.gitsup/environment.toml of the main checkout, with
    --spec's [environment] over it) and what it resolves to on this host: each include
    path present or missing, its size, how a task gets it (overlay, reflink, copy), and the
    refused entries and why."""
    from gitsup.spec import load_spec
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.environment import show

    ctx = SupRepo.discover()
    data = show(ctx, load_spec(spec) if spec is not None else None)
    if json_out:
        emit_json(data)
        return
    for line in render(data):
        out(line)


def render(data: dict[str, Any]) -> list[str]:
    recipe = data["recipe"]
    src = recipe["sources"]
    lines = [f"recipe    {data['file'] or '(no .gitsup/environment.toml)'}"]
    sandbox = data["sandbox"]
    lines.append(
        f"sandbox   {sandbox['mode']}"
        + (
            ""
            if sandbox["overlayfs"]
            else " (no mount namespace or overlayfs: directories are copied)"
        )
    )
    if not recipe["include"] and not data["refused"]:
        lines.append("include   (none)")
    for e in data["include"]:
        if not e["present"]:
            lines.append(f"include   {e['path']}: missing in the main checkout")
            continue
        lines.append(
            f"include   {e['path']}: {e['kind']}, {_size(e['bytes'])}, {e['files']} files; "
            f"{e['method']} (from {src['include']})"
        )
    for r in data["refused"]:
        lines.append(f"refused   {r}")
    for key in ("setup", "setup_egress", "cache"):
        if recipe[key]:
            shown = [" ".join(a) if isinstance(a, list) else a for a in recipe[key]]
            lines.append(f"{key:<9} {'; '.join(shown)} (from {src[key]})")
    return lines


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


@env_app.command("warm")
def warm_cmd(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Fill the shared package caches ([environment] cache) by running the recipe's setup
    on the main checkout's HEAD, confined, with the caches writable; tasks get a copy of
    them. Prints what it ran and the caches' sizes; exit 2 when the recipe names nothing
    to warm, 4 when a setup command failed (the caches are then unchanged)."""
    from gitsup.cli.output import progress
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.envwarm import warm

    ctx = SupRepo.discover()
    data = warm(ctx, say=progress)
    if json_out:
        emit_json(data)
        return
    for name, c in data["caches"].items():
        out(f"cache {name}: {_size(c['bytes'])} in {c['path']}")
    out(
        f"setup {data['setup_seconds']:.1f}s, {data['seconds']:.1f}s in all (on {data['commit'][:12]})"
    )
