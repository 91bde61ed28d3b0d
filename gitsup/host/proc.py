"""The one helper that runs subprocesses, and the environment gitsup gives its children.

Every child runs in its own process group so that a stop reaches all of it;
output is captured with a bound (the tail is kept, which is what a reader of a
failing check wants). `run` runs a command to its end; `spawn_piped` starts a worker
with pipes, `spawn_detached` a background gitsup process (`spawn_waiting` one started ahead of its
work); `kill_group`, `signal_group`,
`wait_exit`, `descendants` and `kill_each` are the pieces every stop is made of (`kill_tree`
puts them together for a process and all below it).
No other module of gitsup imports `subprocess` (the hook path has its own runner,
gitsup/boundary/gitrun.py; the import contracts in pyproject.toml check both).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsup.errors import GitsupError


def package_root() -> str:
    """The directory holding the `gitsup` package in use (put first on sys.path by
    `gitsup_python`, and by the Git hooks' launcher)."""
    import gitsup

    return os.path.dirname(os.path.dirname(os.path.realpath(gitsup.__file__)))


# `python -m MODULE ARGS` with gitsup's own package: the first argument after the program is the
# package root, the second the module. The module's file runs as `__main__` from its cached
# bytecode, through the loader the interpreter has already imported: runpy (and the
# importlib.util it imports) would add a fifth to the start-up of every sandboxed spawn.
_RUN_MODULE = (
    "import sys; from importlib.machinery import SourceFileLoader as L; "
    "r, m = sys.argv.pop(1), sys.argv.pop(1); sys.path.insert(0, r); "
    "p = sys.argv[0] = r + '/' + m.replace('.', '/') + '.py'; "
    "g = sys.modules['__main__'] = type(sys)('__main__'); g.__file__ = p; "
    "exec(L('__main__', p).get_code('__main__'), g.__dict__)"
)


def gitsup_python(module: str, *args: str, stdlib_only: bool = False) -> list[str]:
    """The argv that runs gitsup's `module` (as `python -m`) in a child, whatever its working
    directory or environment holds. `python -m` puts the working directory first on
    sys.path: run in a task's worktree, or in a repository that has a `gitsup/` directory,
    it would import that code instead of gitsup's. So the interpreter is started with `-P`
    (no such entry); `stdlib_only` (the sandbox bootstrap, which runs as root in the task's
    worktree and with the task's environment) starts it with `-I -S` instead: neither
    PYTHON* variables, nor the user's or any site-packages, and gitsup's package root put
    on sys.path explicitly."""
    if stdlib_only:
        return [sys.executable, "-I", "-S", "-c", _RUN_MODULE, package_root(), module, *args]
    return [sys.executable, "-P", "-m", module, *args]


# Variables that would point a child at another repository or index than the one it runs in.
_GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_QUARANTINE_PATH",
)


def child_env(
    extra: Mapping[str, str] | None = None,
    *,
    base: Mapping[str, str] | None = None,
    drop: Sequence[str] = (),
) -> dict[str, str]:
    """The environment for a child gitsup starts: no inherited repository location,
    no terminal prompts, plus `extra`."""
    env = dict(os.environ if base is None else base)
    for name in (*_GIT_LOCATION_VARS, *drop):
        env.pop(name, None)
    env["GIT_TERMINAL_PROMPT"] = "0"
    if extra:
        env.update(extra)
    return env


