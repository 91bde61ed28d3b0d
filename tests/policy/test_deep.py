"""Nesting depth and command length never raise: long flat input is judged, input nested too deep
to judge is `ask` (rule ask.too-complex), and no exception of any kind escapes."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitsup.policy import classify_command, load_policy
from gitsup.policy.parse.parser import MAX_NESTING
from tests.policy.conftest import HOME, W

POLICY = load_policy()


def _c(cmd: str, sandboxed: bool = False) -> tuple[str, str]:
    POLICY._cache.clear()
    d = classify_command(cmd, worktree=W, policy=POLICY, home=HOME, sandboxed=sandboxed)
    return d.verdict, d.rule


N = 3000
FLAT = {
    "and": " && ".join(["ls"] * N),
    "or": " || ".join(["ls"] * N),
    "semicolons": "; ".join(["ls"] * N),
    "newlines": "\n".join(["ls"] * N),
    "pipes": " | ".join(["cat"] * N),
    "mixed": " && ".join(["ls | cat"] * N),
    "long word": "echo " + "a" * 2_000_000,
    "many words": "echo" + " a" * 200_000,
}
DEEP = {
    "subshells": "(" * N + "ls" + ")" * N,
    "groups": "{ " * N + "ls; " + "}; " * N,
    "substitutions": "echo " + "$(" * N + "ls" + ")" * N,
    "quoted substitutions": "echo " + '"$(' * 800 + "ls" + ')"' * 800,
    "backticks in substitutions": "echo " + "$(echo `" * 300 + "ls" + "`)" * 300,
    "if": "if true; then " * N + "ls" + "; fi" * N,
    "while": "while true; do " * 500 + "ls" + "; done" * 500,
    "arithmetic": "echo $((" + "(" * N + "1" + ")" * N + "))",
    "test groups": "[[ " + "( " * N + "a" + " )" * N + " ]]",
    "negation in groups": "( ! " * N + "ls" + " )" * N,
    "process substitutions": "cat " + "<(cat " * 1000 + "x" + ")" * 1000,
}


@pytest.mark.parametrize("name", list(FLAT))
def test_long_flat_input_is_judged(name: str) -> None:
    assert _c(FLAT[name]) == ("allow", "A.read-only")


@pytest.mark.parametrize("name", list(DEEP))
@pytest.mark.parametrize("sandboxed", [False, True])
def test_deep_input_is_ask(name: str, sandboxed: bool) -> None:
    assert _c(DEEP[name], sandboxed) == ("ask", "ask.too-complex")


def test_deny_in_thousands_of_parts_is_still_found() -> None:
    tail = " && ".join(["ls"] * N)
    assert _c(f"git push && {tail}") == ("deny", "D1.push")
    assert _c(f"{tail} && git push origin main") == ("deny", "D1.push")
    assert _c(" | ".join(["cat"] * N) + " | bash -c 'git push'") == ("deny", "D1.push")


def test_nesting_just_under_the_limit_is_judged() -> None:
    depth = MAX_NESTING // 4
    assert _c("( " * depth + "ls" + " )" * depth) == ("allow", "A.read-only")
    assert _c("( " * depth + "git push" + " )" * depth) == ("deny", "D1.push")


def _nested_call(depth: int, cmd: str) -> tuple[str, str]:
    if depth:
        return _nested_call(depth - 1, cmd)
    return _c(cmd)


def test_a_deep_caller_stack_gets_an_answer_not_an_exception() -> None:
    """Called with little stack left (a deep supervisor stack), the walk hits Python's recursion
    limit: the answer is ask, not a RecursionError. With room to spare the same command is judged."""
    limit = sys.getrecursionlimit()
    used = len(__import__("inspect").stack())
    cmd = "( " * (MAX_NESTING // 2 - 1) + "ls" + " )" * (MAX_NESTING // 2 - 1)
    assert _nested_call(limit - used - 30, cmd) == ("ask", "ask.too-complex")
    assert _nested_call(limit - used - 600, cmd) == ("allow", "A.read-only")


PIECES = st.sampled_from(
    [
        "(",
        ")",
        "{ ",
        "; }",
        "$(",
        "`",
        '"',
        "'",
        "[[ ",
        " ]]",
        "((",
        "))",
        "if ",
        " then ",
        " fi",
        " && ",
        " | ",
        "\n",
        "ls",
        "git push",
        "<(",
        "${",
        "}",
        "!",
        "<<EOF\n",
        "EOF\n",
    ]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=40), st.integers(min_value=1, max_value=120))
def test_arbitrary_repeated_structure_never_raises(pieces: list[str], times: int) -> None:
    text = "".join(pieces) * times
    for sandboxed in (False, True):
        verdict, _ = _c(text, sandboxed)
        assert verdict in ("allow", "ask", "deny")


@pytest.mark.parametrize(
    "cmd",
    [
        "make build | make build | make build\nbash <<'EOF'\ngit push\nEOF\n\n\n",
        "cat x\nsh -c 'git push' && ls",
    ],
)
def test_a_deny_after_a_line_tree_sitter_misparses_is_still_found(cmd: str) -> None:
    for sandboxed in (False, True):
        d = classify_command(cmd, worktree=W, policy=POLICY, home=HOME, sandboxed=sandboxed)
        assert d.verdict == "deny", d
