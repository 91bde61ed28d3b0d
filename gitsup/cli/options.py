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
