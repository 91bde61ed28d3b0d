"""The stream-json wire protocol of Claude Code, as pure functions.

No threads, no processes: bytes in, events out (`LineFramer`, `parse_record`);
events in, bytes out (the encoders). The adapter owns the pipes.

Framing is NDJSON in both directions: one JSON object per ``\\n``-terminated
line. Record shapes are those measured with Claude Code 2.1.328 (see
docs/claude-worker-notes.md and the shared protocol reference). Parsing is
lenient: unknown record types and unknown keys are ignored; what cannot be
read becomes `ProtocolNoise` and never raises.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitsup import jsonio
from gitsup.redact import redact, redact_text
from gitsup.workers.base import (
    MAX_NOISE_LINE,
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerOutput,
    clip,
)

# dict first: what json.loads makes, checked without the Mapping ABC's slower isinstance
_MAPPING = (dict, Mapping)

__all__ = [
    "DEFAULT_MAX_LINE",
    "DEFAULT_MAX_TEXT",
    "ControlRequest",
    "ControlResponse",
    "LineFramer",
    "ModelFailure",
    "OversizedLine",
    "SessionInit",
    "control_error",
    "interrupt_request",
    "model_failure",
    "parse_record",
    "permission_response",
    "user_message",
]

DEFAULT_MAX_LINE = 4 * 1024 * 1024  # one record; a big Write/Read tool_result fits
DEFAULT_MAX_TEXT = 16 * 1024  # one WorkerOutput text (WorkerSetup.max_output_bytes)
MAX_TOOL_INPUT = 2000  # characters of one tool input shown in a summary
DENY_DEFAULT = "Denied by the supervisor."


# --- events defined here (the rest are in gitsup.workers.base) ---------------------------


@dataclass(frozen=True)
class SessionInit:
    """A `system/init` record: emitted at the start of every turn."""

    session_id: str | None
    tools: tuple[str, ...] = ()
    permission_mode: str | None = None
    model: str | None = None
    cwd: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class ControlRequest:
    """A worker → supervisor control request other than a well-formed `can_use_tool`.

    The adapter must answer it exactly once (`control_error` unless it knows better)."""

    request_id: str
    subtype: str
    request: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ControlResponse:
    """The worker's answer to a control request the supervisor sent (e.g. interrupt)."""

    request_id: str
    ok: bool
    response: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None


# --- framing -----------------------------------------------------------------------------


class OversizedLine(str):
    """A line longer than the framer's limit: the string is its head; `size` its length
    in bytes. `parse_record` turns it into `ProtocolNoise`."""

    size: int

    def __new__(cls, head: str, size: int) -> OversizedLine:
        obj = super().__new__(cls, head)
        obj.size = size
        return obj


class LineFramer:
    """Splits a byte stream into lines, whatever the read boundaries.

    `feed` returns the complete lines seen so far (without the newline, `\\r\\n`
    tolerated, blank lines dropped); a line over `max_line` bytes is not
    buffered but reported once as an `OversizedLine`. `finish` returns an
    unterminated last line at end of stream.
    """

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        if max_line < 1:
            raise ValueError("max_line must be positive")
        self.max_line = max_line
        self._buf = bytearray()
        self._dropping = False  # inside an oversized line
        self._dropped = 0  # its size so far
        self._head = b""

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if 0 <= nl - start <= self.max_line and not self._buf and not self._dropping:
                # A whole line within this read (the common case): no buffering.
                _emit(data[start:nl], out)
                start = nl + 1
                continue
            piece = data[start:] if nl < 0 else data[start:nl]
            self._take(piece)
            if nl < 0:
                return out
            self._end_line(out)
            start = nl + 1

    def finish(self) -> list[str]:
        out: list[str] = []
        if self._buf or self._dropping:
            self._end_line(out)
        return out

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line held (or skipped, if oversized)."""
        return self._dropped if self._dropping else len(self._buf)

    def _take(self, piece: bytes) -> None:
        if not piece:
            return
        if self._dropping:
            self._dropped += len(piece)
            return
        if len(self._buf) + len(piece) > self.max_line:
            self._dropping = True
            self._dropped = len(self._buf) + len(piece)
            self._head = bytes((self._buf + piece)[:MAX_NOISE_LINE])
            self._buf.clear()
            return
        self._buf += piece

    def _end_line(self, out: list[str]) -> None:
        if self._dropping:
            out.append(OversizedLine(self._head.decode("utf-8", "replace"), self._dropped))
            self._dropping, self._dropped, self._head = False, 0, b""
            return
        raw = bytes(self._buf)
        self._buf.clear()
        _emit(raw, out)


def _emit(raw: bytes, out: list[str]) -> None:
    """One complete line: `\r\n` tolerated, a blank line dropped."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if raw and not raw.isspace():  # not blank (`raw.strip()` without the copy)
        out.append(raw.decode("utf-8", "replace"))


