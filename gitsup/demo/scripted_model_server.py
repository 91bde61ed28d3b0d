"""What the scripted model stand-ins share: an HTTP server on 127.0.0.0/8 that answers each
request from the step of the script it matches, its JSON and event-stream plumbing, and
`serve` (the `python -m` entry points). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from gitsup.demo.scripted_model_steps import (
    ModelScript,
    RecordedRequest,
    ScriptError,
    step_groups,
    substitute,
)


@dataclass(frozen=True)
class Answer:
    """How a request is answered: which script and step, or why none."""

    kind: str  # step, fault, overrun, housekeeping
    script: str | None
    step_index: int | None
    step: Mapping[str, Any] | None


class ScriptServer:
    """What the stand-ins share: an HTTP server on 127.0.0.0/8 that answers each request
    from the step of the script it matches, counting fault retries per conversation.

    A subclass gives the table of scripts, the script a request belongs to, the turn a
    request is at, and the request handler. `requests` lists what was received;
    `overruns` the script names that ran out of steps."""

    thread_name = "scripted-model"

    def __init__(self, *, host: str, port: int, variables: Mapping[str, str] | None = None) -> None:
        if not host.startswith("127."):
            raise ScriptError("the scripted model only listens on 127.0.0.0/8")
        self.scripts: dict[str, ModelScript] = {}
        self.host = host
        self.variables = dict(variables or {})
        self._port = port
        self._lock = threading.Lock()
        self._served: dict[tuple[str, str, int], int] = {}
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[RecordedRequest] = []
        self.overruns: list[str] = []
        # what went wrong serving a connection (the traceback's last line): such a connection
        # is closed without an answer, which its client sees as a reset
        self.errors: list[str] = []

    # what a subclass gives

    @property
    def url(self) -> str:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def _choose_script(self, body: Mapping[str, Any]) -> ModelScript | None:
        raise NotImplementedError

    def _turn(self, body: Mapping[str, Any]) -> int:
        """How many model answers the request's conversation already holds."""
        raise NotImplementedError

    def _housekeeping(self, body: Mapping[str, Any]) -> bool:
        """Whether the request is answered outside the scripts."""
        return False

    # what a subclass uses

    @property
    def port(self) -> int:
        """The port the running server listens on."""
        if self._server is None:
            raise ScriptError("the scripted model is not running")
        return int(self._server.server_address[1])

    def _origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _script_matching(self, texts: Iterable[str]) -> ModelScript | None:
        """The first script whose `match` stands in a text (texts in order), else `default`."""
        for text in texts:
            for script in self.scripts.values():
                if script.match and script.match in text:
                    return script
        return self.scripts.get("default")

    # lifecycle

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server((self.host, self._port), self._handler())
        server.daemon_threads = True
        server.errors = self.errors
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name=self.thread_name, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # views for tests

    def step_requests(self, script: str | None = None) -> list[RecordedRequest]:
        """Requests answered from a script (steps, faults and overruns)."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.kind in ("step", "fault", "overrun") and script in (None, r.script)
            ]

    # answering (called from handler threads)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _plan(self, body: Mapping[str, Any], conversation: str) -> Answer:
        if self._housekeeping(body):
            return Answer("housekeeping", None, None, None)
        script = self._choose_script(body)
        if script is None:
            return Answer("overrun", None, None, None)
        turn = self._turn(body)
        groups = step_groups(script.steps)
        if turn >= len(groups):
            return self._overrun(script)
        faults, response = groups[turn]
        with self._lock:
            key = (script.name, conversation, turn)
            attempt = self._served.get(key, 0)
            self._served[key] = attempt + 1
        for i in faults:  # each fault answers `times` attempts, then the next applies
            times = script.steps[i].get("times", 1)
            if times == "forever" or attempt < times:
                return Answer("fault", script.name, i, script.steps[i])
            attempt -= times
        if response is None:
            return self._overrun(script)
        return Answer("step", script.name, response, script.steps[response])

    def _overrun(self, script: ModelScript) -> Answer:
        with self._lock:
            self.overruns.append(script.name)
        return Answer("overrun", script.name, None, None)

    def step_content(self, step: Mapping[str, Any], cwd: str | None) -> Any:
        """The step's content with `${NAME}` variables and `${CWD}` (the worker's directory,
        as the request states it) filled in."""
        variables = dict(self.variables)
        if cwd is not None:
            variables.setdefault("CWD", cwd)
        return substitute(step["content"], variables)

    def _wait(self, seconds: float) -> bool:
        """Sleeps; False if the server is stopping."""
        return not self._stopping.wait(max(0.0, seconds))


class _Server(ThreadingHTTPServer):
    """Keeps what went wrong serving a connection (`errors`) instead of printing it, and
    queues more connections than socketserver's default of 5 (an agent opens several at
    once; a full queue under load turns into resets)."""

    request_queue_size = 128
    errors: list[str]

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        self.errors.append(f"{client_address}: {type(exc).__name__}: {exc}")


class ScriptHandler(BaseHTTPRequestHandler):
    """The stand-ins' HTTP plumbing: JSON in and out, chunked event streams."""

    protocol_version = "HTTP/1.1"
    # sent after the content headers of every answer
    extra_headers: tuple[tuple[str, str], ...] = ()
    stream_type = "text/event-stream"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _read_json(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"null")
        except ValueError:
            return None

    def _send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (*self.extra_headers, *(headers or {}).items()):
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _unscripted(
        self, model: ScriptServer, body: Any, kind: str, status: int, payload: Any
    ) -> None:
        """Record a request answered outside the scripts (`kind`), and answer it."""
        model._record(RecordedRequest(self.path, body, dict(self.headers), kind))
        self._send_json(status, payload)

    def _scripted(self, model: ScriptServer, body: dict[str, Any], conversation: str) -> None:
        """Answer from the step the request's conversation is at, and record it."""
        answer = model._plan(body, conversation)
        model._record(
            RecordedRequest(
                self.path, body, dict(self.headers), answer.kind, answer.script, answer.step_index
            )
        )
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if not self._hangs(model, answer.step or {}):
                self._answer(body, answer)

    def _answer(self, body: dict[str, Any], answer: Answer) -> None:
        """Answer the request from `answer` (a step's hang is already waited out)."""
        raise NotImplementedError

    def _hangs(self, model: ScriptServer, step: Mapping[str, Any]) -> bool:
        """A step with `hang` waits that many seconds first; True when the server stops
        meanwhile (the connection is then closed unanswered)."""
        if "hang" in step and not model._wait(float(step["hang"])):
            self.close_connection = True
            return True
        return False

    def _answer_fault(
        self,
        step: Mapping[str, Any],
        error: Callable[[int], Any],
        partial: Callable[[], Iterable[bytes]],
        delta_event: str,
    ) -> None:
        """Answer a fault step: `http_error` (the step's body, else `error(status)`); `garbage`
        as the whole stream (`raw`), or after the valid start `partial()` as a `delta_event`
        (`delta`, closed) or nothing more (`truncate`); else (a bare hang) no answer at all."""
        if "http_error" in step:
            status = int(step["http_error"])
            self._send_json(status, step.get("body") or error(status), step.get("headers") or {})
            return
        if "garbage" not in step:
            self.close_connection = True
            return
        garbage = str(step["garbage"])
        mode = step.get("mode", "delta")
        # A garbage stream that ends properly keeps its connection like any answer: closing it
        # can race a client's immediate retry down the same socket, which then sees a reset
        # instead of the API error. A truncated stream's end is the closed connection.
        self.close_connection = mode == "truncate"
        self._start_stream()
        # The garbage and the stream's end go in one write: a client that gives up at the
        # garbage has the whole answer by then, so its connection is clean for the retry it
        # sends next (a stream end arriving after it gave up can cost that retry a reset).
        if mode == "raw":
            self._chunk(garbage.encode(), end=True)
            return
        for data in partial():
            self._chunk(data)
        if mode != "truncate":
            self._chunk(f"event: {delta_event}\ndata: {garbage}\n\n".encode(), end=True)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", self.stream_type)
        self.send_header("cache-control", "no-cache")
        for name, value in self.extra_headers:
            self.send_header(name, value)
        self.send_header("transfer-encoding", "chunked")
        if self.close_connection:
            # said, so that a client does not send its retry down a socket about to be closed
            self.send_header("connection", "close")
        self.end_headers()

    def _chunk(self, data: bytes, *, end: bool = False) -> None:
        """One chunk of the stream; `end`: the stream's end in the same write."""
        out = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
        if end:
            out += b"0\r\n\r\n"
        if out:
            self.wfile.write(out)
            self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def serve(
    name: str, api: str, make: Callable[[Path, int], ScriptServer], argv: Sequence[str] | None
) -> int:
    """`python -m gitsup.demo.NAME SCENARIO [--port N]`: start the server `make(scenario,
    port)` builds, print its URL and serve the scripted `api` until SIGTERM or ^C; 2 (and the
    reason on stderr, after `name:`) when it cannot start."""
    parser = argparse.ArgumentParser(
        prog=f"python -m gitsup.demo.{name}",
        description=f"Serve a scripted {api} on 127.0.0.1 until killed.",
    )
    parser.add_argument("scenario", type=Path, help="scenario JSON file")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    args = parser.parse_args(argv)
    try:
        model = make(args.scenario, args.port).start()
    except (ScriptError, OSError) as exc:
        sys.stderr.write(f"{name}: {exc}\n")
        return 2
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    sys.stdout.write(model.url + "\n")
    sys.stdout.flush()
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        model.stop()
    return 0
