"""The shared plain-part pass decides exactly what the full walk decides, where it matters most:
commands whose parts leave something behind for later parts (downloaded files, files written
with literal content, copies of either, HEAD switched to a protected branch, variables set by
`printf -v` and `read`, git aliases defined by `git config`) and the parts that read it (run a
file, expand an alias or a variable, write HEAD). Each generated command is decided with the
shortcuts on and off (`deny_inert.ENABLED`) in both modes; any difference fails."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitsup.policy import load_policy
from gitsup.policy.parse.parser import parse
from gitsup.policy.parse.script import plain_argv
from tests.policy.test_shortcuts import _same, joined

POLICY = load_policy()

# Parts that leave state behind, and parts that read it.
WRITERS = [
    "curl -o out http://x/y", "curl -sSLo out http://x/y", "wget -O out http://x/y",
    "curl -O http://x/run.sh", "wget http://x/run.sh", "curl --output=out http://x/y",
    "echo 'git push origin main' > out", "printf 'rm -rf /' > out", "cat out | tee x.sh",
    "echo 'git push' | tee x.sh", "tee x.sh", "cp out x.sh", "mv out x.sh", "install out x.sh",
    "cp x.sh run.sh", "git checkout main", "git switch main", "git checkout -b feat",
    "git checkout feat", "git switch -c main", "git config alias.p push",
    "git config alias.q status", "git config alias.s '!sh -c x'", "git config alias.r rebase",
    "git config --global alias.p push", "printf -v X push", "printf -v X %s push",
    "read X <<< push", "read X Y <<< 'push origin'", "X=push", "export GIT_CONFIG_COUNT=1",
    "export GIT_CONFIG_KEY_0=alias.p", "export GIT_CONFIG_VALUE_0=push",
]  # fmt: skip
READERS = [
    "bash out", "sh x.sh", "./out", "./x.sh", "source out", ". x.sh", "python3 out",
    "bash run.sh", "sh run.sh", "git p", "git p origin main", "git q", "git s", "git r main",
    "git $X origin main", "git $X", "git commit -m x", "git reset --hard HEAD~1",
    "git merge feat", "git rebase main", "git cherry-pick x", "git status", "ls", "cat out",
    "echo $X", "git diff", "xargs git < out", "bash -c \"$(cat out)\"", "git am x",
]  # fmt: skip
OPS = [" && ", "; ", "\n", " | ", " || "]


@st.composite
def _command(draw: st.DrawFn) -> str:
    parts = [
        draw(st.sampled_from(WRITERS if draw(st.booleans()) else READERS))
        for _ in range(draw(st.integers(1, 4)))
    ]
    return joined(draw, parts, OPS)


@pytest.mark.parametrize(
    "cmd",
    [
        "curl -o out http://x/y && bash out",
        "wget -O out http://x/y; ./out",
        "curl -O http://x/run.sh && sh run.sh",
        "echo 'git push origin main' > out && cp out x.sh && bash x.sh",
        "git checkout main && git commit -m x",
        "git switch main; git reset --hard HEAD~1",
        "git p origin main; git config alias.p push",
        "git q; git config alias.q status",
        "printf -v X push && git $X origin main",
        "read X <<< push; git $X",
        "echo 'git push' | tee x.sh && sh x.sh",
    ],
)
def test_state_and_collection_decide_the_same(cmd: str) -> None:
    _same(cmd, POLICY)


@settings(max_examples=500, deadline=None)
@given(cmd=_command())
def test_generated_stateful_commands_decide_the_same(cmd: str) -> None:
    _same(cmd, POLICY)


def test_the_plain_argument_vector() -> None:
    script = parse("git log -n 3 && ls 'a b' \"c\" > out; X=1 ls; echo $HOME; ls {a,b} ~")
    argvs = [plain_argv(p) for p in script.parts]
    assert argvs == [["git", "log", "-n", "3"], None, None, None, None]
    assert plain_argv(parse("ls 'a b' \"c\"").parts[0]) == ["ls", "a b", "c"]
    # computed once: the same list for every step that asks
    part = parse("git status").parts[0]
    assert plain_argv(part) is plain_argv(part)
