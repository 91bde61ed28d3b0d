"""What each command imports, through the real console script: the usage text and the read
commands load neither pydantic nor rich nor the process table; only commands that need Git
load pygit2. (Timing lives in bench/bench_foundation.py; this is the behaviour behind it.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GIT_SUP

HEAVY = ("pydantic", "rich", "psutil", "tree_sitter", "pyroute2", "libtmux", "apprise")


def imported(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `git-sup args` and return what it printed and the top-level modules it imported."""
    res = subprocess.run(
        [GIT_SUP, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
        timeout=60,
    )
    mods = {
        line.rsplit("|", 1)[1].strip()
        for line in res.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "typer" in mods, res.stderr[-2000:]  # the measurement itself works
    return res, mods | {m.split(".")[0] for m in mods}


def test_usage_and_version_import_no_core_library(repo: Path) -> None:
    for args in (["-h"], ["ls", "-h"], ["start", "-h"], ["--version"]):
        res, mods = imported(repo, *args)
        assert res.returncode == 0, res.stderr[-2000:]
        assert not mods & {*HEAVY, "pygit2"}, (args, sorted(mods & {*HEAVY, "pygit2"}))
    res, mods = imported(repo, "-h")
    assert "Usage:" in res.stdout and "ls" in res.stdout and "start" in res.stdout
    assert "integrate" in res.stdout and "policy" in res.stdout and "watch" in res.stdout
    assert "gitsup.cli.policy_cmd" in mods  # the usage lists every command


@pytest.mark.parametrize("args", [["ls"], ["ls", "--json"], ["ls", "--attention"]])
def test_ls_reads_tasks_without_pydantic_rich_or_psutil(repo: Path, args: list[str]) -> None:
    start = subprocess.run(
        [GIT_SUP, "start", "g", "--worker", "true", "--review", "none", "--no-commit-required"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert start.returncode == 0, start.stderr[-2000:]
    res, mods = imported(repo, *args)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))
    # only the module that defines `ls` is loaded, not every command's
    assert "gitsup.cli.tasks_cmd" in mods
    assert not {"gitsup.cli.policy_cmd", "gitsup.cli.attention_cmd"} & mods
    if "--json" in args:
        rows = json.loads(res.stdout)
        assert len(rows) == 1 and rows[0]["state"] == "completed" and rows[0]["behind"] == 0
    elif "--attention" not in args:
        assert "completed" in res.stdout


def test_an_option_value_that_needs_converting_still_is(repo: Path) -> None:
    """str and bool options skip pydantic; an int option is still converted and checked."""
    res = subprocess.run(
        [GIT_SUP, "start", "g", "--worker", "true", "--max-turns", "many"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--max-turns" in res.stderr and "valid integer" in res.stderr


def test_every_command_is_registered_by_the_module_that_defines_it() -> None:
    # a command missing from COMMAND_MODULE still works, but loads every command module
    from gitsup.cli import main

    main._register()
    defined: dict[str, str] = {}
    for cmd in main.app.registered_commands:
        name = cmd.name or (cmd.callback.__name__ if cmd.callback else "")
        defined[name] = (cmd.callback.__module__ if cmd.callback else "").rsplit(".", 1)[-1]
    for group in main.app.registered_groups:
        sub = group.typer_instance
        modules = {
            (c.callback.__module__ if c.callback else "").rsplit(".", 1)[-1]
            for c in (sub.registered_commands if sub else [])
        }
        # a group spread over several modules (`hook`) is absent on purpose: it loads them all
        defined[group.name or ""] = modules.pop() if len(modules) == 1 else ""
        if not defined[group.name or ""]:
            assert group.name not in main.COMMAND_MODULE
    missing = {n: m for n, m in defined.items() if n and m and main.COMMAND_MODULE.get(n) != m}
    assert not missing, f"COMMAND_MODULE lacks or misplaces: {missing}"


def test_run_called_by_another_program_returns_to_it_after_temporal_loaded() -> None:
    # `run()` leaves a cluster command's process without the interpreter's shutdown; called
    # in a process of another program's (a test runner, an embedding) it must raise
    # SystemExit as usual and let that program go on
    import subprocess

    from tests.conftest import PYTHON

    code = (
        "import sys, temporalio.bridge.client\n"
        "from gitsup.cli import main\n"
        "sys.argv = ['git-sup', 'ls', '--no-such-flag']\n"
        "try:\n"
        "    main.run()\n"
        "except SystemExit as exc:\n"
        "    print('returned', exc.code, flush=True)\n"
        "print('still here', flush=True)\n"
    )
    res = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    assert "returned 2" in res.stdout and "still here" in res.stdout, (res.stdout, res.stderr)
