"""The rule examples of policies/rules.toml and of a repository's `[[rules]]`, judged by the
classifier: a load-time self-test (every `match` example classifies as its rule, no
`not_match` example does)."""

from __future__ import annotations

from collections.abc import Mapping

from gitsup.errors import GitsupError
from gitsup.policy.classify import classify_command
from gitsup.policy.config import Policy, RepoRule, hit_by
from gitsup.policy.decision import Decision
from gitsup.policy.rules import (
    EXAMPLE_HOME,
    EXAMPLE_WORKTREE,
    RULES_FILE,
    Example,
    Rule,
    RuleId,
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


_KIND = {"deny": RuleId.DENY_REPO.value, "ask": RuleId.ASK_REPO.value, "allow": RuleId.A_REPO.value}


def hits(decision: Decision, rule: RepoRule) -> bool:
    """True when `decision` was made by the repository rule `rule`."""
    return decision.rule == _KIND[rule.decision] and hit_by(decision.reason) == rule.id


def _example(command: str, policy: Policy) -> Decision:
    return classify_command(
        command, worktree=EXAMPLE_WORKTREE, policy=policy, home=EXAMPLE_HOME, sandboxed=False
    )


def check_repo_rules(policy: Policy, allow_rules: tuple[RepoRule, ...], path: str) -> Policy:
    """`policy` with the repository's allow rules that weaken no deny; the others are refused
    (listed in `refused`, not applied): an allow rule one of whose `match` examples the rest
    of the policy denies. Then every `match` example of every applied rule must be decided by
    that rule and no `not_match` example may be, or this raises a `GitsupError` naming the
    rule, the example and what it classified as. Examples are judged in the fixed context of
    the rule examples (docs/policy.md, "The fixed context")."""
    kept: list[RepoRule] = []
    refused_rules: list[RepoRule] = []
    refused: list[str] = []
    try:
        for rule in allow_rules:
            for example in rule.match:
                d = _example(example, policy)
                if d.verdict == "deny":
                    refused_rules.append(rule)
                    refused.append(
                        f"allow rule {rule.id!r}: example {example!r} is denied ({d.rule}); "
                        "a repository rule cannot weaken a deny"
                    )
                    break
            else:
                kept.append(rule)
    finally:
        policy._cache.clear()
    final = policy.replaced(
        allow_rules=tuple(kept), refused_rules=tuple(refused_rules), refused=tuple(refused)
    )
    failures: list[str] = []
    try:
        for rule in final.repo_rules():
            for examples, expect in ((rule.match, True), (rule.not_match, False)):
                for example in examples:
                    d = _example(example, final)
                    if hits(d, rule) != expect:
                        want = "be decided by it" if expect else "not be decided by it"
                        failures.append(
                            f"rule {rule.id!r} ({rule.decision}): example {example!r} should "
                            f"{want}; it classified as {d.verdict} {d.rule}"
                            + (f" ({d.reason})" if d.rule.endswith(".repo") else "")
                        )
    finally:
        final._cache.clear()
    if failures:
        raise GitsupError(
            f"invalid policy file {path}: {len(failures)} rule example(s) do not classify as "
            "declared:\n  " + "\n  ".join(failures),
            hint="fix the rule's pattern or its examples; see docs/policy.md, "
            "'Rules a repository writes'",
        )
    return final
