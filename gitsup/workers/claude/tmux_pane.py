"""A tmux pane a person started, inspected before `git sup adopt-tmux` hands it to a task's
supervisor (docs/tmux.md, "Adopting a pane you started").

The pane is found on the tmux server its socket names (the person's default server when
none is given), every tmux call bounded like the worker's own. It is adopted only when:
the pane exists and its process lives; that process runs in the task's worktree and
belongs to this user; it, or a process below it, runs the task's agent executable (the
running file's sha256 is the one recorded when the task started); that Claude Code runs
with `--setting-sources user` (the worktree's settings files, which the agent can write,
never load) and no argument that would switch supervision off (as the tmux worker refuses
them);
and the settings it loads carry gitsup's relay hooks (`git sup hooks install`) and do not
switch hooks off: without them no decision would reach the supervisor. What is found
becomes the worker identity the tmux worker re-adopts (pane id, pid, start time, cwd,
command, socket), the same checks then run again at adoption.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitsup.errors import GitsupError
from gitsup.host import proc
from gitsup.workers.base import WorkerError

TMUX_TIMEOUT = 10.0
_FORMAT = "#{pane_id}\t#{pane_pid}\t#{pane_dead}\t#{socket_path}"


class PaneRefused(GitsupError):
    """The pane is not one `adopt-tmux` hands to the task (exit 2)."""


def _tmux(socket: str | None, *args: str) -> list[str]:
    argv = ["tmux", *(["-S", socket] if socket else []), *args]
    try:
        res = proc.run(argv, timeout=TMUX_TIMEOUT)
    except GitsupError as exc:
        raise PaneRefused(f"tmux {args[0]} failed: {exc}") from exc
    if not res.ok:
        why = f"timed out after {TMUX_TIMEOUT:g}s" if res.timed_out else res.output.strip()[:300]
        raise PaneRefused(f"no tmux pane {args[-2] if len(args) > 2 else ''}: {why}".strip())
    return res.output.splitlines()


@dataclass(frozen=True)
class PaneProcess:
    """A live pane of this user's in the task's worktree (`locate_pane`)."""

    pane_id: str
    pid: int
    socket: str
    start_time: float
    cwd: str
    command: list[str]


@dataclass(frozen=True)
class PaneFound(PaneProcess):
    """A pane that runs the task's agent (`check_agent`)."""

    agent_pid: int  # the pane's process or the one below it that runs the agent

    def identity(self) -> dict[str, Any]:
        """The worker identity the tmux worker re-adopts (gitsup/workers/claude/tmux.py)."""
        return {
            "pid": self.pid,
            "start_time": self.start_time,
            "pgid": self.pid,
            "extra": {
                "socket": self.socket,
                "session": None,
                "pane_id": self.pane_id,
                "pane_pid": self.pid,
                "pane_start_time": self.start_time,
                "cwd": self.cwd,
                "command": self.command,
                "agent_pid": self.agent_pid,
                "started_by": "user",
            },
        }


def locate_pane(pane: str, *, socket: str | None, worktree: Path) -> PaneProcess:
    """The pane `pane` (an id such as `%3`, or any tmux target): it exists, its process
    lives, belongs to this user and runs in `worktree`; PaneRefused says why not."""
    import psutil

    if not pane or pane.startswith("-"):
        raise PaneRefused(f"{pane!r} is not a tmux pane (an id such as %3, or a target)")
    out = _tmux(socket, "display-message", "-p", "-t", pane, _FORMAT)
    parts = (out[0] if out else "").split("\t")
    if len(parts) != 4 or not parts[0].startswith("%"):
        raise PaneRefused(f"no tmux pane {pane}")
    pane_id, pid_text, dead, sock = parts
    if dead == "1":
        raise PaneRefused(f"tmux pane {pane_id}: its process has exited (a dead pane)")
    try:
        p = psutil.Process(int(pid_text))
        start, cwd, command, uids = p.create_time(), p.cwd(), p.cmdline(), p.uids()
    except (ValueError, psutil.Error) as exc:
        raise PaneRefused(f"tmux pane {pane_id}: its process is gone ({exc})") from exc
    if uids.real != os.getuid():
        raise PaneRefused(f"tmux pane {pane_id} runs as uid {uids.real}, not as this user")
    want = os.path.realpath(worktree)
    if os.path.realpath(cwd) != want:
        raise PaneRefused(f"tmux pane {pane_id} runs in {cwd}, not in the task's worktree {want}")
    return PaneProcess(pane_id, p.pid, os.path.realpath(sock), start, cwd, command)


