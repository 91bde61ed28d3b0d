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
from gitsup.spec import spec_from_mapping
from gitsup.store.events import Event
from gitsup.store.record import TaskRecord
from gitsup.tasks.lifecycle import SupRepo, run_task
from tests.helpers.agents import pinned_agent

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


class Run:
    def __init__(self, record: TaskRecord, events: list[Event], model: ScriptedResponses) -> None:
        self.record, self.events, self.model = record, events, model

    def of(self, type: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == type]


def step(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"content": list(blocks)}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def bash(cmd: str) -> dict[str, Any]:
    return {"type": "tool_use", "name": "Bash", "input": {"command": cmd}}


def write(path: str, content: str) -> dict[str, Any]:
    return {"type": "tool_use", "name": "Write", "input": {"file_path": path, "content": content}}


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
        for k, v in codex_env(model.url, codex_bin).items():
            monkeypatch.setenv(k, v)
        data: dict[str, Any] = {
            "goal": "Fix add() in calc.py and commit.",
            "worker": {"kind": "codex"},
            "review": {"kind": "none"},
            "checks": [PYTEST_CHECK],
            "budget": {"no_output_timeout": "90s", "deadline": "3m", "closeout_grace": 0},
        }
        for k, v in spec.items():
            data[k] = (
                {**data[k], **v} if isinstance(v, dict) and isinstance(data.get(k), dict) else v
            )
        events: list[Event] = []
        record = run_task(SupRepo.discover(repo), spec_from_mapping(data), on_event=events.append)
        return Run(record, events, model)

    return go