# --- parsing -----------------------------------------------------------------------------


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_COMPACT = jsonio.compact_encoder(ensure_ascii=False, default=None)


def _compact(value: Any) -> str:
    try:
        return _COMPACT(value)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, _MAPPING) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, _MAPPING):
                parts.append(f"[{block.get('type', '?')}]")
        return "\n".join(parts)
    return "" if content is None else _compact(content)


def _summarise(content: Any, limit: int) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """Text for the content of an assistant/user message, plus its tool uses and results."""
    uses: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    if isinstance(content, str):
        return clip(redact_text(content), limit), uses, results
    if not isinstance(content, list):
        return "", uses, results
    parts: list[str] = []
    for block in content:
        if not isinstance(block, _MAPPING):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(redact_text(str(block.get("text", ""))))
        elif kind in ("tool_use", "server_tool_use"):
            name = str(block.get("name", "?"))
            uses.append({"id": _str(block.get("id")), "name": name})
            shown = clip(redact_text(_compact(block.get("input"))), MAX_TOOL_INPUT)
            parts.append(f"[tool_use {name}] {shown}")
        elif kind == "tool_result":
            is_error = block.get("is_error") is True
            results.append({"tool_use_id": _str(block.get("tool_use_id")), "is_error": is_error})
            label = "tool_result error" if is_error else "tool_result"
            text = clip(redact_text(_result_text(block.get("content"))), MAX_TOOL_INPUT)
            parts.append(f"[{label}] {text}")
        elif kind in ("thinking", "redacted_thinking"):
            parts.append("[thinking]")
        else:
            parts.append(f"[{kind}]")
    return clip("\n".join(parts), limit), uses, results


_new = object.__new__


def _worker_output(stream: str, text: str, data: dict[str, Any]) -> WorkerOutput:
    """`WorkerOutput(stream, text, data)` without the frozen dataclass's per-field setattr
    (one per assistant/user record). The event log builds its `Event`s the same way; a shared
    helper taking the fields as a dict measured 0.13 µs slower per instance."""
    ev = _new(WorkerOutput)
    fields = ev.__dict__
    fields["stream"] = stream
    fields["text"] = text
    fields["data"] = data
    return ev


