"""docs/scripted-model.md's recipe runs as written: the scenario and the shell block, with
the real Claude Code CLI found the way every task finds it."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.conftest import BIN, REPO_ROOT, git
from tests.helpers.agents import pinned_agent
from tests.workers.claude.conftest import PINNED_VERSION

DOC = REPO_ROOT / "docs" / "scripted-model.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


def test_the_documented_recipe_runs_to_a_ready_candidate(repo: Path, tmp: Path) -> None:
    claude = pinned_agent("GITSUP_CLAUDE_BIN", "claude", "claude", PINNED_VERSION)
    scenario = json.loads(_blocks("json")[0])
    (repo / "scenario.json").write_text(json.dumps(scenario))
    git(repo, "add", "scenario.json")
    git(repo, "commit", "-q", "-m", "scenario")
    recipe = _blocks("sh")[0].replace("/tmp/", f"{tmp}/")
    env = dict(os.environ)
    if Path(claude).resolve() == (REPO_ROOT / ".tools/claude/node_modules/.bin/claude").resolve():
        # the checkout's own install: found without being named
        env.pop("GITSUP_CLAUDE_BIN", None)
        env.pop("GITSUP_OWN_TOOLS", None)
    env["PATH"] = f"{BIN}{os.pathsep}/usr/bin{os.pathsep}/bin"
    res = subprocess.run(
        ["bash", "-e", "-c", recipe],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-4000:])
    assert "ready" in res.stdout + res.stderr
    assert "a + b" in git(repo, "show", "refs/sup/" + _task(repo) + "/candidate:calc.py")
    doctor = subprocess.run(
        [str(BIN / "git-sup"), "doctor"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    line = next(x for x in doctor.stdout.splitlines() if x.startswith("agent claude:"))
    assert str(Path(claude).resolve()) in line or claude in line, line


def _task(repo: Path) -> str:
    tasks = sorted(p.name for p in (repo / ".git" / "sup" / "tasks").iterdir())
    assert len(tasks) == 1, tasks
    return tasks[0]
