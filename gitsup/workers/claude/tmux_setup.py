"""The tmux worker's configuration: what its Claude Code may be started with (the one table in
gitsup/workers/claude/rules.py), its settings file merged with gitsup's hooks, the text it may
be given, and where its tmux socket goes."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gitsup.workers.base import WorkerError
from gitsup.workers.claude.rules import (
    check_flag,
    read_settings_value,
    refused_modes,
)

_SUN_PATH_MAX = 104
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
_BAD_MODES = refused_modes("tmux")


def check_tmux_settings(data: Any, where: str) -> None:
    """Settings the TUI loads must not switch off gitsup's hooks.

    Pre-allowed tools (``permissions.allow``) are accepted for this transport: the
    PreToolUse hook answer is the enforced boundary and a deny there wins over any allow
    rule (measured with 2.1.328)."""
    if not isinstance(data, Mapping):
        return
    if data.get("disableAllHooks") is True:
        raise WorkerError(f"{where} sets disableAllHooks, which switches gitsup's supervision off")
    perms = data.get("permissions")
    if isinstance(perms, Mapping):
        mode = perms.get("defaultMode")
        if isinstance(mode, str) and mode in _BAD_MODES:
            raise WorkerError(f"{where} sets permissions.defaultMode = {mode!r}")


def split_arguments(args: Sequence[str]) -> tuple[list[str], list[Any]]:
    """Check the worker's extra arguments; return (the rest, the --settings values read).

    gitsup passes one `--settings` of its own; user `--settings` values are merged into it."""
    rest: list[str] = []
    settings: list[Any] = []
    i = 0
    while i < len(args):
        a = args[i]
        check_flag("tmux", args, i)
        name, eq, inline = a.partition("=")
        if name == "--setting-sources":
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            sources = {v.strip() for v in value.split(",") if v.strip()}
            if sources - {"user"}:
                raise WorkerError(
                    f"--setting-sources {value!r} is refused: the worktree's own settings files "
                    "could switch gitsup's hooks off (disableAllHooks); only 'user' may load"
                )
        if name == "--settings":
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            data = read_settings_value(value, "--settings", strict=True)
            check_tmux_settings(data, "--settings")
            settings.append(data)
            i += 1 if eq else 2
            continue
        rest.append(a)
        i += 1
    return rest, settings


def merge_settings(user: Sequence[Any], hooks: Mapping[str, Any]) -> dict[str, Any]:
    """User settings (later wins), then gitsup's hooks added to any hooks they define."""
    merged: dict[str, Any] = {}
    for data in user:
        if isinstance(data, Mapping):
            for k, v in data.items():
                if k == "permissions" and isinstance(v, Mapping):
                    merged.setdefault("permissions", {}).update(v)
                else:
                    merged[k] = v
    all_hooks: dict[str, Any] = {}
    existing = merged.get("hooks")
    if isinstance(existing, Mapping):
        all_hooks.update({k: list(v) for k, v in existing.items() if isinstance(v, list)})
    for event, groups in hooks.items():
        all_hooks[event] = [*all_hooks.get(event, []), *groups]
    merged["hooks"] = all_hooks
    merged.pop("disableAllHooks", None)
    return merged


def clean_input(text: str) -> str:
    """Task input as it will be pasted: CRLF/CR -> LF; other control bytes are refused."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    bad = _CONTROL.search(text)
    if bad is not None:
        raise WorkerError(
            f"task input contains the control character {bad.group()!r} at offset {bad.start()}"
        )
    return text


def tmux_socket_path(task_dir: Path, task_id: str) -> Path:
    primary = task_dir / "tmux.sock"
    if len(str(primary).encode()) < _SUN_PATH_MAX:
        return primary
    return Path(f"/tmp/gitsup-{os.getuid()}") / f"t-{task_id}.sock"
