"""The pinned agent CLIs the real-binary suites drive (Claude Code, Codex, the ACP adapter)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.require import noted, unavailable

REPO_ROOT = Path(__file__).resolve().parents[2]


def find_agent(env_var: str, program: str, tool: str, install: str) -> tuple[str | None, str]:
    """`env_var`, else `.tools/<tool>/node_modules/.bin/<program>`, else `program` on PATH;
    (path, "") or (None, why not)."""
    explicit = os.environ.get(env_var)
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit, ""
        return None, f"{env_var}={explicit} is not executable"
    local = REPO_ROOT / ".tools" / tool / "node_modules" / ".bin" / program
    if os.access(local, os.X_OK):
        return str(local), ""
    on_path = shutil.which(program)
    if on_path:
        return on_path, ""
    return None, f"{program} not found (tried {env_var}, {local}, PATH); run {install}"


def pinned_agent(env_var: str, program: str, tool: str, pinned: str) -> str:
    """The agent's binary for a session fixture: skipped when absent, except under CI, where
    an absent binary, one whose --version fails, or another version than `pinned` fails."""
    path, reason = find_agent(env_var, program, tool, f".ci/install-{tool}")
    if path is None:
        unavailable(program, reason)
    res = subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    if res.returncode != 0:
        pytest.fail(f"{path} --version failed ({res.returncode}): {res.stderr}", pytrace=False)
    if pinned not in res.stdout and os.environ.get("CI"):
        pytest.fail(f"{path} is {res.stdout.strip()}, CI pins {pinned}", pytrace=False)
    noted(program, f"{path} ({res.stdout.strip()})")
    return path
