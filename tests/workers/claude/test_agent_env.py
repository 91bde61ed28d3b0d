"""The agent's shell sees the environment the checks see: from an activated virtualenv that is
not gitsup's own, Claude Code's Bash tool (a login shell, whose /etc/profile resets PATH) finds
the venv's `python` and runs the same check command, through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.conftest import git, run_sup
from tests.helpers.supervised import bash, step, text
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude


def test_the_agent_runs_the_checks_python_from_an_activated_venv(
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default rules only, and a Claude config dir that does not exist yet (a first run):
    # Claude Code then starts its Bash tool without a shell snapshot, as a login shell.
    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)
    venv = tmp_path / "project-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    assert (venv / "bin" / "python").exists()
    (repo / "test_calc.py").write_text(
        "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    )
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "unittest")
    model = scripted_model(
        {
            "default": [
                step(bash("command -v python")),
                step(bash("python -m unittest -q")),
                step(text("Looked.")),
            ]
        }
    )
    # an activated venv: its bin first on PATH, VIRTUAL_ENV set; no `python` anywhere else
    path = os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"])
    env: dict[str, Any] = claude_env(model.url, tmp_path / "claude-config")
    env.update(GITSUP_CLAUDE_BIN=claude_bin, VIRTUAL_ENV=str(venv), PATH=path)
    res = run_sup(
        repo,
        "start",
        "look",
        "--worker-kind",
        "claude",
        "--review",
        "none",
        "--check",
        "python -m unittest -q",
        "--no-commit-required",
        "--json",
        env=env,
        timeout=240,
    )
    rec = json.loads(res.stdout)
    events = [
        json.loads(line)
        for line in (repo / ".git" / "sup" / "tasks" / rec["id"] / "events.jsonl")
        .read_text()
        .splitlines()
    ]
    results = [
        e["data"]["text"]
        for e in events
        if e["type"] == "worker_output" and "tool_result" in e["data"].get("text", "")
    ]
    assert len(results) == 2, results
    assert str(venv / "bin" / "python") in results[0], results[0]
    # the agent's run failed as the check did: on the test (add subtracts), not on a
    # missing interpreter (exit 127, "command not found")
    assert "AssertionError" in results[1] and "not found" not in results[1], results[1]
    (check,) = rec["checks"]
    assert check["exit_code"] == 1 and "AssertionError" in check["output_tail"], check
