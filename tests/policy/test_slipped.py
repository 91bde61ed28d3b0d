"""Classes that slipped through before: each command is first run by the real bash (and git, make,
sed) in a scratch worktree to prove it runs code or writes a file, then the classifier must not
allow it, sandboxed or not."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gitsup.policy import classify_command, load_policy

POLICY = load_policy()

# (command with MARK for the file it creates, expected verdict or None for "not allow")
CASES: list[tuple[str, str | None]] = [
    ("[[ -v 'a[$(touch MARK)]' ]]", "ask"),
    ("test -v 'a[$(touch MARK)]'", "ask"),
    ("[ -v 'a[$(touch MARK)]' ]", "ask"),
    ("printf -v 'a[$(touch MARK)]' x", "ask"),
    ("declare 'a[$(touch MARK)]=1'", "ask"),
    ("TERM='a[$(touch MARK)]'; [[ TERM -eq 0 ]]", "ask"),
    ("read 'a[$(touch MARK)]' <<< x", "ask"),
    ("let 'a[$(touch MARK)]=1'", "ask"),
    ("printf -v X %s MARK; touch $X", "ask"),
    ("uniq in.txt MARK", "ask"),
    ("sort -o MARK in.txt", "ask"),
    ("make -f - test <<'EOF'\ntest:\n\ttouch MARK\nEOF", "ask"),
    ("make --file=- test <<'EOF'\ntest:\n\ttouch MARK\nEOF", "ask"),
    ("cat <<'EOF' | make -f- check\ncheck:\n\ttouch MARK\nEOF", "ask"),
    ("sed -f - in.txt <<'EOF'\n1e touch MARK\nEOF", "ask"),
    ("sed -n -f - in.txt <<'EOF'\n1e touch MARK\nEOF", "ask"),
    ("git grep -O'touch MARK;:' hello", "ask"),
    ("git grep -iO'touch MARK;:' hello", "ask"),
    ("git grep --open-files='touch MARK;:' hello", "ask"),
    ("git -c alias.x='!touch MARK' x", "ask"),
    ("git -c core.fsmonitor='touch MARK;false' status", "ask"),
]


@pytest.fixture()
def worktree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    w = tmp_path / "w"
    w.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(tmp_path), GIT_CONFIG_NOSYSTEM="1", GIT_PAGER="", PAGER="")
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t")
    env.update(GIT_COMMITTER_EMAIL="t@t")
    (w / "in.txt").write_text("hello\nhello\n")
    for argv in (["init", "-q"], ["add", "in.txt"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *argv], cwd=w, env=env, check=True)
    return w, env


@pytest.mark.parametrize(("template", "verdict"), CASES, ids=[c[:40] for c, _ in CASES])
def test_command_runs_code_and_is_not_allowed(
    worktree: tuple[Path, dict[str, str]], template: str, verdict: str | None
) -> None:
    w, env = worktree
    marker = w / "marker"
    cmd = template.replace("MARK", "marker")
    subprocess.run(["bash", "-c", cmd], cwd=w, env=env, capture_output=True, timeout=30)
    assert marker.exists(), f"bash did not run the code in {cmd!r}: the case proves nothing"
    for sandboxed in (False, True):
        d = classify_command(cmd, worktree=str(w), policy=POLICY, home="/", sandboxed=sandboxed)
        assert d.verdict != "allow", (cmd, sandboxed, d)
        if verdict is not None:
            assert d.verdict == verdict, (cmd, sandboxed, d)


def test_tilde_plus_and_minus_are_not_the_worktree(
    worktree: tuple[Path, dict[str, str]],
) -> None:
    """`~-` is $OLDPWD and `~+` is $PWD; bash expands both; neither is a path in W."""
    w, env = worktree
    outside = w.parent / "secret"
    outside.write_text("s")
    res = subprocess.run(
        ["bash", "-c", f"cd {w.parent} && cd {w} && cat ~-/secret && cat ~+/../secret"],
        cwd=w,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.stdout == "ss"
    for cmd in ("cat ~-/secret", "cat ~+/../secret", "echo x > ~-/f", "ls ~+2"):
        d = classify_command(cmd, worktree=str(w), policy=POLICY, home="/")
        assert d.verdict == "ask", (cmd, d)


def test_globs_that_name_the_hooks_directory_are_denied(
    worktree: tuple[Path, dict[str, str]],
) -> None:
    w, env = worktree
    cmd = "cp in.txt .gi?/hoo*/ && chmod +x .g*/hooks/in.txt && echo x >> .gi[t]/h*/in.txt"
    subprocess.run(["bash", "-c", cmd], cwd=w, env=env, check=True)
    assert (w / ".git" / "hooks" / "in.txt").read_text().endswith("x\n")
    for sandboxed in (False, True):
        d = classify_command(cmd, worktree=str(w), policy=POLICY, home="/", sandboxed=sandboxed)
        assert (d.verdict, d.rule) == ("deny", "D3.hooks-dir"), d


def test_git_accepts_option_abbreviations(worktree: tuple[Path, dict[str, str]]) -> None:
    """git's parse-options takes unique prefixes of long options: `--no-verif` skips a failing
    hook, so a list of exact option names is not enough."""
    w, env = worktree
    hook = w / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    args = ["git", "commit", "-q", "--allow-empty", "-m", "x"]
    assert subprocess.run(args, cwd=w, env=env, check=False).returncode != 0
    assert subprocess.run([*args, "--no-verif"], cwd=w, env=env, check=False).returncode == 0
    for cmd in (
        "git commit --allow-empty -m x --no-verif",
        "git commit --no-ver -m x",
        "git grep --open foo",
        "git diff --ext-d",
        "git log --textc -p",
        f"git log --outp={w.parent}/out -1",
    ):
        d = classify_command(cmd, worktree=str(w), policy=POLICY, home="/")
        assert d.verdict == "ask", (cmd, d)


@pytest.mark.parametrize(
    "cmd",
    [
        "echo 'git push' | cat | cat | sh\npytest 2>&1 | tail -20",
        "( echo 'git push' | cat | cat | cat | sh\npytest 2>&1 | tail -20\n)",
        "ls | cat | cat | git push\npytest 2>&1",
    ],
)
def test_a_deny_before_a_line_tree_sitter_glues_on_is_found(cmd: str, tmp_path: Path) -> None:
    """After a pipeline of three or more stages, tree-sitter-bash glues the first word of a next
    line that has a redirection (`x 2>&1`) onto the pipeline's last command; bash ends it at the
    newline. Deny detection splits it there."""
    d = classify_command(cmd, worktree="/home/dev/repo", policy=POLICY, home="/home/dev")
    assert (d.verdict, d.rule) == ("deny", "D1.push"), d
    # bash really runs the first line on its own
    subprocess.run(
        ["bash", "-c", cmd.replace("git push", "touch MARK").replace("pytest", "true")],
        cwd=tmp_path,
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert (tmp_path / "MARK").exists()
