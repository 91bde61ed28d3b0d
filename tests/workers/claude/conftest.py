"""Fixtures for tests that drive the real Claude Code CLI against `ScriptedModel`.

The CLI binary: env GITSUP_CLAUDE_BIN, else <repo>/.tools/claude/node_modules/.bin/claude
(installed by .ci/install-claude), else `claude` on PATH. Not found: skip, except
under CI (env CI set), where it is a failure: CI must never silently skip these.

Nothing leaves 127.0.0.1: the CLI talks only to the scripted model, with
telemetry, auto-update and all non-essential traffic off.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.workers.base import PermissionAnswer, PermissionRequest, TurnCompleted
from gitsup.workers.stream_json import (
    ControlRequest,
    LineFramer,
    control_error,
    parse_record,
    permission_response,
    user_message,
)
from tests.helpers.agents import pinned_agent

REPO_ROOT = Path(__file__).resolve().parents[3]
PINNED_VERSION = "2.1.328"
# Every Bash/Write/Edit call asks, whatever the worktree's .claude/ settings say
# (measured, see docs/claude-worker-notes.md).
ASK_EVERYTHING = '{"permissions":{"ask":["Bash","Write","Edit","NotebookEdit"]}}'
SUPERVISED_FLAGS = (
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
    "--permission-mode",
    "default",
    "--setting-sources",
    "",
    "--settings",
    ASK_EVERYTHING,
)


@pytest.fixture(scope="session")
def claude_bin() -> str:
    return pinned_agent("GITSUP_CLAUDE_BIN", "claude", "claude", PINNED_VERSION)


@pytest.fixture
def scripted_model() -> Iterator[Callable[..., ScriptedModel]]:
    """Factory: `scripted_model(scripts, **kw)` starts a server, stopped at teardown."""
    started: list[ScriptedModel] = []

    def start(scripts: Any, **kwargs: Any) -> ScriptedModel:
        model = ScriptedModel(scripts, **kwargs).start()
        started.append(model)
        return model

    yield start
    for model in started:
        model.stop()


def claude_env(
    url: str, config_dir: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env.update(
        ANTHROPIC_BASE_URL=url,
        ANTHROPIC_API_KEY="sk-scripted-not-a-key",
        CLAUDE_CONFIG_DIR=str(config_dir),
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        # bound what a broken model costs: no 3-minute 529 retry ladder in tests
        CLAUDE_CODE_MAX_RETRIES="1",
        API_TIMEOUT_MS="20000",
    )
    env.update(extra or {})
    return env


class ClaudeDriver:
    """The real CLI as a supervised worker, driven with the stream_json layer."""

    def __init__(
        self,
        binary: str,
        model: ScriptedModel,
        cwd: Path,
        config_dir: Path,
        *,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.model = model
        self.proc = subprocess.Popen(
            [binary, *SUPERVISED_FLAGS, *extra_args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=claude_env(model.url, config_dir, env),
            start_new_session=True,
        )
        self.events: list[object] = []
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._done = object()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.stderr = b""

    def _read(self) -> None:
        assert self.proc.stdout is not None
        framer = LineFramer()
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 65536):  # raw reads: arbitrary record boundaries
            for line in framer.feed(chunk):
                event = parse_record(line)
                if event is not None:
                    self._queue.put(event)
        for line in framer.finish():
            event = parse_record(line)
            if event is not None:
                self._queue.put(event)
        self._queue.put(self._done)

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, text: str) -> str:
        key = str(uuid.uuid4())
        self.write(user_message(text, key))
        return key

    def next_event(self, timeout: float = 30.0) -> object | None:
        """The next event, or None at end of stream. Fails the test on timeout."""
        try:
            event = self._queue.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no record from claude within {timeout} s; so far: {self.events[-5:]}")
        if event is self._done:
            return None
        self.events.append(event)
        return event

    def run_turn(
        self,
        decide: Callable[[PermissionRequest], PermissionAnswer] | None = None,
        *,
        timeout: float = 60.0,
    ) -> TurnCompleted:
        """Answer permission requests with `decide` (default: allow) until the turn ends."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.next_event(max(0.1, deadline - time.monotonic()))
            if event is None:
                pytest.fail(f"claude exited mid-turn: {self.finish()!r} {self.stderr[-2000:]!r}")
            if isinstance(event, PermissionRequest):
                answer = decide(event) if decide else PermissionAnswer(allow=True)
                self.write(permission_response(event.request_id, answer, event.tool_input))
            elif isinstance(event, ControlRequest):
                self.write(control_error(event.request_id, f"unsupported: {event.subtype}"))
            elif isinstance(event, TurnCompleted):
                return event

    def close(self, timeout: float = 15.0) -> int:
        """Close stdin and wait for the exit code."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.finish(timeout)

    def finish(self, timeout: float = 15.0) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.wait(timeout=5)
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            self.stderr = self.proc.stderr.read()
            self.proc.stderr.close()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture
def claude(
    claude_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., ClaudeDriver]]:
    """Factory: `claude(model, cwd, extra_args=(), env=None)` spawns a supervised CLI."""
    drivers: list[ClaudeDriver] = []

    def spawn(
        model: ScriptedModel,
        cwd: Path,
        *,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> ClaudeDriver:
        config = tmp_path_factory.mktemp("claude-config")
        driver = ClaudeDriver(claude_bin, model, cwd, config, extra_args=extra_args, env=env)
        drivers.append(driver)
        return driver

    yield spawn
    for driver in drivers:
        driver.kill()
        driver.finish(5)
        for pipe in (driver.proc.stdin, driver.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
