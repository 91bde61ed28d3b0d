"""The worker interface the supervisor drives.

A worker adapter owns only the process lifecycle and the transport. It reports
what happens as small immutable events put on the supervisor's inbox (a
`queue.SimpleQueue`, safe to feed from reader threads and signal handlers);
the supervisor decides everything (policy, verification, state).

Capabilities are explicit and never inferred from each other:
`repairable` (can take another turn after verification) and `persistent`
(survives a supervisor restart and can be re-adopted).
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from gitsup.host import proc
from gitsup.host.procid import ProcessId
from gitsup.redact import redact_text
from gitsup.store.payload import Payload

if TYPE_CHECKING:
    from gitsup.spec import TaskSpec

Inbox = queue.SimpleQueue[object]

MAX_NOISE_LINE = 512  # characters of a bad line kept in ProtocolNoise


def clip(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    cut = max(0, limit - 40)
    return f"{text[:cut]}… [{len(text) - cut} more chars]"


@dataclass(frozen=True)
class Capabilities:
    repairable: bool
    persistent: bool


# --- events a worker puts on the inbox ------------------------------------------------


@dataclass(frozen=True)
class WorkerOutput:
    """Something the worker said (bounded by the adapter). `stream` is stdout/stderr/assistant/user/…

    The adapter redacts `text` and `data` (gitsup.redact) where it reads them: the event
    log does not screen worker output again."""

    stream: str
    text: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PermissionRequest:
    """The worker asks to use a tool. Answer exactly once with `WorkerAdapter.answer`.

    `phase` says which turn asks: `turn` (one gitsup sent: the goal, a repair round, a
    message), `prompt` (one a person started by typing a prompt, or another Claude session
    in the worktree: a human takeover), `takeover` (the turn that was running when a new
    supervisor re-adopted the worker; who started it is not known)."""

    request_id: str
    tool_name: str
    tool_input: Mapping[str, Any]
    raw: Mapping[str, Any] = field(default_factory=dict)
    phase: Literal["turn", "prompt", "takeover"] = "turn"


@dataclass(frozen=True)
class PermissionCancelled:
    """The worker no longer needs the answer to `request_id`."""

    request_id: str


@dataclass(frozen=True)
class TurnCompleted:
    """The worker ended a turn (a `result` record, a Stop hook, or a process exit)."""

    subtype: str = "success"
    is_error: bool = False
    result: str | None = None
    cost_usd: float | None = None
    num_turns: int | None = None
    session_id: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)
    models: tuple[str, ...] = ()  # the models the turn used, as the agent names them


@dataclass(frozen=True)
class ProtocolNoise:
    """A malformed or unexpected record, recorded and otherwise ignored."""

    line: str
    error: str

    @classmethod
    def of(cls, line: str, error: str) -> ProtocolNoise:
        """The noise of `line` as the worker wrote it: redacted, clipped to MAX_NOISE_LINE."""
        return cls(line=clip(redact_text(line), MAX_NOISE_LINE), error=error)


@dataclass(frozen=True)
class WorkerExited:
    """The worker process is gone. `classification` says how (see adapters)."""

    returncode: int | None
    signal: int | None = None
    classification: str = "exited"


@dataclass(frozen=True)
class HumanInput:
    """Somebody typed into the worker's terminal (a prompt the supervisor did not send)."""

    text: str


@dataclass(frozen=True)
class WorkerNote:
    """Something the adapter did or saw that belongs in the event log."""

    payload: Payload


# --- answers the supervisor gives -----------------------------------------------------


@dataclass(frozen=True)
class PermissionAnswer:
    allow: bool
    message: str = ""
    updated_input: Mapping[str, Any] | None = None
    interrupt: bool = False


@dataclass(frozen=True)
class WorkerIdentity:
    """What is persisted to prove later which process this was."""

    pid: int
    start_time: float
    pgid: int
    cgroup: str | None = None
    cgroup_inode: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # transport-specific (tmux pane …)

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "start_time": self.start_time,
            "pgid": self.pgid,
            "cgroup": self.cgroup,
            "cgroup_inode": self.cgroup_inode,
            "extra": dict(self.extra),
        }


class EgressForward(Protocol):
    """The worker's egress gate, as an adapter uses it: let the sandboxed agent reach a
    supervisor port (the tmux worker's HTTP hooks) through its network namespace."""

    def add_forward(self, port: int) -> None: ...


