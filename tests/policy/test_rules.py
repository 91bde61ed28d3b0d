"""Rules as data: the registry of rule ids, its entries in policies/rules.toml, and the examples
checked when the policy loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gitsup.errors import GitsupError
from gitsup.policy import Decision, Policy, classify_command, load_policy, unattended_denial
from gitsup.policy.examples import check_examples, example_failures
from gitsup.policy.rules import (
    DEFAULT_INSTEAD,
    RuleId,
    build_registry,
    instead,
    registry,
)
from tests.policy.conftest import HOME, W
from tests.policy.test_corpus import ROWS

ROOT = Path(__file__).resolve().parents[2]
RULES_TEXT = (ROOT / "policies" / "rules.toml").read_text(encoding="utf-8")


def _edit(old: str, new: str) -> str:
    assert old in RULES_TEXT
    return RULES_TEXT.replace(old, new, 1)


def _set(rid: str, key: str, value: str) -> str:
    """The rules file with `key` of rule `rid` set to the TOML `value`."""
    block = re.compile(
        r'(\[rules\."' + re.escape(rid) + r'"\]\n(?:[^\n]+\n)*?)' + key + r" = [^\n]*\n"
    )
    m = block.search(RULES_TEXT)
    assert m is not None
    return RULES_TEXT[: m.start()] + m.group(1) + f"{key} = {value}\n" + RULES_TEXT[m.end() :]


def test_every_registered_rule_has_an_entry_and_its_examples_hold(policy: Policy) -> None:
    rules = registry()
    assert set(rules) == {r.value for r in RuleId}
    assert example_failures(rules, policy) == []
    for rid, rule in rules.items():
        assert rule.message, rid
        if rid.startswith(("D", "ask.", "deny.")):
            assert rule.instead, rid


def test_the_examples_cover_every_rule_the_corpus_uses() -> None:
    corpus_rules = {rule for _, rule, _ in ROWS}
    assert corpus_rules <= {r.value for r in RuleId}
    with_examples = {rid for rid, r in registry().items() if r.spec.match or r.spec.match_sandboxed}
    assert corpus_rules <= with_examples


def test_an_example_that_does_not_classify_as_declared_is_a_load_error(policy: Policy) -> None:
    text = _edit('match = ["git push"', 'match = ["git status", "git push"')
    rules = build_registry(text, "rules.toml")
    with pytest.raises(GitsupError) as exc:
        check_examples(policy, rules)
    msg = str(exc.value)
    assert "D1.push: example 'git status' should classify as D1.push, got A.git-read" in msg


def test_a_not_match_example_that_matches_is_a_load_error(policy: Policy) -> None:
    text = _edit('[rules."D1.push"]\n', '[rules."D1.push"]\nnot_match = ["git -C . push"]\n')
    # the entry now has not_match twice: TOML refuses it, and that is a load error too
    with pytest.raises(GitsupError, match="invalid TOML"):
        build_registry(text, "rules.toml")
    rules = build_registry(_set("D1.push", "not_match", '["git -C . push"]'), "rules.toml")
    failures = example_failures({"D1.push": rules["D1.push"]}, policy)
    assert failures == [
        "D1.push: example 'git -C . push' should not classify as D1.push, got D1.push"
    ]


def test_sandboxed_and_tool_examples_are_judged_in_their_mode(policy: Policy) -> None:
    rules = build_registry(
        _set("tool.read", "match", '[{ tool = "Read", input = { file_path = "/etc/shadow" } }]'),
        "rules.toml",
    )
    assert example_failures({"tool.read": rules["tool.read"]}, policy) == [
        "tool.read: example \"Read {'file_path': '/etc/shadow'}\" should classify as "
        "tool.read, got tool.outside-path"
    ]
    sb = registry()["A.sandboxed"]
    assert sb.spec.match_sandboxed and not sb.spec.match
    assert example_failures({"A.sandboxed": sb}, policy) == []
    # the same command outside the sandboxed mode is not A.sandboxed
    cmd = sb.spec.match_sandboxed[0]
    assert isinstance(cmd, str)
    assert classify_command(cmd, worktree=W, policy=policy, home=HOME).rule != "A.sandboxed"


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [
        ('[rules."D1.push"]', '[rules."D1.pushed"]', "not in the registry"),
        ('[rules."D1.push"]', '[rules."D1.push"]\nsevere = true', "D1.push.severe"),
        ('[rules."ask.run"]', '[rules."zz.unused"]', "not in the registry"),
    ],
)
def test_a_malformed_rule_table_is_a_clear_load_error(old: str, new: str, error: str) -> None:
    with pytest.raises(GitsupError, match=re.escape(error)):
        build_registry(_edit(old, new), "rules.toml")


def test_an_entry_missing_or_incomplete_is_a_load_error() -> None:
    data = RULES_TEXT.split('[rules."ask.wrapper"]', 1)
    without = data[0] + data[1].split("\n\n", 1)[1]
    with pytest.raises(GitsupError, match=r"without an entry: \['ask.wrapper'\]"):
        build_registry(without, "rules.toml")
    entry = '[rules."ask.background"]\nmessage = "runs a command in the background"\n'
    assert entry in RULES_TEXT
    no_instead = _set("ask.background", "instead", '""')
    with pytest.raises(
        GitsupError, match=re.escape("ask.background does not say what to do instead")
    ):
        build_registry(no_instead, "rules.toml")
    no_match = re.sub(
        r'(\[rules\."ask\.background"\]\n(?:[^\n]+\n)*?)match = [^\n]*\n', r"\1", RULES_TEXT
    )
    with pytest.raises(GitsupError, match=re.escape("ask.background has no `match` example")):
        build_registry(no_match, "rules.toml")


def test_the_denial_names_the_rules_own_instead() -> None:
    # The old prefix table answered every `ask.runner-option` with the `ask.run` text.
    d = Decision("ask", "ask.runner-option", "pytest with --pdbcls", "pytest --pdbcls=x:y")
    msg = unattended_denial(d)
    assert instead("ask.runner-option") in msg
    assert "without options that name programs" in msg
    assert instead("ask.run") not in msg
    assert instead("no.such-rule") == DEFAULT_INSTEAD
    assert instead("A.read-only") == DEFAULT_INSTEAD


_ID_LITERAL = re.compile(r"""["'](?:A|D[1-4]|ask|deny|tool)\.[A-Za-z_-]+["']""")


def test_rule_ids_are_written_once_in_the_registry() -> None:
    """No module of the policy gate spells a rule id as a string: they use `RuleId`."""
    offenders = []
    for path in sorted((ROOT / "gitsup" / "policy").glob("*.py")):
        if path.name == "rules.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _ID_LITERAL.search(line):
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert offenders == []


def test_loading_the_policy_checks_the_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs where the default policy is built: a wrong example stops `load_policy`."""
    from gitsup.policy import examples, load

    bad = build_registry(_set("ask.run", "match", '["make test"]'), "rules.toml")
    monkeypatch.setattr(examples, "registry", lambda: bad)
    load._build.cache_clear()
    try:
        with pytest.raises(
            GitsupError, match=re.escape("ask.run: example 'make test' should classify")
        ):
            load_policy()
    finally:
        load._build.cache_clear()
    monkeypatch.undo()
    assert load_policy().sources == ("gitsup/policies/default.toml",)
