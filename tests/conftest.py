"""Hermetic test environment: real Git repos in temp dirs, no user or system config.

Set GITSUP_KEEP_TMP=1 to keep the temporary directories for debugging.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import require

REPO_ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
GIT_SUP = str(BIN / "git-sup")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "requires(*features): host features the test needs (tests/helpers/require.py): "
        "skipped without them, failed under CI",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    require.check_marks(item)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """What this run exercised of the host (printed by every run, read in CI's log)."""
    terminalreporter.section("host features")
    for line in require.summary(len(terminalreporter.stats.get("skipped", []))):
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def hermetic_env(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    home = tmp_path_factory.mktemp("home")
    # Workers in these tests report to the test through files in its tmp dir; the sandbox
    # tests (tests/test_sandbox*.py) remove this to run with the default rules only.
    monkeypatch.setenv("GITSUP_SANDBOX_EXTRA_WRITE", str(tmp_path))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.invalid")
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv("GIT_EDITOR", "false")
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GITSUP_TASK", "CLAUDECODE"):
        monkeypatch.delenv(var, raising=False)
    # agents are found as GITSUP_*_BIN name them, never implicitly in this checkout's .tools/
    monkeypatch.setenv("GITSUP_OWN_TOOLS", "0")
    # the console scripts of this interpreter come first
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    (home / ".gitconfig").write_text(
        "[init]\n\tdefaultBranch = main\n[user]\n\tname = Test\n\temail = t@example.invalid\n"
    )
    return home


def git(cwd: Path | str, *args: str, check: bool = True) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({res.returncode}): {res.stderr}")
    return res.stdout.strip()


@pytest.fixture
def tmp(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    if os.environ.get("GITSUP_KEEP_TMP"):
        keep = Path("/tmp/gitsup-kept") / tmp_path.name
        shutil.copytree(tmp_path, keep, symlinks=True, dirs_exist_ok=True)


@pytest.fixture
def repo(tmp: Path) -> Path:
    """A small Python project with a failing test (add subtracts), one commit on main."""
    r = tmp / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (r / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "initial")
    return r


def run_sup(
    cwd: Path | str,
    *args: str,
    input: str | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real `git sup` console script."""
    return subprocess.run(
        [GIT_SUP, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


PYTHON = sys.executable
