"""Claude Code hooks into the supervisor's inbox, without a process per tool call.

`HookServer` listens on two channels and hands every hook payload to one handler:

* a loopback HTTP endpoint for Claude Code ``http`` hooks. Every request must carry the
  task's secret in the ``X-Gitsup-Secret`` header (Claude Code fills it from the worker's
  environment, ``allowedEnvVars``); anything else gets 403, so no other local process
  can speak for the task;
* a unix socket in the owner registry (`gitsup.workers.claude.relay.socket_path_for`) for the
  command relay `git sup hook claude`. Its directory is private (0700) and the peer's uid
  must be ours.

`HookBridge` turns payloads into worker events: PreToolUse / PermissionRequest become a
`PermissionRequest` on the inbox and block (bounded) until `answer()`; Stop becomes
`TurnCompleted`; a UserPromptSubmit whose prompt gitsup did not paste becomes
`HumanInput`. A blocking event not answered within the bound gets "no decision"
(fail open): a supervisor bug never wedges Claude Code. Text that becomes an event is
redacted here (gitsup.redact); a tool input is passed on verbatim (the event log redacts
it when it records the decision).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import re
import socket
import stat
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from gitsup.redact import redact, redact_text
from gitsup.workers.base import (
    HumanInput,
    Inbox,
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    TurnCompleted,
    WorkerOutput,
)
from gitsup.workers.claude.relay import MAX_PAYLOAD

SECRET_HEADER = "X-Gitsup-Secret"
SECRET_ENV = "GITSUP_HOOK_SECRET"
DEFAULT_BOUND = 60.0  # seconds a blocking hook waits for the supervisor
HOOK_EVENTS = (
    "PreToolUse",
    "PermissionRequest",
    "Stop",
    "UserPromptSubmit",
    "Notification",
    "SessionStart",
    "SessionEnd",
)

Handler = Callable[[Mapping[str, Any], str], "Mapping[str, Any] | None"]


def hook_settings(url: str, *, timeout: float) -> dict[str, Any]:
    """The `hooks` settings that send every supervised event to `url` with the secret."""
    handler = {
        "type": "http",
        "url": url,
        "headers": {SECRET_HEADER: f"${SECRET_ENV}"},
        "allowedEnvVars": [SECRET_ENV],
        "timeout": max(1, int(timeout + 0.999)),
    }
    return {event: [{"hooks": [dict(handler)]}] for event in HOOK_EVENTS}


_PASTED = re.compile(r"</?pasted_content(?:\s+id=\"[^\"]*\")?>")


def normalise_prompt(text: str) -> str:
    """A prompt as compared with what gitsup pasted: the TUI wraps long pastes in
    `<pasted_content id="…">` markers (measured, 2.1.328); whitespace is not significant."""
    return " ".join(_PASTED.sub(" ", text).split())


class HookServer:
    """Serves hook payloads on loopback HTTP (with a secret) and on a registry socket."""

    def __init__(
        self,
        handler: Handler,
        *,
        secret: str,
        port: int = 0,
        unix_path: str | None = None,
    ) -> None:
        self.handler = handler
        self.secret = secret
        self._http = _make_http(self, port)
        self.port = int(self._http.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.unix_path = unix_path
        self._unix: socket.socket | None = None
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> HookServer:
        t = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        t.start()
        self._threads.append(t)
        if self.unix_path is not None:
            self._unix = _bind_unix(self.unix_path)
            u = threading.Thread(target=self._serve_unix, daemon=True)
            u.start()
            self._threads.append(u)
        return self

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(Exception):
            self._http.shutdown()
        with contextlib.suppress(Exception):
            self._http.server_close()
        if self._unix is not None:
            with contextlib.suppress(OSError):
                self._unix.close()
            if self.unix_path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.unix_path)

    # --- unix socket (command relay) ---------------------------------------------------

    def _serve_unix(self) -> None:
        s = self._unix
        assert s is not None
        while not self._closed.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                return
            threading.Thread(target=self._unix_conn, args=(conn,), daemon=True).start()

    def _unix_conn(self, conn: socket.socket) -> None:
        with conn:
            try:
                if not _peer_is_us(conn):
                    return
                conn.settimeout(10.0)
                data = bytearray()
                while len(data) <= MAX_PAYLOAD:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                conn.settimeout(None)
                reply = self.dispatch(bytes(data), "relay")
                conn.sendall(reply)
            except OSError:
                return

    # --- both channels -----------------------------------------------------------------

    def dispatch(self, body: bytes, channel: str) -> bytes:
        try:
            payload = json.loads(body)
        except ValueError:
            return b""
        if not isinstance(payload, dict):
            return b""
        try:
            out = self.handler(payload, channel)
        except Exception:  # a supervisor bug: fail open
            return b""
        return b"" if not out else json.dumps(out).encode()


class _HTTPHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms stall
    server_version = "gitsup-hooks"
    sys_version = ""

    def do_POST(self) -> None:
        owner: HookServer = self.server.owner  # type: ignore[attr-defined]
        given = self.headers.get(SECRET_HEADER, "")
        if not given or not hmac.compare_digest(given.encode(), owner.secret.encode()):
            self._reply(403, b'{"error":"forbidden"}')
            return
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_PAYLOAD:
            self._reply(413, b"")
            self.close_connection = True
            return
        body = self.rfile.read(n)
        self._reply(200, owner.dispatch(body, "http"))

    def do_GET(self) -> None:
        self._reply(405, b"")

    def _reply(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: HookServer


def _make_http(owner: HookServer, port: int) -> _Server:
    srv = _Server(("127.0.0.1", port), _HTTPHandler)
    srv.owner = owner
    return srv


def _peer_is_us(conn: socket.socket) -> bool:
    so_peercred = getattr(socket, "SO_PEERCRED", None)
    if so_peercred is None:  # pragma: no cover - not Linux
        return True
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, so_peercred, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


def private_dir(path: Path) -> Path:
    """Create (0700) or check a directory only we can use; refuse a symlink or a stranger's."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{path} is not a directory")
    if st.st_uid != os.getuid():
        raise OSError(f"{path} belongs to uid {st.st_uid}")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _bind_unix(path: str) -> socket.socket:
    private_dir(Path(path).parent)
    with contextlib.suppress(FileNotFoundError):
        # A stale socket of a dead owner; a live owner is refused by our lease first.
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(0.5)
            probe.connect(path)
        except OSError:
            os.unlink(path)
        else:
            raise OSError(f"another supervisor listens on {path}")
        finally:
            probe.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o600)
    s.listen(64)
    return s