Wrap = Callable[[list[str]], list[str]]


@dataclass(frozen=True)
class WorkerOptions:
    """What an adapter may be given besides its context; every field is typed and unset
    is None (or empty). Adapters read the fields; there is no mapping behind them.

    `spec` the task's TaskSpec; `wrap` the bootstrap prefix (sandbox, cgroup, namespace) for
    its argv; `egress` the worker's egress gate; `abort` set on stop;
    `tools`/`ask_tools`/`loads_settings_files` a one-off agent call's tool set (agent_call);
    `codex_home` the CODEX_HOME of such a call; `hook_timeout`, `extra_args`,
    `startup_timeout` tmux settings (without a spec).
    """

    spec: TaskSpec | None = None
    wrap: Wrap | None = None
    egress: EgressForward | None = None
    abort: threading.Event | None = None
    tools: str | None = None
    ask_tools: tuple[str, ...] | None = None
    loads_settings_files: bool = False
    codex_home: Path | None = None
    hook_timeout: float | None = None
    extra_args: tuple[str, ...] = ()
    startup_timeout: float | None = None


@dataclass(frozen=True)
class WorkerSetup:
    """What an adapter gets from the supervisor. Adapters never create these themselves."""

    task_id: str
    worktree: Path
    task_dir: Path  # $GIT_COMMON_DIR/sup/tasks/<id>/, for logs and per-task files
    env: Mapping[str, str]  # the child environment, already cleaned by the supervisor
    argv: tuple[str, ...]  # worker.argv from the spec (may be empty: adapter default)
    inbox: Inbox
    options: WorkerOptions = field(default_factory=WorkerOptions)  # adapter-specific settings
    max_output_bytes: int = 16 * 1024  # bound for one WorkerOutput text


class WorkerError(Exception):
    """Raised by adapters for a worker that cannot be started or driven (not user-facing)."""


class WorkerInputStalled(WorkerError):
    """A write to the worker's input did not complete in time: it stopped reading."""


class WorkerAdapter(ABC):
    kind: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def __init__(self, ctx: WorkerSetup) -> None:
        self.ctx = ctx

    @abstractmethod
    def start(self, goal: str) -> WorkerIdentity:
        """Spawn the worker and begin the first turn with `goal`. Raises WorkerError."""

    @abstractmethod
    def send_turn(self, message: str, *, key: str) -> bool:
        """Begin another turn. Returns False if a turn with `key` was already sent
        (idempotent retry). Raises WorkerError if a turn is active or the worker
        is not repairable/alive."""

    def answer(self, request_id: str, answer: PermissionAnswer) -> None:  # noqa: B027
        """Answer a PermissionRequest (adapters without permission requests ignore this)."""

    def adopt(self, identity: Mapping[str, Any]) -> WorkerIdentity:
        """Re-attach to a worker that survived its supervisor (persistent workers only).
        Raises WorkerError when the persisted identity does not match what runs."""
        raise WorkerError(f"the {self.kind} worker is not persistent; it cannot be re-adopted")

    def detach(self) -> str:
        """Let go of an adopted worker without stopping it."""
        return self.stop()

    def interrupt(self) -> None:  # noqa: B027
        """Abort the current turn but keep the worker (if the transport supports it)."""

    @abstractmethod
    def stop(self, *, grace: float = 5.0) -> str:
        """Stop the worker and everything it started; returns how it ended."""

    @property
    @abstractmethod
    def alive(self) -> bool: ...


def spawn_piped(
    ctx: WorkerSetup, argv: list[str], env: Mapping[str, str]
) -> tuple[proc.Popen[bytes], WorkerIdentity]:
    """Start a worker's `argv` (through the `wrap` option, the sandbox's bootstrap, when
    given) in the worktree with stdin/stdout/stderr pipes, in its own session (process
    group); the process and what identifies it."""
    wrap = ctx.options.wrap
    if wrap is not None:
        argv = wrap(argv)
    try:
        p = proc.spawn_piped(argv, cwd=ctx.worktree, env=env)
    except OSError as exc:
        raise WorkerError(f"cannot start worker {argv[0]!r}: {exc.strerror or exc}") from exc
    try:
        start_time = ProcessId.of(p.pid).start_time
    except Exception:
        start_time = 0.0
    return p, WorkerIdentity(pid=p.pid, start_time=start_time, pgid=p.pid)
