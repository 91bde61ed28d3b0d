"""The scripted Messages-API stand-in, driven over HTTP without Claude Code."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.demo.scripted_model_steps import ModelScript, ScriptError, load_scenario

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = sorted((REPO / "fixtures" / "scenarios").glob("*.json"))
TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


def _post(
    model: ScriptedModel, body: Any, path: str = "/v1/messages?beta=true", timeout: float = 5
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", model.port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        resp = conn.getresponse()
        try:
            data = resp.read()
        except http.client.IncompleteRead as exc:  # a stream cut short on purpose
            data = exc.partial
        return resp.status, dict(resp.getheaders()), data
    finally:
        conn.close()


def _events(raw: bytes) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for chunk in raw.decode().split("\n\n"):
        if not chunk.strip():
            continue
        lines = dict(line.split(": ", 1) for line in chunk.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def _message(raw: bytes) -> dict[str, Any]:
    """Reassemble a streamed message the way a client does."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for event, data in _events(raw):
        assert data["type"] == event
        if event == "message_start":
            message = data["message"]
            assert message["content"] == [] and "input_tokens" in message["usage"]
        elif event == "content_block_start":
            block = data["content_block"]
            assert block.get("text", "") == "" and block.get("input", {}) == {}
            message["content"].append(block)
            partial[data["index"]] = ""
        elif event == "content_block_delta":
            block = message["content"][data["index"]]
            delta = data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                assert delta["type"] == "input_json_delta"
                partial[data["index"]] += delta["partial_json"]
        elif event == "content_block_stop":
            block = message["content"][data["index"]]
            if block["type"] == "tool_use":
                block["input"] = json.loads(partial[data["index"]])
        elif event == "message_delta":
            message["stop_reason"] = data["delta"]["stop_reason"]
            assert data["usage"]["output_tokens"] >= 1
    assert _events(raw)[-1][0] == "message_stop"
    return message


def _request(prompt: str, assistant_turns: int = 0, **extra: Any) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(assistant_turns):
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "x"}]})
        messages.append({"role": "user", "content": [{"type": "text", "text": "y"}]})
    return {"model": "m", "stream": True, "tools": TOOLS, "messages": messages, **extra}


BASH_STEP: list[dict[str, Any]] = [
    {"type": "text", "text": "Running it."},
    {"type": "tool_use", "name": "Bash", "input": {"command": "echo " + "a" * 100}},
]


def test_streams_steps_in_conversation_order() -> None:
    with ScriptedModel([BASH_STEP, {"text": "finished"}]) as model:
        assert model.url == f"http://127.0.0.1:{model.port}"
        status, headers, raw = _post(model, _request("go"))
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        first = _message(raw)
        assert first["stop_reason"] == "tool_use"
        assert first["content"][0] == {"type": "text", "text": "Running it."}
        tool = first["content"][1]
        assert tool["name"] == "Bash" and tool["input"] == {"command": "echo " + "a" * 100}
        assert tool["id"].startswith("toolu_")
        deltas = [d for e, d in _events(raw) if e == "content_block_delta" and d["index"] == 1]
        assert len(deltas) > 1  # the input JSON arrives in pieces
        # a retry of the same request gets the same step
        assert _message(_post(model, _request("go"))[2])["content"][1]["id"] == tool["id"]
        second = _message(_post(model, _request("go", 1))[2])
        assert second["stop_reason"] == "end_turn"
        assert second["content"] == [{"type": "text", "text": "finished"}]
        assert model.overruns == []
        overrun = _message(_post(model, _request("go", 2))[2])
        assert overrun["content"] == [{"type": "text", "text": "done"}]
        assert model.overruns == ["default"]
        kinds = [r.kind for r in model.requests]
        assert kinds == ["step", "step", "step", "overrun"]
        assert model.requests[0].body["messages"][0]["content"] == "go"
        assert model.requests[0].path == "/v1/messages?beta=true"


def test_scripts_are_chosen_by_match() -> None:
    scripts = {
        "reviewer": {"match": "REVIEW", "steps": [{"text": "VERDICT: approve"}]},
        "default": [{"text": "worker here"}],
    }
    with ScriptedModel(scripts) as model:
        review = _request("x")
        review["messages"][0]["content"] = [
            {"type": "text", "text": "<system-reminder>…</system-reminder>"},
            {"type": "text", "text": "Please REVIEW this"},
        ]
        assert _message(_post(model, review)[2])["content"][0]["text"] == "VERDICT: approve"
        assert _message(_post(model, _request("work"))[2])["content"][0]["text"] == "worker here"
        by_system = _request("other", system=[{"type": "text", "text": "REVIEW mode"}])
        assert _message(_post(model, by_system)[2])["content"][0]["text"] == "VERDICT: approve"
        assert [r.script for r in model.step_requests()] == ["reviewer", "default", "reviewer"]
        assert len(model.step_requests("default")) == 1


def test_no_default_and_no_match_is_an_overrun() -> None:
    with ScriptedModel({"only": {"match": "ZZZ", "steps": [{"text": "x"}]}}) as model:
        assert _message(_post(model, _request("go"))[2])["content"][0]["text"] == "done"
        assert model.requests[0].kind == "overrun"


