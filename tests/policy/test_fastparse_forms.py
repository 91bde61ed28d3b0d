"""The parser's fast forms beyond plain one-line commands build exactly the `Script` tree-sitter
builds: bare words and operators before a trailing comment, and the message form (bare words,
then one "$(cat <<'EOF' ... EOF)" word holding a quoted heredoc). Each is compared with
tree-sitter over generated input, and the shapes it refuses are listed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitsup.policy.parse.fastpath import fast_parse
from tests.policy.test_fastparse import _OPS_ALPHABET, _OPS_WORDS, _same

# The message form: bare words and a "$(cat <<'EOF' ... EOF)" word (a quoted heredoc).
CLAUDE_MESSAGE = (
    "git commit -m \"$(cat <<'EOF'\nFix the parser (see #12): don't split [a, b] words\n\n"
    "- keep `x` intact\n\n🤖 Generated with [Claude Code](https://claude.com/claude-code)\n\n"
    'Co-Authored-By: Claude <noreply@anthropic.com>\nEOF\n)"'
)


def _message(prefix: str, delim: str, lines: list[str]) -> str:
    return (
        prefix + "\"$(cat <<'" + delim + "'\n" + "".join(x + "\n" for x in lines) + delim + '\n)"'
    )


@pytest.mark.parametrize(
    "cmd",
    [
        CLAUDE_MESSAGE.replace("`", "'"),
        _message("git commit -m ", "EOF", ["Fix a", "", "Body: x=1, y<2 & z|w; (done) 'q' #3"]),
        _message("git commit -am ", "END", []),
        _message("git commit --amend -m ", "E_1", ["x", "  indented", "\ttab", "ünï 日本 🤖", ""]),
        _message("git tag -a v1 -m ", "EOF", ["EO F", "E OF", "eof"]),
    ],
)
def test_the_message_form_takes_the_fast_path_and_matches_tree_sitter(cmd: str) -> None:
    fast = fast_parse(cmd)
    assert fast is not None
    _same(fast, cmd)


@pytest.mark.parametrize(
    "cmd",
    [
        CLAUDE_MESSAGE,  # a backquote in the body: tree-sitter is not asked to agree
        _message("git commit -m ", "EOF", ["a", "EOF", "b"]),  # the heredoc ends earlier
        _message("git commit -m ", "EOF", ["$HOME"]),
        _message("git commit -m ", "EOF", ['say "hi"']),
        _message("git commit -m ", "EOF", ["a\\"]),
        _message("if ", "EOF", ["x"]),
        _message("A=1 git ", "EOF", ["x"]),
        _message(" git commit -m ", "EOF", ["x"]),
        _message("git  commit -m ", "EOF", ["x"]),
        _message("git commit -m ", "EOF", ["x"]) + " && ls",
        _message("git commit -m ", "EOF", ["x"]).replace("<<'EOF'", "<<EOF"),
        _message("git commit -m ", "EOF", ["x"]).replace("<<'EOF'", "<<-'EOF'"),
        _message("git commit -m ", "EOF", ["x\r"]),
        _message("git commit -m ", "EOF", ["  x"]),  # tree-sitter drops these blanks
        _message("git commit -m ", "EOF", ["", "x"]),
        _message("git commit -m ", "EOF", ["EOFX", " EOF"]),  # tree-sitter misreads these
    ],
)
def test_the_message_form_refuses_what_it_does_not_take(cmd: str) -> None:
    assert fast_parse(cmd) is None


_BODY_ALPHABET = "aZ09 \t.,:;!?-_=+*/%&|<>()[]{}#@~^'\"`$\\\r\x01\x7féü日🤖"
_BODY_TAKEN = "aZ09 \t.,:;!?-_=+*/%&|<>()[]{}#@~^'éü日🤖"
_BODY_LINES = ["", "EOF", " EOF", "EOF ", "\tEOF", "END", "EOFEOF", ')"', "$(x)", "<<'EOF'"]
_PREFIXES = ["git commit -m ", "git commit -am ", "git tag -a v1 -m ", "echo ", "if ", "x=1 "]


@settings(max_examples=1500, deadline=None)
@given(
    st.sampled_from(_PREFIXES),
    st.sampled_from(["EOF", "END", "E_1", "x"]),
    st.lists(
        st.one_of(
            st.text(alphabet=_BODY_ALPHABET, max_size=12),
            st.text(alphabet=_BODY_TAKEN, max_size=12),
            st.sampled_from(_BODY_LINES),
        ),
        max_size=6,
    ),
)
def test_the_message_form_equals_tree_sitter_on_generated_messages(
    prefix: str, delim: str, lines: list[str]
) -> None:
    cmd = _message(prefix, delim, [x.replace("\n", "") for x in lines])
    fast = fast_parse(cmd)
    if fast is not None:
        _same(fast, cmd)


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet=_OPS_ALPHABET, min_size=1, max_size=3), st.sampled_from(_OPS_WORDS)
        ),
        max_size=8,
    ),
    st.sampled_from([" #", "\t#", "#", " # ", "  #"]),
    st.text(alphabet="ab #'\"$;|&", max_size=6),
)
def test_words_and_operators_before_a_comment_equal_tree_sitter(
    pieces: list[str], mark: str, note: str
) -> None:
    """`cmd args # note`: the text before the comment is split like a plain command, and the
    result is exactly what tree-sitter builds for the whole line."""
    cmd = "".join(pieces) + mark + note
    fast = fast_parse(cmd)
    if fast is not None:
        _same(fast, cmd)


def test_a_trailing_comment_keeps_the_whitespace_split() -> None:
    for cmd in ("ls -la # 12", "cd src && ls x # note", "a | b\t# c 'd'", "git status #"):
        fast = fast_parse(cmd)
        assert fast is not None, cmd
        _same(fast, cmd)
        assert fast.src == cmd
