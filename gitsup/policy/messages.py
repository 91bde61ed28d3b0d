"""What the unattended decider tells a worker when it answers `ask` (or `deny`) with a denial."""

from __future__ import annotations

from gitsup.policy.decision import Decision
from gitsup.policy.ecosystem import GENERIC, Ecosystem
from gitsup.policy.rules import instead


def unattended_denial(decision: Decision, ecosystem: Ecosystem | None = None) -> str:
    """The denial message the default decider sends back for an `ask` (or `deny`): it names the
    rule and says what to do instead (the rule's `instead` in policies/rules.toml, in the forms
    of the project's `ecosystem` and of the mode that decided), so the worker can proceed
    another way."""
    words = (ecosystem or GENERIC).words(sandboxed=decision.sandboxed)
    what = (
        "is never allowed"
        if decision.verdict == "deny"
        else "needs approval, which is not available in unattended mode"
    )
    return (
        f"Blocked by the gitsup policy gate (rule {decision.rule}): {decision.reason}; this "
        f"{what}. Instead: {instead(decision.rule, words)}."
    )
