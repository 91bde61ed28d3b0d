"""The Codex `app-server` protocol, as a sans-IO session.

No threads, no processes: lines in, (events, bytes to write) out. The adapter
(gitsup.workers.codex.worker) owns the pipes. JSON-RPC 2.0 without the `jsonrpc`
field, one JSON object per line in both directions (measured with Codex CLI
0.171.0, see docs/codex-worker-notes.md).

The session opens with `initialize` (then the `initialized` notification) and
`thread/start` with gitsup's approval settings, checks what the server reports
back, and sends `turn/start` for the first prompt once the thread exists.
Approvals the server asks for become `PermissionRequest`s, answered once:

* `item/commandExecution/requestApproval` -> tool "Bash" with the command the
  shell runs (`/bin/bash -lc '<script>'` unwrapped to the script);
* `item/fileChange/requestApproval` -> one "Write" (add) or "Edit" (update,
  delete, the target of a move) request per path of the change (the paths come
  from the `fileChange` item announced before the request), resolved against
  the thread's directory; the change is accepted only if every path is.

A request delivered twice (the same id) is one request: the repeat is `ProtocolNoise`.

Any other server request is refused. Parsing never raises: what cannot be read
becomes `ProtocolNoise`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsup import jsonio
from gitsup.redact import redact_text
from gitsup.workers.base import (
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerOutput,
    clip,
)
from gitsup.workers.codex.app_server_protocol import (
    APPROVAL_POLICY,
    APPROVALS_REVIEWER,
    DEFAULT_PRICE,
    IGNORED_NOTIFICATIONS,
    MAX_TOOL_TEXT,
    SANDBOX_MODE,
    USAGE_FIELDS,
    ConfigRefused,
    Usage,
    cost_usd,
    encode,
    error_class,
    http_status,
    unwrap_shell,
)


@dataclass
class _Pending:
    """A server request awaiting the supervisor's answer(s)."""

    rpc_id: Any
    method: str
    parts: list[str]
    answers: dict[str, PermissionAnswer] = field(default_factory=dict)


@dataclass
class Feed:
    """What one line produced: events for the supervisor, bytes for the server."""

    events: list[object] = field(default_factory=list)
    out: list[bytes] = field(default_factory=list)


