"""The value every policy question returns."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

from gitsup.policy.rules import RuleId

Verdict = Literal["allow", "ask", "deny"]

SEVERITY: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}


class Decision(NamedTuple):
    """A verdict, the stable id of the rule that decided, a human reason, the part of the
    command (or tool target) the rule applies to, and whether the sandboxed mode decided it.
    Immutable; a tuple, so the classifier builds one or two per question cheaply."""

    verdict: Verdict
    rule: str
    reason: str
    part: str
    sandboxed: bool = False  # decided in the sandboxed mode (docs/policy.md, "Sandboxed mode")

    def as_dict(self) -> dict[str, str | bool]:
        return {
            "verdict": self.verdict,
            "rule": self.rule,
            "reason": self.reason,
            "part": self.part,
            "sandboxed": self.sandboxed,
        }


# RuleId -> its value, looked up once (the enum's `.value` descriptor is slow on a hot path)
_VALUE: dict[str, str] = {m: m.value for m in RuleId}


def _text(reason: str) -> str:
    # normalise.UNKNOWN, as people read it
    return reason.replace("\x00?", "<unknown>") if "\x00" in reason else reason


_new = tuple.__new__


def make_decision(verdict: Verdict, rule: str, reason: str, part: str) -> Decision:
    """`Decision(verdict, rule, reason, part)`, built without the named tuple's own `__new__`
    (a Python function): the same tuple."""
    return _new(Decision, (verdict, rule, reason, part, False))


def allow(rule: RuleId, reason: str, part: str) -> Decision:
    return make_decision("allow", _VALUE[rule], _text(reason), part)


def ask(rule: RuleId, reason: str, part: str) -> Decision:
    return make_decision("ask", _VALUE[rule], _text(reason), part)


def deny(rule: RuleId, reason: str, part: str) -> Decision:
    return make_decision("deny", _VALUE[rule], _text(reason), part)


def worst(decisions: Iterable[Decision]) -> Decision | None:
    """The most severe decision; the first one among equals (source order)."""
    best: Decision | None = None
    for d in decisions:
        if best is None or SEVERITY[d.verdict] > SEVERITY[best.verdict]:
            best = d
    return best
