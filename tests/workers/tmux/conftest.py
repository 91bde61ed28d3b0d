"""Fixtures for the tmux transport: a real tmux server, the real Claude Code TUI and the
scripted Messages-API stand-in. Nothing leaves 127.0.0.1.

Claude Code's config dir is temporary and pre-seeded the way a user's real one already
is (onboarding done, the API key in the environment approved): gitsup answers no dialog
on the screen except workspace trust for the task's own worktree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.helpers.require import noted, require, unavailable

REPO_ROOT = Path(__file__).resolve().parents[3]
API_KEY = "sk-scripted-not-a-key"


def find_claude() -> str | None:
    explicit = os.environ.get("GITSUP_CLAUDE_BIN")
    if explicit and os.access(explicit, os.X_OK):
        return explicit
    local = REPO_ROOT / ".tools" / "claude" / "node_modules" / ".bin" / "claude"
    if os.access(local, os.X_OK):
        return str(local)
    return shutil.which("claude")


@pytest.fixture(scope="session")
def claude_bin() -> str:
    require("tmux", "the TUI worker")
    path = find_claude()
    if path is None:
        unavailable("claude", "the Claude Code CLI is not found (run .ci/install-claude)")
        raise AssertionError("unreachable")
    noted("claude (tmux)", path)
    return path


def seed_config(config_dir: Path, *, trusted: list[str] | None = None) -> Path:
    """A Claude Code config dir like a user's: onboarding done, our API key approved."""
    config_dir.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
    }
    if trusted:
        data["projects"] = {p: {"hasTrustDialogAccepted": True} for p in trusted}
    (config_dir / ".claude.json").write_text(json.dumps(data))
    return config_dir


def claude_env(url: str, config_dir: Path) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": API_KEY,
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "1",
        "API_TIMEOUT_MS": "20000",
    }


@pytest.fixture
def scripted_model() -> Iterator[Callable[..., ScriptedModel]]:
    started: list[ScriptedModel] = []

    def start(scripts: Any, **kwargs: Any) -> ScriptedModel:
        model = ScriptedModel(scripts, **kwargs).start()
        started.append(model)
        return model

    yield start
    for model in started:
        model.stop()


@pytest.fixture
def tmux_sockets() -> Iterator[list[Path]]:
    """Sockets of tmux servers a test started: killed at teardown whatever happened."""
    sockets: list[Path] = []
    yield sockets
    for sock in sockets:
        if sock.exists():
            subprocess.run(
                ["tmux", "-S", str(sock), "kill-server"], capture_output=True, timeout=10
            )
            sock.unlink(missing_ok=True)  # tmux leaves its socket file behind
