"""Options of allowed tools that load or run code the command names, write outside the worktree,
or read a file outside it. Each command is first run with the real tool (pytest, mypy, git) in a
scratch worktree, and its effect is checked from outside (a marker the loaded code wrote, a
directory created outside W, a secret's text in the output, git's own error naming the file it
tried to read); then the classifier must not allow it unsandboxed. The allowed neighbours of
each family are in the labelled corpora."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitsup.policy import classify_command, load_policy
from tests.helpers.require import requires

POLICY = load_policy()
PY = sys.executable


@pytest.fixture()
def scratch(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """(W, a directory outside W, the environment): W is a Git repository with one test, a
    module whose import writes MARK, a warning class in it, and an interpreter wrapper."""
    w = tmp_path / "w"
    out = tmp_path / "outside"
    w.mkdir()
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PYTEST_"))}
    env.update(HOME=str(tmp_path), GIT_CONFIG_NOSYSTEM="1", GIT_PAGER="", PAGER="")
    # the tools of the test environment (pytest, mypy, pylint) by their plain names
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t")
    env.update(GIT_COMMITTER_EMAIL="t@t", MYPY_CACHE_DIR=str(w / ".mypy_cache"))
    (w / "test_a.py").write_text("def test_a():\n    pass\n")
    (w / "evilmod.py").write_text(
        "import pathlib\npathlib.Path('MARK').write_text('loaded')\n"
        "class Warn(Warning):\n    pass\n"
    )
    (w / "evilpy").write_text(f'#!/bin/sh\ntouch MARK\nexec {PY} "$@"\n')
    (w / "evilpy").chmod(0o755)
    (w / "m.py").write_text("x: int = 1\n")
    (w / "README.md").write_text("hello\n")
    (out / "secret").write_text("the-secret-line\n")
    for argv in (["init", "-q"], ["add", "README.md"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *argv], cwd=w, env=env, check=True)
    return w, out, env


def _not_allowed(cmd: str, w: Path) -> None:
    d = classify_command(cmd, worktree=str(w), policy=POLICY, home="/")
    assert d.verdict == "ask", (cmd, d)


# Code the command line names is loaded: the module writes MARK in W when imported.
LOADS_CODE = [
    "python -m pytest -q -p evilmod test_a.py",
    "python -m pytest -q -o 'addopts=-p evilmod' test_a.py",
    "python -m pytest -q --override-ini='addopts=-p evilmod' test_a.py",
    "python -m pytest -q -W error::evilmod.Warn test_a.py",
    "python -m mypy --no-incremental --python-executable=./evilpy m.py",
]


@pytest.mark.parametrize("cmd", LOADS_CODE)
def test_options_that_load_code(scratch: tuple[Path, Path, dict[str, str]], cmd: str) -> None:
    w, _, env = scratch
    res = subprocess.run(
        cmd.replace("python", PY, 1),
        shell=True,
        cwd=w,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (w / "MARK").exists(), f"the code was not loaded: {cmd}\n{res.stdout}{res.stderr}"
    _not_allowed(cmd, w)


# A test runner writes outside W through an ini override or a report option.
@pytest.mark.parametrize(
    ("template", "written"),
    [
        ("python -m pytest -q -o cache_dir=OUT/cache test_a.py", "cache"),
        ("python -m pytest -q --override-ini=cache_dir=OUT/cache test_a.py", "cache"),
        ("python -m pytest -q -o log_file=OUT/log.txt test_a.py", "log.txt"),
    ],
)
def test_runner_options_that_write_outside(
    scratch: tuple[Path, Path, dict[str, str]], template: str, written: str
) -> None:
    w, out, env = scratch
    cmd = template.replace("OUT", str(out))
    subprocess.run(
        cmd.replace("python", PY, 1), shell=True, cwd=w, env=env, capture_output=True, timeout=300
    )
    assert (out / written).exists(), f"nothing written outside W: {cmd}"
    _not_allowed(cmd, w)


def test_git_blame_contents_reads_a_file_outside(
    scratch: tuple[Path, Path, dict[str, str]],
) -> None:
    w, out, env = scratch
    for opt in (f"--contents={out}/secret", f"--contents {out}/secret", f"--cont={out}/secret"):
        cmd = f"git blame {opt} README.md"
        res = subprocess.run(cmd, shell=True, cwd=w, env=env, capture_output=True, text=True)
        assert "the-secret-line" in res.stdout, (cmd, res.stderr)
        _not_allowed(cmd, w)


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("git grep -f OUT/missing hello", "cannot open 'OUT/missing'"),
        ("git grep -nf OUT/missing hello", "cannot open 'OUT/missing'"),
        ("git ls-files -o -X OUT/missing", "cannot use OUT/missing as an exclude file"),
        ("git ls-files -o --exclude-from=OUT/missing", "cannot use OUT/missing as an exclude"),
        ("git log -p -OOUT/missing -1", "failed to read orderfile 'OUT/missing'"),
        ("git show -O OUT/missing", "failed to read orderfile 'OUT/missing'"),
        ("git blame -S OUT/missing README.md", "reading graft file 'OUT/missing' failed"),
        ("git blame -wS OUT/missing README.md", "reading graft file 'OUT/missing' failed"),
        ("git blame --ignore-revs-file=OUT/missing README.md", "OUT/missing"),
        ("git rev-parse --resolve-git-dir OUT/secret", "invalid gitfile format: OUT/secret"),
    ],
)
def test_git_options_that_read_a_file_outside(
    scratch: tuple[Path, Path, dict[str, str]], template: str, said: str
) -> None:
    """git opens the file the option names (its error says so when the file is missing or not
    what git expects), so the option reads outside W."""
    w, out, env = scratch
    cmd = template.replace("OUT", str(out))
    res = subprocess.run(cmd, shell=True, cwd=w, env=env, capture_output=True, text=True)
    assert said.replace("OUT", str(out)) in res.stderr, (cmd, res.stderr)
    _not_allowed(cmd, w)
    # inside the sandbox the kernel decides what the task may read
    d = classify_command(cmd, worktree=str(w), policy=POLICY, home="/", sandboxed=True)
    assert (d.verdict, d.rule) == ("allow", "A.sandboxed"), (cmd, d)


@requires("pylint")
def test_pylint_init_hook_runs_code(scratch: tuple[Path, Path, dict[str, str]]) -> None:
    w, _, env = scratch
    cmd = "pylint --init-hook=\"open('MARK', 'w')\" m.py"
    subprocess.run(cmd, shell=True, cwd=w, env=env, capture_output=True, timeout=300)
    assert (w / "MARK").exists()
    _not_allowed(cmd, w)
