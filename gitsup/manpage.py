"""The `git-sup(1)` manual page, generated from the CLI's command tree.

`python -m gitsup.manpage > man/git-sup.1` rewrites the committed page; a test checks
that it is up to date. The package installs it as share/man/man1/git-sup.1, where `man`
(and so `git help sup` and `git sup --help`) finds it when the environment's bin
directory is on PATH.
"""

from __future__ import annotations

import sys
from typing import Any

from gitsup import __version__

EXIT_CODES = (
    ("0", "success; for start, wait and recover: the task is ready"),
    ("1", "internal error (a bug in gitsup)"),
    ("2", "bad input: a refused command, flag, spec or state; nothing was started"),
    ("3", "the task is parked (blocked): its work is kept for a person"),
    ("4", "the task failed"),
    ("5", "the task was stopped"),
    ("130", "interrupted: Ctrl-C of a foreground start (the task is stopped, its work kept)"),
)

ENVIRONMENT = (
    (
        "GITSUP_CLAUDE_BIN",
        "path of the Claude Code CLI, before PATH, the repository's .tools/ and gitsup's own",
    ),
    (
        "ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, ANTHROPIC_BASE_URL",
        "credentials a claude worker, decider or reviewer needs (or a logged-in Claude Code config)",
    ),
    (
        "GITSUP_CODEX_BIN",
        "path of the Codex CLI, before PATH, the repository's .tools/ and gitsup's own",
    ),
    (
        "OPENAI_API_KEY, OPENAI_BASE_URL",
        "a codex worker's or reviewer's key and model API (or a logged-in Codex auth.json)",
    ),
    ("NO_COLOR", "no colour in the progress, even on a terminal"),
)


def _esc(text: str) -> str:
    out = text.replace("\\", "\\e").replace("-", "\\-")
    lines = []
    for line in out.splitlines():
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def _paragraphs(text: str) -> str:
    parts = [" ".join(p.split()) for p in (text or "").strip().split("\n\n") if p.strip()]
    return "\n.PP\n".join(_esc(p) for p in parts)


def _params(cmd: Any, ctx: Any) -> list[str]:
    lines: list[str] = []
    for param in cmd.params:
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            lines += [".TP", f"\\fI{_esc(param.name.upper())}\\fR"]
            lines.append(_esc(" ".join((getattr(param, "help", None) or "").split())) or "")
            continue
        rec = param.get_help_record(ctx)
        if rec is None:
            continue
        opts, help_text = rec
        lines += [".TP", f"\\fB{_esc(opts)}\\fR", _esc(" ".join(help_text.split()))]
    return lines


def _walk(cmd: Any, ctx: Any, path: list[str]) -> list[str]:
    from typer._click import Context  # the click typer vendors

    lines: list[str] = []
    # sorted: the page must not depend on the order command modules were imported in
    sub_names = sorted(cmd.list_commands(ctx)) if hasattr(cmd, "list_commands") else []
    for name in sub_names:
        sub = cmd.get_command(ctx, name)
        if sub is None or getattr(sub, "hidden", False):
            continue
        sub_ctx = Context(sub, info_name=name, parent=ctx)
        full = [*path, name]
        if hasattr(sub, "list_commands"):
            lines += [f'.SS "{_esc(" ".join(full))}"', _paragraphs(sub.help or "")]
            lines += _walk(sub, sub_ctx, full)
            continue
        usage = " ".join(sub.collect_usage_pieces(sub_ctx))
        lines.append(f'.SS "{_esc(" ".join(full))}"')
        lines += [".B git sup " + _esc(" ".join(full)), _esc(usage), ".PP"]
        lines.append(_paragraphs(sub.help or ""))
        params = _params(sub, sub_ctx)
        if params:
            lines += [".RS", *params, ".RE"]
    return lines


def render() -> str:
    import typer
    from typer._click import Context

    from gitsup.cli.main import _register, app

    _register()
    root = typer.main.get_command(app)
    ctx = Context(root, info_name="git sup")
    lines = [
        f'.TH GIT\\-SUP 1 "" "gitsup {__version__}" "Git Manual"',
        ".SH NAME",
        "git\\-sup \\- run coding agents unattended, one task per Git worktree",
        ".SH SYNOPSIS",
        ".B git sup",
        "[\\fB\\-\\-version\\fR] [\\fB\\-h\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        _paragraphs(
            "git sup starts a coding agent on one task in its own worktree and branch, "
            "supervises it (permission requests answered by a shell policy, a watchdog, "
            "acceptance checks, an independent reviewer, repair rounds) and keeps what "
            "happened in Git: refs under refs/sup/, notes in refs/notes/sup and a sealed "
            "event log.\n\n`git sup --help` shows this page; `git sup COMMAND -h` prints "
            "the usage of one command."
        ),
        ".SH COMMANDS",
        *_walk(root, ctx, []),
        ".SH EXIT STATUS",
    ]
    for code, what in EXIT_CODES:
        lines += [".TP", f"\\fB{code}\\fR", _esc(what)]
    lines.append(".SH ENVIRONMENT")
    for name, what in ENVIRONMENT:
        lines += [".TP", f"\\fB{_esc(name)}\\fR", _esc(what)]
    lines += [".SH SEE ALSO", "\\fBgit\\fR(1), \\fBgit\\-worktree\\fR(1), \\fBgit\\-notes\\fR(1)"]
    return "\n".join(line for line in lines if line != "") + "\n"


def install_path() -> str:
    import os

    return os.path.join(sys.prefix, "share", "man", "man1", "git-sup.1")


def main() -> None:
    """Print the page; with --install write it where `man` looks for this environment
    (an editable install does not install data files)."""
    if sys.argv[1:] == ["--install"]:
        import os

        path = install_path()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(render())
        sys.stdout.write(f"installed {path}\n")
        return
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
