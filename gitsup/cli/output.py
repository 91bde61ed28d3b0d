"""Rendering helpers for the CLI: progress on stderr, results on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit_json(value: Any) -> None:
    if hasattr(value, "model_dump"):  # a pydantic model (not imported for fast commands)
        value = value.model_dump(mode="json")
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")


def emit_jsonl(value: Any) -> None:
    if hasattr(value, "model_dump"):  # a pydantic model (not imported for fast commands)
        value = value.model_dump(mode="json")
    sys.stdout.write(json.dumps(value, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def progress(text: str) -> None:
    sys.stderr.write(f"git sup: {text}\n")
    sys.stderr.flush()


def use_colour(stream: Any = None) -> bool:
    """Colour only on a terminal, never with NO_COLOR set (https://no-color.org) or TERM=dumb."""
    import os

    stream = stream or sys.stderr
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())


_CODES = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


def paint(text: str, colour: str, on: bool) -> str:
    return f"\033[{_CODES[colour]}m{text}\033[0m" if on else text


def fold(text: str, *, lines: int = 3, width: int = 160) -> list[str]:
    """The last `lines` lines of `text`, each at most `width` characters, and a note of
    how much was folded away (nothing is dropped without saying so)."""
    all_lines = text.rstrip().splitlines()
    shown = all_lines[-lines:]
    out = []
    if len(all_lines) > lines:
        out.append(f"[{len(all_lines) - lines} earlier line(s) folded]")
    for line in shown:
        if len(line) > width:
            line = line[:width] + f" [+{len(line) - width} chars]"
        out.append(line)
    return out
