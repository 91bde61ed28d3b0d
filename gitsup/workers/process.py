"""The `process` worker: any argv, goal on stdin and in GITSUP_GOAL; exit = turn end.

Runs in its own process group; stdout/stderr are read by two threads and
reported as bounded, redacted `WorkerOutput` events. Not repairable (a new turn would
mean a new process), not persistent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import IO

from gitsup.host import proc
from gitsup.redact import redact_text
from gitsup.workers.base import (
    Capabilities,
    TurnCompleted,
    WorkerAdapter,
    WorkerError,
    WorkerExited,
    WorkerIdentity,
    WorkerOutput,
    WorkerSetup,
    spawn_piped,
)


class ProcessWorker(WorkerAdapter):
    kind = "process"
    capabilities = Capabilities(repairable=False, persistent=False)

    def __init__(self, ctx: WorkerSetup) -> None:
        super().__init__(ctx)
        self._proc: proc.Popen[bytes] | None = None
        self._readers: list[threading.Thread] = []
        self._exit_reported = threading.Event()
        self._stopping = False

    def start(self, goal: str) -> WorkerIdentity:
        argv = list(self.ctx.argv)
        if not argv:
            raise WorkerError("the process worker needs worker.argv (the command to run)")
        env = dict(self.ctx.env)
        env["GITSUP_GOAL"] = goal
        self._proc, identity = spawn_piped(self.ctx, argv, env)
        p = self._proc
        assert p.stdin is not None and p.stdout is not None and p.stderr is not None
        threading.Thread(target=self._feed_stdin, args=(p.stdin, goal), daemon=True).start()
        done = [threading.Event(), threading.Event()]
        for stream, name, ev in ((p.stdout, "stdout", done[0]), (p.stderr, "stderr", done[1])):
            t = threading.Thread(target=self._read, args=(stream, name, ev), daemon=True)
            t.start()
            self._readers.append(t)
        threading.Thread(target=self._wait, args=(done,), daemon=True).start()
        return identity

    def _feed_stdin(self, stdin: IO[bytes], goal: str) -> None:
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            stdin.write(goal.encode())
            stdin.write(b"\n")
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            stdin.close()

    def _read(self, stream: IO[bytes], name: str, done: threading.Event) -> None:
        limit = self.ctx.max_output_bytes
        fd = stream.fileno()
        pending = b""
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending += chunk
                # report whole lines when possible, bounded chunks otherwise
                while pending:
                    nl = pending.rfind(b"\n")
                    if nl < 0 and len(pending) < limit:
                        break
                    cut = nl + 1 if 0 <= nl < limit else min(len(pending), limit)
                    piece, pending = pending[:cut], pending[cut:]
                    self.ctx.inbox.put(
                        WorkerOutput(name, redact_text(piece.decode("utf-8", "replace")))
                    )
            if pending:
                text = redact_text(pending.decode("utf-8", "replace"))
                self.ctx.inbox.put(WorkerOutput(name, text))
        except (OSError, ValueError):
            pass
        finally:
            done.set()

    def _wait(self, done: list[threading.Event]) -> None:
        p = self._proc
        assert p is not None
        rc = p.wait()
        for ev in done:
            ev.wait(timeout=2.0)
        sig = -rc if rc < 0 else None
        if not self._stopping:
            self.ctx.inbox.put(
                TurnCompleted(
                    subtype="exit" if rc == 0 else "error_exit",
                    is_error=rc != 0,
                    result=f"worker exited with {'signal ' + str(sig) if sig else 'code ' + str(rc)}",
                    num_turns=1,
                )
            )
        self.ctx.inbox.put(
            WorkerExited(
                returncode=rc if rc >= 0 else None,
                signal=sig,
                classification="stopped" if self._stopping else ("exited" if rc == 0 else "error"),
            )
        )
        self._exit_reported.set()

    def send_turn(self, message: str, *, key: str) -> bool:
        raise WorkerError("the process worker cannot take another turn (not repairable)")

    def stop(self, *, grace: float = 5.0) -> str:
        p = self._proc
        if p is None:
            return "not started"
        self._stopping = True
        if p.poll() is not None:
            proc.kill_group(p.pid, grace=0.5)  # descendants left in the group
            return "already exited"
        # Collect descendants first: once the leader dies they are reparented and lost.
        kids = proc.descendants(p.pid)
        proc.kill_group(p.pid, grace=grace, sig=signal.SIGTERM)
        proc.kill_each(kids)
        if not proc.wait_exit(p, 2.0):
            proc.signal_group(p.pid, signal.SIGKILL)
            p.wait()
        return "terminated" if p.returncode in (-signal.SIGTERM, 143) else "killed"

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None
