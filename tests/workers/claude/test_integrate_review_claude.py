"""`git sup integrate --review` with a Claude Code reviewer (the real CLI, the scripted model):
it judges the merge read-only, and its verdict decides and is the `Sup-Review` trailer."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.conftest import git, run_sup
from tests.helpers.supervised import REVIEWER, bash, step, verdict
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude

FIX = """
import pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-qam", "Fix add"], check=True)
"""
AT_INTEGRATION = '"integration": {'
FINDING = {"severity": "P2", "title": "merge drops a docstring", "path": "calc.py", "line": 1}


def test_a_claude_integration_review_decides(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], repo: Path, tmp_path: Path
) -> None:
    assert run_sup(repo, "init").returncode == 0
    task_model = scripted_model({"reviewer": {"match": REVIEWER, "steps": [verdict("pass")]}})
    worker = tmp_path / "worker.py"
    worker.write_text(FIX)
    spec = tmp_path / "task.toml"
    spec.write_text(
        f'goal = "Fix add"\n[worker]\nkind = "process"\nargv = ["{sys.executable}", "{worker}"]\n'
        '[review]\nkind = "claude"\n'
    )
    env = claude_env(task_model.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q", env=env, timeout=180)
    rec = json.loads(res.stdout)
    assert rec["status"] == "ready", (rec["reasons"], res.stderr)
    before = git(repo, "rev-parse", "main").strip()

    # it tries a command (refused: read-only), then asks for a revision: nothing integrated
    revise = scripted_model(
        {
            "integration": {
                "match": AT_INTEGRATION,
                "steps": [step(bash("touch reviewer-was-here")), verdict("revise", [FINDING])],
            }
        }
    )
    env = claude_env(revise.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    res = run_sup(repo, "integrate", rec["id"], "--into", "main", "--review", "--json", env=env)
    assert res.returncode == 3, res.stderr
    got = json.loads(res.stdout)
    assert got["review"]["kind"] == "claude" and got["review"]["verdict"] == "revise"
    assert got["review"]["findings"][0]["title"] == FINDING["title"]
    assert git(repo, "rev-parse", "main").strip() == before
    asked = revise.step_requests("integration")
    assert asked, "the integration reviewer never reached the model"
    tools = {t["name"] for t in asked[-1].body.get("tools", [])}
    assert not tools & {"Bash", "Write", "Edit", "NotebookEdit"}, tools

    passing = scripted_model({"integration": {"match": AT_INTEGRATION, "steps": [verdict("pass")]}})
    env = claude_env(passing.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    res = run_sup(repo, "integrate", rec["id"], "--into", "main", "--review", env=env)
    assert res.returncode == 0, res.stderr
    body = git(repo, "log", "-1", "--format=%B", "main")
    assert "Sup-Review: pass (integration review, claude)" in body, body
    assert "reviewer-was-here" not in git(repo, "ls-tree", "-r", "--name-only", "main")