def _message_output(record: Mapping[str, Any], kind: str, limit: int) -> WorkerOutput:
    message = record.get("message")
    content = message_id = None
    if isinstance(message, _MAPPING):
        content = message.get("content")
        message_id = message.get("id")
    text, uses, results = _summarise(content, limit)
    session_id = record.get("session_id")
    uuid = record.get("uuid")
    parent = record.get("parent_tool_use_id")
    # `_str` written out: this runs for every assistant and user record, where three calls
    # cost about 0.15 µs (0.8% of a record's handling)
    data: dict[str, Any] = {
        "session_id": session_id if isinstance(session_id, str) else None,
        "uuid": uuid if isinstance(uuid, str) else None,
        "parent_tool_use_id": parent if isinstance(parent, str) else None,
    }
    if isinstance(message_id, str):
        data["message_id"] = message_id
    if uses:
        data["tool_uses"] = uses
    if results:
        data["tool_results"] = results
    error = record.get("error")
    if isinstance(error, str):  # a synthetic API-error assistant message
        data["error"] = redact_text(error)
    if record.get("isReplay") is True:
        data["is_replay"] = True
    return _worker_output(kind, text, data)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _turn_completed(record: Mapping[str, Any], limit: int) -> TurnCompleted:
    subtype = _str(record.get("subtype")) or "unknown"
    is_error = record.get("is_error")
    result = _str(record.get("result"))
    num_turns = record.get("num_turns")
    usage = record.get("usage")
    data: dict[str, Any] = {}
    for key in (
        "terminal_reason",
        "stop_reason",
        "api_error_status",
        "duration_ms",
        "duration_api_ms",
        "uuid",
        "user_message_uuids",
    ):
        if key in record:
            data[key] = record[key]
    errors = record.get("errors")
    if isinstance(errors, list):
        data["errors"] = [clip(redact_text(str(e)), MAX_TOOL_INPUT) for e in errors[:20]]
    denials = record.get("permission_denials")
    if isinstance(denials, list) and denials:
        data["permission_denials"] = [
            {"tool_name": d.get("tool_name"), "tool_use_id": d.get("tool_use_id")}
            for d in denials[:50]
            if isinstance(d, _MAPPING)
        ]
    return TurnCompleted(
        subtype=subtype,
        is_error=is_error if isinstance(is_error, bool) else subtype != "success",
        result=None if result is None else clip(redact_text(result), limit),
        cost_usd=_number(record.get("total_cost_usd")),
        num_turns=num_turns
        if isinstance(num_turns, int) and not isinstance(num_turns, bool)
        else None,
        session_id=_str(record.get("session_id")),
        usage=dict(usage) if isinstance(usage, _MAPPING) else {},
        data=data,
        models=_models(record.get("modelUsage")),
    )


def _models(usage: Any) -> tuple[str, ...]:
    """The model names a result's `modelUsage` lists (a few, bounded)."""
    if not isinstance(usage, _MAPPING):
        return ()
    return tuple(clip(str(k), 100) for k in list(usage)[:8])


def _control_request(record: Mapping[str, Any], line: str) -> object:
    request_id = record.get("request_id")
    request = record.get("request")
    if not isinstance(request_id, str) or not request_id:
        return ProtocolNoise.of(line, "control_request without a request_id")
    if not isinstance(request, _MAPPING):
        return ControlRequest(request_id, "", {})
    subtype = _str(request.get("subtype")) or ""
    if subtype == "can_use_tool":
        tool_name = request.get("tool_name")
        tool_input = request.get("input")
        if isinstance(tool_name, str) and tool_name and isinstance(tool_input, _MAPPING):
            return PermissionRequest(
                request_id=request_id,
                tool_name=tool_name,
                tool_input=dict(tool_input),
                raw=dict(record),
            )
    return ControlRequest(request_id, subtype, dict(request))


def _control_response(record: Mapping[str, Any], line: str) -> object:
    response = record.get("response")
    if not isinstance(response, _MAPPING) or not isinstance(response.get("request_id"), str):
        return ProtocolNoise.of(line, "control_response without a request_id")
    ok = response.get("subtype") == "success"
    body = response.get("response")
    error = response.get("error")
    return ControlResponse(
        request_id=response["request_id"],
        ok=ok,
        response=dict(body) if isinstance(body, _MAPPING) else {},
        error=None if ok else (str(error) if error is not None else "error"),
    )


def _session_init(record: Mapping[str, Any]) -> SessionInit:
    tools = record.get("tools")
    return SessionInit(
        session_id=_str(record.get("session_id")),
        tools=tuple(t for t in tools if isinstance(t, str)) if isinstance(tools, list) else (),
        permission_mode=_str(record.get("permissionMode")),
        model=_str(record.get("model")),
        cwd=_str(record.get("cwd")),
        version=_str(record.get("claude_code_version")),
    )


