"""The rule examples of policies/rules.toml, judged by the classifier: a load-time self-test
(every `match` example classifies as its rule, no `not_match` example does)."""

from __future__ import annotations

from collections.abc import Mapping

from gitsup.errors import GitsupError
from gitsup.policy.classify import classify_command
from gitsup.policy.config import Policy
from gitsup.policy.decision import Decision
from gitsup.policy.rules import (
    EXAMPLE_HOME,
    EXAMPLE_WORKTREE,
    RULES_FILE,
    Example,
    Rule,
    registry,
)
from gitsup.policy.tools import decide_tool


def _judge(example: Example, policy: Policy, sandboxed: bool) -> Decision:
    if isinstance(example, str):
        return classify_command(
            example,
            worktree=EXAMPLE_WORKTREE,
            policy=policy,
            home=EXAMPLE_HOME,
            sandboxed=sandboxed,
        )
    return decide_tool(
        example.tool,
        example.input,
        worktree=EXAMPLE_WORKTREE,
        policy=policy,
        git_common_dir=EXAMPLE_WORKTREE + "/.git",
        home=EXAMPLE_HOME,
        sandboxed=sandboxed,
    )


def _show(example: Example) -> str:
    return example if isinstance(example, str) else f"{example.tool} {example.input}"


def example_failures(rules: Mapping[str, Rule], policy: Policy) -> list[str]:
    """Every example of `rules` that does not classify as declared under `policy`."""
    failures: list[str] = []
    for rid, rule in rules.items():
        spec = rule.spec
        for examples, sandboxed, expect in (
            (spec.match, False, True),
            (spec.not_match, False, False),
            (spec.match_sandboxed, True, True),
            (spec.not_match_sandboxed, True, False),
        ):
            for example in examples:
                got = _judge(example, policy, sandboxed).rule
                if (got == rid) != expect:
                    mode = " (sandboxed)" if sandboxed else ""
                    want = "classify as" if expect else "not classify as"
                    failures.append(
                        f"{rid}: example {_show(example)!r}{mode} should {want} {rid}, got {got}"
                    )
    return failures


def check_examples(policy: Policy, rules: Mapping[str, Rule] | None = None) -> None:
    """Raise a `GitsupError` naming every rule example that does not classify as declared
    (called once per process, on the default policy, when it is first built)."""
    try:
        failures = example_failures(registry() if rules is None else rules, policy)
    finally:
        policy._cache.clear()
    if failures:
        raise GitsupError(
            f"{RULES_FILE}: {len(failures)} rule example(s) do not classify as declared:\n  "
            + "\n  ".join(failures)
        )
