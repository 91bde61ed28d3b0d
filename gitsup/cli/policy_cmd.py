"""`git sup policy check|explain|show`: ask the policy gate about commands, say why, print the
effective policy."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt
from gitsup.cli.output import emit_json, out
from gitsup.errors import GitsupError

if TYPE_CHECKING:
    from gitsup.policy import Decision, Policy

policy_app = typer.Typer(
    no_args_is_help=True,
    help="Ask the policy gate about shell commands; show the effective policy.",
)
app.add_typer(policy_app, name="policy")

CwdOpt = Annotated[
    Path | None,
    typer.Option("--cwd", help="Worktree to judge against (default: top of the current one)."),
]


def _context(cwd: Path | None) -> tuple[str, Policy]:
    from gitsup.tasks.policy_context import worktree_policy

    return worktree_policy(cwd)


def _render(d: Decision) -> None:
    out(f"{d.verdict}  {d.rule}" + ("  (sandboxed)" if d.sandboxed else ""))
    out(f"  reason: {d.reason}")
    out(f"  part:   {d.part}")


SandboxedOpt = Annotated[
    bool,
    typer.Option(
        "--sandboxed",
        help="Judge as inside an enforced task sandbox (docs/policy.md, 'Sandboxed mode'): "
        "routine build, install and file work in the worktree is allowed; deny stays deny.",
    ),
]


def _batch(worktree: str, policy: Policy, sandboxed: bool) -> None:
    from gitsup.policy import classify_command

    commands: list[tuple[str, bool]] = []
    for n, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        try:
            value: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GitsupError(
                f"stdin line {n}: not valid JSON ({exc.msg})",
                hint='each line is a JSON string or an object {"cmd": "..."}',
            ) from exc
        except RecursionError:
            raise GitsupError(f"stdin line {n}: JSON nested too deeply") from None
        mode = sandboxed
        if isinstance(value, dict):
            flag = value.get("sandboxed", sandboxed)
            if not isinstance(flag, bool):
                raise GitsupError(
                    f'stdin line {n}: "sandboxed" must be true or false',
                    hint='each line is a JSON string or an object {"cmd": "...", "sandboxed": true}',
                )
            mode = flag
            value = value.get("cmd")
        if not isinstance(value, str):
            raise GitsupError(
                f'stdin line {n}: expected a JSON string or an object with a string "cmd"',
                hint='each line is a JSON string or an object {"cmd": "..."}',
            )
        commands.append((value, mode))
    write = sys.stdout.write
    chunk: list[str] = []
    for cmd, mode in commands:
        d = classify_command(cmd, worktree=worktree, policy=policy, sandboxed=mode)
        chunk.append(json.dumps(d.as_dict(), separators=(",", ":")))
        if len(chunk) >= 512:
            write("\n".join(chunk) + "\n")
            chunk = []
    if chunk:
        write("\n".join(chunk) + "\n")
    sys.stdout.flush()


def command_text(words: list[str]) -> str:
    """The command string to judge: one argument is the command as written for a shell
    (`-- 'make && pytest'`); several are the words of one command as the shell passed them
    (`-- node -e 'x'`), each quoted back so it stays one word."""
    return words[0] if len(words) == 1 else shlex.join(words)


def _words(command: list[str] | None, example: str) -> list[str]:
    """The command's words after `--`; none is bad input (`example` shows how)."""
    if not command:
        raise GitsupError("no command given", hint=example)
    return command


@policy_app.command("check")
def check_cmd(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The command, after `--`: one argument is the command string as is; several "
            "are one command's words, each quoted; `-` reads JSON Lines from stdin."
        ),
    ] = None,
    cwd: CwdOpt = None,
    sandboxed: SandboxedOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Print the verdict, the rule that decided, and the reason. Exit 0 whatever the verdict."""
    words = _words(command, "git sup policy check -- git push origin main")
    worktree, policy = _context(cwd)
    if words == ["-"]:
        _batch(worktree, policy, sandboxed)
        return
    from gitsup.policy import classify_command

    d = classify_command(command_text(words), worktree=worktree, policy=policy, sandboxed=sandboxed)
    if as_json:
        sys.stdout.write(json.dumps(d.as_dict()) + "\n")
    else:
        _render(d)


@policy_app.command("explain")
def explain_cmd(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The command, after `--`: one argument is the command string as is; several "
            "are one command's words, each quoted."
        ),
    ] = None,
    cwd: CwdOpt = None,
    sandboxed: SandboxedOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Print every rule that looked at the command (built-in and repository), its verdict,
    why and what it did, then the decision. Exit 0 whatever the verdict."""
    words = _words(command, "git sup policy explain -- npm publish")
    worktree, policy = _context(cwd)
    from gitsup.policy.explain import explain_command

    e = explain_command(command_text(words), worktree=worktree, policy=policy, sandboxed=sandboxed)
    if as_json:
        emit_json(e.as_dict())
        return
    for p in e.parts:
        out(f"part: {p.part}")
        for f in p.findings:
            name = f"{f.rule} {f.id!r}" if f.id else f.rule
            out(f"  {f.step:<10}  {f.verdict:<5}  {name}: {f.effect}")
            out(f"  {'':<10}  {'':<5}  {f.reason}")
    if e.note:
        out(f"note: {e.note}")
    d = e.decision
    out(f"decision: {d.verdict}  {d.rule}" + ("  (sandboxed)" if d.sandboxed else ""))
    out(f"  reason: {d.reason}")
    out(f"  part:   {d.part}")
    for r in e.refused:
        out(f"refused: {r}")


@policy_app.command("show")
def show_cmd(cwd: CwdOpt = None, as_json: JsonOpt = False) -> None:
    """Print the effective policy (packaged default + .gitsup/policy.toml + sup.protected)."""
    worktree, policy = _context(cwd)
    summary = {"worktree": worktree, **policy.summary()}
    if as_json:
        emit_json(summary)
        return
    out(f"worktree:   {worktree}")
    out(f"sources:    {', '.join(policy.sources)}")
    out(f"protected:  {', '.join(policy.protected)}")
    out(f"inert vars: {', '.join(sorted(policy.inert_vars))}")
    out("runners:")
    for r in summary["runners"]:
        extra = "".join(f"  {k}={','.join(v)}" for k, v in r.items() if k != "argv" and v)
        out(f"  {' '.join(r['argv'])}{extra}")
    out(f"utilities:  {', '.join(summary['utilities'])}")
    out(f"wrappers:   {', '.join(summary['wrappers'])}")
    out("publish:")
    for prog, verbs in summary["publish"].items():
        out(f"  {prog}: {'; '.join(verbs)}")
    out("forge:")
    for prog, verbs in summary["forge"].items():
        out(f"  {prog}: {'; '.join(verbs)}")
    if summary["ask"]:
        out(f"ask (repo):  {'; '.join(summary['ask'])}")
    if summary["deny"]:
        out(f"deny (repo): {'; '.join(summary['deny'])}")
    for r in summary["rules"]:
        state = "  (refused)" if r["refused"] else ""
        out(f"rule (repo): {r['id']}: {r['decision']} `{r['pattern']}`{state}")
    for r in summary["refused"]:
        out(f"refused:     {r}")