def _api_retry(record: Mapping[str, Any]) -> WorkerOutput:
    """The worker is retrying a failed model call (HTTP 5xx/429, reset, timeout)."""
    keys = ("attempt", "max_retries", "retry_delay_ms", "error_status", "error", "session_id")
    data = {k: redact(record[k]) for k in keys if k in record}
    status = record.get("error_status")
    text = redact_text(
        f"API retry {record.get('attempt', '?')}/{record.get('max_retries', '?')}: "
        f"{record.get('error', 'error')}"
        + (f" (HTTP {status})" if status is not None else "")
        + f", next attempt in {record.get('retry_delay_ms', '?')} ms"
    )
    return WorkerOutput(stream="api_retry", text=text, data=data)


def parse_record(line: str, *, max_text: int = DEFAULT_MAX_TEXT) -> object | None:
    """The event for one stdout line, or None for a record the supervisor ignores.

    Returns `WorkerOutput` (assistant/user), `TurnCompleted` (result),
    `WorkerOutput` with stream "api_retry" (system/api_retry),
    `PermissionRequest` (can_use_tool), `PermissionCancelled`,
    `ControlRequest` (any other worker request: answer it), `ControlResponse`,
    `SessionInit` (system/init) or `ProtocolNoise`. Never raises.
    Credential-shaped strings in the text it returns are redacted (gitsup.redact), each
    piece before it is cut; a permission request's tool input is not: allowed, it goes
    back to the worker unchanged (the event log redacts what it records of it).
    """
    if isinstance(line, OversizedLine):
        return ProtocolNoise.of(str(line), f"line of {line.size} bytes exceeds the framing limit")
    try:
        record = jsonio.loads(line)
    except (ValueError, RecursionError) as exc:
        return ProtocolNoise.of(line, f"invalid JSON: {exc}")
    if not isinstance(record, dict):
        return ProtocolNoise.of(line, f"not a JSON object: {type(record).__name__}")
    kind = record.get("type")
    if not isinstance(kind, str):
        return ProtocolNoise.of(line, "record without a type")
    if kind in ("assistant", "user"):
        return _message_output(record, kind, max_text)
    if kind == "result":
        return _turn_completed(record, max_text)
    if kind == "control_request":
        return _control_request(record, line)
    if kind == "control_cancel_request":
        request_id = record.get("request_id")
        if not isinstance(request_id, str):
            return ProtocolNoise.of(line, "control_cancel_request without a request_id")
        return PermissionCancelled(request_id)
    if kind == "control_response":
        return _control_response(record, line)
    if kind == "system" and record.get("subtype") == "init":
        return _session_init(record)
    if kind == "system" and record.get("subtype") == "api_retry":
        return _api_retry(record)
    return None


# --- model/API failures -------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFailure:
    """A turn that ended because the model API failed, not because the worker finished.

    `kind`: "auth" (credentials or configuration: retrying cannot help; the task fails),
    "unreachable" (connection refused/reset, timeout, HTTP 429/5xx/529 after the CLI's own
    bounded retries: the task parks) or "api" (any other API error: the task parks).
    """

    kind: str
    message: str  # the CLI's own words
    status: int | None = None
    error: str | None = None  # the CLI's error class (e.g. "authentication_failed")

    @property
    def hint(self) -> str:
        if self.kind == "auth":
            return (
                "give the worker valid credentials (ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN in "
                "[worker] env or the environment, or log in with `claude /login` for the "
                "CLAUDE_CONFIG_DIR it uses) and check [worker] model, then start the task again"
            )
        if self.kind == "unreachable":
            return (
                "check ANTHROPIC_BASE_URL and the network (the CLI gave up after its bounded "
                "retries), then start the task again"
            )
        return "see the worker's output in `git sup log`; the model API refused the request"

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "status": self.status,
            "error": self.error,
            "hint": self.hint,
        }