# --- hook payloads -> worker events ----------------------------------------------------


@dataclass
class _Waiter:
    event: threading.Event
    answer: PermissionAnswer | None = None


class HookBridge:
    """Turns hook payloads into inbox events; blocks permission hooks until answered."""

    def __init__(
        self,
        inbox: Inbox,
        *,
        bound: float = DEFAULT_BOUND,
        max_text: int = 16 * 1024,
        on_session: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.inbox = inbox
        self.bound = bound
        self.max_text = max_text
        self.on_session = on_session
        self._lock = threading.Lock()
        self._waiting: dict[str, _Waiter] = {}
        self._expected: list[str] = []  # prompts gitsup pasted, not yet seen
        self.session_id: str | None = None
        # A pane a person started and handed over (`adopt-tmux`): its session is the one
        # whose relayed event comes first, not one this supervisor started.
        self.learn_session = False
        self.transcript_path: str | None = None
        self.turn_active = False
        # who started the running turn: gitsup (`turn`), a person (`prompt`), unknown after
        # a re-adoption (`takeover`); a PermissionRequest carries it as its phase
        self.turn_origin: Literal["turn", "prompt", "takeover"] = "turn"
        self.turn_done = threading.Event()
        self.prompt_seen = threading.Event()

    # --- what the adapter tells the bridge ----------------------------------------------

    def expect_prompt(self, text: str) -> None:
        with self._lock:
            self._expected.append(normalise_prompt(text))
            self.turn_active = True
            self.turn_done.clear()
            self.prompt_seen.clear()

    def forget_prompt(self, text: str) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._expected.remove(normalise_prompt(text))

    def answer(self, request_id: str, answer: PermissionAnswer) -> None:
        with self._lock:
            w = self._waiting.pop(request_id, None)
        if w is None:
            return  # timed out (failed open) or answered already: answer once
        w.answer = answer
        w.event.set()

    def cancel_all(self) -> None:
        with self._lock:
            waiting = list(self._waiting.values())
            self._waiting.clear()
        for w in waiting:
            w.event.set()

    # --- payloads -------------------------------------------------------------------------

    def handle(self, payload: Mapping[str, Any], channel: str) -> Mapping[str, Any] | None:
        event = payload.get("hook_event_name")
        sid = payload.get("session_id")
        if self.learn_session and self.session_id is None and isinstance(sid, str) and sid:
            self.session_id = sid
            self.learn_session = False
        ours = channel == "http" or (self.session_id is not None and sid == self.session_id)
        if channel == "http" and isinstance(sid, str) and sid and self.session_id != sid:
            self.session_id = sid
            tp = payload.get("transcript_path")
            self.transcript_path = tp if isinstance(tp, str) else None
            if self.on_session is not None:
                with contextlib.suppress(Exception):
                    self.on_session(payload)
        if event in ("PreToolUse", "PermissionRequest"):
            return self._permission(str(event), payload, self.turn_origin if ours else "prompt")
        if event == "Stop":
            if ours:
                self._stop(payload)
            else:
                self._note("hook", f"Stop of another Claude session {sid} in the worktree")
            return None
        if event == "UserPromptSubmit":
            self._prompt(payload)
            return None
        if event == "Notification":
            msg = payload.get("message")
            self._note("notification", str(msg or ""), payload)
            return None
        if event in ("SessionStart", "SessionEnd"):
            why = payload.get("source") or payload.get("reason") or ""
            self._note("session", f"{event} {why}".strip(), {"session_id": sid})
            return None
        return None

    def _note(self, stream: str, text: str, data: Mapping[str, Any] | None = None) -> None:
        text = redact_text(text)[: self.max_text]
        self.inbox.put(WorkerOutput(stream, text, redact(dict(data or {}))))

    def _prompt(self, payload: Mapping[str, Any]) -> None:
        prompt = payload.get("prompt")
        text = prompt if isinstance(prompt, str) else ""
        norm = normalise_prompt(text)
        with self._lock:
            mine = norm in self._expected
            if mine:
                self._expected.remove(norm)
            self.turn_active = True
            self.turn_origin = "turn" if mine else "prompt"
            self.turn_done.clear()
        self.prompt_seen.set()
        if mine:
            self._note("hook", "UserPromptSubmit (gitsup's prompt)")
        else:
            self.inbox.put(HumanInput(redact_text(text)[: self.max_text]))

    def _stop(self, payload: Mapping[str, Any]) -> None:
        last = payload.get("last_assistant_message")
        with self._lock:
            self.turn_active = False
        self.turn_done.set()
        self.inbox.put(
            TurnCompleted(
                subtype="success",
                is_error=False,
                result=redact_text(last)[: self.max_text] if isinstance(last, str) else None,
                num_turns=1,
                session_id=self.session_id,
                data={"hook": "Stop", "stop_hook_active": bool(payload.get("stop_hook_active"))},
            )
        )

    def _permission(
        self,
        event: str,
        payload: Mapping[str, Any],
        phase: Literal["turn", "prompt", "takeover"] = "turn",
    ) -> Mapping[str, Any] | None:
        tool = str(payload.get("tool_name") or "")
        tool_input = payload.get("tool_input")
        if not isinstance(tool_input, Mapping):
            tool_input = {}
        rid = f"{event}-{uuid.uuid4().hex[:16]}"
        waiter = _Waiter(threading.Event())
        with self._lock:
            self._waiting[rid] = waiter
        started = time.monotonic()
        self.inbox.put(
            PermissionRequest(
                rid, tool, dict(tool_input), raw={**payload, "gitsup_hook": event}, phase=phase
            )
        )
        answered = waiter.event.wait(self.bound)
        with self._lock:
            self._waiting.pop(rid, None)
        ans = waiter.answer
        if not answered or ans is None:
            self.inbox.put(PermissionCancelled(rid))
            self._note(
                "hook",
                f"{event} {tool}: no decision within {time.monotonic() - started:.1f}s; failed open",
            )
            return None
        if event == "PreToolUse":
            if ans.allow:
                return None  # no decision: Claude Code's own permission mode applies
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": ans.message[:2000] or "denied by the supervisor",
                }
            }
        decision: dict[str, Any] = {"behavior": "allow"}
        if not ans.allow:
            decision = {
                "behavior": "deny",
                "message": ans.message[:2000] or "denied by the supervisor",
            }
            if ans.interrupt:
                decision["interrupt"] = True
        return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}
