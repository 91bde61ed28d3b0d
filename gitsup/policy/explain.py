"""Why a command gets its verdict: for each part, the deny rule that found it, the rule of the
allow list that judged it, and every repository rule whose pattern matches it (with what it
did, or why it did nothing), then the decision (docs/policy.md, "Rules a repository writes").
A reading aid for `git sup policy explain`; the decision itself is `classify_command`'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gitsup.policy.allow.judge import judge_part
from gitsup.policy.allow.mode import SANDBOXED
from gitsup.policy.allow.state import AllowState
from gitsup.policy.classify import classify_command, default_home
from gitsup.policy.config import Policy, RepoRule, hit_by
from gitsup.policy.decision import Decision
from gitsup.policy.deny.publish import prefix_match
from gitsup.policy.deny.scan import collect_git_aliases, scan_part
from gitsup.policy.facts import ScanState
from gitsup.policy.normalise.expand import normal_form
from gitsup.policy.parse.parser import parse
from gitsup.policy.parse.script import Part
from gitsup.policy.rules import RuleId


@dataclass(frozen=True)
class Finding:
    """One rule that looked at a part: where it comes from (`built-in` or `repository`), the
    step (`deny`, `allow list`, `repository`), its verdict, why, and what it did."""

    rule: str
    source: str
    step: str
    verdict: str
    reason: str
    effect: str
    id: str = ""  # a repository rule's id

    def as_dict(self) -> dict[str, str]:
        return {
            "rule": self.rule,
            "id": self.id,
            "source": self.source,
            "step": self.step,
            "verdict": self.verdict,
            "reason": self.reason,
            "effect": self.effect,
        }


@dataclass(frozen=True)
class PartExplained:
    part: str
    findings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class Explanation:
    command: str
    decision: Decision
    parts: list[PartExplained]
    refused: list[str]
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "decision": self.decision.as_dict(),
            "parts": [
                {"part": p.part, "rules": [f.as_dict() for f in p.findings]} for p in self.parts
            ],
            "refused": list(self.refused),
            "note": self.note,
        }


def _builtin(d: Decision, step: str, effect: str) -> Finding:
    source = "repository" if d.rule.endswith(".repo") else "built-in"
    return Finding(d.rule, source, step, d.verdict, d.reason, effect)


def explain_command(
    command: str,
    *,
    worktree: str,
    policy: Policy,
    home: str | None = None,
    sandboxed: bool = False,
) -> Explanation:
    """The decision for `command` (as `classify_command` gives it) and the rules behind it."""
    home_dir = (home or default_home()).rstrip("/") or "/"
    decision = classify_command(
        command, worktree=worktree, policy=policy, home=home_dir, sandboxed=sandboxed
    )
    refused = list(policy.refused)
    script = parse(command)
    if script.has_error or script.flags & {"too-deep", "newline-word", "gap"}:
        note = "the command is not split into parts: it does not parse cleanly"
        return Explanation(command, decision, [], refused, note)
    w = normal_form(worktree)
    dotglob = "dotglob" in command or "GLOBIGNORE" in command
    st = ScanState(policy, w, home_dir, dotglob)
    st.collect_variables(script.parts)
    collect_git_aliases(script.parts, st)
    # the allow list as the built-in rules alone judge it
    builtin_policy = policy.replaced(
        deny_rules=(), ask_rules=(), allow_rules=(), ask_prefixes=(), deny_prefixes=()
    )
    mode = SANDBOXED if sandboxed else None
    allow_st = AllowState(builtin_policy, w, home_dir, mode, dotglob)
    full_st = AllowState(policy, w, home_dir, mode, dotglob)
    parts: list[PartExplained] = []
    for bomb in script.fork_bombs:
        found = Finding(
            RuleId.D4_FORK_BOMB.value, "built-in", "deny", "deny", "a fork bomb", "denies"
        )
        parts.append(PartExplained(bomb, [found]))
    for part in script.parts:
        findings: list[Finding] = []
        denied = scan_part(part, st)
        if denied is not None:
            findings.append(_builtin(denied, "deny", "denies"))
        judged = judge_part(part, allow_st)
        actual = judge_part(part, full_st) if policy.repo_rules() else judged
        if judged is not None and judged.rule != RuleId.A_STRUCTURE:
            effect = "allows" if judged.verdict == "allow" else "asks"
            if denied is not None:
                effect = "no effect: the part is denied"
            elif actual is not None and actual.rule != judged.rule:
                effect = f"overridden: {_who(actual)} decides the part"
            findings.append(_builtin(judged, "allow list", effect))
        findings += _repository(part, policy, st, denied, judged, actual)
        if findings:
            parts.append(PartExplained(part.src, findings))
    return Explanation(command, decision, parts, refused)


def _repository(
    part: Part,
    policy: Policy,
    st: ScanState,
    denied: Decision | None,
    judged: Decision | None,
    actual: Decision | None,
) -> list[Finding]:
    """The repository's prefixes and rules whose pattern matches the part's words, and what
    each did: `denied` is the deny scan's finding and `actual` the allow list's decision under
    the whole policy, `judged` under the built-in rules alone."""
    if part.kind != "cmd" or not part.words:
        return []
    argvs = [a for a in st.expander().argvs(part.words) if a]
    if not argvs:
        return []
    out: list[Finding] = []
    for prefix in policy.deny_prefixes:
        if any(_prefix(prefix, a) for a in argvs):
            out.append(_repo_prefix("deny", prefix))
    for prefix in policy.ask_prefixes:
        if any(_prefix(prefix, a) for a in argvs):
            out.append(_repo_prefix("ask", prefix, denied))
    for rule in policy.repo_rules():
        if any(rule.matches(a) for a in argvs):
            out.append(_rule_finding(rule, _effect(rule, denied, judged, actual)))
    for rule in policy.refused_rules:
        if any(rule.matches(a) for a in argvs):
            why = "refused: a repository rule cannot weaken a deny"
            if denied is not None:
                why = f"refused: a repository rule cannot weaken {denied.rule}"
            out.append(_rule_finding(rule, why))
    return out


def _effect(
    rule: RepoRule, denied: Decision | None, judged: Decision | None, actual: Decision | None
) -> str:
    if rule.decision == "allow" and denied is not None:
        return f"refused: a repository rule cannot weaken {denied.rule}"
    by_it = [d for d in (denied, actual) if d is not None and hit_by(d.reason) == rule.id]
    if by_it:
        if rule.decision == "allow" and judged is not None:
            return f"allows (the built-in rules ask: {judged.rule})"
        return {"deny": "denies", "ask": "asks", "allow": "allows"}[rule.decision]
    if denied is not None:
        return f"no effect: {_who(denied)} denies the part first"
    if actual is not None and actual.rule.endswith(".repo"):
        return f"no effect: {_who(actual)} decides the part first"
    if rule.decision == "allow":
        if judged is None or judged.verdict == "allow":
            return "no effect: the built-in rules allow the part"
        return (
            f"no effect: the built-in ask ({judged.rule}) comes from the part's form "
            "(a redirection, an expansion, an assignment, its command name), not its words"
        )
    return "no effect"


def _who(d: Decision) -> str:
    rid = hit_by(d.reason)
    return f"repository rule {rid!r}" if rid is not None else d.rule


def _prefix(prefix: tuple[str, ...], argv: list[str]) -> bool:
    return prefix_match(prefix, argv)


def _repo_prefix(decision: str, prefix: tuple[str, ...], denied: Decision | None = None) -> Finding:
    text = " ".join(prefix)
    if decision == "deny":
        return Finding(
            RuleId.DENY_REPO.value,
            "repository",
            "repository",
            "deny",
            f"the repository policy denies `{text}` (deny = [...])",
            "denies",
        )
    effect = "asks"
    if denied is not None:
        effect = f"no effect: the part is denied ({denied.rule})"
    return Finding(
        RuleId.ASK_REPO.value,
        "repository",
        "repository",
        "ask",
        f"the repository policy asks for `{text}` (ask = [...])",
        effect,
    )


def _rule_finding(rule: RepoRule, effect: str) -> Finding:
    kind = {"deny": RuleId.DENY_REPO, "ask": RuleId.ASK_REPO, "allow": RuleId.A_REPO}
    return Finding(
        kind[rule.decision].value,
        "repository",
        "repository",
        rule.decision,
        rule.reason(),
        effect,
        rule.id,
    )
