"""The real Claude Code CLI, scripted through `ScriptedModel`, parsed by `stream_json`.

Each test spawns one CLI (about 1 s to the first record) and is bounded by
timeouts in the driver; a broken model is bounded by CLAUDE_CODE_MAX_RETRIES=1
and API_TIMEOUT_MS (see conftest.claude_env).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.demo.scripted_model_steps import load_scenario
from gitsup.workers.base import (
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    TurnCompleted,
    WorkerOutput,
)
from gitsup.workers.stream_json import ControlResponse, SessionInit, interrupt_request
from tests.workers.claude.conftest import REPO_ROOT, ClaudeDriver

pytestmark = pytest.mark.claude

Spawn = Callable[..., ClaudeDriver]
Model = Callable[..., ScriptedModel]
SCENARIOS = REPO_ROOT / "fixtures" / "scenarios"


def _bash(command: str) -> dict[str, Any]:
    return {
        "content": [
            {"type": "tool_use", "name": "Bash", "input": {"command": command, "description": "x"}}
        ]
    }


def _tool_results(model: ScriptedModel) -> list[dict[str, Any]]:
    """The tool_result blocks the CLI sent back to the model, in order."""
    seen: dict[str, dict[str, Any]] = {}
    for request in model.step_requests():
        for message in request.body["messages"]:
            if message["role"] == "user" and isinstance(message["content"], list):
                for block in message["content"]:
                    if block.get("type") == "tool_result":
                        seen[block["tool_use_id"]] = block
    return list(seen.values())


def test_bash_turn_asks_runs_and_completes(
    claude: Spawn, scripted_model: Model, tmp_path: Path
) -> None:
    model = scripted_model(
        [
            {"text": "Creating the marker.", **_bash("echo made > marker.txt && echo ok")},
            {"text": "Marker created."},
        ]
    )
    worker = claude(model, tmp_path)
    key = worker.send("Create the marker file")
    asked: list[PermissionRequest] = []

    def allow(request: PermissionRequest) -> PermissionAnswer:
        asked.append(request)
        return PermissionAnswer(allow=True)

    done = worker.run_turn(allow)

    assert [r.tool_name for r in asked] == ["Bash"]
    assert asked[0].tool_input["command"] == "echo made > marker.txt && echo ok"
    assert asked[0].raw["request"]["subtype"] == "can_use_tool"
    assert (tmp_path / "marker.txt").read_text() == "made\n"

    init = next(e for e in worker.events if isinstance(e, SessionInit))
    assert init.permission_mode == "default" and "Bash" in init.tools
    outputs = [e for e in worker.events if isinstance(e, WorkerOutput)]
    assert any(o.stream == "user" and o.text == "[tool_result] ok" for o in outputs)
    assert any(o.text.startswith("[tool_use Bash]") for o in outputs)

    assert done.subtype == "success" and not done.is_error
    assert done.result == "Marker created."
    assert done.num_turns == 2
    assert done.session_id == init.session_id
    assert done.cost_usd is not None and done.usage["input_tokens"] > 0
    assert key in done.data["user_message_uuids"]
    assert worker.close() == 0
    assert model.overruns == []


def test_read_only_bash_still_asks(claude: Spawn, scripted_model: Model, tmp_path: Path) -> None:
    """In plain `default` mode `echo`/`ls` would run unasked; the ask rule makes them ask."""
    model = scripted_model([_bash("echo hi"), _bash("ls"), {"text": "end"}])
    worker = claude(model, tmp_path)
    worker.send("go")
    asked: list[str] = []

    def allow(request: PermissionRequest) -> PermissionAnswer:
        asked.append(str(request.tool_input.get("command")))
        return PermissionAnswer(allow=True)

    assert not worker.run_turn(allow).is_error
    assert asked == ["echo hi", "ls"]


def test_deny_reaches_the_model(claude: Spawn, scripted_model: Model, tmp_path: Path) -> None:
    model = scripted_model(load_scenario(SCENARIOS / "push-attempts.json"))
    worker = claude(model, tmp_path)
    worker.send("Finish and push")
    denied: list[str] = []

    def deny(request: PermissionRequest) -> PermissionAnswer:
        denied.append(str(request.tool_input["command"]))
        return PermissionAnswer(allow=False, message="Refused: pushing is the supervisor's job")

    done = worker.run_turn(deny)
    assert denied == [
        "git push origin HEAD:main",
        "git -c core.hooksPath=/dev/null push",
        "bash -c 'git push'",
    ]
    results = _tool_results(model)
    assert [r["content"] for r in results] == ["Refused: pushing is the supervisor's job"] * 3
    assert all(r["is_error"] for r in results)
    assert done.subtype == "success" and not done.is_error
    assert len(done.data["permission_denials"]) == 3


def test_ask_user_question_answered_by_deny_message(
    claude: Spawn, scripted_model: Model, tmp_path: Path
) -> None:
    model = scripted_model(load_scenario(SCENARIOS / "ask-user-question.json"))
    worker = claude(model, tmp_path)
    worker.send("Set up the tests")

    def decide(request: PermissionRequest) -> PermissionAnswer:
        if request.tool_name == "AskUserQuestion":
            question = request.tool_input["questions"][0]
            assert question["header"] == "Runner" and len(question["options"]) == 2
            assert request.raw["request"]["requires_user_interaction"] is True
            return PermissionAnswer(allow=False, message="Supervisor answer: use pytest")
        return PermissionAnswer(allow=True)

    done = worker.run_turn(decide)
    first = _tool_results(model)[0]
    assert first["content"] == "Supervisor answer: use pytest" and first["is_error"] is True
    assert done.result == "Understood, continuing with the answer given."


def test_ask_user_question_answered_by_updated_input(
    claude: Spawn, scripted_model: Model, tmp_path: Path
) -> None:
    model = scripted_model(load_scenario(SCENARIOS / "ask-user-question.json"))
    worker = claude(model, tmp_path)
    worker.send("Set up the tests")

    def decide(request: PermissionRequest) -> PermissionAnswer:
        if request.tool_name == "AskUserQuestion":
            question = request.tool_input["questions"][0]["question"]
            updated = {**request.tool_input, "answers": {question: "pytest"}}
            return PermissionAnswer(allow=True, updated_input=updated)
        return PermissionAnswer(allow=True)

    worker.run_turn(decide)
    first = _tool_results(model)[0]
    assert "is_error" not in first or first["is_error"] is False
    assert '"Which test runner should I use?"="pytest"' in first["content"]


def test_write_test_commit_scenario(claude: Spawn, scripted_model: Model, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    model = scripted_model(load_scenario(SCENARIOS / "write-code-test-commit.json"))
    worker = claude(model, repo)
    worker.send("Add an add() function with a test, run the tests, commit")
    tools: list[str] = []

    def allow(request: PermissionRequest) -> PermissionAnswer:
        tools.append(request.tool_name)
        return PermissionAnswer(allow=True)

    done = worker.run_turn(allow, timeout=90)
    assert tools == ["Write", "Write", "Bash", "Bash"]
    assert not done.is_error and done.num_turns == 5
    log = subprocess.run(
        ["git", "log", "--format=%s", "--name-only"], cwd=repo, capture_output=True, text=True
    ).stdout
    assert "Add calc.add with a test" in log and "calc.py" in log and "test_calc.py" in log
    pytest_result = _tool_results(model)[2]
    assert "1 passed" in json.dumps(pytest_result["content"])


def test_interrupt_while_permission_pending(
    claude: Spawn, scripted_model: Model, tmp_path: Path
) -> None:
    model = scripted_model([_bash("echo never"), {"text": "again"}])
    worker = claude(model, tmp_path)
    worker.send("go")
    while not isinstance(event := worker.next_event(), PermissionRequest):
        assert event is not None
    pending = event
    worker.write(interrupt_request("sup-int-1"))
    seen: list[object] = []
    while not isinstance(event := worker.next_event(), TurnCompleted):
        assert event is not None
        seen.append(event)
    assert PermissionCancelled(pending.request_id) in seen
    acks = [e for e in seen if isinstance(e, ControlResponse)]
    assert [a.request_id for a in acks] == ["sup-int-1"] and acks[0].ok
    assert event.is_error and event.subtype == "error_during_execution"
    # the worker is still usable: the next turn works
    worker.send("continue")
    assert not worker.run_turn().is_error
    assert worker.close() == 0


def test_max_turns(claude: Spawn, scripted_model: Model, tmp_path: Path) -> None:
    model = scripted_model([_bash("echo 1"), _bash("echo 2"), {"text": "end"}])
    worker = claude(model, tmp_path, extra_args=["--max-turns", "1"])
    worker.send("go")
    done = worker.run_turn()
    assert done.subtype == "error_max_turns" and done.is_error
    assert done.data["errors"] == ["Reached maximum number of turns (1)"]
    assert worker.close() == 1


def test_overloaded_api_is_retried_then_reported(
    claude: Spawn, scripted_model: Model, tmp_path: Path
) -> None:
    model = scripted_model([{"http_error": 529, "times": "forever"}])
    worker = claude(model, tmp_path)  # CLAUDE_CODE_MAX_RETRIES=1
    worker.send("go")
    done = worker.run_turn(timeout=30)
    retries = [e for e in worker.events if isinstance(e, WorkerOutput) and e.stream == "api_retry"]
    assert len(retries) == 1 and retries[0].data["error_status"] == 529
    assert len(model.requests) == 2
    assert done.is_error and done.subtype == "success"
    assert done.data["api_error_status"] == 529 and done.data["terminal_reason"] == "api_error"
    assert worker.close() == 1


def test_garbage_stream_is_an_api_error(
    claude: Spawn, scripted_model: Model, tmp_path: Path
) -> None:
    model = scripted_model(load_scenario(SCENARIOS / "garbage-output.json"))
    worker = claude(model, tmp_path)
    worker.send("go")
    done = worker.run_turn(timeout=30)
    assert done.is_error and done.data["terminal_reason"] == "api_error"
    # one streaming attempt, then one non-streaming fallback
    assert [r.body.get("stream") for r in model.step_requests()] == [True, False]
    # The failed turn left no assistant message, so the CLI merges the next prompt
    # into the same first user message: the "recover" script now matches.
    worker.send("RECOVER please")
    again = worker.run_turn(timeout=30)
    assert not again.is_error and again.result == "Recovered after a malformed response."
    first_user = model.step_requests("recover")[-1].body["messages"][0]["content"]
    texts = [b["text"] for b in first_user if b.get("type") == "text"]
    assert "go\n" in texts and "RECOVER please" in texts
    assert worker.close() == 0
