"""Helpers for tests that drive real `git sup` processes and real workers.

Workers are small Python scripts run with the test interpreter (no shell), so
they behave the same everywhere. Nothing here touches the user's environment:
the hermetic env fixture of tests/conftest.py is in force when these run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from tests.conftest import GIT_SUP, PYTHON, git

# A worker that fixes calc.py (add subtracts) and commits on the task branch.
FIX_AND_COMMIT = """
import pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
print("fixed and committed")
"""

# A worker that commits something that does not fix the failing test.
COMMIT_WITHOUT_FIX = """
import pathlib, subprocess
pathlib.Path("NOTES.md").write_text("looked at it\\n")
subprocess.run(["git", "add", "NOTES.md"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "notes only"], check=True)
print("committed notes")
"""

# A worker that edits (tracked + untracked) but never commits.
EDIT_ONLY = """
import pathlib
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
pathlib.Path("new_dir").mkdir()
pathlib.Path("new_dir/untracked.txt").write_bytes(b"untracked \\x00\\xff bytes\\n")
pathlib.Path("notes.txt").write_text("hello\\n")
print("edited, not committed")
"""


def write_worker(directory: Path, body: str, name: str = "worker.py") -> str:
    """Write a Python worker script; return the --worker command string."""
    path = directory / name
    path.write_text(textwrap.dedent(body).lstrip())
    return shlex.join([PYTHON, str(path)])


def worker_argv(directory: Path, body: str, name: str = "worker.py") -> list[str]:
    return shlex.split(write_worker(directory, body, name))


def check_cmd(code: str) -> str:
    """A check command string running `python -c code` (argv, no shell)."""
    return shlex.join([PYTHON, "-c", code])


PYTEST_CHECK = shlex.join([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"])


def write_spec(directory: Path, text: str, name: str = "task.toml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def start_json(cwd: Path, *args: str, timeout: float = 60) -> tuple[int, dict[str, Any], str]:
    """`git sup start ... --json`: returns (exit code, record, stderr)."""
    from tests.conftest import run_sup

    res = run_sup(cwd, "start", *args, "--json", timeout=timeout)
    try:
        rec = json.loads(res.stdout) if res.stdout.strip() else {}
    except ValueError as exc:
        raise AssertionError(f"start --json printed no JSON: {res.stdout!r}\n{res.stderr}") from exc
    return res.returncode, rec, res.stderr


def popen_sup(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [GIT_SUP, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def wait_for(
    pred: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02, what: str = ""
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or pred}")
        time.sleep(interval)


def common_dir(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))


def task_ids(repo: Path) -> list[str]:
    tasks = common_dir(repo) / "sup" / "tasks"
    if not tasks.exists():
        return []
    return sorted(p.name for p in tasks.iterdir() if (p / "task.json").exists())


def read_record(repo: Path, task: str) -> dict[str, Any]:
    return json.loads((common_dir(repo) / "sup" / "tasks" / task / "task.json").read_text())


def pid_alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a zombie has already exited)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_dead(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def kill_tree(pid: int) -> None:
    """Test cleanup for a process this test started (and its descendants)."""
    try:
        p = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [p, *p.children(recursive=True)]
    for q in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            q.kill()


def marked(marker: str) -> list[int]:
    """Live processes (host pids) whose command line holds `marker`, such as a path a test
    passed to a task's process. A process in a task's PID namespace knows itself only by
    its pid there, so tests find it from outside by what it was started with (the
    bootstrap's processes carry the command line too)."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE and any(marker in a for a in p.cmdline()):
                found.append(p.pid)
    return found


def wait_unmarked(marker: str, timeout: float = 5.0) -> bool:
    """True once no live process carries `marker` (see `marked`)."""
    deadline = time.monotonic() + timeout
    while marked(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def kill_marked(marker: str) -> None:
    """Test cleanup: SIGKILL every process that carries `marker` (see `marked`)."""
    for pid in marked(marker):
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


def run_cli_inproc(cwd: Path, *args: str) -> tuple[int, str, str]:
    """Run the CLI entry point (`gitsup.cli.main.run`, what the console script calls) in
    this process: same argument parsing, error mapping and exit codes as `git sup`, without
    0.5 s of interpreter start-up. For refusals only; tasks run through the real script."""
    import contextlib
    import io
    import sys

    from gitsup.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_argv, old_cwd = sys.argv, os.getcwd()
    sys.argv = ["git-sup", *args]
    code: int | str | None = 0
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main.run()
            except SystemExit as exc:
                code = exc.code
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
    return (
        (code if isinstance(code, int) else (0 if code is None else 1)),
        out.getvalue(),
        err.getvalue(),
    )
