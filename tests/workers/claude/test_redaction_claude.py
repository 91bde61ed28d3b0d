"""The real Claude Code worker prints credentials (Bash tool output, its final message, a
failing check): none reaches Git or the task state, and the repair message the worker
receives carries the marker instead of the value."""

from __future__ import annotations

import json
import os
import secrets
import string
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitsup.redact import REDACTED
from tests.conftest import git
from tests.helpers.supervised import COMMIT, FIX_CALC, Run, bash, step, text
from tests.workers.claude.test_supervised import supervise  # noqa: F401 (a fixture)

pytestmark = pytest.mark.claude


def _rand(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _user_texts(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in messages:
        if m.get("role") != "user":
            continue
        content = m["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out += [b.get("text", "") for b in content if b.get("type") == "text"]
    return out


def test_claude_worker_output_with_keys_never_reaches_git(
    supervise: Callable[..., Run],  # noqa: F811 (the fixture imported above)
    repo: Path,
    tmp_path: Path,
) -> None:
    anthropic = "sk-ant-api03-" + _rand(40)
    aws = "AKIA" + _rand(16, string.ascii_uppercase + string.digits)
    check = tmp_path / "leaky-check.py"
    check.write_text(
        "import sys, pathlib\n"
        f"print('ANTHROPIC_API_KEY={anthropic}')\nprint('aws id {aws}')\n"
        "sys.exit(0 if 'a + b' in pathlib.Path('calc.py').read_text() else 1)\n"
    )
    r = supervise(
        {
            "default": [
                step(bash(f"echo ANTHROPIC_API_KEY={anthropic} {aws}")),
                step(text(f"Done. The key was {anthropic}.")),
                step(FIX_CALC),
                step(COMMIT),
                step(text("fixed")),
            ]
        },
        checks=[{"name": "leaky", "argv": [sys.executable, str(check)], "timeout": 60}],
    )
    rec = r.record
    assert rec.status.value == "ready", rec.reasons
    assert rec.repair_rounds == 1
    # the Bash tool really ran and its output came back to the model (the worker's own
    # conversation, not gitsup's): the test is not vacuous
    results = json.dumps([q.body for q in r.model.step_requests("default")])
    assert anthropic in results
    # what gitsup sent the worker as its repair turn: the marker, not the key
    repair = [
        t
        for q in r.model.step_requests("default")
        for t in _user_texts(q.body["messages"])
        if "The supervisor verified your work" in t
    ]
    assert repair, "no repair message reached the worker"
    assert all(anthropic not in t and aws not in t for t in repair)
    assert REDACTED in repair[-1]
    # nothing in Git, nothing in the task state; the marker where the output was
    objects = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    state = b""
    for root, dirs, files in os.walk(common / "sup"):
        if Path(root).name == "sandbox" and Path(root).parent.parent.name == "tasks":
            dirs.clear()  # the task's private HOME and TMPDIR: the agent's own files
            continue  # (Claude Code's session transcript among them), not gitsup's records
        for f in files:
            p = Path(root) / f
            if p.is_file() and not p.is_symlink():
                state += p.read_bytes()
    for value in (anthropic, aws):
        assert value.encode() not in objects
        assert value.encode() not in state
    outputs = " ".join(e.get("text", "") for e in r.of("worker_output"))
    assert outputs.count(REDACTED) >= 3  # the tool_use, its result, the final message
    assert any(REDACTED in (d.get("result") or "") for d in r.of("turn_completed"))
    assert REDACTED.encode() in objects  # sealed log segments, the note's check output
