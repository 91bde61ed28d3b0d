"""What the unattended decider tells a worker when it answers `ask` (or `deny`) with a denial."""

from __future__ import annotations

from gitsup.policy.decision import Decision

_INSTEAD: tuple[tuple[str, str], ...] = (
    (
        "D1.push",
        "publishing is done by the supervisor after verification; commit locally "
        "instead (git add, git commit -m ...)",
    ),
    (
        "D1.alias",
        "publishing is done by the supervisor after verification; do not define git "
        "aliases, commit locally instead",
    ),
    (
        "D1.forge",
        "pull requests, issues and releases are opened by the supervisor after "
        "verification; describe the change in your final message instead",
    ),
    (
        "D1.registry",
        "packages are published by a human or CI, never by a worker; build and "
        "test locally instead",
    ),
    (
        "D2",
        "protected branches move only through `git sup integrate`; keep committing on the "
        "task branch",
    ),
    ("D3", "the Git hooks are part of the boundary; leave core.hooksPath and .git/hooks alone"),
    (
        "D4",
        "destructive operations outside the task are never run; remove specific files "
        "inside the worktree instead",
    ),
    ("deny.repo", "the repository policy forbids this command; find another way or report it"),
    ("ask.unparseable", "the command does not parse (unbalanced quotes?); fix the quoting"),
    (
        "ask.interpreter",
        "inline interpreters and shell payloads are not run unattended; write "
        "the code to a file in the worktree and run it through the tests (e.g. pytest)",
    ),
    (
        "ask.expansion",
        "write commands with literal arguments (no $VAR, $(...), backticks); for "
        "commit messages use -m 'text' or git commit -m \"$(cat <<'EOF' ... EOF)\"",
    ),
    ("ask.outside-path", "stay inside the worktree and use paths within it"),
    ("ask.git-dir", "do not write into the Git directory; use git commands instead"),
    ("ask.network", "there is no network access for workers; work with what is in the worktree"),
    (
        "ask.install",
        "dependencies cannot be installed unattended; use what is installed and "
        "mention the need in your final message",
    ),
    ("ask.git-cwd", "run git from the worktree root, without -C or cd"),
    (
        "ask.git",
        "allowed git changes are git add, git commit -m, git branch <new> and "
        "git checkout -b <new>; read-only git commands are allowed",
    ),
    ("ask.command", 'call programs by their bare name (pytest, not .venv/bin/pytest or "pytest")'),
    (
        "ask.wrapper",
        "run the command directly, without wrappers such as timeout, env, xargs or sudo",
    ),
    ("ask.mutation", "change files with the editing tools (Write/Edit) inside the worktree"),
    (
        "ask.assignment",
        "drop the variable assignment (only CI, NO_COLOR, LANG and similar "
        "inert variables are allowed)",
    ),
    ("ask.background", "run commands in the foreground"),
    ("ask.function", "run the commands directly instead of defining shell functions"),
    ("ask.run", "run only tests, linters and builds (pytest, make test, npm test, cargo test)"),
    (
        "ask.runner",
        "run tests and linters without options that name programs, fix code or "
        "write outside the worktree",
    ),
    ("ask.utility", "use the read-only form of the tool"),
    ("ask.repo", "the repository policy asks a human for this command; find another way"),
    ("tool.ask_user", "decide yourself from the task description and carry on"),
    ("tool.outside", "work only on files inside the worktree"),
    ("tool.git-dir", "do not edit files under .git; use git commands"),
    ("tool.web", "there is no web access for workers; work with what is in the worktree"),
    ("tool.mcp", "MCP tools are not available unattended"),
    ("tool", "use Bash, Read, Edit and Write within the worktree"),
    ("ask", "use the routine forms: read-only tools, tests, git add and git commit"),
)


def unattended_denial(decision: Decision) -> str:
    """The denial message the default decider sends back for an `ask` (or `deny`): it names the
    rule and says what is allowed instead, so the worker can proceed another way."""
    instead = next(
        (text for prefix, text in _INSTEAD if decision.rule.startswith(prefix)),
        "do the work another way within the policy",
    )
    what = (
        "is never allowed"
        if decision.verdict == "deny"
        else "needs approval, which is not available in unattended mode"
    )
    return (
        f"Blocked by the gitsup policy gate (rule {decision.rule}): {decision.reason}; this "
        f"{what}. Instead: {instead}."
    )
