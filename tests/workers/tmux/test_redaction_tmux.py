"""The tmux worker (Claude Code TUI + hooks) prints a key: it is not in Git, and in the task
state only in the raw pane recording, which is private to its owner (docs/tmux.md)."""

from __future__ import annotations

import json
import os
import secrets
import stat
import string
import subprocess
from collections.abc import Callable
from pathlib import Path

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.redact import REDACTED
from gitsup.spec import spec_from_mapping
from gitsup.state import Status
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import run_task
from tests.conftest import git
from tests.workers.tmux.conftest import seed_config
from tests.workers.tmux.test_tmux_worker import events_of, tmux_spec


def test_tmux_worker_key_stays_out_of_git_and_the_event_log(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    key = "sk-ant-api03-" + "".join(
        secrets.choice(string.ascii_letters + string.digits) for _ in range(40)
    )
    steps = [
        {"bash": f"echo ANTHROPIC_API_KEY={key}"},
        [
            {"type": "text", "text": "Fixing add."},
            {
                "type": "tool_use",
                "name": "Write",
                "input": {
                    "file_path": "${CWD}/calc.py",
                    "content": "def add(a, b):\n    return a + b\n",
                },
            },
        ],
        {"bash": "git commit -qam 'fix add'"},
        {"text": f"Fixed add and committed. The key was {key}."},
    ]
    model = scripted_model({"default": {"steps": steps}})
    config = seed_config(tmp / "claude-config")
    spec = spec_from_mapping(tmux_spec(claude_bin, model, config), "test")
    record = run_task(SupRepo.discover(repo), spec)
    evs = events_of(repo, record.id)
    assert record.status == Status.READY, (record.reasons, evs[-15:])
    # the hook's Stop event carried the final message: redacted there
    tc = [e["data"] for e in evs if e["type"] == "turn_completed"]
    assert tc and tc[-1]["result"] == f"Fixed add and committed. The key was {REDACTED}."
    objects = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    assert key.encode() not in objects
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    holding = []
    for root, dirs, files in os.walk(common / "sup"):
        if Path(root).name == "sandbox" and Path(root).parent.parent.name == "tasks":
            dirs.clear()  # the task's private HOME and TMPDIR: the agent's own files
            continue  # (Claude Code's session transcript among them), not gitsup's records
        for f in files:
            p = Path(root) / f
            if p.is_file() and not p.is_symlink() and key.encode() in p.read_bytes():
                holding.append(p)
    assert all(p.name == "pane.log" for p in holding), holding
    started = next(e for e in evs if e["type"] == "worker_started")["data"]
    log = Path(started["extra"]["log"])
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert key not in json.dumps(evs)
