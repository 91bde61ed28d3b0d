"""An agent decider remembers what it decided, across `recover`: the real Claude Code CLI as
the worker and as the decider, both against the scripted model, through `git sup`."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.conftest import GIT_SUP, run_sup
from tests.helpers.sup import common_dir, kill_tree, task_ids, wait_for
from tests.helpers.supervised import COMMIT, FIX_CALC, step, text
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude

QUESTION = {
    "type": "tool_use",
    "name": "AskUserQuestion",
    "input": {
        "questions": [
            {
                "question": "Which test runner should I use?",
                "header": "Runner",
                "options": [
                    {"label": "pytest", "description": "plain asserts"},
                    {"label": "unittest", "description": "the standard library's"},
                ],
                "multiSelect": False,
            }
        ]
    },
}
ANSWER = "use pytest-kiwi-7 and nothing else"


def _decider_prompts(model: ScriptedModel) -> list[str]:
    out = []
    for r in model.step_requests():
        if r.script in ("question", "turn"):
            first = r.body["messages"][0]["content"]
            if not isinstance(first, str):
                first = "\n".join(b.get("text", "") for b in first if isinstance(b, dict))
            out.append(first)
    return out


def test_the_decider_remembers_across_recover(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], repo: Path, tmp_path: Path
) -> None:
    model = scripted_model(
        {
            "question": {
                "match": "The worker asks a question",
                "steps": [{"text": json.dumps({"answer": ANSWER})}],
            },
            "turn": {
                "match": "The worker finished a turn",
                "steps": [{"text": json.dumps({"action": "verify", "reason": "looks done"})}],
            },
            # the worker asks, then hangs in its next model call (its supervisor dies there)
            "default": [
                step(text("One question first."), QUESTION),
                {"hang": 10, "content": [FIX_CALC]},
                step(COMMIT),
                step(text("Done.")),
            ],
        }
    )
    spec = tmp_path / "task.toml"
    spec.write_text(
        'goal = "Fix add() in calc.py and commit."\n'
        '[worker]\nkind = "claude"\n[review]\nkind = "none"\n[decider]\nkind = "claude"\n'
        '[budget]\ndeadline = "10m"\n'
    )
    env = claude_env(model.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    proc = subprocess.Popen(
        [GIT_SUP, "start", "--spec", str(spec)],
        cwd=repo,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: len(task_ids(repo)) == 1, timeout=60, what="the task")
        (tid,) = task_ids(repo)
        memory = common_dir(repo) / "sup" / "tasks" / tid / "decider.json"
        wait_for(
            lambda: any(r.step == 1 for r in model.step_requests("default")),
            timeout=90,
            what="the worker's call after the answer",
        )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    before = _decider_prompts(model)
    assert len(before) == 1 and "Your earlier decisions" not in before[0]
    assert '"remaining_seconds"' in before[0] and '"close_out": false' in before[0]
    # kept for the task, readable by its owner only
    assert stat.S_IMODE(memory.stat().st_mode) == 0o600
    kept = json.loads(memory.read_text())["entries"]
    assert [e["on"] for e in kept] == ["question"] and ANSWER in kept[0]["answered"]

    res = run_sup(repo, "recover", tid, "--takeover", "--json", "-q", env=env, timeout=180)
    assert res.returncode in (0, 3), res.stderr
    after = _decider_prompts(model)[len(before) :]
    assert after, "the decider was not asked after recover"
    # the restored decider's next prompt holds what it answered before the supervisor died
    assert "Your earlier decisions" in after[0] and ANSWER in after[0], after[0][:2000]
    kept = json.loads(memory.read_text())["entries"]
    assert len(kept) == 1 + len(after) and stat.S_IMODE(memory.stat().st_mode) == 0o600
