"""What `git sup start` proves before it writes anything: every check's executable
resolves, the worker, decider and reviewer can run (Claude Code found, runnable, with
credentials), and the worktree root can be created. A refusal is a GitsupError (exit 2)
naming what is missing and how to fix it; no task, branch, worktree or config is left."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gitsup.errors import GitsupError

if TYPE_CHECKING:
    from gitsup.git import GitRepo
    from gitsup.ids import Oid
    from gitsup.spec import TaskSpec
    from gitsup.store.suprepo import SupRepo
    from gitsup.workers.agentbin import AgentBinary

_CLAUDE_CHOICES = (
    "install Claude Code (npm install -g @anthropic-ai/claude-code, or in the project: "
    "npm install --prefix .tools/claude @anthropic-ai/claude-code), "
    "or set GITSUP_CLAUDE_BIN to its path, or name it in {setting}"
)
_SETTING = {"worker": "[worker] argv", "reviewer": "[review] argv", "decider": "[decider] argv"}

_runnable_cache: dict[tuple[str, float], str | None] = {}
# what `--version` said, for the agent's recorded identity (asked once)
_version_cache: dict[tuple[str, float], str | None] = {}


def task_env(spec: TaskSpec) -> dict[str, str]:
    """The environment the worker, checks and reviewer will see (as the supervisor builds it)."""
    from gitsup.host.proc import child_env

    env = child_env(drop=("CLAUDECODE",))
    env.update(spec.worker.env)
    return env


def preflight_start(ctx: SupRepo, spec: TaskSpec, baseline: Oid) -> AgentBinary | None:
    """Raise a GitsupError (exit 2) for the first thing that would make the task fail late.
    Returns the identity of the agent the worker runs (None: not an agent worker)."""
    env = task_env(spec)
    problems: list[str] = []
    hints: list[str] = []
    # before anything of the agent runs (the version probe below): its executable is checked
    from gitsup.workers.agentbin import UnsafeBinary

    try:
        agent = worker_agent_binary(ctx.repo, spec, env)
    except UnsafeBinary as exc:
        raise GitsupError(f"cannot start the task:\n  worker: {exc.message}") from None
    problems += check_executables(ctx, spec, baseline, env)
    for role, p, h in claude_problems(spec, env):
        problems.append(f"{role}: {p}")
        hints.append(h)
    for role, argv in _command_roles(spec):
        if not argv:
            problems.append(f'{role}: kind = "command" needs an argv')
            continue
        why = _unresolved(argv[0], env, ctx, baseline)
        if why:
            problems.append(f"{role}: {why}")
    problems += acp_problems(spec, env)
    if spec.worker.kind == "process":
        if not spec.worker.argv:
            problems.append('worker: kind = "process" needs an argv (--worker "command")')
        else:
            why = _unresolved(spec.worker.argv[0], env, ctx, baseline)
            if why:
                problems.append(f"worker: {why}")
    from gitsup.store.taskgit import ImportLimits

    try:  # a bad `sup.limits.*` value is said now, not when the work is imported
        ImportLimits.resolve(ctx.repo, spec.limits.model_dump())
    except GitsupError as exc:
        problems.append(exc.message)
    root_problem = worktree_root_problem(ctx)
    if root_problem:
        problems.append(root_problem)
    if problems:
        raise GitsupError(
            "cannot start the task:\n" + "\n".join(f"  {p}" for p in problems),
            hint="; ".join(dict.fromkeys(hints)) or None,
        )
    if agent is not None and agent.version is None:
        import dataclasses

        with contextlib.suppress(OSError):
            version = _version_cache.get((agent.found, os.stat(agent.found).st_mtime))
            agent = dataclasses.replace(agent, version=version)
    return agent


def worker_agent_binary(
    repo: GitRepo, spec: TaskSpec, env: Mapping[str, str] | None = None
) -> AgentBinary | None:
    """The checked identity of the worker's agent executable (gitsup/workers/agentbin.py);
    raises a GitsupError (exit 2) naming why it is refused."""
    from gitsup.workers.agentbin import worker_binary
    from gitsup.workers.kinds import worker_kind

    agent = worker_kind(spec.worker.kind).agent
    if agent is None:
        return None
    pin = repo.config_get(f"sup.{agent}.sha256")
    return worker_binary(
        spec.worker.kind, spec.worker.argv, task_env(spec) if env is None else env, pin
    )


def acp_problems(spec: TaskSpec, env: Mapping[str, str]) -> list[str]:
    """An acp or codex worker's, reviewer's or decider's agent that cannot be found."""
    from gitsup.spec import decider_argv, review_argv
    from gitsup.workers.base import WorkerError

    roles: list[tuple[str, list[str], str]] = []
    if spec.worker.kind in ("acp", "codex"):
        roles.append(("worker", list(spec.worker.argv), spec.worker.kind))
    if spec.review.kind in ("acp", "codex"):
        roles.append(("reviewer", review_argv(spec), spec.review.kind))
    if spec.decider.machine_kind() in ("acp", "codex"):
        roles.append(("decider", decider_argv(spec), spec.decider.machine_kind()))
    out = []
    for role, role_argv, agent in roles:
        try:
            _find_agent(agent)(role_argv, env, _SETTING[role])
        except WorkerError as exc:
            out.append(f"{role}: {exc}")
    return out


