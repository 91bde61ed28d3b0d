"""The supervisor: owns one task's state machine, event log, watchdog, policy gate,
decider and verifier, and drives one worker through them.

It runs in one thread. Workers report through the inbox (a SimpleQueue);
timers are computed, never polled: the loop blocks on the inbox until the next
deadline. The terminal transition happens once, in `_finish`, which stops the
worker, snapshots uncommitted work, writes the candidate ref and note, seals the
event log and releases the lease.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from gitsup.checks import run_check
from gitsup.contain import (
    Cgroup,
    bootstrap_argv,
    create_cgroup,
    executable_problems,
    resolve_mode,
    sweep_marked,
)
from gitsup.decider import DeciderError, RulesDecider, TurnContext, TurnDecision, make_decider
from gitsup.errors import GitsupError
from gitsup.events import Event, EventLog
from gitsup.faults import fault
from gitsup.git import WIP_MAX_FILE_BYTES, GitRepo, RefConflict
from gitsup.gitstate import ImportRefused, import_tree, import_work, open_worktree
from gitsup.ids import Oid, TaskId
from gitsup.layout import Layout, task_refs
from gitsup.lease import Lease, LeaseStore
from gitsup.procid import ProcessId
from gitsup.record import CandidateNote, CheckResult, ReviewResult, TaskRecord, TaskStore
from gitsup.redact import Redacted
from gitsup.review import Attempt, Finding, ReviewContext, evidence_bundle, run_review
from gitsup.sandbox import Plan
from gitsup.spec import Check, TaskSpec
from gitsup.state import EXIT_OF, STATUS_OF, State, StateMachine, Status
from gitsup.workers.base import (
    HumanInput,
    Inbox,
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerAdapter,
    WorkerContext,
    WorkerError,
    WorkerExited,
    WorkerIdentity,
    WorkerInputStalled,
    WorkerNote,
    WorkerOutput,
)
from gitsup.workers.stream_json import ModelFailure, model_failure

EventSink = Callable[[Event], None]
T = TypeVar("T")


class _AdoptRefused(WorkerError):
    """A persisted worker identity did not match: not re-adopted, nothing changed."""


@dataclass(frozen=True)
class Net:
    """Where a process runs: `netns` (None: the host network), what its env needs, the gate."""

    netns: str | None
    env: dict[str, str]
    gate: Any
    describe: dict[str, Any]


@dataclass(frozen=True)
class StopRequest:
    reason: str


@dataclass(frozen=True)
class ResumeAuto:
    """`git sup resume-auto`: automatic turns continue after a human takeover."""


@dataclass(frozen=True)
class _Timer:
    name: str


WorkerFactory = Callable[[TaskSpec, WorkerContext], WorkerAdapter]


def default_worker_factory(spec: TaskSpec, ctx: WorkerContext) -> WorkerAdapter:
    kind = spec.worker.kind
    if kind == "process":
        from gitsup.workers.process import ProcessWorker

        return ProcessWorker(ctx)
    if kind == "claude":
        try:
            from gitsup.workers.claude import ClaudeWorker
        except ImportError as exc:  # pragma: no cover - depends on build stage
            raise GitsupError("the claude worker is not available in this build") from exc
        return ClaudeWorker(ctx)
    if kind == "codex":
        from gitsup.workers.codex import CodexWorker

        return CodexWorker(ctx)
    if kind == "tmux":
        try:
            from gitsup.workers.tmux import TmuxWorker  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise GitsupError(
                "the tmux worker is not available yet",
                hint='use [worker] kind = "claude" or "process"',
            ) from exc
        worker: WorkerAdapter = TmuxWorker(ctx)
        return worker
    raise GitsupError(f"unknown worker kind {kind!r}")


class Supervisor:
    def __init__(
        self,
        repo: GitRepo,
        layout: Layout,
        record: TaskRecord,
        spec: TaskSpec,
        lease: Lease,
        *,
        on_event: EventSink | None = None,
        worker_factory: WorkerFactory = default_worker_factory,
        review_attempt: Attempt | None = None,
    ) -> None:
        self.review_attempt = review_attempt
        self.repo = repo
        self.layout = layout
        self.store = TaskStore(layout)
        self.record = record
        self.spec = spec
        self.lease = lease
        self.task = TaskId(record.id)
        self.worktree = Path(record.worktree)
        self.on_event = on_event
        self.worker_factory = worker_factory
        self.sm = StateMachine(State(record.state))
        self.log = EventLog(
            layout.events(self.task),
            self.task,
            max_record_bytes=spec.events.max_record_bytes,
            rotate_bytes=spec.events.rotate_bytes,
            keep_files=spec.events.keep_files,
        )
        from gitsup import ledger, notify

        self._notifier = notify.notifier_for(repo, layout, spec, self.task)
        ledger.bind_call_sink(
            lambda call: None if self.sm.terminal else self.emit("model_call", call)
        )
        self.inbox: Inbox = queue.SimpleQueue()
        self.worker: WorkerAdapter | None = None
        self.decider: RulesDecider = RulesDecider()
        self._policy: Any = None
        self._abort = threading.Event()
        self._abort_reason: str | None = None
        self._stop_reason: str | None = None
        self._started = time.monotonic()
        self._last_progress = time.monotonic()
        self._phases_done: set[str] = set()
        self._pending: dict[str, PermissionRequest] = {}
        self._turn_active = False
        self._worker_gone = False
        self._verified_head: Oid | None = None
        self._seen_findings: set[str] = set()
        self._spawns = 0
        self._cg_base: Path | None = None
        self._cgroup: Cgroup | None = None
        self._resume_prompt = ""
        self._exit_stack = contextlib.ExitStack()
        self._swept = False
        self._clean_before_checks = True
        self._worker_ref: str | None = f"refs/heads/{record.branch}"
        self._import_refused: str | None = None
        self._emit_lock = threading.RLock()  # the egress gate reports from its own thread
        self._network: dict[str, Any] = {"mode": "host"}
        self._sandbox: Plan | None = None
        self._sandbox_error: str | None = None
        # Whether the kernel sandbox (Landlock, mount namespace, no privileges) is in force
        # for everything this task runs; known once the worker environment is built.
        self.sandbox_enforced = False
        self._left_cgroups: list[str] = []

    # --- events and state ---------------------------------------------------------

    def emit(self, type: str, data: Mapping[str, Any] | None = None) -> Event:
        with self._emit_lock:
            ev = self.log.append(type, data)
            if self.on_event is not None:
                with contextlib.suppress(Exception):
                    self.on_event(ev)
            if self._notifier is not None:
                with contextlib.suppress(Exception):
                    self._notifier.on_event(ev)
        return ev

    def save(self) -> None:
        self.record.state = self.sm.state
        self.store.save(self.record)

    def transition(self, target: State, reason: str = "") -> None:
        previous = self.sm.transition(target)
        self.record.state = target
        self.emit("state_changed", {"from": previous.value, "to": target.value, "reason": reason})
        self.save()
        self._seal(f"{previous.value} -> {target.value}" + (f": {reason}" if reason else ""))

    def _seal(self, reason: str) -> None:
        with self._emit_lock:
            try:
                self.log.seal(self.repo, reason)
            except (GitsupError, RefConflict) as exc:
                # Sealing is retried at the next transition; the WAL keeps every event.
                self.log.append("protocol_noise", {"error": f"seal failed: {exc}"})

    # --- signals ------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGUSR1:
            self.inbox.put(ResumeAuto())
            return
        reason = stop_reason(self.layout.task_dir(self.task), signum)
        self._abort_reason = self._abort_reason or reason
        self._abort.set()
        self.inbox.put(StopRequest(reason))

    @contextlib.contextmanager
    def _signals(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {
            s: signal.signal(s, self._on_signal)
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
        }
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def request_stop(self, reason: str) -> None:
        self._abort_reason = self._abort_reason or reason
        self._abort.set()
        self.inbox.put(StopRequest(reason))

    def _stop_if_requested(self) -> bool:
        """A stop asked for while the loop was busy (checks, review, decider, start-up)
        takes effect now. Returns True when the task stopped."""
        if not self._abort.is_set():
            return False
        if not self.sm.terminal:
            self._stop(self._stop_reason or self._abort_reason or "stop requested")
        return True

    # --- the run ------------------------------------------------------------------

    def run(self) -> TaskRecord:
        with self._signals():
            try:
                self._run()
            except BaseException as exc:
                if not self.sm.terminal:
                    self.record.reasons.append(f"internal error: {type(exc).__name__}: {exc}")
                    self._finish_failed_internal()
                raise
        return self.record

    def adopt(self, previous: Mapping[str, Any]) -> TaskRecord:
        """Re-adopt a persistent worker that survived its supervisor, then supervise on."""
        with self._signals():
            try:
                self.decider = self._make_decider()
                self.record.supervisor = supervisor_identity()
                try:
                    ident = self._adopt_worker()
                except WorkerError as exc:
                    # Refused (identity mismatch): nothing was taken over; the caller
                    # (recover_task) parks the task after proving the old worker gone.
                    self.record = self.store.load(self.task)
                    raise _AdoptRefused(str(exc)) from exc
                self.emit(
                    "recovered",
                    {
                        "previous": dict(previous),
                        "state": self.sm.state.value,
                        "action": "re-adopted",
                        **ident.as_dict(),
                    },
                )
                self.save()
                self._loop()
            except BaseException as exc:
                if not self.sm.terminal and not isinstance(exc, _AdoptRefused):
                    self.record.reasons.append(f"internal error: {type(exc).__name__}: {exc}")
                    self._finish_failed_internal()
                raise
        return self.record

    def _adopt_worker(self) -> WorkerIdentity:
        ctx = WorkerContext(
            task_id=self.task,
            worktree=self.worktree,
            task_dir=self.layout.task_dir(self.task),
            env=self._worker_env(),
            argv=tuple(self.spec.worker.argv),
            inbox=self.inbox,
            options={"spec": self.spec, "egress": self._regate(self._worker_env())},
        )
        worker = self.worker_factory(self.spec, ctx)
        ident = worker.adopt(self.record.worker or {})
        self.worker = worker
        self._worker_gone = False
        self._spawns = max(self._spawns, 1)
        self._last_progress = time.monotonic()
        self._turn_active = self.sm.state in (State.RUNNING, State.PAUSED)
        return ident

    def resume(self, *, park: bool, previous: Mapping[str, Any]) -> TaskRecord:
        """Continue (or park) a task whose supervisor died, after its old worker is
        provably gone. A new worker gets an explicit recovery turn; nothing is re-sent
        silently."""
        with self._signals():
            try:
                self._resume(park=park, previous=previous)
            except BaseException as exc:
                if not self.sm.terminal:
                    self.record.reasons.append(f"internal error: {type(exc).__name__}: {exc}")
                    self._finish_failed_internal()
                raise
        return self.record

    def _resume(self, *, park: bool, previous: Mapping[str, Any]) -> None:
        self.decider = self._make_decider()
        self.record.supervisor = supervisor_identity()
        state = self.sm.state
        self.emit(
            "recovered",
            {
                "previous": dict(previous),
                "state": state.value,
                "turns_before": self.record.turns,
                "action": "park"
                if park
                else ("verify" if state == State.VERIFYING else "new worker turn"),
            },
        )
        self.record.reasons.append(f"recovered after the supervisor died in state {state.value}")
        self.save()
        self._worker_gone = True
        if park or not os.path.isdir(self.worktree):
            reason = "recovered: parked on request" if park else "recovered: worktree is missing"
            self.record.reasons.append(reason)
            self._finish(State.BLOCKED if state != State.STARTING else State.FAILED)
            return
        if state == State.VERIFYING:
            self._verify_and_conclude()
            if not self.sm.terminal:
                self._loop()
            return
        self._spawns = max(self._spawns, 1)
        self._resume_prompt = (
            self.spec.prompt()
            + "\n\nNote from the supervisor: an earlier worker on this task was interrupted "
            "(its supervisor stopped). Its work is in this worktree: look at `git status` and "
            "`git log` first, keep what is right, then finish the task and commit locally."
        )
        if state == State.STARTING:
            self._spawns = 0
        if state == State.WAITING or state == State.PAUSED:
            self.transition(State.RUNNING, "recovery: new worker")
        if not self._spawn():
            return
        if self.sm.state == State.STARTING:
            self.transition(State.RUNNING, "worker started")
        self._loop()

    def _run(self) -> None:
        self.decider = self._make_decider()
        self.record.supervisor = supervisor_identity()
        self.transition(State.STARTING, "spawning worker")
        if not self._spawn():
            return
        self.transition(State.RUNNING, "worker started")
        self._loop()

    def _make_decider(self) -> RulesDecider:
        """The spec's decider, contained like everything the task runs (sandbox, network)."""
        return make_decider(
            self.spec,
            cwd=str(self.worktree),
            env=self._worker_env(),
            network=self._agent_network("decider"),
            wrap=self._wrapper(None, None, read_only=True),
            wrap_for=lambda ns: self._wrapper(None, ns, read_only=True),
            abort=self._abort,
        )

    def _worker_env(self) -> dict[str, str]:
        from gitsup.proc import child_env

        env = child_env(
            {
                "GITSUP_TASK": self.task,
                "GITSUP_WORKTREE": str(self.worktree),
                "GITSUP_BASELINE": self.record.baseline,
            },
            drop=("CLAUDECODE",),
        )
        env.update(self.spec.worker.env)
        from gitsup.workers.claude import model_call_env

        for k, v in model_call_env(self.spec.budget).items():
            env.setdefault(k, v)
        plan = self._sandbox_plan(env)
        return dict(plan.env) if plan is not None else env

    def _sandbox_plan(self, env: Mapping[str, str] | None = None) -> Plan | None:
        """The task's sandbox (gitsup/sandbox.py), built once; None when it cannot be built
        (the reason is a preflight failure)."""
        if self._sandbox is not None or self._sandbox_error is not None:
            return self._sandbox
        if env is None:
            self._worker_env()
            return self._sandbox
        from gitsup.sandbox import build_plan, load_rules, resolve_mode

        try:
            mode = resolve_mode(self.spec.sandbox.mode, self.repo.config_get("sup.sandbox"))
            env = dict(env)
            for var, key in (("NAME", "user.name"), ("EMAIL", "user.email")):
                value = self.repo.config_get(key)
                if value and f"GIT_AUTHOR_{var}" not in env:
                    env.setdefault(f"GIT_AUTHOR_{var}", value)
                    env.setdefault(f"GIT_COMMITTER_{var}", value)
            self._sandbox = build_plan(
                mode=mode,
                rules=load_rules(self.repo.main_workdir),
                worktree=self.worktree,
                common_dir=self.layout.common_dir,
                task_dir=self.layout.task_dir(self.task),
                branch=self.record.branch,
                env=env,
                programs=self._programs(env),
                keep_env=self.spec.worker.env.keys(),
                claude=self.spec.worker.kind not in ("process", "codex")
                or "claude" in (self.spec.review.kind, self.spec.decider.kind),
            )
        except (GitsupError, OSError) as exc:
            self._sandbox_error = exc.message if isinstance(exc, GitsupError) else str(exc)
            return None
        self.sandbox_enforced = self._sandbox.enforced
        self.record.sandbox = self._sandbox.report()
        return self._sandbox

    def _programs(self, env: Mapping[str, str]) -> list[list[str]]:
        """Every argv this task runs, so that the sandbox lets them be read and executed."""
        spec = self.spec
        out = [list(spec.worker.argv), *(list(c.argv) for c in spec.checks)]
        out += [list(spec.review.argv), list(spec.decider.argv)]
        if "claude" in (spec.review.kind, spec.decider.kind) or spec.worker.kind != "process":
            from gitsup.workers.claude import find_claude

            argv = list(spec.worker.argv) if spec.worker.kind != "process" else []
            with contextlib.suppress(WorkerError):
                out.append(find_claude(argv, env))
            with contextlib.suppress(WorkerError):
                out.append(find_claude([], env))
        if "codex" in (spec.worker.kind, spec.review.kind):
            from gitsup.workers.codex import find_codex

            argv = list(spec.worker.argv) if spec.worker.kind == "codex" else []
            with contextlib.suppress(WorkerError):
                out.append(find_codex(argv, env))
        return out

    def _wrapper(
        self, cg: Cgroup | None, netns: str | None, *, read_only: bool = False
    ) -> Callable[[list[str]], list[str]] | None:
        """The bootstrap prefix for one process of this task (None: run it as is). Fails
        closed: nothing runs when the sandbox could not be built or is required but missing
        (a path that skips the spawn preflight, such as verifying after a recovery)."""
        from gitsup.sandbox import required_problems

        plan = self._sandbox_plan()
        if plan is not None and cg is None and netns is None and not plan.active:
            return None

        def wrap(argv: list[str]) -> list[str]:
            if plan is None:
                raise GitsupError(f"sandbox: {self._sandbox_error}")
            problems = required_problems(plan)
            if problems:
                raise GitsupError("; ".join(problems))
            sandbox = plan.argv(read_only=read_only, files=argv)
            return bootstrap_argv(argv, cgroup=cg, netns=netns, sandbox=sandbox)

        return wrap

    def _preflight(self) -> list[str]:
        """Everything that must hold before anything runs. Returns the failures."""
        problems: list[str] = []
        for d in (self.layout.task_dir(self.task), self.layout.leases):
            if not os.access(d, os.W_OK):
                problems.append(f"state directory {d} is not writable")
        current = self.repo.ref_target(task_refs(self.task)["baseline"])
        if current != self.record.baseline:
            problems.append("baseline ref changed between validation and spawn")
        head = self.repo.branch_target(self.record.branch)
        if head != self.record.baseline and self.record.turns == 0:
            problems.append(f"{self.record.branch} moved between validation and spawn")
        try:
            self._cg_base = resolve_mode(self.spec.isolation.cgroup)
        except GitsupError as exc:
            problems.append(exc.message)
        plan = self._sandbox_plan()
        if plan is None:
            problems.append(f"sandbox: {self._sandbox_error}")
        else:
            from gitsup.sandbox import required_problems

            problems += required_problems(plan)
        exe = self._worker_executable()
        if exe is not None:
            problems += executable_problems(exe)
        return problems

    def _worker_executable(self) -> str | None:
        argv = list(self.spec.worker.argv)
        if self.spec.worker.kind == "claude":
            from gitsup.workers.claude import find_claude

            try:
                return find_claude(argv, self._worker_env())[0]
            except WorkerError:
                return None  # reported by the adapter at start, with its own message
        if self.spec.worker.kind == "codex":
            from gitsup.workers.codex import find_codex

            try:
                return find_codex(argv, self._worker_env())[0]
            except WorkerError:
                return None
        if not argv:
            return None
        first = argv[0]
        if os.sep in first:
            return first if os.path.isabs(first) else str(self.worktree / first)
        return shutil.which(first, path=self._worker_env().get("PATH")) or first

    def _spawn(self) -> bool:
        problems = self._preflight()
        if problems:
            self.record.reasons += [f"preflight: {p}" for p in problems]
            self._finish(State.FAILED)
            return False
        self._spawns += 1
        cg = None
        if self._cg_base is not None:
            try:
                cg = create_cgroup(f"{self.task}-w{self._spawns}", self._cg_base)
            except (GitsupError, OSError) as exc:
                if self.spec.isolation.cgroup == "required":
                    self.record.reasons.append(f"preflight: cannot create the worker cgroup: {exc}")
                    self._finish(State.FAILED)
                    return False
        self._cgroup = cg
        env = self._worker_env()
        try:
            if self.spec.worker.kind == "tmux" and self.spec.isolation.network == "auto":
                # The TUI outlives its supervisor; the gate (a thread of it) does not, and a
                # model request cut mid-flight ends the TUI's turn. Gated only when asked.
                why = (
                    'auto: a tmux worker outlives its supervisor\'s gate; network = "none" gates it'
                )
                net = Net(None, {}, None, {"mode": "host", "reason": why})
            else:
                net = self._network_for(
                    "worker",
                    self._exit_stack,
                    env,
                    agent=self.spec.worker.kind != "process",
                    model_kind=self.spec.worker.kind,
                )
        except GitsupError as exc:
            self.record.reasons.append(f"preflight: {exc.message}")
            self._finish(State.FAILED)
            return False
        self._network = net.describe
        netns = net.netns
        ctx = WorkerContext(
            task_id=self.task,
            worktree=self.worktree,
            task_dir=self.layout.task_dir(self.task),
            env={**env, **net.env},
            argv=tuple(self.spec.worker.argv),
            inbox=self.inbox,
            options={
                "spec": self.spec,
                "wrap": self._wrapper(cg, netns),
                "egress": net.gate,
                "abort": self._abort,
            },
        )
        # Crash window marker: a record with spawn_pending and no worker identity means
        # "a worker may have been spawned"; recover/doctor look for it in the cgroup.
        self.record.spawn_pending = True
        self.record.worker = {
            "pid": None,
            "cgroup": str(cg.path) if cg else None,
            "cgroup_inode": cg.inode if cg else None,
        }
        self.save()
        fault("before_spawn")
        try:
            self.worker = self.worker_factory(self.spec, ctx)
            ident = self.worker.start(
                self.spec.prompt() if self._spawns == 1 else self._resume_prompt
            )
        except (WorkerError, GitsupError) as exc:
            msg = exc.message if isinstance(exc, GitsupError) else str(exc)
            self.record.spawn_pending = False
            if self._abort.is_set():
                self._stop_if_requested()
                return False
            self.record.reasons.append(f"worker could not start: {msg}")
            self._cleanup_cgroup()
            self._finish(State.FAILED)
            return False
        fault("after_spawn")
        if netns is not None:  # a re-adopting supervisor serves the same namespace again
            ident = WorkerIdentity(
                ident.pid,
                ident.start_time,
                ident.pgid,
                ident.cgroup,
                ident.cgroup_inode,
                {
                    **ident.extra,
                    "netns": netns,
                    "egress_proxy_port": getattr(net.gate, "proxy_port", None),
                },
            )
        if cg is not None:
            ident = WorkerIdentity(
                ident.pid, ident.start_time, ident.pgid, str(cg.path), cg.inode, ident.extra
            )
        self._record_worker(ident)
        self._turn_active = True
        self._last_progress = time.monotonic()
        return not self._stop_if_requested()

    def _cleanup_cgroup(self) -> None:
        cg = self._cgroup
        if cg is None:
            # A worker that was only detached (a re-adopted tmux session) keeps running.
            detached = bool(getattr(self.worker, "detached", False))
            if self._spawns and not self._swept and not detached:
                self._swept = True
                swept = sweep_marked(self.task)
                self.emit(
                    "worker_stopped",
                    {
                        "containment": "process group + descendant sweep",
                        "guarantee": "weaker: a descendant that left the process group and "
                        "cleared GITSUP_TASK from its environment can escape",
                        "swept": swept,
                    },
                )
            return
        empty = cg.kill(timeout=self.spec.worker.stop_grace + 5)
        removed = cg.remove() if empty else False
        self._swept = True  # the cgroup, proven empty, is the stronger guarantee
        self.emit(
            "worker_stopped", {"cgroup": str(cg.path), "verified_empty": empty, "removed": removed}
        )
        if not empty:
            self.record.reasons.append(f"cgroup {cg.path} could not be emptied")
            self._left_cgroups.append(f"cgroup {cg.path} still has processes")
        self._cgroup = None

    def _record_worker(self, ident: WorkerIdentity) -> None:
        """Persist the worker's identity (record and lease) before clearing spawn_pending,
        so every crash window leaves a recognizable trace."""
        self.record.worker = ident.as_dict()
        self.record.worker_kind = self.spec.worker.kind
        self.save()
        with contextlib.suppress(GitsupError, OSError):
            self.lease = LeaseStore(self.layout.leases).update_extra(
                self.lease, {"supervisor": self.record.supervisor, "worker": ident.as_dict()}
            )
        self.record.spawn_pending = False
        self.emit(
            "worker_started",
            {
                "kind": self.spec.worker.kind,
                "argv": list(self.spec.worker.argv),
                **ident.as_dict(),
                "network": self._network,
                "sandbox": self.record.sandbox,
            },
        )
        self.save()

    # --- timers -------------------------------------------------------------------

    def _deadline_at(self) -> float | None:
        """When the deadline falls (monotonic), or None: a deadline of 0 is off."""
        d = self.spec.budget.deadline
        return None if d <= 0 else self._started + d

    def _past_deadline(self) -> bool:
        dl = self._deadline_at()
        return "deadline_reached" in self._phases_done or (
            dl is not None and time.monotonic() >= dl
        )

    def _next_timer(self) -> tuple[float, str] | None:
        # A timer set to 0 is off (docs/spec.md): it never fires, least of all at once.
        now = time.monotonic()
        b = self.spec.budget
        cands: list[tuple[float, str]] = []
        dl = self._deadline_at()
        if dl is not None:
            if "deadline_approaching" not in self._phases_done and (
                0 < b.deadline_warning < b.deadline
            ):
                cands.append((dl - b.deadline_warning, "deadline_approaching"))
            if "deadline_reached" not in self._phases_done:
                cands.append((dl, "deadline_reached"))
            elif "watchdog_timeout" not in self._phases_done:
                cands.append((dl + b.closeout(), "deadline_closeout"))
        if self.sm.state == State.RUNNING and b.no_output_timeout > 0:
            cands.append((self._last_progress + b.no_output_timeout, "no_output"))
        if not cands:
            return None
        at, name = min(cands)
        return max(0.0, at - now), name

    def _on_timer(self, name: str) -> None:
        b = self.spec.budget
        if name == "deadline_approaching":
            self._phases_done.add(name)
            left = max(0.0, (self._deadline_at() or 0.0) - time.monotonic())
            self.emit("deadline_approaching", {"seconds_left": round(left, 1)})
            if (
                self.worker is not None
                and self.worker.capabilities.repairable
                and not self._turn_active
            ):
                self._send(
                    f"{int(left)} seconds are left before the deadline. Integrate what you have and "
                    "commit it locally now.",
                    key="deadline_approaching",
                )
        elif name == "deadline_reached":
            self._phases_done.add(name)
            grace = b.closeout()
            busy = self._turn_active
            self.emit("deadline_reached", {"closeout_grace": grace, "busy": busy})
            if busy and grace <= 0:
                self._watchdog("deadline")
            elif not busy:
                # Idle at the deadline: its result is verified and reviewed like any
                # other (no repair round follows), not parked regardless.
                self._phases_done.add("watchdog_timeout")
                self._stop_worker("deadline reached; the worker was idle")
                self._verify_and_conclude()
        elif name == "deadline_closeout":
            self._watchdog("deadline")
        elif name == "no_output":
            self._watchdog("no_output")

    def _watchdog(self, kind: str) -> None:
        self._phases_done.add("watchdog_timeout")
        limit = (
            self.spec.budget.no_output_timeout if kind == "no_output" else self.spec.budget.deadline
        )
        self.emit("watchdog_timeout", {"kind": kind, "limit": limit})
        reason = (
            f"no output for {limit:g}s"
            if kind == "no_output"
            else f"deadline of {limit:g}s reached"
        )
        self.record.reasons.append(f"watchdog: {reason}")
        self._stop_worker(f"watchdog: {reason}")
        self._verify_and_conclude(park_reason=f"watchdog: {reason}")

    # --- main loop ----------------------------------------------------------------

    def _loop(self) -> None:
        while not self.sm.terminal:
            nxt = self._next_timer()
            try:
                item = self.inbox.get(timeout=None if nxt is None else max(nxt[0], 0.0))
            except queue.Empty:
                if nxt is not None:
                    self._on_timer(nxt[1])
                continue
            self._dispatch(item)

    def _dispatch(self, item: object) -> None:
        if isinstance(item, StopRequest):
            self._stop(item.reason)
        elif isinstance(item, WorkerOutput):
            self._last_progress = time.monotonic()
            self.emit(  # redacted by the adapter where it read the output
                "worker_output",
                Redacted({"stream": item.stream, "text": item.text, **dict(item.data)}),
            )
        elif isinstance(item, PermissionRequest):
            self._on_permission(item)
        elif isinstance(item, PermissionCancelled):
            self._pending.pop(item.request_id, None)
            self.emit("permission_decided", {"request_id": item.request_id, "cancelled": True})
        elif isinstance(item, TurnCompleted):
            self._on_turn_completed(item)
        elif isinstance(item, ProtocolNoise):
            self.emit("protocol_noise", {"line": item.line[:2000], "error": item.error})
        elif isinstance(item, WorkerExited):
            self._on_worker_exit(item)
        elif isinstance(item, HumanInput):
            self._on_human_input(item)
        elif isinstance(item, ResumeAuto):
            self._on_resume_auto()
        elif isinstance(item, WorkerNote):
            self.emit(item.type, dict(item.data))

    # --- human takeover (tmux) ---------------------------------------------------------

    def _on_human_input(self, item: HumanInput) -> None:
        self._last_progress = time.monotonic()
        self._turn_active = True
        self.emit("human_input", {"text": item.text})
        if self.sm.state in (State.RUNNING, State.WAITING):
            if self.sm.state == State.WAITING:
                self.transition(State.RUNNING, "a person typed into the worker")
            self.emit("human_takeover", {"resume_with": f"git sup resume-auto {self.task}"})
            self.transition(State.PAUSED, "human takeover: automatic turns pause")

    def _on_resume_auto(self) -> None:
        if self.sm.state != State.PAUSED:
            self.emit("resume_auto", {"ignored": True, "state": self.sm.state.value})
            return
        self.emit("resume_auto", {"turn_active": self._turn_active})
        self.transition(State.RUNNING, "automatic turns resume")
        self._last_progress = time.monotonic()
        if not self._turn_active:
            self._on_turn_completed(
                TurnCompleted(
                    subtype="resumed", result="resumed after a human takeover", num_turns=0
                )
            )

    # --- permissions --------------------------------------------------------------

    def _policy_obj(self) -> Any:
        if self._policy is None:
            from gitsup.policy import Policy

            self._policy = Policy.load(
                self.repo.main_workdir, extra_protected=self.repo.config_get_all("sup.protected")
            )
        return self._policy

    def _policy_sandboxed(self) -> bool:
        """POLICY.md section 4a applies only when the kernel contains the worker: the sandbox
        is enforced and its network is a namespace (loopback, or gated to the model API)."""
        return self.sandbox_enforced and self._network.get("mode") in ("gated", "loopback")

    def _on_permission(self, req: PermissionRequest) -> None:
        from gitsup.policy import decide_tool, unattended_denial

        self._pending[req.request_id] = req
        decision = decide_tool(
            req.tool_name,
            req.tool_input,
            worktree=str(self.worktree),
            policy=self._policy_obj(),
            git_common_dir=str(self.repo.common_dir),
            sandboxed=self._policy_sandboxed(),
        )
        park: str | None = None
        if decision.verdict == "allow":
            answer = PermissionAnswer(True, updated_input=req.tool_input)
        elif decision.verdict == "deny":
            answer = PermissionAnswer(False, unattended_denial(decision))
        else:
            is_question = req.tool_name == "AskUserQuestion"
            self.emit("permission_pending", {"request_id": req.request_id, "tool": req.tool_name})
            text = self._with_retries(
                "question" if is_question else "ask",
                (lambda: self.decider.answer_question(req.tool_input))
                if is_question
                else (lambda: self.decider.answer_ask(unattended_denial(decision))),
            )
            if text is None:
                park = "decider failed to answer a permission request"
                text = (
                    RulesDecider().answer_question(req.tool_input)
                    if is_question
                    else unattended_denial(decision)
                )
            answer = PermissionAnswer(False, text)
        if self._pending.pop(req.request_id, None) is None:
            return  # cancelled meanwhile
        stalled: str | None = None
        if self.worker is not None:
            try:
                self.worker.answer(req.request_id, answer)
            except WorkerInputStalled as exc:
                stalled = str(exc)
            except (WorkerError, OSError):
                pass
        self.emit(
            "permission_decided",
            {
                "request_id": req.request_id,
                "tool": req.tool_name,
                "input": _summarize_input(req.tool_input),
                **decision.as_dict(),
                "answer": "allow" if answer.allow else "deny",
                "message": answer.message,
            },
        )
        if stalled is not None:
            park = self._input_stalled(stalled)
        if park is not None:
            if park not in self.record.reasons:
                self.record.reasons.append(park)
            self._stop_worker(park)
            self._verify_and_conclude(park_reason=park)

    def _input_stalled(self, why: str) -> str:
        self.emit("worker_input_stalled", {"reason": why})
        reason = f"worker input stalled: {why}"
        if reason not in self.record.reasons:
            self.record.reasons.append(reason)
        return reason

    # --- turns --------------------------------------------------------------------

    def _on_turn_completed(self, tc: TurnCompleted) -> None:
        self._turn_active = False
        if self.sm.state == State.PAUSED:
            # A person drives the worker: record the turn, decide nothing.
            self.record.turns += int(tc.num_turns or 0)
            self.emit(
                "turn_completed",
                {"subtype": tc.subtype, "result": (tc.result or "")[:4000], "paused": True},
            )
            return
        self._last_progress = time.monotonic()
        self.record.turns += int(tc.num_turns or 1)
        if tc.cost_usd:
            self.record.cost_usd = round(self.record.cost_usd + float(tc.cost_usd), 6)
        self.emit(
            "turn_completed",
            {
                "subtype": tc.subtype,
                "is_error": tc.is_error,
                "result": (tc.result or "")[:4000],
                "cost_usd": tc.cost_usd,
                "num_turns": tc.num_turns,
                "session_id": tc.session_id,
                "usage": dict(tc.usage),
                "round": self.record.repair_rounds,
            },
        )
        if self.sm.state == State.RUNNING:
            self.transition(
                State.WAITING, "turn ended with an error" if tc.is_error else "turn completed"
            )
        elif self.sm.state != State.WAITING:
            return
        failure = model_failure(tc)
        if failure is not None:
            self._on_model_failure(failure)
            return
        if self._import_work() is not None:
            self._finish(State.BLOCKED)
            return
        over = self._budget_exceeded()
        if over:
            self.record.reasons.append(over)
            self.emit("budget_exceeded", {"reason": over})
            self._stop_worker(over)
            self._verify_and_conclude(park_reason=over)
            return
        decision = self._with_retries("turn_completed", lambda: self._decide_turn(tc))
        if self._stop_if_requested():
            return
        if decision is None:
            decision = TurnDecision(
                "park", reason="decider failed; parking", source=self.decider.kind
            )
        elif (
            decision.noop
            and tc.subtype == "exit"
            and not tc.is_error
            and not (self.worker and self.worker.alive)
        ):
            decision = TurnDecision(
                "verify", reason="noop decision after a clean worker exit", source=decision.source
            )
        self.record.decisions.append({"on": "turn_completed", **decision.as_dict()})
        self.emit("decision", decision.as_dict())
        if decision.action == "verify":
            self._verify_and_conclude()
        elif decision.action == "continue" and decision.message and self._past_deadline():
            self._verify_and_conclude()  # no new turn after the deadline
        elif decision.action == "continue" and decision.message:
            if not self._send(decision.message, key=f"continue-{self.record.turns}"):
                self._verify_and_conclude(park_reason="worker cannot take another turn")
        else:
            self._verify_and_conclude(park_reason=decision.reason or "decider parked the task")

    def _on_model_failure(self, f: ModelFailure) -> None:
        """The model API failed the turn: never a completion, never a repair round.
        Credentials/configuration: failed at once. Unreachable/overloaded (after the
        CLI's own bounded retries) or another API error: parked."""
        self.emit("model_error", f.as_dict())
        if f.kind == "auth":
            reason = f"model API authentication failed: {f.message}"
        elif f.kind == "unreachable":
            reason = f"model API unreachable: {f.message}"
        else:
            reason = f"model API error: {f.message}"
        self.record.reasons += [reason, f"what to do: {f.hint}"]
        self._stop_worker(reason)
        self._finish(State.FAILED if f.kind == "auth" else State.BLOCKED)

    def _with_retries(self, what: str, fn: Callable[[], T]) -> T | None:
        tries = 1 + self.spec.autonomy.max_decision_retries
        for n in range(1, tries + 1):
            if self._abort.is_set():
                return None
            try:
                return fn()
            except DeciderError as exc:
                self.emit("decision", {"on": what, "attempt": n, "error": str(exc)[:500]})
        return None

    def _decide_turn(self, tc: TurnCompleted) -> TurnDecision:
        ctx = TurnContext(
            task=self.task,
            goal=self.spec.goal,
            turns=self.record.turns,
            last_result=tc.result,
            is_error=tc.is_error,
            subtype=tc.subtype,
            worker_alive=self.worker is not None and self.worker.alive,
        )
        return self.decider.on_turn_completed(ctx)

    def _budget_exceeded(self) -> str | None:
        b = self.spec.budget
        if self.record.turns > b.max_turns:
            return f"budget: {self.record.turns} turns exceed max_turns {b.max_turns}"
        if b.max_cost_usd is not None and self.record.cost_usd > b.max_cost_usd:
            return (
                f"budget: cost ${self.record.cost_usd:.4f} exceeds max_cost_usd ${b.max_cost_usd:g}"
            )
        return None

    def _send(self, message: str, *, key: str) -> bool:
        w = self.worker
        if w is None or not w.capabilities.repairable or not w.alive:
            return False
        try:
            sent = w.send_turn(message, key=key)
        except WorkerInputStalled as exc:
            self._input_stalled(str(exc))
            return False
        except WorkerError as exc:
            self.emit("protocol_noise", {"error": f"send failed: {exc}"})
            return False
        if sent:
            self._turn_active = True
            self._last_progress = time.monotonic()
        return True

    def _on_worker_exit(self, ex: WorkerExited) -> None:
        self._worker_gone = True
        self.emit(
            "worker_stopped",
            {"returncode": ex.returncode, "signal": ex.signal, "classification": ex.classification},
        )
        if self.sm.state == State.RUNNING:
            # Gone without ending its turn: classified, never taken as completion.
            reason = f"worker exited without completing its turn ({ex.classification}, rc={ex.returncode})"
            self.record.reasons.append(reason)
            self.transition(State.WAITING, reason)
            self._verify_and_conclude(park_reason=reason)

    # --- verification -------------------------------------------------------------

    def _verify_and_conclude(self, *, park_reason: str | None = None) -> None:
        """Checks, then review, then a repair round or a conclusion (ready / parked)."""
        if self.sm.terminal:
            return
        if self.sm.state == State.PAUSED:
            self.transition(State.RUNNING, "resuming to verify")
        if self.sm.state == State.RUNNING:
            self.transition(State.WAITING, park_reason or "verifying")
        if self.sm.state != State.VERIFYING:
            self.transition(State.VERIFYING, park_reason or "turn completed")
        if self._import_work() is not None:
            self._finish(State.BLOCKED)
            return
        results = self._run_checks()
        fault("after_checks")
        if self._stop_reason is not None:
            self._stop(self._stop_reason)
            return
        fixable = self._candidate_problems(results)
        hard: list[str] = [park_reason] if park_reason else []
        findings: list[Finding] = []
        if not fixable and not hard:
            verdict_problems, hard_review, findings = self._review(results)
            fixable += verdict_problems
            hard += hard_review
        # A stop asked for during checks or review ends the task stopped, never completed.
        if self._stop_if_requested():
            return
        if not fixable and not hard:
            self._finish(State.COMPLETED)
            return
        if not hard:
            why_not = self._repair(results, fixable, findings)
            if why_not is None:
                return
            hard.append(why_not)
        for p in [*hard, *fixable]:
            if p not in self.record.reasons:
                self.record.reasons.append(p)
        self._finish(State.BLOCKED)

    def _review(self, results: list[CheckResult]) -> tuple[list[str], list[str], list[Finding]]:
        """Returns (fixable problems, park reasons, findings)."""
        kind = self.spec.review.kind
        if kind == "none":
            self.record.review = ReviewResult(kind="none", verdict=None)
            return [], [], []
        wt = self._worktree_repo()
        if wt is None:
            return [], ["worktree is gone; nothing to review"], []
        evidence = wt.evidence(Oid(self.record.baseline))
        bundle = evidence_bundle(self.task, self.spec, results, evidence)
        self.emit(
            "review_started",
            {
                "kind": kind,
                "round": self.record.repair_rounds,
                "complete": evidence.complete,
                "head": evidence.head,
            },
        )
        ctx = ReviewContext(
            self.task,
            self.worktree,
            self._worker_env(),
            self.spec,
            bundle,
            network=self._agent_network("reviewer", self.spec.review.kind),
            wrap=self._wrapper(None, None, read_only=True),
            wrap_for=lambda ns: self._wrapper(None, ns, read_only=True),
            abort=self._abort,
        )

        def on_attempt(n: int, err: str | None) -> None:
            if err:
                self.emit("review_result", {"attempt": n, "error": err})

        result, verdict = run_review(ctx, on_attempt=on_attempt, attempt_fn=self.review_attempt)
        self.record.review = result
        self.emit("review_result", result.model_dump(mode="json"))
        self.save()
        if verdict is None:
            return [], [f"review failed after {result.attempts} attempt(s): {result.error}"], []
        serious = [f for f in verdict.findings if f.severity in ("P0", "P1")]
        if serious:
            return (
                [],
                [f"review: {f.severity} finding: {f.title}" for f in serious],
                verdict.findings,
            )
        if verdict.verdict == "human":
            return [], ["review: a person must decide (verdict human)"], verdict.findings
        if verdict.verdict == "pass":
            return [], [], verdict.findings
        repeated = [f for f in verdict.findings if f.key() in self._seen_findings]
        if repeated:
            return (
                [],
                [f"review: finding repeated from an earlier round: {f.title}" for f in repeated],
                verdict.findings,
            )
        self._seen_findings.update(f.key() for f in verdict.findings)
        titles = "; ".join(f.title for f in verdict.findings) or "no findings given"
        return [f"review asked for revisions: {titles}"], [], verdict.findings

    def _repair(
        self, results: list[CheckResult], problems: list[str], findings: list[Finding]
    ) -> str | None:
        """Send one corrective turn to the same worker. Returns why not, or None if sent."""
        w = self.worker
        rounds = self.spec.autonomy.max_repair_rounds
        if self._past_deadline():
            return "deadline reached; no repair round starts after it"
        if self.record.repair_rounds >= rounds:
            return f"repair rounds exhausted ({rounds})"
        if w is None or not w.capabilities.repairable:
            return f"worker ({self.spec.worker.kind}) cannot take a repair turn"
        if self._worker_gone or not w.alive:
            return "worker is gone; a non-persistent worker is never restarted silently"
        message = repair_message(problems, results, findings)
        self.record.repair_rounds += 1
        self.emit(
            "repair_requested",
            {"round": self.record.repair_rounds, "problems": problems, "message": message},
        )
        self.transition(State.RUNNING, f"repair round {self.record.repair_rounds}")
        if not self._send(message, key=f"repair-{self.record.repair_rounds}"):
            self.transition(State.WAITING, "repair turn could not be sent")
            self.transition(State.VERIFYING, "concluding")
            return "repair turn could not be sent to the worker"
        return None

    def _run_checks(self) -> list[CheckResult]:
        results: list[CheckResult] = []
        env = self._worker_env()
        # The worker's result is judged as it was before the checks ran: what the checks
        # write themselves (__pycache__, .pytest_cache, build output) is not its change.
        wt = self._worktree_repo()
        self._clean_before_checks = wt is None or wt.is_clean()
        for check in self.spec.effective_checks(self.record.baseline):
            if self._abort.is_set():
                self._stop_reason = self._stop_reason or self._abort_reason or "stop requested"
                break
            self.emit("acceptance_started", {"name": check.name, "argv": check.argv})
            r = self._run_one_check(check, env)
            results.append(r)
            self.emit("acceptance_result", r.model_dump(mode="json"))
        self.record.checks = results
        self.save()
        if self._abort.is_set() and self._stop_reason is None:
            self._stop_reason = self._abort_reason or "stop requested"
        return results

    def _run_one_check(self, check: Check, env: dict[str, str]) -> CheckResult:
        """One check, in its own cgroup (when available) and network namespace (if asked)."""
        with contextlib.ExitStack() as stack:
            cg = None
            if self._cg_base is not None:
                with contextlib.suppress(GitsupError, OSError):
                    cg = create_cgroup(f"{self.task}-c{os.urandom(3).hex()}", self._cg_base)
            net = self._network_for("check", stack, env, agent=False)
            netns = net.netns
            if net.env:
                env = {**env, **net.env}

            try:
                return run_check(
                    check,
                    cwd=self.worktree,
                    env=env,
                    round=self.record.repair_rounds,
                    abort=self._abort,
                    wrap=self._wrapper(cg, netns),
                )
            finally:
                if cg is not None:
                    cg.kill(timeout=5.0)
                    cg.remove()

    # --- network ----------------------------------------------------------------------

    def _network_for(
        self,
        who: str,
        stack: contextlib.ExitStack,
        env: Mapping[str, str],
        *,
        agent: bool,
        model_kind: str = "claude",
    ) -> Net:
        """The network a worker, reviewer, decider or check gets (see docs/containment.md):
        agents reach only their model API (and the allowed `egress` endpoints) through the
        gate; process workers and checks get loopback only (plus the `egress` endpoints)."""
        mode = self.spec.isolation.network
        if mode == "host":
            return Net(None, {}, None, {"mode": "host", "reason": 'network = "host"'})
        from gitsup.contain import isolated_netns
        from gitsup.egress import gated_namespace, model_endpoint, parse_endpoint

        extra = [*self.spec.isolation.egress, *self.repo.config_get_all("sup.egress")]
        # a configuration error fails the task; it never falls back to the host network
        for e in extra:
            parse_endpoint(e)
        if agent:
            model_endpoint(env, model_kind)

        def refused(host: str, port: int, reason: str) -> None:
            self.emit("egress_refused", {"who": who, "host": host, "port": port, "reason": reason})

        try:
            if agent or extra:
                an = stack.enter_context(
                    gated_namespace(
                        self.task, env, extra, refused, model=agent, model_kind=model_kind
                    )
                )
                gate = an.gate
                stack.callback(
                    lambda: self.emit(
                        "egress_summary",
                        {"who": who, "connections": gate.forwarded, "refused": gate.refused},
                    )
                )
                return Net(an.netns, an.env, an.gate, an.describe())
            ns = stack.enter_context(isolated_netns(self.task))
            return Net(ns, {}, None, {"mode": "loopback", "netns": ns})
        except GitsupError as exc:
            if mode == "none":
                raise
            return Net(None, {}, None, {"mode": "host", "reason": f"auto: {exc.message}"})

    def _regate(self, env: Mapping[str, str]) -> Any:
        """A re-adopted worker's namespace outlived its supervisor, the gate did not:
        serve the same namespace again (closed at the end; the namespace stays with the
        detached worker)."""
        extra = (self.record.worker or {}).get("extra") or {}
        ns = extra.get("netns") if isinstance(extra, dict) else None
        if not isinstance(ns, str) or not os.path.exists(ns):
            return None
        from gitsup.egress import EgressGate, make_plan, model_endpoint, parse_endpoint

        allowed = [*self.spec.isolation.egress, *self.repo.config_get_all("sup.egress")]
        try:
            plan = make_plan(
                [
                    model_endpoint(env, self.spec.worker.kind),
                    *(parse_endpoint(e) for e in allowed),
                ]
            )
        except GitsupError:
            return None

        def refused(host: str, port: int, reason: str) -> None:
            self.emit(
                "egress_refused", {"who": "worker", "host": host, "port": port, "reason": reason}
            )

        port = extra.get("egress_proxy_port")
        try:
            gate = EgressGate(ns, plan, refused, port if isinstance(port, int) else None).start()
        except GitsupError as exc:  # the worker keeps its namespace, without a way out
            self.emit("protocol_noise", {"error": f"egress gate not served again: {exc.message}"})
            return None
        self._exit_stack.callback(gate.close)
        self._network = {"mode": "gated", "netns": ns, **plan.as_dict()}
        return gate

    def _agent_network(
        self, who: str, model_kind: str = "claude"
    ) -> Callable[[Mapping[str, str]], Any]:
        """For the agent reviewer and decider: a fresh gated namespace per call."""

        @contextlib.contextmanager
        def factory(env: Mapping[str, str]) -> Any:
            with contextlib.ExitStack() as stack:
                yield self._network_for(who, stack, env, agent=True, model_kind=model_kind)

        return factory

    def _candidate_problems(self, results: list[CheckResult]) -> list[str]:
        problems = []
        failed = [r.name for r in results if r.required and not r.passed]
        if failed:
            problems.append("required checks failed: " + ", ".join(failed))
        head = self._branch_head()
        self.record.head = head
        if self.spec.autonomy.require_local_commit:
            if head is None or head == self.record.baseline:
                problems.append("no local commit after the baseline")
            elif not self.repo.is_ancestor(Oid(self.record.baseline), head):
                problems.append("branch head does not descend from the baseline")
        if not self._clean_before_checks:
            problems.append("worktree has uncommitted changes")
        self._verified_head = head
        return problems

    def _branch_head(self) -> Oid | None:
        return self.repo.branch_target(self.record.branch)

    def _worktree_repo(self) -> GitRepo | None:
        try:
            return open_worktree(self.layout, self.task, self.worktree)
        except GitsupError:
            return None

    def _import_work(self) -> str | None:
        """Import the worker's commits into the task branch (verified). Returns why the
        import was refused (also recorded as a reason), None when it went through."""
        try:
            res = import_work(
                self.repo, self.layout, self.task, Oid(self.record.baseline), self.record.branch
            )
        except (ImportRefused, GitsupError) as exc:
            reason = f"import refused: {exc.message}"
            if reason != self._import_refused:
                self._import_refused = reason
                self.emit("import_refused", {"reason": exc.message})
            if reason not in self.record.reasons:
                self.record.reasons.append(reason)
            return reason
        self._import_refused = None
        if res is None:
            return None
        if res.ref != self._worker_ref:
            self.emit(
                "worker_branch_changed",
                {"from": self._worker_ref, "to": res.ref, "tip": res.tip},
            )
            self._worker_ref = res.ref
        if res.moved:
            self.emit(
                "work_imported",
                {
                    "branch": self.record.branch,
                    "from": res.previous,
                    "to": res.tip,
                    "objects": res.objects,
                    "bytes": res.bytes,
                },
            )
        return None

    # --- stopping and finishing -----------------------------------------------------

    def _stop(self, reason: str) -> None:
        if self.sm.terminal:
            return
        self._stop_reason = reason
        self.emit("stop_requested", {"reason": reason})
        self.record.reasons.append(f"stopped: {reason}")
        self._finish(State.STOPPED)

    def _stop_worker(self, why: str) -> None:
        w = self.worker
        if w is None:
            return
        try:
            how = w.stop(grace=self.spec.worker.stop_grace)
        except (WorkerError, OSError) as exc:
            how = f"stop failed: {exc}"
        if not self._worker_gone:
            self.emit("worker_stopped", {"reason": why, "how": how})
        self._worker_gone = True
        self._cleanup_cgroup()
        self._exit_stack.close()

    def _finish_failed_internal(self) -> None:
        final = State.BLOCKED if self.sm.state == State.VERIFYING else State.FAILED
        with contextlib.suppress(BaseException):
            self._finish(final)

    def _finish(self, final: State) -> None:
        """The one idempotent finalizer."""
        if self.sm.terminal:
            return
        self._stop_worker(f"task {final.value}")
        left = self._left_behind()
        if left:
            # The lease is released only when cleanup proved the worker gone.
            self.record.left_behind = left
            self.record.reasons.append(
                "cleanup could not prove the worker gone: "
                + "; ".join(left)
                + "; the worktree lease stays held (see `git sup doctor`, "
                "`git sup doctor --fix`)"
            )
            self.emit("worker_left_behind", {"what": left, "lease": self.lease.path})
        if self._import_work() is not None and final == State.COMPLETED:
            final = State.BLOCKED
        status = STATUS_OF[final]
        head = self._branch_head()
        self.record.head = head
        if final == State.COMPLETED and head != self._verified_head:
            # The branch moved after verification: not what was verified.
            final, status = State.BLOCKED, Status.PARKED
            self.record.reasons.append("branch moved after verification")
        if status != Status.READY:
            self._save_wip(head)
        if (
            head is not None
            and head != self.record.baseline
            and self.repo.is_ancestor(Oid(self.record.baseline), head)
        ):
            self._write_candidate(head, status)
        self.record.status = status
        self.record.finished_at = time.time()
        self.record.exit_code = EXIT_OF[status]
        kind = {
            Status.READY: "candidate_ready",
            Status.PARKED: "candidate_parked",
            Status.STOPPED: "candidate_parked",
        }.get(status, "candidate_failed")
        self.emit(kind, {"candidate": self.record.candidate, "reasons": self.record.reasons})
        path = shortest_path(self.sm.state, final)
        for step in path[:-1]:
            self.transition(step, "on the way to " + final.value)
        self.transition(final, "; ".join(self.record.reasons[-3:]))
        self.emit(
            "task_finished",
            {"state": final.value, "status": status.value, "exit_code": self.record.exit_code},
        )
        self.save()
        self._seal(f"task finished: {status.value}")
        self.log.close()
        if not left:
            with contextlib.suppress(Exception):
                LeaseStore(self.layout.leases).release(self.lease)
        if self._notifier is not None:  # the task has ended: let bounded deliveries finish
            self._notifier.join(120.0)

    def _left_behind(self) -> list[str]:
        """What of the worker cleanup could not prove gone: its process (same pid and
        start time) after a bounded wait, a cgroup that could not be emptied."""
        left = list(self._left_cgroups)
        if getattr(self.worker, "detached", False):
            return left  # a re-adopted worker let go on purpose keeps running
        w = self.record.worker or {}
        ident = ProcessId.from_dict(w) if isinstance(w.get("pid"), int) else None
        if ident is not None:
            end = time.monotonic() + self.spec.worker.stop_grace
            while ident.alive() and time.monotonic() < end:
                time.sleep(0.05)
            if ident.alive():
                left.append(f"worker pid {ident.pid} is still running")
        return left

    def _save_wip(self, head: Oid | None) -> None:
        wt = self._worktree_repo()
        if wt is None:
            return
        omitted: list[dict[str, Any]] = []
        try:
            # The worker's state: its files, and its commits when they were not imported
            # (e.g. on a branch that does not descend from the baseline).
            tree = wt.snapshot_tree(
                include_untracked=True,
                max_file_bytes=WIP_MAX_FILE_BYTES,
                baseline=Oid(self.record.baseline),
                omitted=omitted,
            )
            parent = head or Oid(self.record.baseline)
            # What is not saved is said (event, record, `git sup show`), never dropped silently.
            omitted = bound_not_captured(omitted)
            self.record.not_captured = omitted
            if tree == self.repo.tree_of(parent):
                if omitted:
                    self.emit("wip_saved", {"ref": None, "commit": None, "not_captured": omitted})
                return
            import_tree(self.repo, self.layout, self.task, tree)
            commit = self.repo.commit_tree(
                tree,
                [parent],
                f"gitsup: work in progress of task {self.task}\n\n"
                "Uncommitted changes (tracked and untracked) saved when the task ended.\n",
            )
            ref = task_refs(self.task)["wip"]
            old = self.repo.ref_target(ref)
            self.repo.update_ref(ref, commit, old=old, message=f"gitsup: wip of {self.task}")
        except (GitsupError, OSError) as exc:
            self.emit("protocol_noise", {"error": f"wip snapshot failed: {exc}"})
            return
        self.record.wip = commit
        self.emit("wip_saved", {"ref": ref, "commit": commit, "not_captured": omitted})

    def _write_candidate(self, head: Oid, status: Status) -> None:
        ref = task_refs(self.task)["candidate"]
        old = self.repo.ref_target(ref)
        try:
            if old != head:
                self.repo.update_ref(
                    ref, head, old=old, message=f"gitsup: candidate {status.value}"
                )
        except RefConflict as exc:
            self.record.reasons.append(f"candidate ref not written: {exc}")
            return
        self.record.candidate = head
        note = CandidateNote(
            task=self.task,
            status=status,
            baseline=self.record.baseline,
            candidate=head,
            branch=self.record.branch,
            goal=self.spec.goal,
            checks=self.record.checks,
            review=self.record.review,
            turns=self.record.turns,
            cost_usd=self.record.cost_usd,
            repair_rounds=self.record.repair_rounds,
            reasons=self.record.reasons,
            decisions=self.record.decisions,
            created_at=self.record.created_at,
            finished_at=time.time(),
            cost=_cost_breakdown(self.task, self.log),
        )
        self.repo.write_note(head, note.to_text())


