"""The policy gate: every permission request of a worker gets `allow`, `ask` or `deny` and the
rule that decided (docs/policy.md). Pure: no Git, no subprocesses, no I/O
beyond reading policy files, (for file tools) resolving symlinks and (for the denial hints'
`detect_ecosystem`) listing the top of the worktree.

The package is a one-way pipeline (docs/policy.md, "The code: a one-way pipeline"): parse ->
normalise -> facts -> deny -> allow -> classify -> tools, explain -> examples -> load, each stage
importing only the ones before it. This face exports what the rest of gitsup uses."""

from __future__ import annotations

from gitsup.policy.classify import classify_command
from gitsup.policy.config import Policy
from gitsup.policy.decision import Decision, Verdict
from gitsup.policy.ecosystem import Ecosystem
from gitsup.policy.ecosystem import detect as detect_ecosystem
from gitsup.policy.load import load_policy
from gitsup.policy.messages import unattended_denial
from gitsup.policy.rules import RuleId
from gitsup.policy.tools import decide_tool

__all__ = [
    "Decision",
    "Ecosystem",
    "Policy",
    "RuleId",
    "Verdict",
    "classify_command",
    "decide_tool",
    "detect_ecosystem",
    "load_policy",
    "unattended_denial",
]
