"""`git sup hooks install|uninstall`: gitsup's command-hook entries in the user's Claude Code
settings (`$CLAUDE_CONFIG_DIR/settings.json`, else `~/.claude/settings.json`), so that a
session a person starts in a task worktree reaches that task's supervisor through the relay
(`python3 -P -m gitsup.hookrelay`, gitsup/workers/claude/relay.py; docs/tmux.md).

An entry is gitsup's when it is a `command` hook whose command runs the module
`gitsup.hookrelay`. Install adds one per event (or updates the interpreter of one already
there); uninstall removes exactly those, and the groups and events they leave empty.
Everything else in the file stays as it was (its formatting aside: the file is rewritten as
JSON with two-space indents, and only when something changes). A file that is not a JSON
object, or whose `hooks` are not shaped as Claude Code reads them, is refused and left
untouched. The file is replaced atomically, with its mode kept (0600 for a new one).
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitsup.errors import GitsupError
from gitsup.host.fsutil import atomic_write

RELAY_MODULE = "gitsup.hookrelay"
EVENTS = ("PreToolUse", "PermissionRequest", "UserPromptSubmit", "Stop")


def settings_path(env: Mapping[str, str]) -> Path:
    """The user's Claude Code settings file (`CLAUDE_CONFIG_DIR`, else `~/.claude`)."""
    config = env.get("CLAUDE_CONFIG_DIR")
    home = env.get("HOME") or os.path.expanduser("~")
    return (Path(config) if config else Path(home) / ".claude") / "settings.json"


def relay_command(python: str | None = None) -> str:
    """The command that runs the relay with the interpreter that has gitsup installed."""
    return f"{shlex.quote(python or sys.executable)} -P -m {RELAY_MODULE}"


def is_gitsup_hook(handler: Any) -> bool:
    if not isinstance(handler, dict) or handler.get("type") != "command":
        return False
    cmd = handler.get("command")
    if not isinstance(cmd, str):
        return False
    try:
        words = shlex.split(cmd)
    except ValueError:
        return False
    return any(a == "-m" and b == RELAY_MODULE for a, b in itertools.pairwise(words))


@dataclass
class HooksChange:
    path: str
    action: str  # install | uninstall
    changed: bool
    events: list[str] = field(default_factory=list)  # the events whose entries changed
    command: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "action": self.action,
            "changed": self.changed,
            "events": self.events,
            "command": self.command,
        }


def install(path: Path, command: str | None = None) -> HooksChange:
    cmd = command or relay_command()
    data = _load(path)
    hooks = data.setdefault("hooks", {})
    changed: list[str] = []
    for event in EVENTS:
        groups = hooks.setdefault(event, [])
        mine = [h for g in groups for h in g.get("hooks", []) if is_gitsup_hook(h)]
        if mine:
            if mine[0]["command"] != cmd:
                mine[0]["command"] = cmd
                changed.append(event)
            if len(mine) > 1:  # one entry is enough: a second would relay each event twice
                changed.append(event)
                for g in groups:
                    if any(is_gitsup_hook(h) for h in g.get("hooks", [])):
                        g["hooks"] = [
                            h for h in g["hooks"] if not is_gitsup_hook(h) or h is mine[0]
                        ]
                groups[:] = [g for g in groups if g.get("hooks", [None])]
        else:
            groups.append({"hooks": [{"type": "command", "command": cmd}]})
            changed.append(event)
    events = sorted(set(changed), key=EVENTS.index)
    if events:
        _write(path, data)
    return HooksChange(str(path), "install", bool(events), events, cmd)


def uninstall(path: Path) -> HooksChange:
    if not path.exists():
        return HooksChange(str(path), "uninstall", False)
    data = _load(path)
    hooks = data.get("hooks")
    changed: list[str] = []
    if isinstance(hooks, dict):
        for event in list(hooks):
            groups = hooks[event]
            hit = [g for g in groups if any(is_gitsup_hook(h) for h in g.get("hooks", []))]
            if not hit:
                continue
            changed.append(event)
            for g in hit:
                g["hooks"] = [h for h in g["hooks"] if not is_gitsup_hook(h)]
            groups[:] = [g for g in groups if g.get("hooks") or not any(g is x for x in hit)]
            if not groups:
                del hooks[event]
        if changed and not hooks:
            del data["hooks"]
    if changed:
        _write(path, data)
    return HooksChange(str(path), "uninstall", bool(changed), changed)


def _load(path: Path) -> dict[str, Any]:
    """The settings as JSON, checked where gitsup will change them; refused (exit 2) if not
    a JSON object or its `hooks` are not `{event: [{"hooks": [{...}]}]}`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise GitsupError(f"cannot read {path}: {exc}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _corrupt(path, f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _corrupt(path, "not a JSON object")
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise _corrupt(path, '"hooks" is not an object')
    for event, groups in hooks.items():
        if not isinstance(groups, list) or not all(
            isinstance(g, dict) and isinstance(g.get("hooks", []), list) for g in groups
        ):
            raise _corrupt(path, f'"hooks.{event}" is not a list of {{"hooks": [...]}} groups')
    return data


def _corrupt(path: Path, why: str) -> GitsupError:
    return GitsupError(
        f"{path} is {why}; it was left as it is",
        hint="fix the file (Claude Code would not read it either), then run this again",
    )


def _write(path: Path, data: Mapping[str, Any]) -> None:
    """Replace the file (through a symlink to it) atomically, keeping its mode."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o600
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    atomic_write(target, text.encode("utf-8"), mode=mode)
