"""tmux transport commands: `git sup attach ID [--read-only]`, `git sup adopt-tmux ID PANE`,
`git sup hook claude`, `git sup hooks install|uninstall`."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt, TaskArg
from gitsup.cli.output import emit_json
from gitsup.errors import GitsupError


def attach_argv(socket: str, *, read_only: bool) -> list[str]:
    tmux = shutil.which("tmux") or "tmux"
    argv = [tmux, "-S", socket, "attach-session", "-t", "gitsup"]
    if read_only:
        argv.append("-r")
    return argv


def task_socket(task: str) -> str:
    from gitsup.state import TERMINAL
    from gitsup.store.suprepo import SupRepo

    ctx = SupRepo.discover()
    record = ctx.store.load(task)
    if record.worker_kind != "tmux":
        raise GitsupError(
            f"task {task} runs a {record.worker_kind} worker; only tmux workers can be attached"
        )
    extra = (record.worker or {}).get("extra") or {}
    socket = extra.get("socket") if isinstance(extra, dict) else None
    if not socket or not Path(socket).exists():
        state = record.state.value
        hint = "the task has ended" if record.state in TERMINAL else "its tmux server is gone"
        raise GitsupError(f"task {task} ({state}) has no tmux session to attach to: {hint}")
    return str(socket)


@app.command("attach")
def attach_cmd(
    task: TaskArg,
    read_only: Annotated[
        bool, typer.Option("--read-only", "-r", help="Watch only; keys are not sent to the pane.")
    ] = False,
) -> None:
    """Attach this terminal to the task's Claude Code pane (tmux workers).

    Typing into the pane is a human takeover: automatic turns pause until
    `git sup resume-auto ID`. Detach with the tmux prefix key, then d (C-b d)."""
    socket = task_socket(task)
    argv = attach_argv(socket, read_only=read_only)
    if not sys.stdin.isatty():
        raise GitsupError("attach needs a terminal", hint=" ".join(argv))
    os.execvp(argv[0], argv)


@app.command("adopt-tmux")
def adopt_tmux_cmd(
    task: TaskArg,
    pane: Annotated[str, typer.Argument(help="The pane: its id (%3) or a tmux target.")],
    socket: Annotated[
        str | None,
        typer.Option("--socket", "-S", help="The tmux server's socket (default: your server)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Hand a tmux pane you started in a tmux task's worktree (`claude --setting-sources
    user` running there, `git sup hooks install` done) to a new supervisor of the task, which
    supervises it from then on. The task's supervisor must be gone. Runs in the foreground."""
    from gitsup.cli.task_render import ProgressRenderer, print_summary
    from gitsup.store.suprepo import SupRepo
    from gitsup.supervision.recovery import adopt_pane
    from gitsup.tasks.lifecycle import show_dict, status_exit

    ctx = SupRepo.discover()
    on_event = None if quiet else ProgressRenderer()
    record = adopt_pane(ctx, task, pane, socket=socket, on_event=on_event)
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        print_summary(ctx, record)
    raise typer.Exit(status_exit(record))


def _hook_app() -> typer.Typer:
    """The `hook` sub-app: the one the boundary commands registered, else our own."""
    from gitsup.cli import boundary_cmd  # noqa: F401  (registers the `hook` sub-app)

    for group in app.registered_groups:
        if group.name == "hook" and isinstance(group.typer_instance, typer.Typer):
            return group.typer_instance
    hook = typer.Typer(help="Git and Claude Code hooks (run by hooks, not by people).")
    app.add_typer(hook, name="hook")
    return hook


hook_app = _hook_app()


@hook_app.command("claude")
def hook_claude_cmd() -> None:
    """Claude Code command hook: forward the hook JSON on stdin to the supervisor owning
    the session's directory and print its answer (nothing when no supervisor owns it).

    Faster, for registering in Claude Code settings: `python3 -P -m gitsup.hookrelay`."""
    from gitsup.workers.claude.relay import main

    raise typer.Exit(main())


hooks_app = typer.Typer(
    help="gitsup's hook entries in your Claude Code settings (sessions you start in a task "
    "worktree then reach its supervisor)."
)
app.add_typer(hooks_app, name="hooks")


def _hooks_done(change: object, json_out: bool) -> None:
    from gitsup.cli.output import emit_json, out
    from gitsup.workers.claude.user_hooks import HooksChange

    assert isinstance(change, HooksChange)
    if json_out:
        emit_json(change.as_dict())
    elif not change.changed:
        out(f"{change.path}: unchanged (nothing to {change.action})")
    else:
        done = "installed" if change.action == "install" else "removed"
        out(f"{change.path}: {done} for {', '.join(change.events)}")
        if change.command:
            out(f"  command: {change.command}")


@hooks_app.command("install")
def hooks_install_cmd(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Add gitsup's relay (`python3 -P -m gitsup.hookrelay`, this interpreter) to the hooks of
    your Claude Code settings ($CLAUDE_CONFIG_DIR/settings.json, else ~/.claude/settings.json).
    Idempotent; your other settings and hooks stay. A settings file that is not valid JSON is
    refused (exit 2) and left untouched."""
    from gitsup.workers.claude.user_hooks import install, settings_path

    _hooks_done(install(settings_path(os.environ)), json_out)


@hooks_app.command("uninstall")
def hooks_uninstall_cmd(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Remove gitsup's relay entries from your Claude Code settings (only those; the groups and
    events they leave empty go too). A settings file that is not valid JSON is refused
    (exit 2) and left untouched."""
    from gitsup.workers.claude.user_hooks import settings_path, uninstall

    _hooks_done(uninstall(settings_path(os.environ)), json_out)
