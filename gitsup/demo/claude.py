"""`git sup demo` with the real Claude Code CLI and the bundled scripted model on 127.0.0.1."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.demo.scripted_model_steps import load_scenario
from gitsup.errors import GitsupError
from gitsup.host import proc
from gitsup.spec import spec_from_mapping
from gitsup.store.events import Event
from gitsup.store.record import TaskRecord
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import run_task


def run_claude_demo(
    repo: Path, data: dict[str, Any], claude_bin: str, on_event: Callable[[Event], None] | None
) -> tuple[TaskRecord, str]:
    """Run the demo task with the real CLI against the bundled scenario: the record, and what
    the worker was."""
    import json

    scenario = load_scenario(
        json.loads((resources.files("gitsup.data") / "demo_scenario.json").read_text())
    )
    version = _version(claude_bin)
    config_dir = tempfile.mkdtemp(prefix="gitsup-demo-claude-")
    with ScriptedModel(scenario) as model:
        env = {
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": "sk-demo-not-a-key",
            "CLAUDE_CONFIG_DIR": config_dir,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": "1",
            "API_TIMEOUT_MS": "30000",
        }
        spec = spec_from_mapping(
            {
                **data,
                "worker": {"kind": "claude", "argv": [claude_bin], "env": env},
                "review": {"kind": "claude", "timeout": "2m"},
            },
            "demo",
        )
        record = run_task(SupRepo.discover(repo), spec, on_event=on_event)
    return (
        record,
        f"Claude Code {version} (the real CLI) with gitsup's bundled scripted model on 127.0.0.1",
    )


def _version(claude_bin: str) -> str:
    try:
        out = proc.run([claude_bin, "--version"], timeout=30, merge_stderr=False)
    except GitsupError:
        return "?"
    return (out.output.strip().split(" ")[0] or "?") if out.ok else "?"
