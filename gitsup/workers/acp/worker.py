"""The `acp` worker: any agent that speaks ACP (Agent Client Protocol) v1 over stdio.

    [worker]
    kind = "acp"
    argv = ["claude-agent-acp"]        # or gemini --experimental-acp, opencode acp, …

One session per task (`session/new` in the worktree), one `session/prompt` per turn;
the prompt's response (`stopReason`) ends the turn. Every `session/request_permission`
becomes a PermissionRequest answered exactly once from the supervisor's decision with
the agent's `allow_once` or `reject_once` option (never an "always" option). `fs/*`
requests go through the same gate as the Read and Write tools and are served only
inside the worktree; `terminal/*` and every other client method are refused. Stop:
`session/cancel` -> close stdin -> SIGTERM -> SIGKILL of the process group.

The environment never carries IS_SANDBOX (it makes Claude Code's adapter offer to skip
permission checks), and the session is never switched to a mode that skips asking:
a session that starts in one (`auto`, `acceptEdits` …) is set to `default` before the
first prompt, and a task fails when that is not possible.

Repairable (another prompt in the same session), not persistent.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gitsup import __version__
from gitsup.host import proc
from gitsup.names import TASK_MARKER
from gitsup.redact import redact_text
from gitsup.workers.acp import protocol as ap
from gitsup.workers.agentproc import PipedAgent, find_agent
from gitsup.workers.base import (
    Capabilities,
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerError,
    WorkerIdentity,
    WorkerOutput,
    WorkerSetup,
)
from gitsup.workers.claude.worker import ASK_TOOLS, find_claude

ENV_BIN = "GITSUP_ACP_BIN"
DEFAULT_NAME = "claude-agent-acp"
# Never passed to the agent: with it, Claude Code's adapter (as root) offers to skip
# every permission check.
DROPPED_ENV = ("IS_SANDBOX", "CLAUDECODE")
# Arguments of known ACP agents that approve tool calls without asking the client.
_FORBIDDEN_ARGS = {
    "--yolo": "approves every tool call without asking",
    "-y": "approves every tool call without asking",
    "--dangerously-skip-permissions": "skips every permission check",
    "--allow-dangerously-skip-permissions": "allows skipping every permission check",
}
_BAD_APPROVAL_MODES = {"yolo", "auto_edit", "autoEdit"}
SAFE_MODE = "default"


def find_acp(
    argv: Sequence[str], env: Mapping[str, str], setting: str = "[worker] argv"
) -> list[str]:
    """The agent to run: worker.argv, else GITSUP_ACP_BIN, else `claude-agent-acp` on PATH."""
    return find_agent(
        argv,
        env,
        setting=setting,
        env_var=ENV_BIN,
        name=DEFAULT_NAME,
        missing=f"no ACP agent: name one in {setting}, set {ENV_BIN}, or put {DEFAULT_NAME} "
        "(npm @agentclientprotocol/claude-agent-acp) on PATH",
    )


def check_arguments(args: Sequence[str]) -> None:
    """Refuse agent arguments that approve tool calls without asking gitsup."""
    for i, a in enumerate(args):
        name, _, inline = a.partition("=")
        if name in _FORBIDDEN_ARGS:
            raise WorkerError(f"worker argument {a!r} is refused: {_FORBIDDEN_ARGS[name]}")
        if name == "--approval-mode":
            mode = inline or (args[i + 1] if i + 1 < len(args) else "")
            if mode in _BAD_APPROVAL_MODES:
                raise WorkerError(
                    f"--approval-mode {mode} is refused: it approves tool calls without asking"
                )


def agent_env(env: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment: without IS_SANDBOX, and with CLAUDE_CODE_EXECUTABLE (the
    Claude Code CLI that Claude's ACP adapter runs) pointing at gitsup's Claude Code when
    it is not set."""
    out = {k: v for k, v in env.items() if k not in DROPPED_ENV}
    if "CLAUDE_CODE_EXECUTABLE" not in out:
        with contextlib.suppress(WorkerError):
            out["CLAUDE_CODE_EXECUTABLE"] = find_claude([], env)[0]
    return out