def test_housekeeping_and_count_tokens_consume_no_step() -> None:
    with ScriptedModel([{"text": "real answer"}]) as model:
        title = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "t"}]}
        assert _message(_post(model, title)[2])["content"][0]["type"] == "text"
        status, _, raw = _post(model, _request("go"), path="/v1/messages/count_tokens")
        assert status == 200 and json.loads(raw)["input_tokens"] > 0
        assert _message(_post(model, _request("go"))[2])["content"][0]["text"] == "real answer"
        assert [r.kind for r in model.requests] == ["housekeeping", "count_tokens", "step"]


def test_non_streaming_request_gets_a_whole_message() -> None:
    with ScriptedModel([BASH_STEP]) as model:
        status, headers, raw = _post(model, {**_request("go"), "stream": False})
        assert status == 200 and headers["content-type"] == "application/json"
        message = json.loads(raw)
        assert message["stop_reason"] == "tool_use"
        assert message["content"][1]["input"] == BASH_STEP[1]["input"]


def test_http_error_then_recovery() -> None:
    with ScriptedModel([{"http_error": 529, "times": 2}, {"text": "ok"}]) as model:
        for _ in range(2):
            status, _, raw = _post(model, _request("go"))
            assert status == 529
            assert json.loads(raw)["error"]["type"] == "overloaded_error"
        assert _message(_post(model, _request("go"))[2])["content"][0]["text"] == "ok"
        assert [r.kind for r in model.requests] == ["fault", "fault", "step"]


def test_http_error_forever_with_custom_body_and_headers() -> None:
    step = {"http_error": 500, "times": "forever", "body": {"x": 1}, "headers": {"x-a": "b"}}
    with ScriptedModel([step]) as model:
        for _ in range(3):
            status, headers, raw = _post(model, _request("go"))
            assert (status, headers["x-a"], json.loads(raw)) == (500, "b", {"x": 1})


def test_garbage_modes() -> None:
    steps = [
        {"garbage": "{broken"},
        {"garbage": "not an event stream", "mode": "raw"},
        {"garbage": "", "mode": "truncate"},
        {"text": "fine"},
    ]
    with ScriptedModel(steps) as model:
        raw = _post(model, _request("go"))[2]
        assert b"data: {broken" in raw and b"message_stop" not in raw
        assert _post(model, _request("go"))[2] == b"not an event stream"
        raw = _post(model, _request("go"))[2]
        assert b"content_block_delta" in raw and b"message_stop" not in raw
        assert _message(_post(model, _request("go"))[2])["content"][0]["text"] == "fine"


def test_hang_delays_and_stop_releases_it() -> None:
    with ScriptedModel([{"hang": 0.3, "text": "late"}, {"hang": 60}]) as model:
        start = time.monotonic()
        assert _message(_post(model, _request("go"))[2])["content"][0]["text"] == "late"
        assert time.monotonic() - start >= 0.3
        with pytest.raises(TimeoutError):
            _post(model, _request("go", 1), timeout=0.5)
    # stop() did not wait for the 60 s hang


def test_cwd_and_variables_are_substituted() -> None:
    step = {
        "content": [{"type": "tool_use", "name": "Write", "input": {"p": "${CWD}/a ${X} ${Y}"}}]
    }
    with ScriptedModel([step], variables={"X": "ex"}) as model:
        body = _request("go")
        body["messages"].append(
            {"role": "system", "content": "- Primary working directory: /w/t1\n - Is a git"}
        )
        tool = _message(_post(model, body)[2])["content"][0]
        assert tool["input"] == {"p": "/w/t1/a ex ${Y}"}


def test_bad_requests() -> None:
    with ScriptedModel([{"text": "x"}]) as model:
        conn = http.client.HTTPConnection("127.0.0.1", model.port, timeout=5)
        conn.request("POST", "/v1/messages", b"{nope", {"content-type": "application/json"})
        assert conn.getresponse().status == 400
        conn.close()
        assert _post(model, {}, path="/v1/other")[0] == 404


@pytest.mark.parametrize(
    "bad",
    [
        "steps",
        [{"content": [{"type": "image"}]}],
        [{"content": [{"type": "tool_use"}]}],
        [{"http_error": 529, "garbage": "x"}],
        [{"http_error": 529, "times": 0}],
        [{}],
        [7],
    ],
)
def test_bad_scripts_are_refused(bad: Any) -> None:
    with pytest.raises(ScriptError):
        ModelScript.from_value("s", bad)


def test_refuses_non_loopback() -> None:
    with pytest.raises(ScriptError):
        ScriptedModel([], host="0.0.0.0")


def test_url_needs_a_running_server() -> None:
    model = ScriptedModel([])
    with pytest.raises(ScriptError):
        _ = model.url


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenarios_load(path: Path) -> None:
    scripts = load_scenario(path)
    assert "default" in scripts
    for script in scripts.values():
        assert script.steps


def test_load_scenario_errors(tmp_path: Path) -> None:
    with pytest.raises(ScriptError):
        load_scenario(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(ScriptError):
        load_scenario(tmp_path / "bad.json")
    with pytest.raises(ScriptError):
        load_scenario({"scripts": {}})


def test_command_line_entry_point(tmp_path: Path) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"steps": [{"text": "from the CLI"}]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitsup.demo.scripted_model", str(scenario)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("POST", "/v1/messages", json.dumps(_request("go")))
        assert b"from the CLI" in conn.getresponse().read()
        conn.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0
