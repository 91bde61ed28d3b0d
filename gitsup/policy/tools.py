"""Rules for Claude Code tools other than Bash (POLICY.md section 6).

File-writing tools are judged by the *resolved* target: `~`, `..` and symlinks on disk.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from gitsup.policy.classify import classify_command, default_home
from gitsup.policy.config import Policy
from gitsup.policy.decision import Decision, allow, ask, deny
from gitsup.policy.normalise import inside
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
    return os.path.realpath(path)


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
    enforced (POLICY.md section 4a); it widens only Bash commands, and the decision records it."""
    d = _decide_tool(
        tool_name,
        tool_input,
        worktree=worktree,
        policy=policy,
        git_common_dir=git_common_dir,
        home=home,
        sandboxed=sandboxed,
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
    real_w = os.path.realpath(worktree)
    common = os.path.realpath(git_common_dir) if git_common_dir else None
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