class AcpWorker(PipedAgent):
    kind = "acp"
    capabilities = Capabilities(repairable=True, persistent=False)
    interrupted = "cancelled and closed input"

    def __init__(self, ctx: WorkerSetup) -> None:
        super().__init__(ctx)
        self._next_id = 0
        # our outstanding requests: id -> what it was ("initialize", "prompt" …)
        self._calls: dict[int, str] = {}
        # the agent's requests waiting for the supervisor: request_id -> (rpc id, kind, data)
        self._pending: dict[str, tuple[int | str, str, Mapping[str, Any]]] = {}
        self._queued_prompt: str | None = None
        self._session_cost: float | None = None
        self._last_cost = 0.0
        self._last_msg_id: Any = None
        self._last_msg: list[str] = []
        self.agent_info: Mapping[str, Any] = {}
        self.modes: list[str] = []

    # --- spawning -----------------------------------------------------------------

    def _argv(self) -> list[str]:
        spec = self.ctx.options.spec
        extra = list(spec.worker.extra_args) if spec is not None else []
        base = find_acp(self.ctx.argv, self.ctx.env)
        check_arguments([*base[1:], *extra])
        return base + extra

    def start(self, goal: str) -> WorkerIdentity:
        argv = self._argv()
        env = agent_env(self.ctx.env)
        env[TASK_MARKER] = self.ctx.task_id
        identity = self._spawn(argv, env)
        with self._state_lock:
            self._sent_keys.add("goal")
            self._turn_active = True
            self._queued_prompt = goal
        self._call("initialize", ap.initialize_params(__version__))
        return identity

    def _call(self, method: str, params: Mapping[str, Any], what: str | None = None) -> int:
        with self._state_lock:
            self._next_id += 1
            msg_id = self._next_id
            self._calls[msg_id] = what or method
        self._input.write(ap.request(msg_id, method, params))
        return msg_id

    # --- turns --------------------------------------------------------------------

    def send_turn(self, message: str, *, key: str) -> bool:
        def send() -> None:
            session = self._session_id  # set once, when the session is created
            assert session is not None
            self._call("session/prompt", ap.prompt_params(session, message), "prompt")

        return self._open_turn(key, send, ready=lambda: self._session_id is not None)

    def answer(self, request_id: str, answer: PermissionAnswer) -> None:
        with self._state_lock:
            entry = self._pending.pop(request_id, None)
        if entry is None:
            return  # cancelled, or already answered: answer once
        rpc_id, kind, data = entry
        if kind == "permission":
            option = ap.pick_option(data.get("options"), answer.allow)
            if answer.allow and option is None:
                # no allow_once offered: an "always" answer is never given
                option = ap.pick_option(data.get("options"), False)
            self._input.write(ap.result(rpc_id, ap.permission_outcome(option, answer.message)))
            return
        if not answer.allow:
            self._input.write(ap.error(rpc_id, ap.REFUSED, answer.message or "refused by gitsup"))
            return
        self._input.write(self._serve_fs(rpc_id, kind, data))

    def _serve_fs(self, rpc_id: int | str, kind: str, data: Mapping[str, Any]) -> bytes:
        """Serve an allowed fs/* request, only inside the worktree (resolved, symlinks too)."""
        root = os.path.realpath(self.ctx.worktree)
        path = os.path.realpath(str(data.get("file_path", "")))
        if os.path.commonpath([root, path]) != root or path == root:
            return ap.error(rpc_id, ap.REFUSED, "gitsup serves files only inside the worktree")
        try:
            if kind == "fs_read":
                text = Path(path).read_text(encoding="utf-8", errors="replace")
                line, limit = data.get("line"), data.get("limit")
                if isinstance(line, int) or isinstance(limit, int):
                    lines = text.splitlines(keepends=True)
                    start = max(0, (line if isinstance(line, int) else 1) - 1)
                    end = start + limit if isinstance(limit, int) else None
                    text = "".join(lines[start:end])
                return ap.result(rpc_id, {"content": text})
            Path(path).write_text(str(data.get("content", "")), encoding="utf-8")
            return ap.result(rpc_id, {})
        except OSError as exc:
            return ap.error(rpc_id, ap.REFUSED, f"{exc.strerror or exc}")

    def interrupt(self) -> None:
        """`session/cancel`; the agent's open permission requests are answered `cancelled`."""
        with self._state_lock:
            session = self._session_id
            open_reqs = [(rid, e) for rid, e in self._pending.items()]
            self._pending.clear()
        for rid, (rpc_id, kind, _data) in open_reqs:
            # recorded before the agent hears it: what the answer makes it do (end the turn)
            # comes after the cancellation in the task's events
            self.ctx.inbox.put(PermissionCancelled(rid))
            with contextlib.suppress(WorkerError):
                if kind == "permission":
                    self._input.write(ap.result(rpc_id, ap.permission_outcome(None)))
                else:
                    self._input.write(ap.error(rpc_id, ap.REFUSED, "the turn was cancelled"))
        if session is not None:
            with contextlib.suppress(WorkerError):
                self._input.write(ap.notification("session/cancel", {"sessionId": session}))

    # --- reading ------------------------------------------------------------------

    def _on_line(self, line: str) -> None:
        self.on_line(line)

    def on_line(self, line: str) -> None:
        """Handle one line of the agent's output (public for replay benchmarks)."""
        msg = ap.decode(line)
        if msg is None:
            return
        if isinstance(msg, ap.Notification):
            if msg.method == "session/update":
                self._on_update(msg.params.get("update"))
            return
        if isinstance(msg, ap.Request):
            self._on_request(msg, line)
        elif isinstance(msg, ap.Response):
            self._on_response(msg, line)
        else:
            self.ctx.inbox.put(ProtocolNoise(ap.noise_line(line), msg.error))

    def _on_update(self, update: Any) -> None:
        if not isinstance(update, Mapping):
            return
        kind = update.get("sessionUpdate")
        if kind == "usage_update":
            cost = ap.cost_of(update)
            if cost is not None:
                self._session_cost = cost
            return
        if kind == "current_mode_update":
            mode = update.get("currentModeId")
            if isinstance(mode, str):
                self._on_mode(mode, "current_mode_update")
            return
        out = ap.update_output(update, self.ctx.max_output_bytes)
        if out is not None:
            if kind == "agent_message_chunk":
                # the turn's result is the agent's last message (its chunks, joined)
                mid = update.get("messageId")
                if mid != self._last_msg_id or mid is None:
                    self._last_msg_id, self._last_msg = mid, []
                self._last_msg.append(out.text)
            self.ctx.inbox.put(out)

    def _on_mode(self, mode: str, where: str) -> None:
        self.modes.append(mode)
        if mode in ap.UNSUPERVISED_MODES or mode == "plan":
            self.ctx.inbox.put(
                WorkerOutput("control", f"the agent switched to mode {mode!r}; set back to default")
            )
            with contextlib.suppress(WorkerError):
                if self._session_id is not None:
                    self._call(
                        "session/set_mode",
                        {"sessionId": self._session_id, "modeId": SAFE_MODE},
                        "set_mode_again",
                    )

    def _on_request(self, msg: ap.Request, line: str) -> None:
        rid = f"acp-{msg.id}"
        try:
            self._dispatch_request(msg, rid, line)
        except WorkerError as exc:  # the agent stopped reading: recorded, it is stopped later
            self.ctx.inbox.put(WorkerOutput("stderr", redact_text(f"acp: {exc}")))

    def _dispatch_request(self, msg: ap.Request, rid: str, line: str) -> None:
        asks = ("session/request_permission", "fs/read_text_file", "fs/write_text_file")
        if msg.method in asks and not self._first_ask(rid):
            self.ctx.inbox.put(
                ProtocolNoise(
                    ap.noise_line(line),
                    "duplicate permission request ignored (already asked)",
                )
            )
            return
        if msg.method == "session/request_permission":
            tool_call = msg.params.get("toolCall")
            name, tool_input = ap.tool_of(tool_call)
            with self._state_lock:
                self._pending[rid] = (msg.id, "permission", {"options": msg.params.get("options")})
            self.ctx.inbox.put(
                PermissionRequest(
                    rid,
                    name,
                    tool_input,
                    {"toolCall": tool_call, "options": msg.params.get("options")},
                )
            )
            return
        if msg.method in ("fs/read_text_file", "fs/write_text_file"):
            path = msg.params.get("path")
            if not isinstance(path, str) or not os.path.isabs(path):
                self._input.write(ap.error(msg.id, ap.INVALID_PARAMS, "path must be absolute"))
                return
            reading = msg.method == "fs/read_text_file"
            data: dict[str, Any] = {"file_path": path}
            if reading:
                data.update(line=msg.params.get("line"), limit=msg.params.get("limit"))
            else:
                data["content"] = msg.params.get("content", "")
            with self._state_lock:
                self._pending[rid] = (msg.id, "fs_read" if reading else "fs_write", data)
            tool_input = (
                {"file_path": path}
                if reading
                else {"file_path": path, "content": str(data["content"])[:2000]}
            )
            self.ctx.inbox.put(
                PermissionRequest(
                    rid, "Read" if reading else "Write", tool_input, {"acp": msg.method}
                )
            )
            return
        # terminal/* and anything else: refused, and recorded
        with contextlib.suppress(WorkerError):
            self._input.write(
                ap.error(msg.id, ap.METHOD_NOT_FOUND, f"gitsup does not serve {msg.method}")
            )
        self.ctx.inbox.put(
            WorkerOutput(
                "control", redact_text(f"refused agent request {msg.method[:100]!r}"), {"id": rid}
            )
        )

    def _on_response(self, msg: ap.Response, line: str) -> None:
        with self._state_lock:
            what = self._calls.pop(msg.id, None) if isinstance(msg.id, int) else None
        if what is None:
            self.ctx.inbox.put(ProtocolNoise(ap.noise_line(line), "response to no request"))
            return
        if msg.error is not None and what in ("initialize", "session/new", "set_mode"):
            self._fail_start(f"{what} failed: {msg.error.get('message', msg.error)}")
            return
        if what == "initialize":
            res = msg.result if isinstance(msg.result, Mapping) else {}
            info = res.get("agentInfo")
            self.agent_info = dict(info) if isinstance(info, Mapping) else {}
            if res.get("protocolVersion") != ap.PROTOCOL_VERSION:
                self._fail_start(f"the agent speaks ACP {res.get('protocolVersion')!r}, not 1")
                return
            given = self.ctx.options.tools
            tools = None if given is None else [t for t in given.split(",") if t]
            self._call_or_fail(
                "session/new",
                ap.new_session_params(
                    str(self.ctx.worktree),
                    ASK_TOOLS if self.ctx.options.ask_tools is None else self.ctx.options.ask_tools,
                    tools,
                ),
            )
        elif what == "session/new":
            res = msg.result if isinstance(msg.result, Mapping) else {}
            sid = res.get("sessionId")
            if not isinstance(sid, str):
                self._fail_start("session/new returned no sessionId")
                return
            self._session_id = sid
            modes = res.get("modes")
            current = modes.get("currentModeId") if isinstance(modes, Mapping) else None
            if isinstance(current, str):
                self.modes.append(current)
            if isinstance(current, str) and current != SAFE_MODE:
                available = [
                    m.get("id")
                    for m in (modes.get("availableModes") or [])  # type: ignore[union-attr]
                    if isinstance(m, Mapping)
                ]
                if SAFE_MODE not in available:
                    if current in ap.UNSUPERVISED_MODES:
                        self._fail_start(
                            f"the session runs in mode {current!r}, which does not ask, and "
                            "offers no 'default' mode"
                        )
                        return
                else:
                    self._call_or_fail(
                        "session/set_mode", {"sessionId": sid, "modeId": SAFE_MODE}, "set_mode"
                    )
                    return
            self._send_queued()
        elif what == "set_mode":
            self.modes.append(SAFE_MODE)
            self._send_queued()
        elif what == "prompt":
            self._on_prompt_done(msg)

    def _send_queued(self) -> None:
        with self._state_lock:
            text, self._queued_prompt = self._queued_prompt, None
            sid = self._session_id
        if text is not None and sid is not None:
            self.ctx.inbox.put(
                WorkerOutput(
                    "control", "acp session ready", {"session_id": sid, "modes": self.modes}
                )
            )
            self._call_or_fail("session/prompt", ap.prompt_params(sid, text), "prompt")

    def _call_or_fail(
        self, method: str, params: Mapping[str, Any], what: str | None = None
    ) -> None:
        """A request sent from the reader thread: a write that fails ends the start."""
        try:
            self._call(method, params, what)
        except WorkerError as exc:
            self._fail_start(f"{method}: {exc}")

    def _fail_start(self, why: str) -> None:
        self.ctx.inbox.put(WorkerOutput("stderr", redact_text(f"acp: {why}")))
        self.ctx.inbox.put(
            TurnCompleted(subtype="error_during_execution", is_error=True, result=f"acp: {why}")
        )
        self._close_turn()
        self._result_seen.set()
        p = self._proc
        if p is not None:
            proc.signal_group(p.pid, signal.SIGTERM)

    def _on_prompt_done(self, msg: ap.Response) -> None:
        with self._state_lock:
            self._turn_active = False
            stale = [rid for rid, e in self._pending.items() if e[1] == "permission"]
            for rid in stale:
                self._pending.pop(rid, None)
            last_text = "".join(self._last_msg)
            self._last_msg_id, self._last_msg = None, []
        cost = None
        if self._session_cost is not None:
            total = self._session_cost
            cost = round(
                max(0.0, total - self._last_cost if total >= self._last_cost else total), 8
            )
            self._last_cost = total
        data: dict[str, Any] = {"session_total_cost_usd": self._session_cost}
        if msg.error is not None:
            text = str(msg.error.get("message", ""))
            text = text.removeprefix("Internal error: ")
            if text.lower().startswith("api error"):
                data["terminal_reason"] = "api_error"
            data["rpc_error"] = {k: msg.error.get(k) for k in ("code", "data")}
            tc = TurnCompleted(
                subtype="error_during_execution",
                is_error=True,
                result=redact_text(text)[:4000],
                cost_usd=cost,
                session_id=self._session_id,
                data=data,
            )
        else:
            res = msg.result if isinstance(msg.result, Mapping) else {}
            stop = res.get("stopReason")
            usage = res.get("usage") if isinstance(res.get("usage"), Mapping) else {}
            data["stop_reason"] = stop
            subtype = {
                "end_turn": "success",
                "max_tokens": "error_max_tokens",
                "max_turn_requests": "error_max_turns",
                "refusal": "error_refusal",
                "cancelled": "error_during_execution",
            }.get(str(stop), "error_during_execution")
            tc = TurnCompleted(
                subtype=subtype,
                is_error=subtype != "success",
                result=last_text[:16000],
                cost_usd=cost,
                session_id=self._session_id,
                usage=dict(usage),  # type: ignore[arg-type]
                data=data,
            )
        self.ctx.inbox.put(tc)
        self._result_seen.set()
