"""A scripted stand-in for the Anthropic Messages API, on 127.0.0.1 only.

Claude Code talks to it when `ANTHROPIC_BASE_URL` points here: every step of
its agent loop is one `POST /v1/messages` carrying the whole conversation, and
the answer is streamed as server-sent events exactly like the real API. Used
by the tests and by `git sup demo`; standard library only.

A *script* is a list of *steps*; each step is one assistant API response:

* a list of content blocks, or ``{"content": [...], "stop_reason"?: ...}``.
  Blocks are ``{"type": "text", "text": ...}`` or
  ``{"type": "tool_use", "name": "Bash", "input": {...}}`` (ids are generated).
  Shorthands: ``{"text": "..."}`` for one text block, ``{"bash": "cmd"}`` for
  one Bash call. `stop_reason` is `tool_use` if any block is a tool_use, else
  `end_turn`.
* ``{"hang": seconds, "content"|"text"|"bash": ...}``: the same, answered late.

Fault steps produce no assistant message, so Claude Code asks again; each
answers `times` requests (default 1, ``"forever"`` for unlimited), then the
next step applies:

* ``{"http_error": 529, "body"?: {...}, "headers"?: {...}}``
* ``{"garbage": "text", "mode"?: "delta"|"raw"|"truncate"}``: `delta` sends a
  valid start then the text as the JSON of a `content_block_delta` and closes;
  `raw` sends the text as the whole event-stream body; `truncate` stops the
  stream after the first delta.
* ``{"hang": seconds}`` alone: wait, then drop the connection unanswered.

Strings in tool inputs may use ``${CWD}`` (the worker's working directory, as
Claude Code states it in the request: Write/Edit need absolute paths) and
``${NAME}`` for any `variables` given to `ScriptedModel`.

Which step comes next is counted from the assistant messages already in the
request. A script is chosen by its `match` substring in the first user
message (then in the system prompt), else the ``"default"`` script. A request
without tools (housekeeping such as title generation) gets a short text and
consumes no step. A script that has run out of steps answers "done"
(`end_turn`), and the overrun is recorded.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

from gitsup.demo.scripted_model_server import Answer, ScriptHandler, ScriptServer, serve
from gitsup.demo.scripted_model_steps import (
    ModelScript,
    estimate_tokens,
    load_scenario,
)

__all__ = [
    "ScriptedModel",
    "Step",
]

JsonObject = dict[str, Any]
Step = Mapping[str, Any] | Sequence[Mapping[str, Any]]
"""One scripted answer (see the module docstring)."""

MODEL_ID = "claude-scripted-1"
DELTA_CHUNK = 24  # characters of tool input JSON per input_json_delta
OVERRUN_TEXT = "done"
HOUSEKEEPING_TEXT = "Scripted session"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


# --- reading requests ------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        ]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _first_user_text(body: Mapping[str, Any]) -> str:
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def _assistant_count(body: Mapping[str, Any]) -> int:
    messages = body.get("messages") or []
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


_CWD_RE = re.compile(r"Primary working directory: (\S+)")


def _request_cwd(body: Mapping[str, Any]) -> str | None:
    """The working directory Claude Code announces in its environment section."""
    texts = [_text_of(body.get("system"))]
    texts += [_text_of(m.get("content")) for m in body.get("messages") or [] if isinstance(m, dict)]
    for text in texts:
        found = _CWD_RE.search(text)
        if found:
            return found.group(1)
    return None


# --- writing answers -------------------------------------------------------------------


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _tool_id(seed: str) -> str:
    return "toolu_01" + hashlib.sha256(seed.encode()).hexdigest()[:22]


def _chunks(text: str, size: int) -> Iterator[str]:
    if not text:
        yield ""
    for i in range(0, len(text), size):
        yield text[i : i + size]


def _message_events(
    content: Sequence[Mapping[str, Any]],
    *,
    message_id: str,
    input_tokens: int,
    stop_reason: str | None = None,
    id_seed: str = "",
) -> Iterator[bytes]:
    """The SSE events of one complete assistant message."""
    blocks = [dict(b) for b in content]
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    yield _sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": MODEL_ID,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        },
    )
    output_tokens = 0
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            text = str(block.get("text", ""))
            start: JsonObject = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": t} for t in _chunks(text, DELTA_CHUNK * 2)]
        else:
            raw = json.dumps(block.get("input") or {})
            text = raw
            start = {
                "type": "tool_use",
                "id": str(block.get("id") or _tool_id(f"{id_seed}:{index}")),
                "name": block["name"],
                "input": {},
            }
            deltas = [
                {"type": "input_json_delta", "partial_json": t} for t in _chunks(raw, DELTA_CHUNK)
            ]
        output_tokens += estimate_tokens(text)
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        for delta in deltas:
            yield _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": max(1, output_tokens)},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


class ScriptedModel(ScriptServer):
    """Serves `scripts` on ``http://127.0.0.1:<port>`` (port chosen by the OS).

    Use as a context manager, or `start()`/`stop()`. `requests` lists what was
    received; `overruns` the script names that ran out of steps.
    """

    def __init__(
        self,
        scripts: Mapping[str, Any] | Sequence[Any] | ModelScript,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        variables: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(host=host, port=port, variables=variables)
        if isinstance(scripts, ModelScript):
            table = {scripts.name: scripts}
        elif isinstance(scripts, Mapping) and ("scripts" in scripts or "steps" in scripts):
            table = load_scenario(scripts)
        elif isinstance(scripts, Mapping):
            table = {str(k): ModelScript.from_value(str(k), v) for k, v in scripts.items()}
        else:
            table = {"default": ModelScript.from_value("default", scripts)}
        self.scripts = table

    # lifecycle

    @property
    def url(self) -> str:
        return self._origin()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    def _choose_script(self, body: Mapping[str, Any]) -> ModelScript | None:
        return self._script_matching((_first_user_text(body), _text_of(body.get("system"))))

    def _housekeeping(self, body: Mapping[str, Any]) -> bool:
        return not body.get("tools")

    def _turn(self, body: Mapping[str, Any]) -> int:
        return _assistant_count(body)


def _make_handler(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(ScriptHandler):
        server_version = "ScriptedModel/1"
        extra_headers = (("request-id", "req_scripted"),)
        stream_type = "text/event-stream; charset=utf-8"

        def do_GET(self) -> None:
            error = {"type": "not_found_error", "message": "no"}
            self._unscripted(model, None, "not_found", 404, {"type": "error", "error": error})

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            body = self._read_json()
            if path.endswith("/v1/messages/count_tokens"):
                tokens = {"input_tokens": estimate_tokens(body)}
                self._unscripted(model, body, "count_tokens", 200, tokens)
                return
            if not path.endswith("/v1/messages"):
                error = {"type": "not_found_error", "message": path}
                self._unscripted(model, body, "not_found", 404, {"type": "error", "error": error})
                return
            if not isinstance(body, dict):
                error = {"type": "invalid_request_error", "message": "not JSON"}
                self._unscripted(model, body, "bad_request", 400, {"type": "error", "error": error})
                return
            conversation = str(
                self.headers.get("x-claude-code-session-id") or _first_user_text(body)[:200]
            )
            self._scripted(model, body, conversation)

        def _answer(self, body: JsonObject, answer: Answer) -> None:
            tokens = estimate_tokens(body)
            message_id = (
                "msg_01"
                + hashlib.sha256(
                    f"{answer.script}:{answer.step_index}:{len(model.requests)}".encode()
                ).hexdigest()[:22]
            )
            step = answer.step or {}
            # Tool ids are stable per script step, so a retried request gets the same ids.
            id_seed = f"{answer.script}:{answer.step_index}"
            if answer.kind == "fault":
                self._answer_fault(
                    step,
                    lambda status: {
                        "type": "error",
                        "error": {
                            "type": _ERROR_TYPES.get(status, "api_error"),
                            "message": f"Scripted error {status}",
                        },
                    },
                    # message_start, content_block_start, first delta
                    lambda: itertools.islice(
                        _message_events(
                            [{"type": "text", "text": "partial answer"}],
                            message_id=message_id,
                            input_tokens=tokens,
                        ),
                        3,
                    ),
                    "content_block_delta",
                )
                return
            if answer.kind == "step":
                content = model.step_content(step, _request_cwd(body))
                stop_reason = step.get("stop_reason")
            elif answer.kind == "housekeeping":
                content, stop_reason = [{"type": "text", "text": HOUSEKEEPING_TEXT}], None
            else:
                content, stop_reason = [{"type": "text", "text": OVERRUN_TEXT}], None
            if not body.get("stream"):
                self._send_json(
                    200, _whole_message(content, message_id, tokens, stop_reason, id_seed)
                )
                return
            self._start_stream()
            for event in _message_events(
                content,
                message_id=message_id,
                input_tokens=tokens,
                stop_reason=stop_reason,
                id_seed=id_seed,
            ):
                self._chunk(event)
            self._end_stream()

    return Handler


def _whole_message(
    content: Sequence[Mapping[str, Any]],
    message_id: str,
    tokens: int,
    stop_reason: str | None,
    id_seed: str = "",
) -> JsonObject:
    blocks: list[JsonObject] = []
    for index, block in enumerate(content):
        if block["type"] == "text":
            blocks.append({"type": "text", "text": str(block.get("text", ""))})
        else:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": str(block.get("id") or _tool_id(f"{id_seed}:{index}")),
                    "name": block["name"],
                    "input": dict(block.get("input") or {}),
                }
            )
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL_ID,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": tokens, "output_tokens": 1},
    }


def main(argv: Sequence[str] | None = None) -> int:
    return serve(
        "scripted_model",
        "Messages API",
        lambda scenario, port: ScriptedModel(load_scenario(scenario), port=port),
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
