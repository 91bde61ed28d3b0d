"""Claude Code's configuration for one task: a private copy inside the task's sandbox.

A task that runs Claude Code (a claude, tmux or ACP worker, a claude reviewer or decider)
never sees the user's own config dir (`CLAUDE_CONFIG_DIR`, else `~/.claude` and
`~/.claude.json`). Its private HOME (`<task dir>/sandbox/home`) holds a directory `.claude`
with copies of what configures Claude Code:

* the settings files, the user memory (`CLAUDE.md`), `agents/`, `commands/`, `skills/`,
  `output-styles/`, `rules/` and `keybindings.json`;
* the credentials file `.credentials.json`, which the sandbox binds read-only over itself
  (gitsup/host/bootstrap.py, `ro`), so no process of the task can change it;
* the state file `.claude.json` (onboarding, approved keys, trusted folders): in the private
  HOME, or inside the copy when the user sets `CLAUDE_CONFIG_DIR` (the task's
  `CLAUDE_CONFIG_DIR` then names the copy).

The copy is made again before every process of the task starts: whatever the task wrote to
those entries (a hook in `settings.json`, a `CLAUDE.md`, credentials) is replaced by the
user's current version, or removed when the user has none. Everything else Claude Code
writes there (sessions under `projects/`, todos, caches) is the task's own and stays. Nothing
is ever written back to the user's config, and no other task sees this one's copy.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gitsup.errors import GitsupError

# What configures Claude Code, copied from the user's config dir before every spawn.
CONFIG_ENTRIES = (
    "settings.json",
    "settings.local.json",
    "CLAUDE.md",
    "agents",
    "commands",
    "skills",
    "output-styles",
    "rules",
    "keybindings.json",
)
CREDENTIALS = ".credentials.json"
STATE = ".claude.json"
_PENDING = ".gitsup-copy"
_LOCK = threading.Lock()  # processes of a task may start from several threads


@dataclass(frozen=True)
class ClaudeConfig:
    """One task's copy of the user's Claude Code configuration."""

    source: Path  # the user's config dir (CLAUDE_CONFIG_DIR, else ~/.claude); may not exist
    state_source: Path  # the user's state file
    target: Path  # <task dir>/sandbox/home/.claude
    explicit: bool  # the user sets CLAUDE_CONFIG_DIR: the task's names the copy

    @property
    def state_target(self) -> Path:
        return self.target / STATE if self.explicit else self.target.parent / STATE

    @property
    def credentials(self) -> Path:
        return self.target / CREDENTIALS

    def env(self) -> dict[str, str]:
        """What the task's environment needs to find the copy."""
        return {"CLAUDE_CONFIG_DIR": str(self.target)} if self.explicit else {}

    def refresh(self) -> None:
        """Make the copy match the user's config again (before each process of the task)."""
        with _LOCK:
            self._refresh()

    def _refresh(self) -> None:
        try:
            if self.target.is_symlink() or (self.target.exists() and not self.target.is_dir()):
                self.target.unlink()  # a link to the user's dir, from an older gitsup
            self.target.mkdir(mode=0o700, exist_ok=True)
            for name in (*CONFIG_ENTRIES, CREDENTIALS):
                _replace(self.source / name, self.target / name)
            _replace(self.state_source, self.state_target)
        except OSError as exc:
            raise GitsupError(
                f"cannot copy Claude Code's configuration into the task's sandbox: {exc}",
                hint=f"check that {self.source} is readable",
            ) from None


def claude_config(env: Mapping[str, str], user_home: str, private_home: Path) -> ClaudeConfig:
    """The copy for a task whose private HOME is `private_home`, from the config the user's
    environment `env` names."""
    given = env.get("CLAUDE_CONFIG_DIR", "")
    if given:
        if given == "~" or given.startswith("~/"):
            given = user_home + given[1:]
        source = Path(os.path.abspath(given))
        state = source / STATE
    else:
        source = Path(user_home, ".claude")
        state = Path(user_home, STATE)
    return ClaudeConfig(source, state, private_home / ".claude", bool(given))


def _replace(src: Path, dst: Path) -> None:
    """`dst` becomes a copy of `src` (following links), or disappears when `src` does not
    exist. Files are replaced by a rename, so a running process reads the old or the new."""
    pending = dst.with_name(dst.name + _PENDING)
    _remove(pending)
    if src.is_dir():
        shutil.copytree(src, pending, symlinks=False)
        _remove(dst)
        pending.rename(dst)
    elif src.is_file():
        shutil.copyfile(src, pending)
        os.chmod(pending, 0o600)
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        os.replace(pending, dst)
    else:
        _remove(dst)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.is_symlink() or p.exists():
        p.unlink()
