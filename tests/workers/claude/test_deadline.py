"""The deadline ends repair: the real Claude Code CLI (scripted model), `git sup start`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.conftest import run_sup
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude

COMMIT_NOTES = {
    "type": "tool_use",
    "name": "Bash",
    "input": {
        "command": "echo notes > NOTES.md && git add NOTES.md && git commit -qm notes",
        "description": "Commit",
    },
}


def test_no_repair_round_starts_after_the_deadline(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], repo: Path, tmp_path: Path
) -> None:
    # The worker commits something that does not fix add(); the check fails after the
    # deadline has passed. A repair round would have been sent before.
    model = scripted_model(
        {"default": [{"content": [COMMIT_NOTES]}, {"text": "Done."}, {"text": "Repaired."}]}
    )
    check = [sys.executable, "-c", "import time; time.sleep(9); raise SystemExit(1)"]
    spec = tmp_path / "task.toml"
    spec.write_text(
        'goal = "Fix add() in calc.py and commit."\n'
        f'[[checks]]\nname = "slow"\nargv = {json.dumps(check)}\n'
        '[worker]\nkind = "claude"\n[review]\nkind = "none"\n'
        '[budget]\ndeadline = "7s"\ndeadline_warning = 0\nno_output_timeout = "60s"\n'
    )
    env = claude_env(model.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q", env=env, timeout=120)
    rec = json.loads(res.stdout)
    assert res.returncode == 3, (rec.get("reasons"), res.stderr)
    assert rec["repair_rounds"] == 0
    assert "deadline reached; no repair round starts after it" in rec["reasons"], rec["reasons"]
    log = run_sup(repo, "log", rec["id"], "--json", env=env)
    types = [json.loads(line)["type"] for line in log.stdout.splitlines()]
    assert "repair_requested" not in types
    assert len([r for r in model.step_requests() if r.kind == "step"]) == 2