class AppServerSession:
    """The client side of one app-server connection with one thread."""

    def __init__(
        self,
        *,
        cwd: str,
        model: str | None = None,
        max_text: int = 16 * 1024,
        price: Mapping[str, float] = DEFAULT_PRICE,
        client_version: str = "0",
        developer_instructions: str | None = None,
    ) -> None:
        self.cwd = cwd
        self.model = model
        self.max_text = max_text
        self.price = dict(price)
        self.client_version = client_version
        self.developer_instructions = developer_instructions
        self.thread_id: str | None = None
        self.turn_id: str | None = None
        self.server_version: str | None = None
        self._next_id = 1
        self._calls: dict[int, str] = {}  # our request id -> method
        self._queued: list[str] = []  # prompts waiting for the thread
        self._pending: dict[str, _Pending] = {}  # part id -> request
        # every approval request this session was asked: one delivered twice is decided,
        # recorded and answered once
        self._asked: set[str] = set()
        self._file_changes: dict[str, list[Mapping[str, Any]]] = {}
        self._outputs: dict[str, list[str]] = {}  # command item -> output deltas (bounded)
        self._output_sizes: dict[str, int] = {}
        self._usage = Usage()  # all threads of this server (sub-agents cost too)
        self._usage_by_thread: dict[str, Usage] = {}
        self._usage_at_turn = Usage()
        self._model_calls = 0
        self._turn_error: Mapping[str, Any] | None = None

    # --- outgoing ---------------------------------------------------------------------

    def _request(self, method: str, params: Mapping[str, Any]) -> bytes:
        rid = self._next_id
        self._next_id += 1
        self._calls[rid] = method
        return encode({"id": rid, "method": method, "params": params})

    def open(self) -> list[bytes]:
        return [
            self._request(
                "initialize",
                {
                    "clientInfo": {
                        "name": "gitsup",
                        "title": "gitsup",
                        "version": self.client_version,
                    }
                },
            )
        ]

    def thread_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "cwd": self.cwd,
            "approvalPolicy": APPROVAL_POLICY,
            "approvalsReviewer": APPROVALS_REVIEWER,
            "sandbox": SANDBOX_MODE,
        }
        if self.model:
            params["model"] = self.model
        if self.developer_instructions:
            params["developerInstructions"] = self.developer_instructions
        return params

    def send_turn(self, text: str) -> list[bytes]:
        if self.thread_id is None:
            self._queued.append(text)
            return []
        return [self._turn_start(text)]

    def _turn_start(self, text: str) -> bytes:
        self._turn_error = None
        self._model_calls = 0
        self._usage_at_turn = self._usage
        return self._request(
            "turn/start",
            {
                "threadId": self.thread_id,
                "input": [{"type": "text", "text": text, "text_elements": []}],
                "approvalPolicy": APPROVAL_POLICY,
                "approvalsReviewer": APPROVALS_REVIEWER,
            },
        )

    def interrupt(self) -> list[bytes]:
        if self.thread_id is None or self.turn_id is None:
            return []
        return [
            self._request("turn/interrupt", {"threadId": self.thread_id, "turnId": self.turn_id})
        ]

    def answer(self, request_id: str, answer: PermissionAnswer) -> list[bytes]:
        """The response to a server request once every part of it is answered."""
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return []  # cancelled, or already answered: answer once
        pending.answers[request_id] = answer
        missing = [p for p in pending.parts if p not in pending.answers]
        if missing and answer.allow and not answer.interrupt:
            return []  # wait for the other paths of the same change
        for p in missing:  # one denial decides the whole change
            self._pending.pop(p, None)
        denied = [a for a in pending.answers.values() if not a.allow]
        if any(a.interrupt for a in pending.answers.values()):
            decision = "cancel"
        elif denied:
            decision = "decline"
        else:
            decision = "accept"
        out: list[bytes] = []
        # A decline carries no text: the supervisor's reason reaches the model as input
        # steered into the running turn, sent first so that it is queued before the
        # decline lets the turn go on to its next model request.
        reasons = [a.message for a in pending.answers.values() if not a.allow and a.message]
        if decision == "decline" and reasons and self.thread_id and self.turn_id:
            out.append(
                self._request(
                    "turn/steer",
                    {
                        "threadId": self.thread_id,
                        "expectedTurnId": self.turn_id,
                        "input": [
                            {"type": "text", "text": "\n".join(reasons), "text_elements": []}
                        ],
                    },
                )
            )
        out.append(encode({"id": pending.rpc_id, "result": {"decision": decision}}))
        return out

    # --- incoming ---------------------------------------------------------------------

    def feed(self, line: str) -> Feed:
        result = Feed()
        try:
            msg = jsonio.loads(line)
        except (ValueError, RecursionError) as exc:
            result.events.append(ProtocolNoise.of(line, f"invalid JSON: {exc}"))
            return result
        if not isinstance(msg, dict):
            result.events.append(ProtocolNoise.of(line, f"not a JSON object: {type(msg).__name__}"))
            return result
        method = msg.get("method")
        if "id" in msg and isinstance(method, str):
            self._server_request(msg, method, line, result)
        elif isinstance(method, str):
            if method not in IGNORED_NOTIFICATIONS:
                self._notification(method, msg.get("params"), line, result)
        elif "id" in msg:
            self._response(msg, line, result)
        else:
            result.events.append(
                ProtocolNoise.of(line, "neither a request, a response nor a notification")
            )
        return result

    def _response(self, msg: Mapping[str, Any], line: str, result: Feed) -> None:
        rid = msg.get("id")
        method = self._calls.pop(rid, None) if isinstance(rid, int) else None
        if method is None:
            result.events.append(ProtocolNoise.of(line, "response to no request of ours"))
            return
        error = msg.get("error")
        if error is not None:
            text = error.get("message") if isinstance(error, Mapping) else str(error)
            if method == "turn/start":
                result.events.append(
                    TurnCompleted(
                        subtype="error_start",
                        is_error=True,
                        result=redact_text(f"turn/start failed: {text}"),
                        session_id=self.thread_id,
                    )
                )
            elif method in ("turn/interrupt", "turn/steer"):
                result.events.append(WorkerOutput("control", redact_text(f"{method}: {text}")))
            else:
                raise ConfigRefused(f"{method} failed: {text}")
            return
        body = msg.get("result")
        body = body if isinstance(body, Mapping) else {}
        if method == "initialize":
            agent = body.get("userAgent")
            if isinstance(agent, str) and "/" in agent:
                self.server_version = agent.split("/", 1)[1].split(" ", 1)[0]
            result.out.append(encode({"method": "initialized"}))
            result.out.append(self._request("thread/start", self.thread_params()))
        elif method == "thread/start":
            self._check_thread(body)
            thread = body.get("thread")
            tid = thread.get("id") if isinstance(thread, Mapping) else None
            if not isinstance(tid, str):
                raise ConfigRefused("thread/start returned no thread id")
            self.thread_id = tid
            result.events.append(
                WorkerOutput(
                    "system",
                    f"codex thread {tid} (model {body.get('model')}, approvals "
                    f"{body.get('approvalPolicy')}, sandbox off: gitsup's sandbox applies)",
                    {"session_id": tid, "model": body.get("model"), "version": self.server_version},
                )
            )
            queued, self._queued = self._queued, []
            result.out += [self._turn_start(t) for t in queued]
        elif method == "turn/start":
            turn = body.get("turn")
            if isinstance(turn, Mapping) and isinstance(turn.get("id"), str):
                self.turn_id = turn["id"]

    @staticmethod
    def _check_thread(body: Mapping[str, Any]) -> None:
        """What the server says it will do must be what gitsup asked for."""
        policy = body.get("approvalPolicy")
        if policy != APPROVAL_POLICY:
            raise ConfigRefused(
                f"codex runs the thread with approvalPolicy {policy!r}; gitsup needs "
                f"{APPROVAL_POLICY!r} (every command and patch asks)"
            )
        reviewer = body.get("approvalsReviewer", APPROVALS_REVIEWER)
        if reviewer != APPROVALS_REVIEWER:
            raise ConfigRefused(
                f"codex routes approvals to {reviewer!r}; gitsup must answer every one itself"
            )

    def _server_request(self, msg: Mapping[str, Any], method: str, line: str, result: Feed) -> None:
        rid = msg.get("id")
        params = msg.get("params")
        params = params if isinstance(params, Mapping) else {}
        key = f"codex:{rid}"
        if method.endswith(("requestApproval", "Approval")):
            if key in self._asked:
                result.events.append(
                    ProtocolNoise(
                        redact_text(line)[:512],
                        "duplicate permission request ignored (already asked)",
                    )
                )
                return
            self._asked.add(key)
        if method == "item/commandExecution/requestApproval":
            command = params.get("command")
            if not isinstance(command, str) or not command:
                self._refuse(rid, method, "an approval request without a command", result)
                return
            cwd = params.get("cwd") if isinstance(params.get("cwd"), str) else self.cwd
            tool_input: dict[str, Any] = {"command": unwrap_shell(command)}
            if cwd and os.path.normpath(str(cwd)) != os.path.normpath(self.cwd):
                # the policy reads commands against the worktree: say where this one runs
                tool_input["command"] = f"cd {shlex.quote(str(cwd))} && {tool_input['command']}"
            self._pending[key] = _Pending(rid, method, [key])
            result.events.append(
                PermissionRequest(key, "Bash", tool_input, raw={"method": method, **params})
            )
            return
        if method == "item/fileChange/requestApproval":
            item_id = params.get("itemId")
            changes = self._file_changes.get(str(item_id))
            if not changes:
                self._refuse(rid, method, "a file change gitsup was not shown", result)
                return
            parts: list[tuple[str, str, dict[str, Any]]] = []
            for i, change in enumerate(changes):
                path = self._resolve(change.get("path"))
                kind = change.get("kind")
                kind_type = kind.get("type") if isinstance(kind, Mapping) else kind
                diff = change.get("diff") if isinstance(change.get("diff"), str) else ""
                if path is None:
                    self._refuse(rid, method, "a file change without a path", result)
                    return
                if kind_type == "add":
                    parts.append((f"{key}#{i}", "Write", {"file_path": path, "content": diff}))
                else:
                    edit: dict[str, Any] = {
                        "file_path": path,
                        "change": str(kind_type),
                        "diff": diff,
                    }
                    parts.append((f"{key}#{i}", "Edit", edit))
                move = kind.get("move_path") if isinstance(kind, Mapping) else None
                target = self._resolve(move) if isinstance(move, str) else None
                if target is not None:
                    parts.append((f"{key}#{i}m", "Write", {"file_path": target, "content": diff}))
            pending = _Pending(rid, method, [p[0] for p in parts])
            for part_id, tool, tinput in parts:
                self._pending[part_id] = pending
                result.events.append(
                    PermissionRequest(part_id, tool, tinput, raw={"method": method, **params})
                )
            return
        approval = method.endswith(("requestApproval", "Approval"))
        self._refuse(rid, method, "gitsup does not handle this request", result, decline=approval)

    def _refuse(
        self, rid: Any, method: str, why: str, result: Feed, *, decline: bool = True
    ) -> None:
        if decline and method.endswith(("requestApproval", "Approval")):
            result.out.append(encode({"id": rid, "result": {"decision": "decline"}}))
        else:
            result.out.append(
                encode({"id": rid, "error": {"code": -32601, "message": f"gitsup: {why}"}})
            )
        result.events.append(
            WorkerOutput("control", redact_text(f"refused {method}: {why}"), {"request": method})
        )

    def _resolve(self, raw: Any) -> str | None:
        if not isinstance(raw, str) or not raw:
            return None
        return os.path.normpath(raw if os.path.isabs(raw) else os.path.join(self.cwd, raw))

    def _notification(self, method: str, params: Any, line: str, result: Feed) -> None:
        p = params if isinstance(params, Mapping) else {}
        if method == "item/commandExecution/outputDelta":
            delta, item_id = p.get("delta"), str(p.get("itemId"))
            size = self._output_sizes.get(item_id, 0)
            if isinstance(delta, str) and size < self.max_text:
                self._outputs.setdefault(item_id, []).append(delta[: self.max_text - size])
                self._output_sizes[item_id] = size + len(delta)
            return
        if method in ("item/started", "item/completed"):
            item = p.get("item")
            if isinstance(item, Mapping):
                self._item(method == "item/completed", item, result)
        elif method == "thread/tokenUsage/updated":
            usage = p.get("tokenUsage")
            if isinstance(usage, Mapping):
                tid = str(p.get("threadId") or self.thread_id)
                self._usage_by_thread[tid] = Usage.of(usage.get("total"))
                self._usage = Usage(
                    *(
                        sum(getattr(u, f) for u in self._usage_by_thread.values())
                        for f in USAGE_FIELDS
                    )
                )
                self._model_calls += 1
        elif self._other_thread(p) and method in ("turn/started", "turn/completed", "error"):
            # a sub-agent's thread: its approvals are gated like any, its turns are not ours
            raw_turn = p.get("turn")
            status = raw_turn.get("status") if isinstance(raw_turn, Mapping) else None
            result.events.append(
                WorkerOutput(
                    "subagent",
                    f"thread {p.get('threadId')}: {method} {status or ''}".strip(),
                    {"thread_id": p.get("threadId"), "method": method},
                )
            )
        elif method == "turn/started":
            turn = p.get("turn")
            if isinstance(turn, Mapping) and isinstance(turn.get("id"), str):
                self.turn_id = turn["id"]
        elif method == "turn/completed":
            result.events += self._turn_completed(p)
        elif method == "serverRequest/resolved":
            rid = p.get("requestId")
            key = f"codex:{rid}"
            for part in [k for k in self._pending if k == key or k.startswith(key + "#")]:
                self._pending.pop(part, None)
                result.events.append(PermissionCancelled(part))
        elif method == "error":
            raw_err = p.get("error")
            err: Mapping[str, Any] = raw_err if isinstance(raw_err, Mapping) else {}
            text = str(err.get("message", "error"))
            retry = p.get("willRetry") is True
            if not retry:
                self._turn_error = err
            result.events.append(
                WorkerOutput(
                    "api_retry" if retry else "error",
                    clip(redact_text(text), self.max_text),
                    {"will_retry": retry, "codex_error": err.get("codexErrorInfo")},
                )
            )
        elif method in ("warning", "configWarning", "deprecationNotice", "guardianWarning"):
            text = p.get("message") or p.get("summary") or ""
            result.events.append(
                WorkerOutput("warning", clip(redact_text(str(text)), self.max_text))
            )
        else:
            result.events.append(WorkerOutput("notification", method, {"method": method}))

    def _other_thread(self, p: Mapping[str, Any]) -> bool:
        tid = p.get("threadId")
        return isinstance(tid, str) and self.thread_id is not None and tid != self.thread_id

    def _item(self, done: bool, item: Mapping[str, Any], result: Feed) -> None:
        kind = item.get("type")
        item_id = str(item.get("id"))
        if kind == "fileChange":
            changes = item.get("changes")
            if isinstance(changes, list) and not done:
                self._file_changes[item_id] = [c for c in changes if isinstance(c, Mapping)]
            paths = [str(c.get("path")) for c in self._file_changes.get(item_id, [])]
            if done:
                self._file_changes.pop(item_id, None)
                status = item.get("status")
                result.events.append(
                    WorkerOutput(
                        "tool",
                        redact_text(f"[fileChange {status}] {', '.join(paths)}"),
                        {"item_id": item_id, "status": status, "paths": paths},
                    )
                )
            return
        if kind == "commandExecution":
            command = unwrap_shell(str(item.get("command") or ""))
            if not done:
                result.events.append(
                    WorkerOutput(
                        "tool_use",
                        clip(redact_text(f"[command] {command}"), MAX_TOOL_TEXT),
                        {"item_id": item_id},
                    )
                )
                return
            streamed = "".join(self._outputs.pop(item_id, []))
            self._output_sizes.pop(item_id, None)
            output = item.get("aggregatedOutput") or streamed
            text = f"[command {item.get('status')} exit {item.get('exitCode')}] {command}\n{output}"
            result.events.append(
                WorkerOutput(
                    "tool",
                    clip(redact_text(text), self.max_text),
                    {
                        "item_id": item_id,
                        "status": item.get("status"),
                        "exit_code": item.get("exitCode"),
                    },
                )
            )
            return
        if not done:
            return
        if kind == "agentMessage":
            text = str(item.get("text") or "")
            result.events.append(
                WorkerOutput(
                    "assistant", clip(redact_text(text), self.max_text), {"item_id": item_id}
                )
            )
        elif kind in ("reasoning", "userMessage"):
            return
        else:
            result.events.append(
                WorkerOutput("item", str(kind), {"item_id": item_id, "type": kind})
            )

    def _turn_completed(self, p: Mapping[str, Any]) -> list[object]:
        turn = p.get("turn")
        turn = turn if isinstance(turn, Mapping) else {}
        status = turn.get("status")
        err = turn.get("error") if isinstance(turn.get("error"), Mapping) else self._turn_error
        self._turn_error = None
        self.turn_id = None
        text = ""
        for item in turn.get("items") or []:
            if isinstance(item, Mapping) and item.get("type") == "agentMessage":
                text = str(item.get("text") or "")
        usage = self._usage.minus(self._usage_at_turn)
        self._usage_at_turn = self._usage
        data: dict[str, Any] = {"status": status, "turn_id": turn.get("id")}
        if isinstance(turn.get("durationMs"), int):
            data["duration_ms"] = turn["durationMs"]
        is_error = status != "completed"
        subtype = {"completed": "success", "interrupted": "interrupted"}.get(str(status), "error")
        if err:
            info = err.get("codexErrorInfo")
            message = str(err.get("message") or "model error")
            data.update(terminal_reason="api_error", codex_error=info)
            status_code = http_status(info)
            if status_code is not None:
                data["api_error_status"] = status_code
            data["api_error"] = error_class(info)
            text = f"API Error: {message}"
            is_error = True
        for k in list(self._pending):
            self._pending.pop(k, None)
        return [
            TurnCompleted(
                subtype=subtype,
                is_error=is_error,
                result=clip(redact_text(text), self.max_text),
                cost_usd=cost_usd(usage, self.price),
                num_turns=max(1, self._model_calls),
                session_id=self.thread_id,
                usage=usage.as_dict(),
                data=data,
            )
        ]