def _cost_breakdown(task: str, log: EventLog) -> dict[str, Any] | None:
    from gitsup.ledger import task_cost

    try:
        return task_cost(task, (e.as_dict() for e in log.read())).breakdown()
    except Exception:
        return None


NOT_CAPTURED_LIST_LIMIT = 200


def bound_not_captured(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most NOT_CAPTURED_LIST_LIMIT entries (those that block a discard first); the rest
    become one summary entry with their count and total size."""
    if len(items) <= NOT_CAPTURED_LIST_LIMIT:
        return items
    ordered = sorted(items, key=lambda i: not i.get("blocks_discard", True))
    keep, rest = ordered[: NOT_CAPTURED_LIST_LIMIT - 1], ordered[NOT_CAPTURED_LIST_LIMIT - 1 :]
    summary = {
        "path": f"({len(rest)} more paths)",
        "bytes": sum(int(i.get("bytes") or 0) for i in rest),
        "why": "; ".join(sorted({str(i.get("why")) for i in rest})),
        "blocks_discard": any(i.get("blocks_discard", True) for i in rest),
    }
    return [*keep, summary]


STOP_REQUEST_FILE = "stop-request"


def stop_reason(task_dir: Path, signum: int) -> str:
    """Who asked to stop: `git sup stop` leaves a note before it signals."""
    name = signal.Signals(signum).name
    try:
        who = (task_dir / STOP_REQUEST_FILE).read_text(encoding="utf-8").strip()[:200]
    except (OSError, UnicodeDecodeError):
        who = ""
    return f"requested by {who}" if who and signum == signal.SIGTERM else f"signal {name}"


def supervisor_identity() -> dict[str, Any]:
    from gitsup.contain import _own_cgroup_v2

    return {**ProcessId.current().as_dict(), "cgroup": _own_cgroup_v2()}


def repair_message(
    problems: list[str], results: list[CheckResult], findings: list[Finding], limit: int = 8000
) -> str:
    """One bounded corrective message: what failed, the failing output tails, the findings."""
    parts = ["The supervisor verified your work and it is not ready yet.", ""]
    parts += [f"- {p}" for p in problems]
    for r in results:
        if r.required and not r.passed:
            parts += [
                "",
                f"Check {r.name!r} ({' '.join(r.argv)}) failed with exit {r.exit_code}. Output tail:",
                r.output_tail[-1500:],
            ]
    if findings:
        parts += ["", "Reviewer findings:"]
        for f in findings:
            where = f" ({f.path}{':' + str(f.line) if f.line else ''})" if f.path else ""
            parts.append(f"- [{f.severity}] {f.title}{where}: {f.detail[:600]}")
    parts += ["", "Fix these, run the checks, and commit your work locally. Do not push."]
    text = "\n".join(parts)
    return text if len(text) <= limit else text[: limit - 20] + "\n[message cut]"


def shortest_path(start: State, goal: State) -> list[State]:
    """The legal states from `start` (exclusive) to `goal` (inclusive), fewest steps."""
    from collections import deque

    from gitsup.state import TRANSITIONS

    prev: dict[State, State] = {}
    todo = deque([start])
    while todo:
        cur = todo.popleft()
        if cur == goal:
            break
        for nxt in sorted(TRANSITIONS[cur]):
            if nxt not in prev and nxt != start:
                prev[nxt] = cur
                todo.append(nxt)
    if goal not in prev:
        from gitsup.state import InvalidTransition

        raise InvalidTransition(f"no path from {start} to {goal}")
    out = [goal]
    while out[-1] in prev and prev[out[-1]] != start:
        out.append(prev[out[-1]])
    return list(reversed(out))


def _summarize_input(tool_input: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tool_input.items():
        if isinstance(v, str) and len(v) > 2000:
            out[k] = v[:2000] + f"… [{len(v) - 2000} chars cut]"
        else:
            out[k] = v
    return out
