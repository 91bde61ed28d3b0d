"""What a Claude Code worker may not be started with: one table for both transports.

The headless worker (gitsup/workers/claude/worker.py) answers permission prompts over stdio, so
anything that would skip or pre-answer them is refused; the tmux worker
(gitsup/workers/claude/tmux.py) drives the interactive TUI and supervises it through hooks, so
anything that would turn the TUI into a print session or switch the hooks off is refused.
Each row says, per transport, why the flag is refused (None: allowed there).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from gitsup.workers.base import WorkerError

Transport = Literal["headless", "tmux"]

_TUI = "the tmux worker runs the interactive TUI"

# flag: (why refused for the headless worker, why refused for the tmux worker)
FLAGS: Mapping[str, tuple[str | None, str | None]] = {
    "--dangerously-skip-permissions": (
        "skips every permission check",
        "skips every permission check",
    ),
    "--allow-dangerously-skip-permissions": (
        "allows skipping every permission check",
        "allows skipping every permission check",
    ),
    "--permission-prompt-tool": (
        "gitsup answers permission prompts itself (stdio)",
        "permission prompts are answered through hooks",
    ),
    "--input-format": ("gitsup drives the worker over stream-json", _TUI),
    "--output-format": ("gitsup reads the worker's stream-json", _TUI),
    # The tmux worker lets only the 'user' source load (checked where it parses the value).
    "--setting-sources": ("gitsup loads no settings files but its own", None),
    "--bare": (None, "skips hooks, and hooks are how gitsup supervises the TUI"),
    "-p": (None, _TUI),
    "--print": (None, _TUI),
}

# `--permission-mode` / `permissions.defaultMode` values: the transports that refuse them.
# Headless, every mode but `default` answers some prompts without asking gitsup; through the
# TUI's hooks a PreToolUse answer still decides, so only bypassing them is refused there.
MODES: Mapping[str, frozenset[Transport]] = {
    "bypassPermissions": frozenset({"headless", "tmux"}),
    "dontAsk": frozenset({"headless"}),
    "acceptEdits": frozenset({"headless"}),
    "auto": frozenset({"headless"}),
    "plan": frozenset({"headless"}),
}


def refused_flags(transport: Transport) -> dict[str, str]:
    """Flag -> why it is refused, for one transport."""
    col = 0 if transport == "headless" else 1
    return {flag: why for flag, whys in FLAGS.items() if (why := whys[col]) is not None}


def refused_modes(transport: Transport) -> frozenset[str]:
    return frozenset(mode for mode, where in MODES.items() if transport in where)


# Why a refused `--permission-mode` is refused, per transport.
_MODE_WHY: Mapping[Transport, str] = {
    "headless": "it hides permission requests from gitsup",
    "tmux": "it skips the hooks gitsup supervises the TUI through",
}


def check_flag(transport: Transport, args: Sequence[str], i: int) -> None:
    """Refuse the argument `args[i]` when `transport` refuses its flag, or the mode it sets
    (`--permission-mode MODE` or `--permission-mode=MODE`)."""
    a = args[i]
    name, _, inline = a.partition("=")
    why = refused_flags(transport).get(name)
    if why is not None:
        raise WorkerError(f"worker argument {a!r} is refused: {why}")
    if name == "--permission-mode":
        mode = inline or (args[i + 1] if i + 1 < len(args) else "")
        if mode in refused_modes(transport):
            raise WorkerError(f"--permission-mode {mode} is refused: {_MODE_WHY[transport]}")


def read_settings_value(value: str, where: str, *, strict: bool) -> Any:
    """A `--settings` value: inline JSON, or the path of a JSON file. A file that cannot be
    read is refused; text that is not JSON is refused when `strict`, else None (the headless
    CLI ignores settings it cannot parse)."""
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).read_text()
        except OSError as exc:
            raise WorkerError(f"{where} {value!r} cannot be read: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        if strict:
            raise WorkerError(f"{where} is not valid JSON: {exc}") from exc
        return None
