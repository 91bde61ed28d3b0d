"""The classifier's shortcuts decide exactly what the full walk decides: every verdict, rule,
reason and quoted part is the same with the shortcuts on and off, over both labelled corpora
(plain and sandboxed mode) and over generated commands mixing the programs the deny rules name
with ones they do not, in every shape the parser builds (lists, pipes, payloads, redirects,
assignments, expansions, quoting)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gitsup.policy.deny.inert as deny_inert
from gitsup.policy import Policy, classify_command, load_policy
from gitsup.policy.decision import Decision
from tests.policy.conftest import HOME, W
from tests.policy.test_corpus import ROWS

POLICY = load_policy()
SB_ROWS = [
    json.loads(line)[2]
    for line in Path(__file__).with_name("corpus_sandboxed.jsonl").read_text().splitlines()
    if line.strip()
]
ALL = sorted({c for _, _, c in ROWS} | set(SB_ROWS))


@contextmanager
def _shortcuts(on: bool) -> Iterator[None]:
    old = deny_inert.ENABLED
    deny_inert.ENABLED = on
    try:
        yield
    finally:
        deny_inert.ENABLED = old


def _decide(cmd: str, policy: Policy, *, on: bool, sandboxed: bool) -> Decision:
    with _shortcuts(on):
        policy._cache.clear()
        return classify_command(cmd, worktree=W, policy=policy, home=HOME, sandboxed=sandboxed)


def _same(cmd: str, policy: Policy = POLICY) -> None:
    for sandboxed in (False, True):
        fast = _decide(cmd, policy, on=True, sandboxed=sandboxed)
        full = _decide(cmd, policy, on=False, sandboxed=sandboxed)
        assert fast == full, (cmd, sandboxed)


def test_the_shortcuts_are_on_by_default() -> None:
    assert deny_inert.ENABLED
    assert deny_inert.relevant_names(POLICY) is not None


@pytest.mark.parametrize("cmd", ALL)
def test_corpora_decide_the_same_with_and_without_shortcuts(cmd: str) -> None:
    _same(cmd)


def test_a_repository_deny_prefix_turns_the_deny_shortcut_off(tmp_path: Path) -> None:
    (tmp_path / ".gitsup").mkdir()
    (tmp_path / ".gitsup" / "policy.toml").write_text('deny = ["cat secret*"]\n')
    policy = load_policy(tmp_path)
    assert deny_inert.relevant_names(policy) is None
    d = classify_command("cat secret.txt", worktree=W, policy=policy, home=HOME)
    assert (d.verdict, d.rule) == ("deny", "deny.repo")
    _same("ls && cat secret.txt", policy)


# Programs: ones the deny rules name (git, shells, wrappers, writers, downloaders, registries)
# and ones they do not; names spelled in ways that hide or reveal them.
PROGS = [
    "ls", "cat", "echo", "rg", "grep", "head", "wc", "pytest", "ruff", "make", "npm", "cargo",
    "git", "/usr/bin/git", "git-push", "hub", "gh", "bash", "sh", "python", "python3.11",
    "node", "eval", "source", ".", "sudo", "env", "timeout", "nohup", "xargs", "find",
    "parallel", "rm", "chmod", "dd", "mkfs.ext4", "tee", "cp", "mv", "ln", "sed", "sort",
    "uniq", "tree", "base64", "go", "curl", "wget", "ssh", "mosh", "alias", "printf", "read",
    "test", "[", "export", "declare", "twine", "docker", "'git'", '"ls"', "l\\s", "g''it",
    "./x", "bin/run", "{git,push}", "~/bin/x", "gp", "my-tool", "$X",
]  # fmt: skip
ARGS = [
    "status", "push", "origin", "main", "-rf", "/", "~", ".", "src", "src/app.py", ".git/hooks",
    ".git/hooks/pre-commit", "-c", "'git push'", '"rm -rf /"', "-delete", "-exec", "--", ";",
    "-o", "out", "/dev/sda", "of=/dev/sda", "-R", "--force", "checkout", "config",
    "alias.p=push", "core.hooksPath=x", "host", "publish", "upload", "-m", "pip", "install", "$X",
    '"$(echo push)"', "`echo push`", "$((1+2))", "{a,b}", "a[$(id)]", "http://x/pulls", "-X",
    "POST", "x.sh", "-I{}", "{}", ":::", "-v", "X", "HEAD~1", "*", ".*", "-i", "s/a/b/",
    "-rf /", "-R /etc", "-rf ~", "-rf ..", "-rf .git", "-a", "install x", "publish",
]  # fmt: skip
OPS = [" && ", " || ", "; ", " | ", "\n", " & "]
TAILS = ["", " > out.txt", " > .git/hooks/x", " 2>&1", " <<< 'git push'", " < in.txt"]
LEADS = ["", "X=push ", "GIT_CONFIG_KEY_0=alias.p ", "FOO=1 "]


@st.composite
def _command(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 3)) == 0:
            parts.append(draw(st.sampled_from(ALL)))
            continue
        words = [draw(st.sampled_from(PROGS))]
        words += draw(st.lists(st.sampled_from(ARGS), max_size=5))
        parts.append(draw(st.sampled_from(LEADS)) + " ".join(words) + draw(st.sampled_from(TAILS)))
    return joined(draw, parts, OPS)


def joined(draw: st.DrawFn, parts: list[str], ops: list[str]) -> str:
    """`parts` joined by drawn operators, then as they are, in `bash -c '…'`, in `"$(…)"` or
    in a subshell."""
    text = parts[0]
    for p in parts[1:]:
        text += draw(st.sampled_from(ops)) + p
    shape = draw(st.integers(0, 4))
    if shape == 1:
        text = "bash -c '" + text.replace("'", "'\\''") + "'"
    elif shape == 2:
        text = 'echo "$(' + text + ')"'
    elif shape == 3:
        text = "( " + text + " )"
    return text


@settings(max_examples=600, deadline=None)
@given(cmd=_command())
def test_generated_commands_decide_the_same_with_and_without_shortcuts(cmd: str) -> None:
    _same(cmd)
