"""The labelled corpus: every line is [verdict, rule, command] in the fixed context of
docs/policy.md ("The fixed context")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitsup.policy import Policy, classify_command
from tests.policy.conftest import HOME, W

CORPUS = Path(__file__).with_name("corpus.jsonl")


def _load() -> list[tuple[str, str, str]]:
    rows = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if line.strip():
            verdict, rule, cmd = json.loads(line)
            rows.append((verdict, rule, cmd))
    return rows


ROWS = _load()


def test_corpus_is_large_and_covers_every_family() -> None:
    assert len(ROWS) >= 300
    rules = {r for _, r, _ in ROWS}
    for family in (
        "D1.push",
        "D1.alias",
        "D1.forge",
        "D1.registry",
        "D2.protected-head",
        "D2.protected-ref",
        "D3.hooks-path",
        "D3.hooks-dir",
        "D4.rm-root",
        "D4.block-device",
        "D4.chmod-root",
        "D4.fork-bomb",
        "D4.download-exec",
        "A.read-only",
        "A.git-read",
        "A.git-change",
        "A.local-dev",
        "A.create",
        "ask.unparseable",
        "ask.interpreter",
        "ask.expansion",
        "ask.outside-path",
        "ask.network",
        "ask.install",
        "ask.git-change",
    ):
        assert family in rules, family


@pytest.mark.parametrize(("verdict", "rule", "cmd"), ROWS, ids=[c[:60] for _, _, c in ROWS])
def test_corpus(policy: Policy, verdict: str, rule: str, cmd: str) -> None:
    d = classify_command(cmd, worktree=W, policy=policy, home=HOME)
    assert (d.verdict, d.rule) == (verdict, rule), d.reason
    assert d.part
