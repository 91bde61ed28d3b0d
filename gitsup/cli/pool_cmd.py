"""`git sup pool`: spare worktrees that make `git sup start` skip the checkout."""

from __future__ import annotations

from typing import Annotated

import typer

from gitsup.cli.main import app
from gitsup.cli.output import emit_json, out

pool_app = typer.Typer(
    no_args_is_help=True,
    help="Spare worktrees (git config sup.poolSize N) so that starting a task skips the checkout.",
)
app.add_typer(pool_app, name="pool")


@pool_app.command("fill")
def fill_cmd(
    size: Annotated[
        int | None, typer.Option("--size", help="Spares to keep (default: sup.poolSize).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Make spare worktrees at HEAD until the pool is full."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.pool import fill

    ctx = SupRepo.discover()
    ctx.refuse_in_task("pool fill")
    made = fill(ctx, size)
    if json_out:
        emit_json([{"path": str(s.path), "commit": s.commit} for s in made])
        return
    out(f"made {len(made)} spare worktree(s)")


@pool_app.command("ls")
def ls_cmd(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the spare worktrees."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.pool import pool_size, spares

    ctx = SupRepo.discover()
    items = spares(ctx)
    if json_out:
        emit_json(
            {
                "size": pool_size(ctx),
                "spares": [{"path": str(s.path), "commit": s.commit} for s in items],
            }
        )
        return
    out(f"sup.poolSize = {pool_size(ctx)}; {len(items)} spare(s)")
    for s in items:
        out(f"  {s.commit[:12]}  {s.path}")


@pool_app.command("clear")
def clear_cmd() -> None:
    """Remove every spare worktree."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.pool import clear

    out(f"removed {clear(SupRepo.discover())} spare worktree(s)")
