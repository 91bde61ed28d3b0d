"""The shell classifier: parse, deny detection (with payloads and wrappers), then the allow
list in plain form; everything else asks. Deny dominates (docs/policy.md,
"Decision order")."""

from __future__ import annotations

import os

from gitsup.policy.allow.judge import judge_script
from gitsup.policy.allow.mode import SANDBOXED
from gitsup.policy.allow.state import AllowState
from gitsup.policy.config import Policy
from gitsup.policy.decision import Decision, allow, ask
from gitsup.policy.deny.scan import scan_command
from gitsup.policy.facts import ScanState
from gitsup.policy.normalise.braces import repair_braces
from gitsup.policy.normalise.expand import normal_form
from gitsup.policy.parse.parser import MAX_NESTING, parse
from gitsup.policy.rules import RuleId

_CACHE_LIMIT = 8192


def default_home() -> str:
    return os.environ.get("HOME") or os.path.expanduser("~")


def classify_command(
    command: str,
    *,
    worktree: str,
    policy: Policy,
    home: str | None = None,
    sandboxed: bool = False,
) -> Decision:
    """The verdict for one Bash command string run with cwd `worktree`.

    `sandboxed` says the task's kernel sandbox is enforced (docs/policy.md, "Sandboxed mode"): routine
    build, install, run and file work inside the worktree is then allowed; deny stays deny.
    Identical questions are answered from a per-policy cache (the policy is immutable).
    Never raises for any input string: input too deep to judge is `ask`.
    """
    home_dir = (home or default_home()).rstrip("/") or "/"
    key = (command, worktree, home_dir, sandboxed)
    cache = policy._cache
    hit = cache.get(key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    norm = normal_form(worktree)
    try:
        decision = _classify(command, norm, policy, home_dir, sandboxed)
    except RecursionError:
        decision = ask(
            RuleId.ASK_TOO_COMPLEX, "the command nests too deeply to be judged", command[:200]
        )
    except UnicodeError:
        decision = ask(
            RuleId.ASK_UNPARSEABLE,
            "the command is not valid text (a lone surrogate)",
            command[:200],
        )
    if sandboxed:
        decision = decision._replace(sandboxed=True)
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = decision
    return decision


def _classify(command: str, worktree: str, policy: Policy, home: str, sandboxed: bool) -> Decision:
    if not command.strip():
        return allow(RuleId.A_STRUCTURE, "empty command", command)
    script = parse(command)
    dotglob = "dotglob" in command or "GLOBIGNORE" in command
    found = scan_command(command, script, ScanState(policy, worktree, home, dotglob))
    if found is not None:
        return found
    if "too-deep" in script.flags:
        return ask(
            RuleId.ASK_TOO_COMPLEX,
            f"the command nests deeper than {MAX_NESTING} levels; it is not judged",
            command[:200],
        )
    if script.has_error:
        if repair_braces(command) is not None:
            return ask(RuleId.ASK_COMMAND_NAME, "brace expansion in command position", command)
        return ask(
            RuleId.ASK_UNPARSEABLE,
            "the command does not parse as bash (unbalanced quotes "
            "or an incomplete construct); bash would refuse it",
            command,
        )
    if "newline-word" in script.flags:
        return ask(
            RuleId.ASK_UNPARSEABLE,
            "a line starting with a backslash is not parsed reliably",
            command,
        )
    return judge_script(
        script, AllowState(policy, worktree, home, SANDBOXED if sandboxed else None, dotglob)
    )
