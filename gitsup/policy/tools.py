"""Rules for Claude Code tools other than Bash (docs/policy.md, "Tools other than Bash").

File-writing tools are judged by the *resolved* target: `~`, `..` and symlinks on disk. The
path is resolved by the kernel on an opened descriptor (`resolve_path`), so a directory swapped
for a symlink while it is judged gives one answer or the other; a path that cannot be resolved
(it changed under the check, a NUL byte, a loop) is denied with the reason.
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Mapping
from typing import Any

from gitsup.policy.classify import classify_command, default_home
from gitsup.policy.config import Policy
from gitsup.policy.decision import Decision, allow, ask, deny
from gitsup.policy.normalise.expand import inside
from gitsup.policy.rules import RuleId

WRITE_TOOLS: Mapping[str, str] = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
READ_TOOLS: Mapping[str, str] = {"Read": "file_path", "Grep": "path", "Glob": "path", "LS": "path"}
WEB_TOOLS = frozenset({"WebFetch", "WebSearch"})


def _resolve(raw: str, worktree: str, home: str) -> str:
    path = raw
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    if not path.startswith("/"):
        path = posixpath.join(worktree, path)
    return resolve_path(path)


_MAX_LINKS = 40


def resolve_path(path: str, _links: int = 0) -> str:
    """The real path of the absolute `path`, as the kernel resolves it now.

    The path is opened (O_PATH: nothing is read, a FIFO does not block) and named from the
    descriptor (/proc/self/fd). A path that does not exist is its parent's real path and the
    missing name (a dangling symlink is followed). Raises OSError or ValueError when it cannot
    be resolved: a loop, a NUL byte, an entry that vanished while it was named."""
    if _links > _MAX_LINKS:
        raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
    if not path.startswith("/"):
        path = posixpath.join(os.getcwd(), path)
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        pass
    else:
        try:
            return _fd_path(fd)
        finally:
            os.close(fd)
    head, tail = posixpath.split(path)
    if head == path:  # "/" always opens; anything else here is malformed
        raise OSError(errno.ENOENT, "cannot resolve", path)
    real_head = resolve_path(head or "/", _links)
    if tail in ("", "."):
        return real_head
    if tail == "..":
        return posixpath.dirname(real_head)
    try:
        dfd = os.open(real_head, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return posixpath.join(real_head, tail)  # a missing directory holds no symlink
    try:
        target = os.readlink(tail, dir_fd=dfd)
    except (FileNotFoundError, NotADirectoryError):
        return posixpath.join(real_head, tail)
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # it exists now, and is no symlink
            return posixpath.join(real_head, tail)
        raise
    finally:
        os.close(dfd)
    return resolve_path(posixpath.join(real_head, target), _links + 1)


def _fd_path(fd: int) -> str:
    real = os.readlink(f"/proc/self/fd/{fd}")
    if not real.startswith("/") or (real.endswith(" (deleted)") and os.fstat(fd).st_nlink == 0):
        raise OSError(errno.ENOENT, "the path vanished while it was resolved", real)
    return real


def _part(tool_name: str, tool_input: Mapping[str, Any]) -> str:
    key = WRITE_TOOLS.get(tool_name) or READ_TOOLS.get(tool_name)
    value = tool_input.get(key) if key else None
    return value[:500] if isinstance(value, str) else tool_name


def _git_area(path: str, worktree: str, common: str | None) -> str | None:
    """'hooks', 'config', 'git' (other Git-internal path) or None."""
    comps = path.split("/")
    for i, c in enumerate(comps):
        if c == ".git" or (c.endswith(".git") and len(c) > 4):
            rest = comps[i + 1 :]
            if rest[:1] == ["hooks"]:
                return "hooks"
            if rest in (["config"],) or (
                len(rest) == 3
                and rest[0] == "worktrees"
                and rest[2] in ("config", "config.worktree")
            ):
                return "config"
            return "git"
    if common:
        if inside(path, posixpath.join(common, "hooks")):
            return "hooks"
        if path == posixpath.join(common, "config") or (
            inside(path, posixpath.join(common, "worktrees"))
            and path.endswith(("/config", "/config.worktree"))
        ):
            return "config"
        if inside(path, common):
            return "git"
    gitfile = posixpath.join(worktree, ".git")
    if path == gitfile or inside(path, gitfile):
        return "git"
    return None


def decide_tool(
    tool_name: str,
    tool_input: Mapping[str, Any],
    *,
    worktree: str,
    policy: Policy,
    git_common_dir: str | None = None,
    home: str | None = None,
    sandboxed: bool = False,
) -> Decision:
    """The verdict for one tool-permission request. `sandboxed`: the task's kernel sandbox is
    enforced (docs/policy.md, "Sandboxed mode"); it widens only Bash commands, and the decision records it.
    A path that cannot be resolved is denied, never an error."""
    try:
        d = _decide_tool(
            tool_name,
            tool_input,
            worktree=worktree,
            policy=policy,
            git_common_dir=git_common_dir,
            home=home,
            sandboxed=sandboxed,
        )
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        d = deny(
            RuleId.TOOL_UNRESOLVED,
            f"{tool_name}: the path cannot be resolved ({why}); it may have changed while "
            "it was checked",
            _part(tool_name, tool_input),
        )
    return d._replace(sandboxed=True) if sandboxed and not d.sandboxed else d


def _decide_tool(
    tool_name: str,
    tool_input: Mapping[str, Any],
    *,
    worktree: str,
    policy: Policy,
    git_common_dir: str | None,
    home: str | None,
    sandboxed: bool,
) -> Decision:
    home_dir = home or default_home()
    if tool_name == "Bash":
        command = tool_input.get("command")
        if not isinstance(command, str):
            return ask(RuleId.TOOL_INVALID_INPUT, "Bash request without a command string", "")
        return classify_command(
            command, worktree=worktree, policy=policy, home=home_dir, sandboxed=sandboxed
        )
    if tool_name == "AskUserQuestion":
        questions = tool_input.get("questions")
        part = (
            str(questions)[:500]
            if questions is not None
            else str(tool_input.get("question", ""))[:500]
        )
        return ask(RuleId.TOOL_ASK_USER, "a question for the user; the decider answers it", part)
    real_w = resolve_path(worktree)
    common = resolve_path(git_common_dir) if git_common_dir else None
    if tool_name in WRITE_TOOLS:
        raw = tool_input.get(WRITE_TOOLS[tool_name])
        if not isinstance(raw, str) or not raw:
            return ask(RuleId.TOOL_INVALID_INPUT, f"{tool_name} request without a path", "")
        path = _resolve(raw, real_w, home_dir)
        area = _git_area(path, real_w, common)
        if area == "hooks":
            return deny(
                RuleId.D3_HOOKS_DIR, f"{tool_name} into a Git hooks directory ({path})", raw
            )
        if area == "config":
            return deny(
                RuleId.D3_GIT_CONFIG, f"{tool_name} of the repository's Git config ({path})", raw
            )
        if area == "git":
            return ask(RuleId.TOOL_GIT_DIR, f"{tool_name} under the Git directory ({path})", raw)
        if inside(path, real_w):
            return allow(RuleId.TOOL_WRITE, f"{tool_name} inside the worktree", raw)
        return ask(RuleId.TOOL_OUTSIDE_PATH, f"{tool_name} outside the worktree ({path})", raw)
    if tool_name in READ_TOOLS:
        raw = tool_input.get(READ_TOOLS[tool_name])
        if raw is None or raw == "":
            raw = worktree
        if not isinstance(raw, str):
            return ask(RuleId.TOOL_INVALID_INPUT, f"{tool_name} request with a non-string path", "")
        path = _resolve(raw, real_w, home_dir)
        pattern = tool_input.get("pattern") if tool_name == "Glob" else None
        if isinstance(pattern, str) and (pattern.startswith(("/", "~")) or ".." in pattern):
            fixed = pattern.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
            ppath = _resolve(fixed or ".", path, home_dir)
            if not inside(ppath, real_w) or ".." in pattern[len(fixed) :]:
                return ask(
                    RuleId.TOOL_OUTSIDE_PATH, f"Glob pattern reaches outside ({pattern})", pattern
                )
        if inside(path, real_w):
            return allow(RuleId.TOOL_READ, f"{tool_name} inside the worktree", raw)
        return ask(RuleId.TOOL_OUTSIDE_PATH, f"{tool_name} outside the worktree ({path})", raw)
    if tool_name in WEB_TOOLS:
        return ask(RuleId.TOOL_WEB, f"{tool_name} reaches the network", tool_name)
    if tool_name.startswith("mcp__"):
        return ask(RuleId.TOOL_MCP, f"MCP tool {tool_name}", tool_name)
    return ask(RuleId.TOOL_UNKNOWN, f"unknown tool {tool_name}", tool_name)