def check_agent(
    found: PaneProcess, *, worktree: Path, agent_sha256: str | None, env: Mapping[str, str]
) -> PaneFound:
    """The pane runs the task's agent executable, and that Claude Code reaches the
    supervisor; PaneRefused says why not."""
    import psutil

    try:
        root = psutil.Process(found.pid)
    except psutil.Error as exc:
        raise PaneRefused(f"tmux pane {found.pane_id}: its process is gone ({exc})") from exc
    agent = _agent_process(root, agent_sha256)
    if agent is None:
        raise PaneRefused(
            f"no process in tmux pane {found.pane_id} runs the task's agent executable"
            + ("" if agent_sha256 else " (the task recorded none)")
        )
    _check_supervisable(agent, worktree, env, found.pane_id)
    return PaneFound(**dataclasses.asdict(found), agent_pid=agent.pid)


def _agent_process(root: Any, sha256: str | None) -> Any:
    """The pane's process, or one below it, whose running executable has `sha256`."""
    import psutil

    if not sha256:
        return None
    with contextlib.suppress(psutil.Error):
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error, OSError):
                if p.uids().real == os.getuid() and _sha256(f"/proc/{p.pid}/exe") == sha256:
                    return p
    return None


def _sha256(path: str) -> str:
    """The running file's digest (`/proc/<pid>/exe` reads the file the process runs, even
    one replaced on disk since)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _user_settings_only(args: list[str]) -> bool:
    """`--setting-sources user` (or `=user`) is among the arguments."""
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name == "--setting-sources":
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            return {v.strip() for v in value.split(",") if v.strip()} == {"user"}
    return False


def _check_supervisable(agent: Any, worktree: Path, env: Mapping[str, str], pane: str) -> None:
    """The pane's Claude Code asks the supervisor: no argument that switches supervision
    off, gitsup's relay hooks in the user settings it loads, nothing that disables hooks."""
    import psutil

    from gitsup.workers.claude.tmux_setup import check_tmux_settings, split_arguments
    from gitsup.workers.claude.user_hooks import EVENTS, is_gitsup_hook
    from gitsup.workers.claude.worker import loaded_settings_files, read_settings_files

    try:
        args, environ = agent.cmdline()[1:], agent.environ()
    except psutil.Error as exc:
        raise PaneRefused(f"tmux pane {pane}: cannot read its agent's process ({exc})") from exc
    their_env = {**env, **{k: environ[k] for k in ("CLAUDE_CONFIG_DIR", "HOME") if k in environ}}
    if not _user_settings_only(args):
        # the worktree's own settings files could switch the hooks off during the session
        # (disableAllHooks), as the tmux worker's own panes never load them
        raise PaneRefused(
            f"tmux pane {pane}: its Claude Code loads the worktree's settings files, which "
            "the agent could change to switch gitsup's hooks off; start it with "
            "`--setting-sources user`"
        )
    try:
        _rest, extra_settings = split_arguments(args)
        files = list(read_settings_files(loaded_settings_files(worktree, their_env)))
        for f, data in files:
            check_tmux_settings(data, str(f))
        for data in extra_settings:
            check_tmux_settings(data, "--settings")
    except WorkerError as exc:
        raise PaneRefused(f"tmux pane {pane}: {exc}") from exc
    user = (
        files[0][1]
        if files and files[0][0] == loaded_settings_files(worktree, their_env)[0]
        else {}
    )
    hooks = user.get("hooks") if isinstance(user, dict) else None
    missing = [
        ev
        for ev in EVENTS
        if not any(
            is_gitsup_hook(h)
            for group in ((hooks or {}).get(ev) or [] if isinstance(hooks, dict) else [])
            if isinstance(group, dict)
            for h in (group.get("hooks") or [])
        )
    ]
    if missing:
        raise PaneRefused(
            f"tmux pane {pane}: its Claude Code settings lack gitsup's hooks for "
            + ", ".join(missing)
            + ": no decision would reach the supervisor (`git sup hooks install`, then start "
            "Claude Code again)"
        )