def _find_agent(kind: str) -> Callable[[Sequence[str], Mapping[str, str], str], list[str]]:
    """The agent lookup of an acp or codex role (imported only for a task that has one)."""
    if kind == "acp":
        from gitsup.workers.acp.worker import find_acp

        return find_acp
    from gitsup.workers.codex.worker import find_codex

    return find_codex


def _command_roles(spec: TaskSpec) -> list[tuple[str, list[str]]]:
    roles = []
    if spec.review.kind == "command":
        roles.append(("reviewer", list(spec.review.argv)))
    if spec.decider.machine_kind() == "command":
        roles.append(("decider", list(spec.decider.argv)))
    return roles


def check_executables(
    ctx: SupRepo, spec: TaskSpec, baseline: Oid, env: Mapping[str, str]
) -> list[str]:
    out = []
    for check in spec.checks:
        why = _unresolved(check.argv[0], env, ctx, baseline)
        if why:
            out.append(f"check {check.name!r}: {why}")
    return out


def _unresolved(exe: str, env: Mapping[str, str], ctx: SupRepo, baseline: Oid) -> str | None:
    """Why `exe` would not start in the worktree, or None. A bare name is looked up on the
    PATH the process will see; a relative path must be a file of the baseline."""
    if not exe:
        return "the command is empty"
    if os.sep not in exe:
        if shutil.which(exe, path=env.get("PATH")) is None:
            return f"{exe!r} is not an executable on PATH ({env.get('PATH', '')})"
        return None
    if os.path.isabs(exe):
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            return f"{exe} is not an executable file"
        return None
    rel = posixpath.normpath(exe)
    if rel.startswith("../") or rel == "..":
        full = ctx.repo.main_workdir / exe
        if not (full.is_file() and os.access(full, os.X_OK)):
            return f"{exe} (relative to the worktree) is not an executable file"
        return None
    if not ctx.repo.tree_has_file(baseline, rel):
        return f"{exe} is not a file in the baseline {baseline[:12]} (checks run in the worktree)"
    return None


