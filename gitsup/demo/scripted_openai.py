"""A scripted stand-in for the OpenAI Responses API, on 127.0.0.1 only.

The Codex CLI talks to it when a model provider's `base_url` points here
(`gitsup.workers.codex.worker` does that from `OPENAI_BASE_URL`): every step of its
agent loop is one `POST /v1/responses` carrying the whole conversation as
`input` items, and the answer is streamed as server-sent events like the
real API (`response.created`, `response.output_item.added|done`,
`response.output_text.delta`, `response.completed` with `usage`). Used by the
tests; standard library only.

Scenarios have the format of `gitsup.demo.scripted_model` (named scripts with an
optional `match`, each a list of steps; the fault steps `http_error`,
`garbage`, `hang` and `times` behave the same). A step's content blocks
become Responses output items:

* ``{"text": "..."}`` / a `text` block: an assistant `message`.
* ``{"bash": "cmd"}`` / a `Bash` tool_use: a `function_call` of the shell tool
  the request offers (`exec_command` with `cmd`, `shell_command` with
  `command`, or `shell` with an argv).
* ``{"patch": "*** Begin Patch ..."}``: an apply_patch call (the
  `apply_patch` tool when offered, else `apply_patch <<'PATCH'` through the
  shell tool, which Codex turns into a patch).
* a `Write` tool_use (`file_path`, `content`): the same as a patch that adds
  the file.
* ``{"type": "function_call", "name": ..., "arguments": {...}}`` and
  ``{"type": "custom_tool_call", "name": ..., "input": "..."}`` (e.g. Codex's code-mode
  `exec` with JavaScript): verbatim.

Which step comes next is counted from the model output already in `input`
(each run of consecutive assistant items is one earlier response). A script is
chosen by its `match` in the user messages, in order (then in the developer
and system text), else the ``"default"`` script. ``${CWD}`` is the directory
Codex states in its `<environment_context>`.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from gitsup.demo.scripted_model_server import Answer, ScriptHandler, ScriptServer, serve
from gitsup.demo.scripted_model_steps import (
    ModelScript,
    estimate_tokens,
    scenario_scripts,
)

__all__ = ["ScriptedResponses", "load_responses_scenario"]

MODEL_ID = "gpt-scripted"
OVERRUN_TEXT = "done"
TEXT_CHUNK = 48
_MODEL_ITEMS = {"function_call", "custom_tool_call", "local_shell_call", "reasoning"}
_CWD_RE = re.compile(r"<cwd>([^<]+)</cwd>")


def _prepare_step(step: Any) -> Any:
    """Codex shorthands turned into the content blocks `scripted_model` validates."""
    if not isinstance(step, Mapping):
        return step
    out = dict(step)
    if "patch" in out:
        out.setdefault("content", []).append(
            {"type": "tool_use", "name": "apply_patch", "input": {"patch": str(out.pop("patch"))}}
        )
    blocks = []
    for block in out.get("content", []):
        if isinstance(block, Mapping) and block.get("type") in (
            "function_call",
            "custom_tool_call",
        ):
            block = {"type": "tool_use", "name": block.get("name"), "input": block}
        blocks.append(block)
    if "content" in out:
        out["content"] = blocks
    return out


def load_responses_scenario(source: str | Path | Mapping[str, Any]) -> dict[str, ModelScript]:
    """Scripts from a scenario file or object (the `scripted_model` format plus `patch`)."""
    table: dict[str, ModelScript] = {}
    for name, value in scenario_scripts(source).items():
        if isinstance(value, Mapping):
            value = {**value, "steps": [_prepare_step(s) for s in value.get("steps") or []]}
        elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
            value = [_prepare_step(s) for s in value]
        table[str(name)] = ModelScript.from_value(str(name), value)
    return table


# --- reading requests ------------------------------------------------------------------


def _item_text(item: Mapping[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(c.get("text", "")) for c in content if isinstance(c, Mapping) and "text" in c
        )
    return ""


def _is_model_item(item: Any) -> bool:
    if not isinstance(item, Mapping):
        return False
    kind = item.get("type")
    return kind in _MODEL_ITEMS or (kind == "message" and item.get("role") == "assistant")


def responses_so_far(body: Mapping[str, Any]) -> int:
    """Earlier model responses in `input`: runs of consecutive assistant items."""
    count, inside = 0, False
    for item in body.get("input") or []:
        model = _is_model_item(item)
        if model and not inside:
            count += 1
        inside = model
    return count


def _user_texts(body: Mapping[str, Any]) -> list[str]:
    return [
        _item_text(i)
        for i in body.get("input") or []
        if isinstance(i, Mapping) and i.get("type") == "message" and i.get("role") == "user"
    ]


def _other_texts(body: Mapping[str, Any]) -> list[str]:
    out = [str(body.get("instructions") or "")]
    out += [
        _item_text(i)
        for i in body.get("input") or []
        if isinstance(i, Mapping) and i.get("role") in ("developer", "system")
    ]
    return out


def _request_cwd(body: Mapping[str, Any]) -> str | None:
    for text in _user_texts(body):
        found = _CWD_RE.search(text)
        if found:
            return found.group(1).strip()
    return None


def _tool_names(body: Mapping[str, Any]) -> set[str]:
    return {
        str(t.get("name"))
        for t in body.get("tools") or []
        if isinstance(t, Mapping) and isinstance(t.get("name"), str)
    }


# --- writing answers -------------------------------------------------------------------


def _sse(kind: str, data: Mapping[str, Any]) -> bytes:
    payload = {"type": kind, **data}
    return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


def _call_id(seed: str) -> str:
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:24]


def _shell_call(command: str, tools: set[str]) -> tuple[str, dict[str, Any]]:
    if "exec_command" in tools or not tools & {"shell_command", "shell"}:
        return "exec_command", {"cmd": command}
    if "shell_command" in tools:
        return "shell_command", {"command": command}
    return "shell", {"command": ["bash", "-lc", command]}


def _add_file_patch(path: str, content: str) -> str:
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    body = "".join(f"+{line}\n" for line in lines)
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch"


def output_items(
    content: Sequence[Mapping[str, Any]], tools: set[str], seed: str
) -> list[dict[str, Any]]:
    """The Responses output items for one step's blocks."""
    items: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        ident = f"{seed}:{index}"
        if block.get("type") == "text":
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "id": "msg_" + hashlib.sha256(ident.encode()).hexdigest()[:24],
                    "status": "completed",
                    "content": [
                        {
                            "type": "output_text",
                            "text": str(block.get("text", "")),
                            "annotations": [],
                        }
                    ],
                }
            )
            continue
        name = str(block.get("name"))
        raw = block.get("input") or {}
        args: dict[str, Any]
        if name == "Bash":
            name, args = _shell_call(str(raw.get("command", "")), tools)
        elif name in ("apply_patch", "Write"):
            patch = (
                str(raw.get("patch", ""))
                if name == "apply_patch"
                else _add_file_patch(str(raw.get("file_path", "")), str(raw.get("content", "")))
            )
            if "apply_patch" in tools:
                name, args = "apply_patch", {"input": patch}
            else:
                name, args = _shell_call(f"apply_patch <<'PATCH'\n{patch}\nPATCH", tools)
        elif raw.get("type") == "custom_tool_call":
            items.append(
                {
                    "type": "custom_tool_call",
                    "id": "ctc_" + hashlib.sha256(ident.encode()).hexdigest()[:24],
                    "call_id": _call_id(ident),
                    "name": name,
                    "input": str(raw.get("input", "")),
                    "status": "completed",
                }
            )
            continue
        elif raw.get("type") == "function_call":
            arguments = raw.get("arguments") or {}
            args = dict(arguments) if isinstance(arguments, Mapping) else {"raw": arguments}
        else:
            args = dict(raw)
        items.append(
            {
                "type": "function_call",
                "id": "fc_" + hashlib.sha256(ident.encode()).hexdigest()[:24],
                "call_id": _call_id(ident),
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
        )
    return items


def response_events(
    items: Sequence[Mapping[str, Any]], response_id: str, tokens: int
) -> Iterator[bytes]:
    """The SSE events of one complete response."""
    yield _sse(
        "response.created",
        {
            "response": {
                "id": response_id,
                "object": "response",
                "status": "in_progress",
                "model": MODEL_ID,
            }
        },
    )
    output_tokens = 0
    for index, item in enumerate(items):
        yield _sse("response.output_item.added", {"output_index": index, "item": item})
        if item["type"] == "message":
            text = item["content"][0]["text"]
            output_tokens += estimate_tokens(text)
            for i in range(0, len(text), TEXT_CHUNK):
                yield _sse(
                    "response.output_text.delta",
                    {
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": text[i : i + TEXT_CHUNK],
                    },
                )
        else:
            output_tokens += estimate_tokens(item.get("arguments", ""))
        yield _sse("response.output_item.done", {"output_index": index, "item": item})
    yield _sse(
        "response.completed",
        {
            "response": {
                "id": response_id,
                "object": "response",
                "status": "completed",
                "model": MODEL_ID,
                "usage": {
                    "input_tokens": tokens,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": max(1, output_tokens),
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": tokens + max(1, output_tokens),
                },
            }
        },
    )


# --- the server ------------------------------------------------------------------------


class ScriptedResponses(ScriptServer):
    """Serves scripts on ``http://127.0.0.1:<port>`` (`url` is the base, with `/v1`).

    Use as a context manager, or `start()`/`stop()`. `requests` lists what was
    received; `overruns` the script names that ran out of steps."""

    thread_name = "scripted-openai"

    def __init__(
        self,
        scenario: str | Path | Mapping[str, Any] | Sequence[Any],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        variables: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(host=host, port=port, variables=variables)
        if isinstance(scenario, Mapping) and ("scripts" in scenario or "steps" in scenario):
            table = load_responses_scenario(scenario)
        elif isinstance(scenario, Mapping):
            table = load_responses_scenario({"scripts": scenario})
        elif isinstance(scenario, str | Path):
            table = load_responses_scenario(scenario)
        else:
            table = load_responses_scenario({"scripts": {"default": list(scenario)}})
        self.scripts = table

    @property
    def url(self) -> str:
        return self._origin() + "/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    def _choose_script(self, body: Mapping[str, Any]) -> ModelScript | None:
        return self._script_matching([*_user_texts(body), *_other_texts(body)])

    def _turn(self, body: Mapping[str, Any]) -> int:
        return responses_so_far(body)


def _make_handler(model: ScriptedResponses) -> type[BaseHTTPRequestHandler]:
    class Handler(ScriptHandler):
        server_version = "ScriptedResponses/1"

        def do_GET(self) -> None:
            error = {"type": "not_found", "message": self.path}
            self._unscripted(model, None, "not_found", 404, {"error": error})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            body = self._read_json()
            if not path.endswith("/responses"):
                error = {"type": "not_found", "message": path}
                self._unscripted(model, body, "not_found", 404, {"error": error})
                return
            if not isinstance(body, dict):
                error = {"type": "invalid_request_error", "message": "not JSON"}
                self._unscripted(model, body, "bad_request", 400, {"error": error})
                return
            conversation = str(body.get("prompt_cache_key") or "".join(_user_texts(body))[:200])
            self._scripted(model, body, conversation)

        def _answer(self, body: dict[str, Any], answer: Answer) -> None:
            tokens = estimate_tokens(body)
            seed = f"{answer.script}:{answer.step_index}:{responses_so_far(body)}"
            response_id = (
                "resp_" + hashlib.sha256(f"{seed}:{len(model.requests)}".encode()).hexdigest()[:24]
            )
            step = answer.step or {}
            if answer.kind == "fault":
                self._answer_fault(
                    step,
                    lambda status: {
                        "error": {
                            "type": "server_error" if status >= 500 else "invalid_request_error",
                            "message": f"Scripted error {status}",
                        }
                    },
                    lambda: [_sse("response.created", {"response": {"id": "resp_garbage"}})],
                    "response.output_text.delta",
                )
                return
            if answer.kind == "step":
                content = model.step_content(step, _request_cwd(body))
            else:
                content = [{"type": "text", "text": OVERRUN_TEXT}]
            items = output_items(content, _tool_names(body), seed)
            self._start_stream()
            for event in response_events(items, response_id, tokens):
                self._chunk(event)
            self._end_stream()

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    return serve(
        "scripted_openai",
        "Responses API",
        lambda scenario, port: ScriptedResponses(scenario, port=port),
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