class BoundedBuffer:
    """Keeps the first `head` and the last `limit - head` bytes; counts the rest."""

    def __init__(self, limit: int, head: int | None = None) -> None:
        self.limit = max(0, limit)
        self.head_limit = self.limit // 4 if head is None else min(head, self.limit)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            tail_limit = self.limit - self.head_limit
            if len(self._tail) > tail_limit:
                del self._tail[: len(self._tail) - tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > len(self._head) + len(self._tail)

    def text(self) -> str:
        if not self.truncated:
            return (bytes(self._head) + bytes(self._tail)).decode("utf-8", "replace")
        skipped = self.total - len(self._head) - len(self._tail)
        return (
            bytes(self._head).decode("utf-8", "replace")
            + f"\n[... {skipped} bytes omitted ...]\n"
            + bytes(self._tail).decode("utf-8", "replace")
        )


@dataclass(frozen=True)
class ProcResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when killed for the timeout
    output: str  # stdout and stderr interleaved, bounded
    truncated: bool
    duration: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def failure(
        self, what: str, *, timeout: float, abort: threading.Event | None = None
    ) -> str | None:
        """Why `what` (a reviewer, a decider) did not succeed, or None when it did."""
        if self.timed_out and abort is not None and abort.is_set():
            return f"{what} stopped: stop requested"
        if self.timed_out:
            return f"{what} timed out after {timeout:g}s"
        if self.returncode != 0:
            return f"{what} exited {self.returncode}"
        return None


Popen = subprocess.Popen  # the type of a started child, for annotations


def spawn_piped(
    argv: Sequence[str], *, cwd: str | os.PathLike[str], env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Start argv (never through a shell) with stdin/stdout/stderr pipes in its own session
    (process group). OSError when it cannot be started."""
    return _in_session(argv, cwd, env, subprocess.PIPE)


def spawn_service(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    log: str | os.PathLike[str],
) -> subprocess.Popen[bytes]:
    """Start a helper that may outlive us (the egress gate): its own session, stdin and
    stdout pipes to talk to it while we live, stderr appended to `log`, no inherited
    descriptors. OSError when it cannot be started."""
    with open(log, "ab") as fh:
        return _in_session(argv, cwd, env, fh)


def _in_session(
    argv: Sequence[str], cwd: str | os.PathLike[str], env: Mapping[str, str], stderr: Any
) -> subprocess.Popen[bytes]:
    """argv in its own session with stdin and stdout pipes (no inherited descriptors)."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        start_new_session=True,
        close_fds=True,
    )


def spawn_detached(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    log: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
) -> int:
    """Start argv in its own session, detached from ours: no stdin, stdout and stderr appended
    to `log`, no inherited descriptors, nobody waits for it. Returns its pid."""
    with open(log, "ab") as fh:
        child = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else child_env(),
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    return child.pid


def spawn_waiting(
    argv: Sequence[str], *, cwd: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start argv as `spawn_detached` does (its own session, no inherited descriptors),
    but with a pipe as its stdin and no output: a process started ahead of its work, which
    it reads from the pipe (and ends at the pipe's end, when the writer is gone). Returns
    the child (`stdin` the pipe's writing end; `wait_exit` collects it)."""
    child = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env) if env is not None else child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    return child


def run_foreground(
    argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str]
) -> int:
    """Run a long-lived program (a server) in the foreground in its own process group, with
    our stdout and stderr; return its exit code. Ctrl-C or SIGTERM to us stops its whole
    group (SIGTERM, then SIGKILL after a grace) before we return."""
    try:
        child = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise GitsupError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from exc

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return child.wait()
    except KeyboardInterrupt:
        kill_group(child.pid, grace=10.0)
        child.wait()
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to the process group; a group that is gone (or not ours) is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait_exit(p: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait up to `timeout` for a child to exit (and reap it); False when it still runs."""
    try:
        p.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def descendants(pid: int) -> list[Any]:
    """The processes below `pid` (psutil.Process objects), collected before a stop: once the
    leader dies they are reparented, and those that left the group (setsid) are lost."""
    try:
        import psutil

        return list(psutil.Process(pid).children(recursive=True))
    except Exception:
        return []


def kill_each(procs: Sequence[Any]) -> list[int]:
    """SIGKILL each of `procs` (from `descendants`) that still runs. Returns the pids killed."""
    killed = []
    for p in procs:
        with contextlib.suppress(Exception):
            p.kill()
            killed.append(int(p.pid))
    return killed


def kill_tree(pid: int, *, wait: float) -> list[int]:
    """SIGKILL `pid` and every process below it, `pid` stopped (SIGSTOP) first so that none
    of them acts on the others' end; wait up to `wait` for them to be gone, and reap `pid`
    when it is a child of this process. Returns the pids killed."""
    import psutil

    try:
        top = psutil.Process(pid)
        top.suspend()
    except psutil.Error:
        return []
    procs = [top, *descendants(pid)]
    killed = kill_each(procs)
    psutil.wait_procs(procs, timeout=wait)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    return killed


def stop_session(
    p: subprocess.Popen[bytes],
    *,
    grace: float,
    close_input: Callable[[], None],
    interrupt: Callable[[], bool] | None = None,
    interrupted: str = "interrupted and closed input",
) -> str:
    """Stop an agent session started by `spawn_piped`, politely first: `interrupt` (returns
    whether a turn was running, after giving it `grace` to end), close its input, then SIGTERM,
    then SIGKILL of its group and of every descendant collected before (tool children may have
    left the group). Returns how it ended."""
    if p.poll() is not None:
        signal_group(p.pid, signal.SIGKILL)
        return "already exited"
    kids = descendants(p.pid)
    busy = interrupt() if interrupt is not None else False
    close_input()
    how = "killed"
    if wait_exit(p, grace):
        how = interrupted if busy else "closed input"
    else:
        signal_group(p.pid, signal.SIGTERM)
        if wait_exit(p, grace):
            how = "terminated"
    signal_group(p.pid, signal.SIGKILL)
    kill_each(kids)
    wait_exit(p, grace)
    return how


def kill_group(pgid: int, *, grace: float = 5.0, sig: int = signal.SIGTERM) -> None:
    """SIGTERM the process group, wait up to `grace`, then SIGKILL it."""
    signal_group(pgid, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.02)
    signal_group(pgid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) also succeeds for zombies: members that already exited and wait for a parent
    # (or a lazy init, for orphans) to reap them. They are gone; do not wait the grace out.
    try:
        import psutil

        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                    return True
            except (psutil.Error, OSError):
                continue
    except Exception:
        return True
    return False


def run(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    input: bytes | None = None,
    max_output: int = 64 * 1024,
    kill_grace: float = 2.0,
    abort: threading.Event | None = None,
    preexec_fn: Callable[[], None] | None = None,
    merge_stderr: bool = True,
    redact: bool = False,
) -> ProcResult:
    """Run argv (never through a shell) in its own process group.

    stdout and stderr are merged (stderr dropped with merge_stderr=False) and bounded; on timeout (or when `abort` is set)
    the whole group is stopped. A program that cannot be started is a GitsupError.
    With `redact`, credential-shaped strings in the output are replaced (gitsup.redact)
    before anything else sees it: for output of programs gitsup does not control.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else child_env(),
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise GitsupError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from exc
    buf = BoundedBuffer(max_output)
    timed_out = False
    if input is not None and proc.stdin is not None:
        # A writer thread: a child that prints before it reads (or never reads) cannot
        # deadlock us, and its early exit (EPIPE) is not an error of ours.
        stdin = proc.stdin

        def feed() -> None:
            with contextlib.suppress(OSError, ValueError):
                stdin.write(input)
            with contextlib.suppress(OSError, ValueError):
                stdin.close()

        threading.Thread(target=feed, daemon=True).start()
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = None if timeout is None else start + timeout
    fd = proc.stdout.fileno()
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if wait == 0.0 or (abort is not None and abort.is_set()):
            timed_out = True
            break
        if abort is not None:
            wait = 0.2 if wait is None else min(wait, 0.2)
        if not sel.select(wait):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf.feed(chunk)
    sel.close()
    if timed_out:
        kill_group(proc.pid, grace=kill_grace)
    else:
        # The direct child closed its output; reap it (descendants holding no pipe may linger).
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(
                timeout=kill_grace if deadline is None else max(0.1, deadline - time.monotonic())
            )
        if proc.returncode is None:
            timed_out = True
            kill_group(proc.pid, grace=kill_grace)
    proc.stdout.close()
    proc.wait()
    output = buf.text()
    if redact:
        from gitsup.redact import redact_text

        output = redact_text(output)
    return ProcResult(
        argv=tuple(argv),
        returncode=None if timed_out else proc.returncode,
        output=output,
        truncated=buf.truncated,
        duration=time.monotonic() - start,
        timed_out=timed_out,
    )
