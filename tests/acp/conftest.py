"""Fixtures for tests that drive a real ACP agent: Claude Code's ACP adapter
(`@agentclientprotocol/claude-agent-acp`, installed by .ci/install-acp) running the real
Claude Code CLI against `ScriptedModel` on 127.0.0.1.

The adapter: env GITSUP_ACP_BIN, else <repo>/.tools/acp/node_modules/.bin/claude-agent-acp,
else `claude-agent-acp` on PATH. Not found: skip, except under CI (env CI set), where it
is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.claude.conftest import claude_bin, claude_env, scripted_model

__all__ = ["acp_bin", "claude_bin", "claude_env", "scripted_model"]

REPO_ROOT = Path(__file__).resolve().parents[2]
PINNED_VERSION = "0.101.0"  # keep in sync with VERSION in .ci/install-acp


def _find_acp() -> tuple[str | None, str]:
    explicit = os.environ.get("GITSUP_ACP_BIN")
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit, ""
        return None, f"GITSUP_ACP_BIN={explicit} is not executable"
    local = REPO_ROOT / ".tools" / "acp" / "node_modules" / ".bin" / "claude-agent-acp"
    if os.access(local, os.X_OK):
        return str(local), ""
    on_path = shutil.which("claude-agent-acp")
    if on_path:
        return on_path, ""
    return (
        None,
        f"claude-agent-acp not found (tried GITSUP_ACP_BIN, {local}, PATH); run .ci/install-acp",
    )


@pytest.fixture(scope="session")
def acp_bin() -> str:
    path, reason = _find_acp()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set: these tests must not be skipped)", pytrace=False)
        pytest.skip(reason)
    res = subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    if res.returncode != 0:
        pytest.fail(f"{path} --version failed ({res.returncode}): {res.stderr}", pytrace=False)
    if PINNED_VERSION not in res.stdout and os.environ.get("CI"):
        pytest.fail(f"{path} is {res.stdout.strip()}, CI pins {PINNED_VERSION}", pytrace=False)
    return path