def claude_problems(spec: TaskSpec, env: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(role, problem, hint) for every role that runs Claude Code and could not."""
    from gitsup.spec import decider_argv, review_argv

    roles: list[tuple[str, Sequence[str], str]] = []
    if spec.worker.kind == "claude":
        roles.append(
            ("worker", list(spec.worker.argv), 'or run another worker: --worker "command"')
        )
    if spec.decider.machine_kind() == "claude":
        roles.append(("decider", decider_argv(spec), 'or [decider] kind = "rules"'))
    if spec.review.kind == "claude":
        roles.append(
            (
                "reviewer",
                review_argv(spec),
                'or review another way: --review none, or [review] kind = "command" with an argv',
            )
        )
    out: list[tuple[str, str, str]] = []
    for role, argv, alternative in roles:
        why = claude_missing(argv, env, _SETTING[role])
        if why:
            choices = _CLAUDE_CHOICES.format(setting=_SETTING[role])
            out.append((role, why, f"{choices}; {alternative}"))
            continue
        cred = missing_credentials(env)
        if cred:
            out.append(
                (
                    role,
                    cred,
                    "set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, or ANTHROPIC_BASE_URL for a "
                    f"gateway), or log in once with `claude`; {alternative}",
                )
            )
    return out


def claude_missing(
    argv: Sequence[str], env: Mapping[str, str], setting: str = "[worker] argv"
) -> str | None:
    """Why Claude Code cannot run (not found, or `--version` fails), or None."""
    from gitsup.workers.base import WorkerError
    from gitsup.workers.claude.worker import find_claude

    try:
        exe = find_claude(argv, env, setting)[0]
    except WorkerError as exc:
        return f"Claude Code not found: {exc}"
    try:
        key = (exe, os.stat(exe).st_mtime)
    except OSError as exc:
        return f"Claude Code at {exe} cannot be read: {exc.strerror}"
    if key not in _runnable_cache:
        _runnable_cache[key], _version_cache[key] = _run_version(exe, env)
    why = _runnable_cache[key]
    return f"Claude Code at {exe} does not run: {why}" if why else None


def _run_version(exe: str, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(why it does not run or None, the version it said)."""
    from gitsup.host import proc
    from gitsup.workers.agents import parse_version

    try:
        res = proc.run([exe, "--version"], env=env, timeout=60, max_output=4096)
    except GitsupError as exc:
        return exc.message, None
    if res.timed_out:
        return "`--version` did not answer within 60s", None
    if res.returncode != 0:
        last = res.output.strip().splitlines()[-1:] or [""]
        return f"`--version` exited {res.returncode}: {last[0][:200]}", None
    return None, parse_version(res.output)


def missing_credentials(env: Mapping[str, str]) -> str | None:
    """None when Claude Code has a way to authenticate; else what was looked for."""
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
    ):
        if env.get(name, "").strip():
            return None
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    config_dir = env.get("CLAUDE_CONFIG_DIR")
    files = [Path(config_dir) / ".credentials.json"] if config_dir else []
    files.append(home / ".claude" / ".credentials.json")
    if any(f.is_file() and f.stat().st_size > 0 for f in files):
        return None
    for cfg in ([Path(config_dir) / ".claude.json"] if config_dir else []) + [
        home / ".claude.json"
    ]:
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and data.get("oauthAccount"):
            return None
    return (
        "no Claude Code credentials: ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN and "
        "ANTHROPIC_BASE_URL are unset and no logged-in config was found "
        f"({', '.join(str(f) for f in files)}, {home / '.claude.json'})"
    )


def worktree_root_problem(ctx: SupRepo) -> str | None:
    """The configured (or default) worktree root must be a directory gitsup can create and
    write in. Proven by doing it (root may write where permission bits say no, and /proc
    or a read-only mount refuse what access() allows); what the probe created is removed."""
    from gitsup.store.suprepo import worktree_root

    root = worktree_root(ctx)
    # Another start may create or remove the same directories at the same moment: a race
    # is retried, never reported as "not writable".
    for _ in range(5):
        problem = _probe_root(root)
        if problem != "race":
            return problem
    return None


def _probe_root(root: Path) -> str | None:
    import tempfile

    missing: list[Path] = []
    probe = root
    while not probe.exists() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    if not probe.is_dir():
        return (
            f"worktree root {root} (sup.worktreeRoot) cannot be created: {probe} is not a directory"
        )
    created: list[Path] = []
    try:
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                if not d.is_dir():
                    raise
                continue
            except FileNotFoundError:
                if d.parent.is_dir():  # e.g. /proc: the parent exists but takes no directory
                    raise OSError(errno.EACCES, "cannot create a directory there") from None
                return "race"  # another start removed the parent it had created
            created.append(d)
        fd, name = tempfile.mkstemp(prefix=".gitsup-probe-", dir=root)
        os.close(fd)
        os.unlink(name)
    except (FileExistsError, FileNotFoundError):
        return "race"
    except OSError as exc:
        return f"worktree root {root} (sup.worktreeRoot) is not writable: {exc.strerror or exc}"
    finally:
        for d in reversed(created):
            with contextlib.suppress(OSError):
                d.rmdir()
    return None
