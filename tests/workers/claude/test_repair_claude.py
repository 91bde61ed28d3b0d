"""`git sup repair` on a parked candidate of a real Claude Code worker (scripted model),
through the real CLI: the new round is a new Claude Code process in the same worktree whose
first request holds what the last verification found and the person's message; the task
ends ready as the same task."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.conftest import run_sup
from tests.helpers.sup import check_cmd
from tests.helpers.supervised import bash, step, text
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude

NOTES = bash("echo notes > NOTES.md && git add NOTES.md && git commit -qm notes", "Commit")
FIX = bash("sed -i 's/a - b/a + b/' calc.py && git commit -qam 'fix add'", "Fix")
CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")


def test_repair_a_parked_claude_candidate(
    scripted_model: Callable[..., ScriptedModel], claude_bin: str, repo: Path, tmp_path: Path
) -> None:
    model = scripted_model(
        {
            "default": [step(NOTES), step(text("Done."))],
            # the repair round's conversation: its prompt holds the person's message
            "repair": {"match": "add must add", "steps": [step(FIX), step(text("Fixed."))]},
        }
    )
    env = claude_env(model.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    spec = tmp_path / "task.toml"
    spec.write_text(
        'goal = "Make add add."\n[worker]\nkind = "claude"\n[review]\nkind = "none"\n'
        '[budget]\ndeadline = "5m"\nno_output_timeout = "2m"\n'
        "[autonomy]\nmax_repair_rounds = 0\n"
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--check", CHECK, "--json", "-q", env=env)
    assert res.returncode == 3, res.stderr
    task = json.loads(res.stdout)["id"]
    first = len(model.requests)
    res = run_sup(
        repo,
        "repair",
        task,
        "-m",
        "add must add",
        "--rounds",
        "1",
        "--json",
        "-q",
        env=env,
        timeout=240,
    )
    rec = json.loads(res.stdout)
    assert res.returncode == 0, (rec["reasons"], res.stderr)
    assert rec["id"] == task and rec["status"] == "ready", rec["reasons"]
    assert rec["repair_rounds"] == 1 and rec["spawns"] == 2
    later = [r for r in model.requests[first:] if r.kind == "step"]
    assert later, [r.kind for r in model.requests]
    body = json.dumps(later[0].body)
    assert "add must add" in body and "add is wrong" in body
    events = [json.loads(x) for x in run_sup(repo, "log", task, "--json").stdout.splitlines()]
    started = [e for e in events if e["type"] == "worker_started"]
    assert [e["worker"] for e in started] == [1, 2]
