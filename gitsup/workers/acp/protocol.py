"""ACP (Agent Client Protocol) v1 for the `acp` worker: a sans-IO codec and mappings.

JSON-RPC 2.0, one message per line over the agent's stdio. Nothing here reads or writes
a pipe: `decode` turns one line into a message, the encoders return the bytes of one
line, and the mapping functions turn the agent's records into worker events. The
adapter (gitsup/workers/acp/worker.py) owns the process and the threads.

What the gate sees (docs/acp-worker-notes.md): a `session/request_permission` becomes a
PermissionRequest named like the Claude Code tool it stands for (`Bash` with a
`command`, `Write`/`Edit` with a `file_path`, `Read` …), so the same policy rules judge
it; a tool call whose kind or paths cannot be read becomes an unknown tool, which the
policy never allows unasked.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsup import jsonio
from gitsup.redact import redact_text
from gitsup.workers.base import WorkerOutput

PROTOCOL_VERSION = 1
MAX_NOISE_LINE = 2000

# JSON-RPC error codes
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
REFUSED = -32000  # an application error: the supervisor refused the request

# Claude Code tool names the adapter reports (in `_meta.claudeCode.toolName`); the
# policy knows their input shapes.
KNOWN_TOOLS = frozenset(
    {
        "Bash",
        "Write",
        "Edit",
        "MultiEdit",
        "NotebookEdit",
        "Read",
        "Grep",
        "Glob",
        "LS",
        "WebFetch",
        "WebSearch",
        "AskUserQuestion",
    }
)
# Permission modes that let calls run without asking the client.
UNSUPERVISED_MODES = frozenset(
    {"bypassPermissions", "acceptEdits", "auto", "dontAsk", "yolo", "autoEdit", "auto_edit"}
)


@dataclass(frozen=True)
class Request:
    """The agent asks the client something; answer with `result` or `error`."""

    id: int | str
    method: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Notification:
    method: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Response:
    """The answer to one of our requests: `result`, or `error` (code, message, data)."""

    id: int | str
    result: Any = None
    error: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Invalid:
    line: str
    error: str


Message = Request | Notification | Response | Invalid


def decode(line: str) -> Message | None:
    """One line from the agent; None for a blank line."""
    if not line.strip():
        return None
    try:
        obj = jsonio.loads(line)
    except ValueError as exc:
        return Invalid(line, f"not JSON: {exc}")
    if not isinstance(obj, dict):
        return Invalid(line, "not a JSON object")
    if obj.get("jsonrpc") != "2.0":
        return Invalid(line, "not JSON-RPC 2.0")
    method = obj.get("method")
    params = obj.get("params")
    if params is None:
        params = {}
    msg_id = obj.get("id")
    if msg_id is not None and (isinstance(msg_id, bool) or not isinstance(msg_id, int | str)):
        return Invalid(line, "id is neither a number nor a string")
    if isinstance(method, str):
        if not isinstance(params, dict):
            return Invalid(line, "params is not an object")
        if msg_id is None:
            return Notification(method, params)
        return Request(msg_id, method, params)
    if msg_id is None:
        return Invalid(line, "neither a request nor a response")
    err = obj.get("error")
    if err is not None:
        if not isinstance(err, dict):
            err = {"code": None, "message": str(err)}
        return Response(msg_id, None, err)
    if "result" not in obj:
        return Invalid(line, "response without result or error")
    return Response(msg_id, obj.get("result"))


def _line(obj: Mapping[str, Any]) -> bytes:
    # ensure_ascii: U+2028 and friends stay escaped, one message is exactly one line.
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=True) + "\n").encode("ascii")


def request(msg_id: int, method: str, params: Mapping[str, Any]) -> bytes:
    return _line({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": dict(params)})


def notification(method: str, params: Mapping[str, Any]) -> bytes:
    return _line({"jsonrpc": "2.0", "method": method, "params": dict(params)})


def result(msg_id: int | str, value: Any) -> bytes:
    return _line({"jsonrpc": "2.0", "id": msg_id, "result": value})


def error(msg_id: int | str, code: int, message: str) -> bytes:
    return _line({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


# --- the client's side of the handshake ----------------------------------------------------


def initialize_params(version: str) -> dict[str, Any]:
    """gitsup serves no file system and no terminal: the agent uses its own tools, and
    every call of those reaches `session/request_permission`."""
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "clientCapabilities": {
            "fs": {"readTextFile": False, "writeTextFile": False},
            "terminal": False,
        },
        "clientInfo": {"name": "gitsup", "version": version},
    }


def new_session_params(
    cwd: str, ask_tools: Sequence[str], tools: Sequence[str] | None = None
) -> dict[str, Any]:
    """`session/new` for the task's worktree. The `_meta.claudeCode.options` part is read
    by Claude Code's ACP adapter (other agents ignore `_meta`): no settings file is loaded
    (a worktree's `.claude/settings.local.json` could pre-allow tools or run hooks), every
    call of `ask_tools` asks, and the permission checks can never be skipped. `tools`,
    when given, are the only built-in tools the model is offered (a read-only reviewer)."""
    options: dict[str, Any] = {
        "settingSources": [],
        "allowDangerouslySkipPermissions": False,
        "settings": {"permissions": {"ask": list(ask_tools)}},
    }
    if tools is not None:
        options["tools"] = list(tools)
    return {"cwd": cwd, "mcpServers": [], "_meta": {"claudeCode": {"options": options}}}


def prompt_params(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def pick_option(options: Any, allow: bool) -> str | None:
    """The optionId that answers a permission request: `allow_once` to allow, `reject_once`
    to deny. Never `allow_always` (every call is decided) nor `reject_always`; None when
    the agent offers no such option (then the request is answered `cancelled`)."""
    want = "allow_once" if allow else "reject_once"
    if not isinstance(options, list):
        return None
    for o in options:
        if isinstance(o, dict) and o.get("kind") == want and isinstance(o.get("optionId"), str):
            return str(o["optionId"])
    return None


def permission_outcome(option_id: str | None, message: str = "") -> dict[str, Any]:
    out: dict[str, Any] = (
        {"outcome": {"outcome": "selected", "optionId": option_id}}
        if option_id is not None
        else {"outcome": {"outcome": "cancelled"}}
    )
    if message:
        out["_meta"] = {"gitsup": {"message": message}}
    return out


# --- what the gate sees ----------------------------------------------------------------


def _paths(tool_call: Mapping[str, Any], raw: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    locs = tool_call.get("locations")
    if isinstance(locs, list):
        for loc in locs:
            if isinstance(loc, dict) and isinstance(loc.get("path"), str):
                out.append(loc["path"])
    for key in ("file_path", "path", "notebook_path", "filePath", "absolute_path"):
        v = raw.get(key)
        if isinstance(v, str) and v:
            out.append(v)
    content = tool_call.get("content")
    if isinstance(content, list):
        for c in content:
            if isinstance(c, dict) and c.get("type") == "diff" and isinstance(c.get("path"), str):
                out.append(c["path"])
    seen: list[str] = []
    for p in out:
        if p not in seen:
            seen.append(p)
    return seen


def tool_of(tool_call: Any) -> tuple[str, dict[str, Any]]:
    """(tool name, input) for the policy from a permission request's `toolCall`."""
    if not isinstance(tool_call, Mapping):
        return "acp:invalid", {}
    raw_in = tool_call.get("rawInput")
    raw: dict[str, Any] = dict(raw_in) if isinstance(raw_in, Mapping) else {}
    meta = tool_call.get("_meta")
    named = None
    if isinstance(meta, Mapping) and isinstance(meta.get("claudeCode"), Mapping):
        named = meta["claudeCode"].get("toolName")
    if not isinstance(named, str):
        named = tool_call.get("name") if isinstance(tool_call.get("name"), str) else None
    if named in KNOWN_TOOLS or (isinstance(named, str) and named.startswith("mcp__")):
        return str(named), raw
    kind = tool_call.get("kind")
    title = str(tool_call.get("title") or "")[:200]
    if kind == "execute":
        cmd = raw.get("command")
        if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
            cmd = shlex.join(cmd)
        if isinstance(cmd, str):
            return "Bash", {"command": cmd}
        return "acp:execute", {"title": title}
    paths = _paths(tool_call, raw)
    if kind in ("edit", "delete", "move"):
        if len(paths) == 1:
            return "Edit", {"file_path": paths[0]}
        return f"acp:{kind}", {"paths": paths, "title": title}
    if kind in ("read", "search"):
        if len(paths) <= 1:
            return "Read", {"file_path": paths[0] if paths else ""}
        return f"acp:{kind}", {"paths": paths, "title": title}
    if kind == "fetch":
        return "WebFetch", raw
    return f"acp:{kind or 'other'}", {"title": title, **({"name": named} if named else {})}


# --- what the event log sees -------------------------------------------------------------

_QUIET_UPDATES = frozenset(
    {
        "usage_update",
        "available_commands_update",
        "session_info_update",
        "config_option_update",
        "current_mode_update",
    }
)


def _content_text(content: Any) -> str:
    if isinstance(content, Mapping):
        if content.get("type") == "text" and isinstance(content.get("text"), str):
            return str(content["text"])
        inner = content.get("content")
        if inner is not None:
            return _content_text(inner)
        return ""
    if isinstance(content, list):
        return "\n".join(t for t in (_content_text(c) for c in content) if t)
    return ""


def update_output(update: Any, max_text: int) -> WorkerOutput | None:
    """The WorkerOutput for one `session/update`'s `update`, or None for bookkeeping
    updates (usage, commands, titles, modes: the adapter reads those itself)."""
    if not isinstance(update, Mapping):
        return None
    kind = update.get("sessionUpdate")
    if not isinstance(kind, str) or kind in _QUIET_UPDATES:
        return None
    if kind in ("agent_message_chunk", "agent_thought_chunk", "user_message_chunk"):
        stream = {"agent_message_chunk": "assistant", "agent_thought_chunk": "thinking"}.get(
            kind, "user"
        )
        text = _content_text(update.get("content"))
        return WorkerOutput(stream, redact_text(text[:max_text]))
    if kind in ("tool_call", "tool_call_update"):
        data: dict[str, Any] = {"update": kind}
        for key in ("toolCallId", "kind", "status"):
            v = update.get(key)
            if isinstance(v, str):
                data[key] = v
        parts = []
        title = update.get("title")
        if isinstance(title, str):
            parts.append(title)
        out = update.get("rawOutput")
        if isinstance(out, str):
            parts.append(out)
        elif update.get("content"):
            parts.append(_content_text(update.get("content")))
        text = "\n".join(p for p in parts if p)
        return WorkerOutput("tool", redact_text(text[:max_text]), data)
    if kind == "plan":
        entries = update.get("entries")
        lines = []
        if isinstance(entries, list):
            for e in entries:
                if isinstance(e, Mapping):
                    lines.append(f"[{e.get('status', '')}] {e.get('content', '')}")
        return WorkerOutput("plan", redact_text("\n".join(lines)[:max_text]))
    return WorkerOutput("acp", redact_text(kind[:200]), {"update": kind})


def cost_of(update: Mapping[str, Any]) -> float | None:
    """The session's cumulative cost in USD from a `usage_update`, if it carries one."""
    cost = update.get("cost")
    if not isinstance(cost, Mapping):
        return None
    amount = cost.get("amount")
    if cost.get("currency", "USD") != "USD":
        return None
    if isinstance(amount, int | float) and not isinstance(amount, bool):
        return float(amount)
    return None


def noise_line(line: str) -> str:
    return redact_text(line)[:MAX_NOISE_LINE]
