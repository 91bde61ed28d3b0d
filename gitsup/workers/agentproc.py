"""What the piped agent workers (claude, codex, acp) share: finding the agent's binary,
spawning it with its stdout/stderr readers, writing its input (one writer, each write
bounded in time), classifying its exit, and stopping it.

A subclass gives the line handler (`_on_line`) and interrupting a turn (`interrupt`); it
writes to the agent through `_input`; its turn state is guarded by `_state_lock`.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from gitsup.host import proc
from gitsup.redact import redact_text
from gitsup.workers.base import (
    WorkerAdapter,
    WorkerError,
    WorkerExited,
    WorkerIdentity,
    WorkerInputStalled,
    WorkerOutput,
    WorkerSetup,
    spawn_piped,
)
from gitsup.workers.stream_json import LineFramer

# A write to the agent's input that takes longer (2 x stop_grace, at least this) means the
# agent stopped reading.
MIN_WRITE_TIMEOUT = 5.0


def find_agent(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    env_var: str,
    name: str,
    missing: str,
    local: Sequence[Path] = (),
    setting: str = "[worker] argv",
) -> list[str]:
    """The agent to run: `argv` (worker.argv), else the file `env_var` names, else `name`
    on PATH, else the first of `local` installed in the current directory's repository, else
    in gitsup's own checkout (one lookup for `start`, `doctor`, the preflight and the demo).
    Raises WorkerError with `missing` when there is none."""
    if argv:
        exe = argv[0]
        resolved = exe if os.sep in exe else shutil.which(exe, path=env.get("PATH"))
        if resolved is None or not os.path.exists(resolved):
            raise WorkerError(f"{setting} names {exe!r}, which is not an executable on PATH")
        return [resolved, *argv[1:]]
    from_env = env.get(env_var)
    if from_env:
        if not os.path.exists(from_env):
            raise WorkerError(
                f"{env_var} names {from_env!r}, which does not exist; fix or unset it, "
                f"or name the agent in {setting}"
            )
        return [from_env]
    found = shutil.which(name, path=env.get("PATH"))
    if found is None and local:
        found = project_local(local)
        if found is None and os.environ.get("GITSUP_OWN_TOOLS") != "0":
            found = project_local(local, start=_own_checkout())
    if found is None:
        raise WorkerError(missing)
    return [found]


def _own_checkout() -> Path:
    """Where gitsup itself is installed from: its checkout for an editable install (whose
    `.tools/` `bash .ci/test` fills), else the environment it is installed in."""
    return Path(__file__).resolve().parents[2]


def project_local(rels: Sequence[Path], start: Path | None = None) -> str | None:
    """The first of `rels` that is an executable file under the repository holding
    `start` (default: the current directory)."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / ".git").exists():
            for rel in rels:
                cand = d / rel
                if cand.is_file() and os.access(cand, os.X_OK):
                    return str(cand)
            return None
    return None


