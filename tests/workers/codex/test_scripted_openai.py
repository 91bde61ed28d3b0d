"""The Responses-API stand-in: step counting, output items, the SSE stream, faults."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from gitsup.demo.scripted_model_steps import ScriptError
from gitsup.demo.scripted_openai import (
    ScriptedResponses,
    load_responses_scenario,
    output_items,
    responses_so_far,
)


def post(model: ScriptedResponses, body: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    host, port = model.url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", "/v1/responses", json.dumps(body), {"content-type": "application/json"})
    res = conn.getresponse()
    raw = res.read().decode()
    conn.close()
    events = [json.loads(x[6:]) for x in raw.splitlines() if x.startswith("data: ")]
    return res.status, events


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_steps_are_counted_from_model_output_already_in_the_input() -> None:
    call = {"type": "function_call", "name": "exec_command", "call_id": "c", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c", "output": "ok"}
    said = {"type": "message", "role": "assistant", "content": []}
    assert responses_so_far({"input": [user("x")]}) == 0
    assert responses_so_far({"input": [user("x"), said, call, out]}) == 1
    assert responses_so_far({"input": [user("x"), call, out, call, call, out, out, said]}) == 3


def test_blocks_become_the_tools_the_request_offers() -> None:
    bash = {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}
    write = {"type": "tool_use", "name": "Write", "input": {"file_path": "/w/a", "content": "x\n"}}
    items = output_items([{"type": "text", "text": "hi"}, bash, write], {"exec_command"}, "s")
    assert items[0]["type"] == "message" and items[0]["content"][0]["text"] == "hi"
    assert items[1]["name"] == "exec_command" and json.loads(items[1]["arguments"]) == {"cmd": "ls"}
    cmd = json.loads(items[2]["arguments"])["cmd"]
    assert cmd.startswith("apply_patch <<'PATCH'") and "*** Add File: /w/a\n+x\n" in cmd
    items = output_items([bash, write], {"shell", "apply_patch"}, "s")
    assert json.loads(items[0]["arguments"]) == {"command": ["bash", "-lc", "ls"]}
    assert items[1]["name"] == "apply_patch"


def test_a_scripted_conversation_over_http() -> None:
    scenario = {
        "scripts": {
            "other": {"match": "OTHER", "steps": [{"text": "other script"}]},
            "default": [{"bash": "echo ${CWD}"}, {"http_error": 500}, {"text": "done here"}],
        }
    }
    with ScriptedResponses(scenario) as model:
        env = user("<environment_context>\n  <cwd>/w/t</cwd>\n</environment_context>")
        body = {"input": [env, user("go")], "tools": [{"type": "function", "name": "exec_command"}]}
        status, events = post(model, body)
        assert status == 200
        kinds = [e["type"] for e in events]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        assert json.loads(done[0]["arguments"]) == {"cmd": "echo /w/t"}
        assert events[-1]["response"]["usage"]["input_tokens"] > 0
        body["input"] += [done[0], {"type": "function_call_output", "call_id": "x", "output": ""}]
        assert post(model, body)[0] == 500  # the fault, then the step
        status, events = post(model, body)
        texts = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        assert "".join(texts) == "done here"
        assert post(model, {"input": [user("OTHER please")]})[1][1]["item"]["role"] == "assistant"
        assert [r.kind for r in model.step_requests()] == ["step", "fault", "step", "step"]


def test_only_loopback_and_valid_scenarios() -> None:
    with pytest.raises(ScriptError):
        ScriptedResponses({"default": [{"text": "x"}]}, host="0.0.0.0")
    with pytest.raises(ScriptError):
        load_responses_scenario({"scripts": {"default": [{"nothing": 1}]}})
    table = load_responses_scenario({"steps": [{"patch": "*** Begin Patch\n*** End Patch"}]})
    assert table["default"].steps[0]["content"][0]["name"] == "apply_patch"
