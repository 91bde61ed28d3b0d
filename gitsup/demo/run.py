"""`git sup demo`: a throwaway repository and one scripted task through the whole loop.

No network, no API key. With the Claude Code CLI installed, the worker is the
real CLI talking to the bundled scripted model on 127.0.0.1; otherwise a
scripted process worker stands in.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gitsup.errors import GitsupError
from gitsup.host import proc
from gitsup.spec import spec_from_mapping
from gitsup.store.events import Event
from gitsup.store.record import TaskRecord
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import run_task

CALC = "def add(a, b):\n    return a - b\n"
TEST = (
    "import unittest\n\nfrom calc import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n"
    "        self.assertEqual(add(1, 2), 3)\n"
)


@dataclass(frozen=True)
class DemoResult:
    repo: Path
    record: TaskRecord
    worker: str
    note: str


def _git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "gitsup demo",
        "GIT_AUTHOR_EMAIL": "demo@gitsup.invalid",
        "GIT_COMMITTER_NAME": "gitsup demo",
        "GIT_COMMITTER_EMAIL": "demo@gitsup.invalid",
    }
    res = proc.run(["git", *args], cwd=cwd, env=proc.child_env(env), timeout=60)
    if not res.ok:
        raise GitsupError(f"git {' '.join(args)} failed: {res.output.strip()}")
    return res.output


def make_demo_repo(parent: Path) -> Path:
    repo = parent / "demo-repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "gitsup demo")
    _git(repo, "config", "user.email", "demo@gitsup.invalid")
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST)
    (repo / "README.md").write_text("# demo\n\n`add()` is broken; the task fixes it.\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "Initial commit: add() subtracts")
    return repo


def run_demo(
    directory: Path | None = None,
    *,
    worker: str = "auto",
    on_event: Callable[[Event], None] | None = None,
) -> DemoResult:
    parent = directory or Path(tempfile.mkdtemp(prefix="gitsup-demo-"))
    repo = make_demo_repo(parent)
    # Everything gitsup keeps per user (the integration signing key, the allowed signers) is
    # the demo's own: nothing of it, least of all its identity, reaches the user's.
    with _own_config(parent / "config"):
        return _run(repo, worker, on_event)


@contextlib.contextmanager
def _own_config(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    saved = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(directory)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("XDG_CONFIG_HOME", None)
        else:
            os.environ["XDG_CONFIG_HOME"] = saved


def _run(repo: Path, worker: str, on_event: Callable[[Event], None] | None) -> DemoResult:
    checks = [{"name": "unittest", "argv": [sys.executable, "-m", "unittest", "-q"], "timeout": 60}]
    claude_bin = find_claude() if worker in ("auto", "claude") else None
    if worker == "claude" and claude_bin is None:
        raise GitsupError(
            "the Claude Code CLI was not found",
            hint="install it (npm install @anthropic-ai/claude-code) or run `git sup demo --worker process`",
        )
    data: dict[str, Any] = {
        "goal": "Fix add() in calc.py so the tests pass, add a test for negative numbers, and commit.",
        "checks": checks,
        "budget": {"deadline": "5m", "no_output_timeout": "2m", "closeout_grace": 0},
        "review": {"kind": "none"},
    }
    if claude_bin is not None:
        return _run_with_claude(repo, data, claude_bin, on_event)
    script = resources.files("gitsup.data") / "demo_worker.py"
    data["worker"] = {"kind": "process", "argv": [sys.executable, str(script)]}
    spec = spec_from_mapping(data, "demo")
    record = run_task(SupRepo.discover(repo), spec, on_event=on_event)
    return DemoResult(repo, record, "process (scripted; Claude Code CLI not installed)", "")


def find_claude() -> str | None:
    """Claude Code as every task finds it (gitsup/workers/agentproc.py `find_agent`)."""
    import os

    from gitsup.workers.base import WorkerError
    from gitsup.workers.claude.worker import find_claude as lookup

    try:
        return lookup([], os.environ)[0]
    except WorkerError:
        return None


def _run_with_claude(
    repo: Path, data: dict[str, Any], claude_bin: str, on_event: Callable[[Event], None] | None
) -> DemoResult:
    from gitsup.demo.claude import run_claude_demo

    record, worker = run_claude_demo(repo, data, claude_bin, on_event)
    return DemoResult(repo, record, worker, "")