class PipedAgent(WorkerAdapter):
    """An agent process with piped stdin, stdout and stderr, one turn at a time."""

    # what stop() reports when it interrupted a running turn
    interrupted = "interrupted and closed input"

    def __init__(self, ctx: WorkerSetup) -> None:
        super().__init__(ctx)
        self._proc: proc.Popen[bytes] | None = None
        self._state_lock = threading.Lock()
        self._turn_active = False
        self._sent_keys: set[str] = set()
        # every request id the agent asked gitsup to decide: one delivered twice is decided,
        # recorded and answered once (`_first_ask`)
        self._asked: set[str] = set()
        self._session_id: str | None = None
        self._stopping = False
        self._result_seen = threading.Event()
        self._exited = threading.Event()
        self._input = AgentInput()

    # --- what a subclass gives ----------------------------------------------------------

    def _on_line(self, line: str) -> None:
        raise NotImplementedError

    # --- turns --------------------------------------------------------------------------

    def _open_turn(
        self, key: str, send: Callable[[], None], *, ready: Callable[[], bool] | None = None
    ) -> bool:
        """Send a turn once per `key` (False: already sent) when none is running: `send()`
        writes it; a write that fails leaves no turn open and the key unsent."""
        with self._state_lock:
            if key in self._sent_keys:
                return False
            if self._turn_active:
                raise WorkerError("a turn is active; a new one can be sent only after its result")
            if not self.alive or (ready is not None and not ready()):
                raise WorkerError("the worker is gone")
            self._sent_keys.add(key)
            self._turn_active = True
        try:
            send()
        except WorkerError:
            with self._state_lock:
                self._turn_active = False
                self._sent_keys.discard(key)
            raise
        return True

    # --- spawning -----------------------------------------------------------------------

    def _spawn(self, argv: list[str], env: Mapping[str, str]) -> WorkerIdentity:
        """Start `argv` (through the `wrap` option, if any) in the worktree with `env`,
        and the threads that read its output and wait for its exit."""
        self._proc, identity = spawn_piped(self.ctx, argv, env)
        p = self._proc
        assert p.stdin is not None and p.stdout is not None and p.stderr is not None
        self._input.attach(p.stdin, self._write_timeout())
        out_done, err_done = threading.Event(), threading.Event()
        threading.Thread(target=self._read_stdout, args=(p.stdout, out_done), daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(p.stderr, err_done), daemon=True).start()
        threading.Thread(target=self._wait, args=(out_done, err_done), daemon=True).start()
        return identity

    def _write_timeout(self) -> float:
        spec = self.ctx.options.spec
        grace = float(spec.worker.stop_grace) if spec is not None else 5.0
        return max(MIN_WRITE_TIMEOUT, 2 * grace)

    # --- stdout / stderr / exit ---------------------------------------------------------

    def _read_stdout(self, stream: IO[bytes], done: threading.Event) -> None:
        framer = LineFramer()
        fd = stream.fileno()
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                for line in framer.feed(chunk):
                    self._on_line(line)
            for line in framer.finish():
                self._on_line(line)
        except (OSError, ValueError):
            pass
        finally:
            done.set()

    def _read_stderr(self, stream: IO[bytes], done: threading.Event) -> None:
        limit = self.ctx.max_output_bytes
        try:
            for raw in iter(
                lambda: stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536), b""
            ):
                text = redact_text(raw.decode("utf-8", "replace"))
                self.ctx.inbox.put(WorkerOutput("stderr", text[:limit]))
        except (OSError, ValueError):
            pass
        finally:
            done.set()

    def _close_turn(self) -> bool:
        """End the running turn; whether one was running (a completion that finds none is a
        repeat, protocol noise: one turn, one completion)."""
        with self._state_lock:
            running = self._turn_active
            self._turn_active = False
        return running

    def _first_ask(self, request_id: str) -> bool:
        """Whether the agent asks `request_id` for the first time (else: a repeat)."""
        with self._state_lock:
            first = request_id not in self._asked
            self._asked.add(request_id)
        return first

    def _wait(self, out_done: threading.Event, err_done: threading.Event) -> None:
        p = self._proc
        assert p is not None
        rc = p.wait()
        out_done.wait(timeout=5.0)
        err_done.wait(timeout=1.0)
        sig = -rc if rc < 0 else None
        mid_turn = self._close_turn()
        if self._stopping:
            how = "stopped"
        elif mid_turn:
            how = "exited_without_result"
        else:
            how = "exited" if rc == 0 else "error"
        self.ctx.inbox.put(
            WorkerExited(returncode=rc if rc >= 0 else None, signal=sig, classification=how)
        )
        self._exited.set()

    # --- stopping -----------------------------------------------------------------------

    def stop(self, *, grace: float = 5.0) -> str:
        if self._proc is None:
            return "not started"
        self._stopping = True
        return proc.stop_session(
            self._proc,
            grace=grace,
            close_input=self._input.close,
            interrupt=lambda: self._interrupt_turn(grace),
            interrupted=self.interrupted,
        )

    def _interrupt_turn(self, grace: float) -> bool:
        """Interrupt a running turn and give it `grace` to end; whether one was running."""
        with self._state_lock:
            busy = self._turn_active
        if busy:
            self._result_seen.clear()
            self.interrupt()
            self._result_seen.wait(timeout=grace)
        return busy

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self._input.closed

    @property
    def session_id(self) -> str | None:
        return self._session_id


class AgentInput:
    """The agent's stdin: one writer at a time, each write bounded in time (an agent that
    stops reading makes it raise WorkerInputStalled, and the input unusable, instead of
    blocking the supervisor)."""

    def __init__(self) -> None:
        self._stream: IO[bytes] | None = None
        self._timeout = MIN_WRITE_TIMEOUT
        self._lock = threading.Lock()
        self._closed = False
        self._stalled: str | None = None

    def attach(self, stream: IO[bytes], timeout: float) -> None:
        self._stream, self._timeout = stream, timeout

    @property
    def closed(self) -> bool:
        return self._closed

    def write(self, data: bytes) -> None:
        """Write one record; WorkerError when it cannot be written."""
        with self._lock:
            if self._closed:
                raise WorkerError("the worker's input is closed")
            s = self._stream
            if s is None:
                raise WorkerError("the worker is not running")
            if self._stalled:
                raise WorkerInputStalled(self._stalled)
            try:
                written = write_within(s.fileno(), data, self._timeout)
            except (OSError, ValueError) as exc:
                raise WorkerError(f"cannot write to the worker: {exc}") from exc
            if written < len(data):
                self._stalled = (
                    f"the worker stopped reading its input: a write of {len(data)} bytes "
                    f"did not complete within {self._timeout:g}s ({written} written)"
                )
                raise WorkerInputStalled(self._stalled)

    def close(self) -> None:
        """Close it (once; a write under way finishes first)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._stream.close()


def write_within(fd: int, data: bytes, timeout: float) -> int:
    """Write `data` to the pipe `fd` (made non-blocking), giving up after `timeout` seconds
    of a reader that does not keep up; how many bytes were written (`len(data)` when all).
    OSError (a closed pipe included) propagates."""
    os.set_blocking(fd, False)
    view = memoryview(data)
    deadline = time.monotonic() + timeout
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            n = 0
        view = view[n:]
        if not view:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        select.select([], [fd], [], min(left, 0.5))
    return len(data) - len(view)
