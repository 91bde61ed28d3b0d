"""Fixtures for tests that drive the real Codex CLI (`codex app-server`) against
`ScriptedResponses`, the Responses-API stand-in on 127.0.0.1.

The CLI: env GITSUP_CODEX_BIN, else <repo>/.tools/codex/node_modules/.bin/codex (installed
by .ci/install-codex), else `codex` on PATH. Not found: skip, except under CI (env CI
set), where it is a failure: CI must never silently skip these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_openai import ScriptedResponses
from tests.helpers.agents import pinned_agent
from tests.helpers.supervised import Run, run_supervised, step, text, write
from tests.helpers.supervised import bash as harness_bash

__all__ = ["COMMIT", "FIX_CALC", "Run", "bash", "codex_env", "step", "text", "write"]

PINNED_VERSION = "0.171.0"
PYTEST_CHECK = {
    "name": "tests",
    "argv": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    "timeout": 60,
}


@pytest.fixture(scope="session")
def codex_bin() -> str:
    return pinned_agent("GITSUP_CODEX_BIN", "codex", "codex", PINNED_VERSION)


@pytest.fixture
def scripted_openai() -> Iterator[Callable[..., ScriptedResponses]]:
    started: list[ScriptedResponses] = []

    def start(scenario: Any, **kwargs: Any) -> ScriptedResponses:
        model = ScriptedResponses(scenario, **kwargs).start()
        started.append(model)
        return model

    yield start
    for model in started:
        model.stop()


def codex_env(url: str, codex_bin: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "sk-scripted-not-a-key",
        "GITSUP_CODEX_BIN": codex_bin,
    }


def bash(cmd: str) -> dict[str, Any]:
    """A shell call as Codex makes it (no description)."""
    return harness_bash(cmd, None)


FIX_CALC = write("${CWD}/calc.py", "def add(a, b):\n    return a + b\n")
COMMIT = bash("git add -A && git commit -q -m 'Fix add'")


@pytest.fixture
def supervise(
    codex_bin: str,
    scripted_openai: Callable[..., ScriptedResponses],
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Run]:
    """`supervise(scenario, **spec)`: run a codex task in `repo` against the stand-in."""

    def go(scenario: Any, **spec: Any) -> Run:
        model = scripted_openai(scenario)
        env = codex_env(model.url, codex_bin)
        return run_supervised(
            repo, model, env, monkeypatch, {"kind": "codex"}, PYTEST_CHECK, **spec
        )

    return go
