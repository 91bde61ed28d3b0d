"""Rendering helpers for the CLI: progress on stderr, results on stdout."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any


def emit_json(value: Any) -> None:
    if hasattr(value, "model_dump"):  # a pydantic model (not imported for fast commands)
        value = value.model_dump(mode="json")
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")


def emit_json_rows(rows: list[Any]) -> None:
    """`emit_json(rows)`, byte for byte, faster for many flat rows (`ls --json`)."""
    sys.stdout.write(rows_json(rows) + "\n")


_CONTAINERS = (list, tuple, dict)
Encode = Callable[[Any], str]


@functools.cache
def _encoders() -> tuple[Encode, Encode]:
    """One row's values laid out one per line, and a single value."""
    from gitsup import jsonio  # `ls` has it loaded; other commands need not

    row = jsonio.compact_encoder(ensure_ascii=True, default=str, separators=(",\n    ", ": "))
    return row, jsonio.compact_encoder(ensure_ascii=True, default=str)


def rows_json(rows: list[Any]) -> str:
    """`json.dumps(rows, indent=2, default=str)`, byte for byte. The indenting encoder is
    Python through and through; here the layout is Python and the values are written by the
    C encoder: a row whose values hold no non-empty list or object in one call (with
    separators that lay it out the same: an encoded value holds no raw newline), others
    container by container."""
    row_encode, value_encode = _encoders()
    if not rows:
        return "[]"
    out = []
    for row in rows:
        flat = type(row) is dict and bool(row)
        if flat:
            for v in row.values():
                if v and isinstance(v, _CONTAINERS):
                    flat = False
                    break
        if flat:
            out.append("{\n    " + row_encode(row)[1:-1] + "\n  }")
        else:
            try:
                out.append(_indented(row, "\n  ", value_encode))
            except _NotPlain:
                out.append(json.dumps(row, indent=2, default=str).replace("\n", "\n  "))
    return "[\n  " + ",\n  ".join(out) + "\n]"


class _NotPlain(Exception):
    """A key that is not a string: the standard encoder converts (or refuses) it."""


def _indented(value: Any, newline: str, encode: Encode) -> str:
    """`value` as the indenting encoder lays it out at the depth `newline` opens."""
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        inner = newline + "  "
        return (
            "["
            + inner
            + ("," + inner).join(_indented(v, inner, encode) for v in value)
            + newline
            + "]"
        )
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = newline + "  "
        parts = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise _NotPlain
            parts.append(encode(k) + ": " + _indented(v, inner, encode))
        return "{" + inner + ("," + inner).join(parts) + newline + "}"
    return encode(value)


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
