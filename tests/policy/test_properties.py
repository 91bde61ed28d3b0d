"""Property tests: wrapping a deny command in allowed structure never yields allow, and it
stays deny (deny dominates; reachability is not evaluated)."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from gitsup.policy import classify_command, load_policy
from gitsup.policy.parse.parser import parse
from gitsup.policy.parse.script import Part
from tests.policy.conftest import HOME, W
from tests.policy.test_corpus import ROWS

DENY = [c for v, _, c in ROWS if v == "deny" and not parse(c).has_error]
ALLOWED = [c for v, _, c in ROWS if v == "allow" and "\n" not in c and "#" not in c]
POLICY = load_policy()


def _sq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


WRAPPERS = [
    lambda x, a: f"{a}\n{x}\n",
    lambda x, a: f"{x}\n{a}",
    lambda x, a: f"{a} && {x}\n",
    lambda x, a: f"{a} || {x}\n",
    lambda x, a: f"{a} | {x}\n",
    lambda x, a: f"false && {x}\n",
    lambda x, a: f"( {x}\n)",
    lambda x, a: f"{{ {x}\n}}",
    lambda x, a: f"bash -c {_sq(x)}",
    lambda x, a: f"sh -c {_sq(x)} && {a}",
    lambda x, a: f'echo "$({x}\n)"',
    lambda x, a: f"if {a}; then\n{x}\nfi",
    lambda x, a: f"eval {_sq(x)}",
]


@settings(max_examples=400, deadline=None)
@given(
    cmd=st.sampled_from(DENY),
    allowed=st.sampled_from(ALLOWED),
    wrappers=st.lists(st.sampled_from(range(len(WRAPPERS))), min_size=1, max_size=3),
)
def test_wrapping_a_deny_keeps_it_deny(cmd: str, allowed: str, wrappers: list[int]) -> None:
    text = cmd
    for k in wrappers:
        text = WRAPPERS[k](text, allowed)
    d = classify_command(text, worktree=W, policy=POLICY, home=HOME)
    assert d.verdict == "deny", (text, d)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.sampled_from(ALLOWED), min_size=1, max_size=4),
    sep=st.sampled_from([" && ", " ; ", "\n", " || "]),
)
def test_lists_of_allowed_parts_are_not_denied(parts: list[str], sep: str) -> None:
    d = classify_command(sep.join(parts), worktree=W, policy=POLICY, home=HOME)
    assert d.verdict != "deny", d


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("gitpush -;|&'\"$(){}\\\n`<>#~/.*=")), max_size=40)
)
def test_arbitrary_text_never_crashes_and_push_is_never_allowed(text: str) -> None:
    d = classify_command(text, worktree=W, policy=POLICY, home=HOME)
    assert d.verdict in ("allow", "ask", "deny")
    if d.verdict == "allow":
        # an allowed command may mention push only as data (echo/printf/grep pattern):
        # no command it runs, at any depth, is `git … push`
        for part in _all_parts(parse(text).parts):
            argv = [w.src.replace("'", "").replace('"', "").replace("\\", "") for w in part.words]
            assert not (argv[:1] == ["git"] and "push" in argv), (text, d)


def _all_parts(parts: list[Part]) -> Iterator[Part]:
    for p in parts:
        yield p
        for w in p.words:
            for seg in w.segs:
                yield from _all_parts(seg.inner or [])


@settings(max_examples=200, deadline=None)
@given(
    before=st.sampled_from(ALLOWED),
    sep=st.sampled_from([" && ", " ; ", "\n", " || ", " | "]),
    opts=st.sampled_from(["", " -C .", " --no-pager", " -c a.b=c", " -C /tmp"]),
    args=st.sampled_from(["", " origin", " --force origin HEAD:main", " -u origin HEAD", " --all"]),
)
def test_a_git_push_after_allowed_commands_is_denied(
    before: str, sep: str, opts: str, args: str
) -> None:
    text = f"{before}{sep}git{opts} push{args}"
    d = classify_command(text, worktree=W, policy=POLICY, home=HOME)
    assert d.verdict == "deny", (text, d)
