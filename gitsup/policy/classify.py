"""The shell classifier: parse, deny detection (with payloads and wrappers), then the allow
list in plain form; everything else asks. Deny dominates (POLICY.md sections 1 and 5)."""

from __future__ import annotations

import os
import posixpath

from gitsup.policy.allow import AllowState, judge_script
from gitsup.policy.config import Policy
from gitsup.policy.context import ScanState
from gitsup.policy.decision import Decision, allow, ask
from gitsup.policy.deny import scan_parsed
from gitsup.policy.parse import parse, repair_braces

_CACHE_LIMIT = 8192


def default_home() -> str:
    return os.environ.get("HOME") or os.path.expanduser("~")


def classify_command(
    command: str, *, worktree: str, policy: Policy, home: str | None = None
) -> Decision:
    """The verdict for one Bash command string run with cwd `worktree`.

    Identical questions are answered from a per-policy cache (the policy is immutable).
    """
    home_dir = (home or default_home()).rstrip("/") or "/"
    key = (command, worktree, home_dir)
    cache = policy._cache
    hit = cache.get(key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    try:
        decision = _classify(command, posixpath.normpath(worktree), policy, home_dir)
    except RecursionError:
        decision = ask("ask.unparseable", "the command is nested too deeply to analyse", command)
    except UnicodeError:
        decision = ask(
            "ask.unparseable", "the command is not valid text (a lone surrogate)", command
        )
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = decision
    return decision


def _classify(command: str, worktree: str, policy: Policy, home: str) -> Decision:
    if not command.strip():
        return allow("A.structure", "empty command", command)
    script = parse(command)
    st = ScanState(policy=policy, worktree=worktree, home=home)
    found = scan_parsed(script, command, st)
    if found is not None:
        return found
    if script.has_error:
        if repair_braces(command) is not None:
            return ask("ask.command-name", "brace expansion in command position", command)
        return ask(
            "ask.unparseable",
            "the command does not parse as bash (unbalanced quotes "
            "or an incomplete construct); bash would refuse it",
            command,
        )
    if "newline-word" in script.flags:
        return ask(
            "ask.unparseable", "a line starting with a backslash is not parsed reliably", command
        )
    return judge_script(script, AllowState(policy=policy, worktree=worktree, home=home))
