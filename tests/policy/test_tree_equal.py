"""The tree-sitter walk (`parse.parse_tree`) builds exactly the `Script` the reference walk
(tests/policy/reference_tree.py, a frozen copy of the walk before it was rewritten for
speed) builds: over the labelled corpora, every string constant in the policy tests, and
generated bash fragments heavy in structure (substitutions, heredocs, redirections, quotes,
arrays, functions, syntax errors)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gitsup.policy.parse.parser import parse_tree
from gitsup.policy.parse.script import Part, Redirect, Script, Seg, Word
from tests.policy.reference_tree import ref_parse_tree

HERE = Path(__file__).resolve().parent


def _corpus_commands() -> list[str]:
    out: list[str] = []
    for name in sorted(HERE.glob("corpus*.jsonl")):
        for line in name.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line)[2])
    return out


def _test_strings() -> list[str]:
    """Every string constant in the policy test modules (commands and everything else)."""
    out: set[str] = set()
    for name in sorted(HERE.glob("*.py")):
        for node in ast.walk(ast.parse(name.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
                out.add(node.value)
    return sorted(out)


CORPUS = _corpus_commands()
STRINGS = _test_strings()


def canonical(script: Script) -> Any:
    """The script as nested tuples, with each `Part` reference (pipe_prev, a function's parts,
    a substitution's parts) replaced by its index in `script.parts`: dataclass equality alone
    would accept an equal copy where the walk shares one object."""
    index = {id(p): i for i, p in enumerate(script.parts)}

    def ref(p: Part | None) -> Any:
        return None if p is None else index.get(id(p), ("foreign", part(p)))

    def seg(s: Seg) -> Any:
        inner = None if s.inner is None else tuple(ref(p) for p in s.inner)
        return (s.kind, s.text, s.quoted, s.op, s.arg, inner)

    def word(w: Word | None) -> Any:
        return None if w is None else (w.src, w.node_type, tuple(seg(s) for s in w.segs))

    def redirect(r: Redirect) -> Any:
        return (r.op, r.fd, word(r.target), r.body, r.quoted, r.expands)

    def part(p: Part) -> Any:
        return (
            p.src,
            p.kind,
            tuple(word(w) for w in p.words),
            tuple((n, word(w)) for n, w in p.assigns),
            tuple(redirect(r) for r in p.redirects),
            p.background,
            ref(p.pipe_prev),
            p.depth,
            p.in_function,
            p.line,
        )

    return (
        script.src,
        tuple(part(p) for p in script.parts),
        script.has_error,
        script.error_line,
        tuple((k, tuple(ref(p) for p in v)) for k, v in script.functions.items()),
        tuple(script.fork_bombs),
        tuple(sorted(script.flags)),
        tuple(script.glued),
    )


def same(command: str) -> None:
    new = parse_tree(command)
    old = ref_parse_tree(command)
    assert canonical(new) == canonical(old), command
    assert new == old, command


@pytest.mark.parametrize("chunk", range(8))
def test_corpora_and_test_strings_build_the_reference_script(chunk: int) -> None:
    inputs = sorted(set(CORPUS) | set(STRINGS))
    assert len(CORPUS) > 500 and len(STRINGS) > 1000
    for command in inputs[chunk::8]:
        same(command)


def test_mutated_corpus_builds_the_reference_script() -> None:
    """Every corpus command cut short, and with one structural character dropped or doubled:
    syntax errors and recoveries of every kind."""
    for command in CORPUS:
        n = len(command)
        for k in {n // 3, n // 2, (2 * n) // 3, n - 1}:
            same(command[:k])
        for k, ch in enumerate(command):
            if ch in "()[]{}$`\"'|&;<>\n\\" and k % 3 == 0:
                same(command[:k] + command[k + 1 :])
                same(command[:k] + ch + command[k:])


# -- generated fragments -------------------------------------------------------------------

_NAME = st.sampled_from(["x", "HOME", "PATH", "a_1", "f", "git", "i", "IFS", "@", "#", "?", "1"])
_PLAIN = st.sampled_from(
    [
        "git",
        "ls",
        "echo",
        "-la",
        "--x=1",
        "src/a.py",
        "*.py",
        "~/x",
        "a{b,c}",
        "{1..3}",
        "12",
        "-",
        "a\\ b",
        "\\$x",
        "x\\\ny",
        "a=b",
        "'",
        "!",
        "@(a|b)",
        "[a-z]",
        "%s",
        "..",
        "\\n",
    ]
)


def _words(cmd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    sub = cmd.map(lambda c: f"$({c})") | cmd.map(lambda c: f"`{c}`")
    proc = cmd.map(lambda c: f"<({c})") | cmd.map(lambda c: f">({c})")
    var = (
        _NAME.map(lambda n: f"${n}")
        | _NAME.map(lambda n: "${" + n + "}")
        | st.tuples(
            _NAME, st.sampled_from([":-", "-", ":=", "#", "##", "%", "/", ":+", "^^"])
        ).flatmap(lambda t: (_PLAIN | sub).map(lambda a: "${" + t[0] + t[1] + a + "}"))
        | _NAME.map(lambda n: "${#" + n + "}")
        | _NAME.map(lambda n: "${!" + n + "}")
        | _NAME.map(lambda n: "${" + n + "[1]}")
        | _NAME.map(lambda n: "${" + n + "[@]}")
    )
    arith = st.sampled_from(["$((1+2))", "$((x*3))", "$[1+1]"]) | cmd.map(
        lambda c: f"$(( $({c}) ))"
    )
    dq_piece = st.sampled_from(["a b", '\\"', "\\$", "\\\\", "\\x", "\n", "'"]) | var | sub | arith
    dq = st.lists(dq_piece, max_size=4).map(lambda ps: '"' + "".join(ps) + '"')
    tq = st.lists(dq_piece, max_size=3).map(lambda ps: '$"' + "".join(ps) + '"')
    sq = st.sampled_from(["''", "'a b'", "'$x'", "'a\"b'", "'\n'", "'\\'"])
    ansi = st.sampled_from(["$'a\\nb'", "$'\\x41\\101\\u00e9'", "$'\\''", "$'\\cA'", "$''"])
    atom = _PLAIN | var | sub | proc | arith | dq | tq | sq | ansi
    return st.lists(atom, min_size=1, max_size=3).map("".join)


@st.composite
def _heredoc(draw: st.DrawFn, cmd: st.SearchStrategy[str]) -> str:
    delim = draw(st.sampled_from(["EOF", "'EOF'", '"EOF"', "\\EOF", "E"]))
    op = draw(st.sampled_from(["<<", "<<-", "<< "]))
    lines = draw(
        st.lists(
            st.sampled_from(["text", "$x", "\tindented", "${y:-z}", "`id`", ""])
            | cmd.map(lambda c: f"$({c})"),
            max_size=3,
        )
    )
    tail = draw(st.sampled_from(["", " | bash", " && ls", " > out", " 2>&1", "; echo"]))
    end = delim.strip("'\"\\")
    return f"{op}{delim}{tail}\n" + "".join(line + "\n" for line in lines) + end + "\n"


def _redirects(cmd: st.SearchStrategy[str], word: st.SearchStrategy[str]) -> Any:
    ops = st.sampled_from([">", ">>", "<", "2>", "2>&1", "&>", ">&2", "1>", "<>", ">|", "&>>"])
    simple = st.tuples(ops, word).map(lambda t: t[0] if t[0].endswith("&1") else t[0] + t[1])
    here = word.map(lambda w: "<<< " + w)
    return simple | here | _heredoc(cmd)


def _commands(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    word = _words(inner)
    assign = st.tuples(_NAME, word).map(lambda t: f"{t[0]}={t[1]}") | _NAME.map(
        lambda n: f"{n}=(a 'b c' $x)"
    )
    simple = st.tuples(
        st.lists(assign, max_size=2),
        st.lists(word, min_size=1, max_size=4),
        st.lists(_redirects(inner, word), max_size=2),
    ).map(lambda t: " ".join(t[0] + t[1] + t[2]))
    decl = st.tuples(
        st.sampled_from(["export", "declare -a", "local", "readonly", "unset", "typeset -x"]),
        st.lists(assign | word, min_size=1, max_size=3),
    ).map(lambda t: t[0] + " " + " ".join(t[1]))
    test = st.tuples(word, st.sampled_from(["==", "=~", "-eq", "!=", "-nt"]), word).map(
        lambda t: f"[[ {t[0]} {t[1]} {t[2]} ]]"
    ) | word.map(lambda w: f"[ -f {w} ]")
    return simple | decl | test | assign | st.sampled_from(["(( i++ ))", "# a comment", ":"])


def _statements(leaf: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    def extend(s: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        word = _words(s)
        seps = st.sampled_from([" && ", " || ", "; ", " | ", " |& ", " & ", "\n", " &\n"])
        chain = st.tuples(s, seps, s).map("".join)
        return (
            chain
            | s.map(lambda x: f"( {x} )")
            | s.map(lambda x: f"{{ {x}; }}")
            | s.map(lambda x: f"! {x}")
            | st.tuples(s, s).map(lambda t: f"if {t[0]}; then {t[1]}; fi")
            | st.tuples(s, s, s).map(
                lambda t: f"if {t[0]}; then {t[1]}; elif x; then :; else {t[2]}; fi"
            )
            | st.tuples(s, s).map(lambda t: f"while {t[0]}; do {t[1]}; done")
            | st.tuples(st.lists(word, max_size=3), s).map(
                lambda t: f"for i in {' '.join(t[0])}; do {t[1]}; done"
            )
            | s.map(lambda x: f"for ((i=0; i<3; i++)); do {x}; done")
            | st.tuples(word, s).map(lambda t: f"case {t[0]} in a|b) {t[1]};; *) ;; esac")
            | st.tuples(st.sampled_from(["f", "git", "ls", ":"]), s).map(
                lambda t: f"{t[0]}() {{ {t[1]}; }}"
            )
            | s.map(lambda x: f"function g {{ {x} | g & }}")
            | st.tuples(s, _redirects(s, word)).map(lambda t: f"{{ {t[0]}; }} {t[1]}")
            | st.tuples(s, _redirects(s, word)).map(lambda t: f"{t[0]} {t[1]}")
            | s.map(lambda x: f"bash -c '{x}'")
        )

    return st.recursive(leaf, extend, max_leaves=6)


_LEAF = st.sampled_from(["ls", "git status", "echo hi", "cat f", "rm -rf x", "true"])
FRAGMENTS = _statements(_commands(_statements(_LEAF)))


@settings(max_examples=1500, deadline=None)
@given(text=FRAGMENTS)
@example(text="cat <<EOF | bash\nrm -rf /\nEOF\n")
@example(text="git commit -F - <<'EOF'\nmsg\nEOF")
def test_generated_fragments_build_the_reference_script(text: str) -> None:
    same(text)


@settings(max_examples=800, deadline=None)
@given(text=FRAGMENTS, data=st.data())
def test_damaged_fragments_build_the_reference_script(text: str, data: st.DataObject) -> None:
    """A generated fragment with a cut, a dropped or an inserted structural character."""
    k = data.draw(st.integers(0, len(text)))
    ch = data.draw(st.sampled_from(list("()[]{}$`\"'|&;<>\n\\#= \t")))
    how = data.draw(st.sampled_from(["cut", "drop", "insert"]))
    if how == "cut":
        same(text[:k])
    elif how == "drop":
        same(text[:k] + text[k + 1 :])
    else:
        same(text[:k] + ch + text[k:])


@settings(max_examples=800, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab$(){}[]'\"`\\|&;<>\n #=!*~-0EOF\t")), max_size=60)
)
def test_arbitrary_text_builds_the_reference_script(text: str) -> None:
    same(text)


def test_deep_and_long_inputs_build_the_reference_script() -> None:
    for n in (40, 49, 50, 51, 99, 100, 101, 150):
        same("(" * n + "ls" + ")" * n)
        same("$(" * n + "ls" + ")" * n)
        same("echo " + '"$(' * n + "x" + ')"' * n)
        same("{ " * n + "ls; " + "}; " * n)
    same(" && ".join(f"echo {i}" for i in range(3000)))
    same("\n".join(f"x{i}=$(cat f{i}) | grep -v {i} > o{i}" for i in range(300)))
    same("echo é ünïcödé '日本' \udcff $'\\xff'")
