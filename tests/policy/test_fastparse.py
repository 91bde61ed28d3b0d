"""The parser's fast path (plain commands split without tree-sitter) builds exactly the `Script`
tree-sitter builds, and refuses everything it cannot prove plain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitsup.policy.parse.fastpath import fast_ops, fast_parse
from gitsup.policy.parse.parser import parse_tree
from gitsup.policy.parse.script import Script, plain_argv
from tests.policy.test_corpus import ROWS

SANDBOXED = [
    json.loads(line)[2]
    for line in Path(__file__).with_name("corpus_sandboxed.jsonl").read_text().splitlines()
    if line.strip()
]

PLAIN = [
    "git status",
    "ls -la src",
    "git log --oneline -10",
    "head -50 src/app.py",
    "git add src/a.py && git commit -m 'Update a'",
    'git commit -m "Fix the parser"',
    "cat a | grep b | wc -l",
    "a; b | c; d",
    "a && b; c || d",
    "ls # a comment",
    "echo '' \"\" x",
    "echo :a +b -",
    "ls  -la\tsrc",
    "echo 'é ü' \"日本\"",
    "sort -k 2 -n file",
]

NOT_PLAIN = [
    "",
    "   ",
    "ls;",
    "; ls",
    "ls && && ls",
    "ls &",
    "ls#x",
    "ls; # x",
    "FOO=1 ls",
    "time ls",
    "export A=1",
    "if true",
    "for x",
    "echo $HOME",
    'echo "$HOME"',
    'echo "a\\"b"',
    'echo "!x"',
    "echo 'a'b",
    "echo a'b'",
    "echo --x='a b'",
    "ls\nrm -rf /",
    "ls > out",
    "ls ~",
    "ls *.py",
    "echo {a,b}",
    "echo 0x10",
    "echo 1.5",
    "echo `id`",
    "(ls)",
    "ls\\ x",
    "ls\r",
    "a == b",
    "- -x=1",
    "x+: y",
    "git@host x",
    "git% x",
    "a | b | c && d",
    "a && b | c",
]


def _same(fast: Script, cmd: str) -> None:
    """`fast` is what tree-sitter builds for `cmd`, and the argument vectors the fast path sets
    on its parts are those derived from tree-sitter's words (`argv` is not compared by ==)."""
    tree = parse_tree(cmd)
    assert fast == tree
    assert [plain_argv(p) for p in fast.parts] == [plain_argv(p) for p in tree.parts]


@pytest.mark.parametrize("cmd", PLAIN)
def test_plain_commands_take_the_fast_path_and_match_tree_sitter(cmd: str) -> None:
    fast = fast_parse(cmd)
    assert fast is not None
    _same(fast, cmd)


@pytest.mark.parametrize("cmd", NOT_PLAIN)
def test_the_fast_path_refuses_what_it_cannot_prove_plain(cmd: str) -> None:
    assert fast_parse(cmd) is None


def test_every_corpus_command_the_fast_path_takes_matches_tree_sitter() -> None:
    taken = 0
    for cmd in [c for _, _, c in ROWS] + SANDBOXED:
        fast = fast_parse(cmd)
        if fast is not None:
            taken += 1
            _same(fast, cmd)
    assert taken >= 150  # the fast path is actually exercised


# Near-plain text: the fast path's alphabet plus every character that changes bash's reading.
_ALPHABET = "ab-=.%0159@+:,/_ \t'\"|&;#$`\\!(){}[]<>*?~\n"
_WORDS = ["git", "push", "ls", "if", "time", "export", "A=1", "-10", "0x1", "'x y'", '"a b"']


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.one_of(st.text(alphabet=_ALPHABET, min_size=1, max_size=4), st.sampled_from(_WORDS)),
        max_size=8,
    )
)
def test_fast_path_equals_tree_sitter_on_near_plain_text(pieces: list[str]) -> None:
    cmd = "".join(pieces)
    fast = fast_parse(cmd)
    if fast is not None:
        _same(fast, cmd)


_OPS_ALPHABET = "ab-=.0159+:,/_ \t|&;"
_OPS_WORDS = ["git", "ls", "if", "time", "A=1", "-10", "&&", "||", "|", ";", " ", "\t"]


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet=_OPS_ALPHABET, min_size=1, max_size=3), st.sampled_from(_OPS_WORDS)
        ),
        max_size=10,
    )
)
def test_the_word_and_operator_split_equals_tree_sitter(pieces: list[str]) -> None:
    """Bare words and operators standing apart are split at whitespace (`fast_ops`); what it
    takes is exactly what tree-sitter builds, and what it refuses the token scanner still sees."""
    cmd = "".join(pieces)
    fast = fast_ops(cmd)
    if fast is not None:
        _same(fast, cmd)
        assert fast_parse(cmd) == fast


def test_the_word_and_operator_split_takes_lists_and_pipelines() -> None:
    for cmd in ("cd src && ls mod1", "a | b | c", "ls  -la\tsrc && x -1", "a ; b || c"):
        fast = fast_ops(cmd)
        assert fast is not None, cmd
        _same(fast, cmd)
    for cmd in ("a&&b", "a &", "ls ;", "a | b && c", "&& a", "a && if", "a || 1x"):
        assert fast_ops(cmd) is None, cmd