_AUTH_ERRORS = {
    "authentication_failed",
    "authentication_error",
    "permission_error",
    "billing_error",
}
_AUTH_TEXT = (
    "not logged in",
    "please run /login",
    "invalid api key",
    "failed to authenticate",
    "oauth token",
    "credit balance",
)
_UNREACHABLE_ERRORS = {"server_error", "overloaded", "overloaded_error", "rate_limit", "unknown"}
_UNREACHABLE_TEXT = (
    "connection",
    "econnrefused",
    "econnreset",
    "etimedout",
    "enotfound",
    "can't reach",
    "cannot reach",
    "unable to connect",
    "timed out",
    "overloaded",
    "fetch failed",
)


def model_failure(tc: TurnCompleted) -> ModelFailure | None:
    """The model/API failure that ended this turn, or None for a turn the worker ended.

    Claude Code reports it as `result` with `is_error: true` and `terminal_reason:
    "api_error"` (its `subtype` stays "success"); the synthetic assistant record before it
    carries the error class (kept by the adapter as `data["api_error"]`)."""
    if not tc.is_error:
        return None
    data = tc.data
    status_raw = data.get("api_error_status")
    status = (
        status_raw if isinstance(status_raw, int) and not isinstance(status_raw, bool) else None
    )
    error = data.get("api_error") if isinstance(data.get("api_error"), str) else None
    text = (tc.result or "").strip()
    low = text.lower()
    api = data.get("terminal_reason") == "api_error" or error is not None or status is not None
    if not api and not low.startswith(("api error", "not logged in", "invalid api key")):
        return None
    message = text or (f"API error {status}" if status else "API error")
    malformed = "malformed" in low or "empty or" in low
    if status in (401, 403, 404) or (error in _AUTH_ERRORS) or any(t in low for t in _AUTH_TEXT):
        return ModelFailure("auth", message, status, error)
    if (
        (status is not None and (status == 408 or status == 429 or status >= 500))
        or (status is None and error in _UNREACHABLE_ERRORS and not malformed)
        or any(t in low for t in _UNREACHABLE_TEXT)
    ):
        return ModelFailure("unreachable", message, status, error)
    return ModelFailure("api", message, status, error)


# --- encoding ----------------------------------------------------------------------------


def _line(obj: Mapping[str, Any]) -> bytes:
    # ensure_ascii keeps U+2028 and friends escaped: one record is exactly one line.
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=True) + "\n").encode("ascii")


def user_message(text: str | Sequence[Mapping[str, Any]], uuid: str) -> bytes:
    """A user turn; `uuid` comes back as `user_message_uuids` on the turn's records."""
    content: str | list[dict[str, Any]] = (
        text if isinstance(text, str) else [dict(block) for block in text]
    )
    return _line(
        {
            "type": "user",
            "message": {"role": "user", "content": content},
            "parent_tool_use_id": None,
            "session_id": "",
            "uuid": uuid,
        }
    )


def permission_response(
    request_id: str, answer: PermissionAnswer, original_input: Mapping[str, Any]
) -> bytes:
    """The answer to a `can_use_tool` request.

    Allow always carries `updatedInput` (the original input unless the answer
    rewrites it: what is sent is what runs). Deny carries `message` (what the
    model sees as the tool result) and `interrupt` (True also ends the turn).
    """
    body: dict[str, Any]
    if answer.allow:
        chosen = original_input if answer.updated_input is None else answer.updated_input
        body = {"behavior": "allow", "updatedInput": dict(chosen)}
    else:
        body = {
            "behavior": "deny",
            "message": answer.message or DENY_DEFAULT,
            "interrupt": answer.interrupt,
        }
    return _line(
        {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_id, "response": body},
        }
    )


def control_error(request_id: str, text: str) -> bytes:
    """Refuse a control request (unknown subtype, malformed request …)."""
    return _line(
        {
            "type": "control_response",
            "response": {"subtype": "error", "request_id": request_id, "error": text},
        }
    )


def interrupt_request(request_id: str) -> bytes:
    """Abort the current turn, keep the worker: answered by a `ControlResponse`, then the
    turn ends with an `error_during_execution` result."""
    return _line(
        {"type": "control_request", "request_id": request_id, "request": {"subtype": "interrupt"}}
    )
