"""Fixtures for tests that drive a real ACP agent: Claude Code's ACP adapter
(`@agentclientprotocol/claude-agent-acp`, installed by .ci/install-acp) running the real
Claude Code CLI against `ScriptedModel` on 127.0.0.1.

The adapter: env GITSUP_ACP_BIN, else <repo>/.tools/acp/node_modules/.bin/claude-agent-acp,
else `claude-agent-acp` on PATH. Not found: skip, except under CI (env CI set), where it
is a failure.
"""

from __future__ import annotations

import pytest

from tests.helpers.agents import pinned_agent
from tests.workers.claude.conftest import claude_bin, claude_env, scripted_model

__all__ = ["acp_bin", "claude_bin", "claude_env", "scripted_model"]

PINNED_VERSION = "0.101.0"  # keep in sync with VERSION in .ci/install-acp


@pytest.fixture(scope="session")
def acp_bin() -> str:
    return pinned_agent("GITSUP_ACP_BIN", "claude-agent-acp", "acp", PINNED_VERSION)
