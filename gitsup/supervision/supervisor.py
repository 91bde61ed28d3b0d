"""The supervisor: one task's loop. Inputs (worker events, timers, stop and resume requests)
go to the task machine (gitsup/supervision/machine.py), which decides; the loop carries out the effects
it returns through small collaborators:

    journal    (gitsup/supervision/journal.py)    events, the record, sealing the log
    launcher   (gitsup/supervision/launcher.py)   preflight, sandbox, cgroup, network, spawn/adopt/stop
    gate       (gitsup/supervision/gate.py)       permission requests, the decider's turn verdicts
    verifier   (gitsup/supervision/verifier.py)   import, checks, review -> ready | repair | park
    finaliser  (gitsup/supervision/finaliser.py)  wip, candidate and note, `task_finished`, the lease

It runs in one thread. Workers report through the inbox (a SimpleQueue); timers are
computed, never polled: the loop blocks on the inbox until the next one is due.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

from gitsup.git import GitRepo
from gitsup.host.procid import ProcessId
from gitsup.ids import TaskId
from gitsup.layout import Layout
from gitsup.spec import TaskSpec
from gitsup.state import TERMINAL, State, Status
from gitsup.store import eventtypes as et
from gitsup.store.events import Event
from gitsup.store.eventtypes import ModelCall
from gitsup.store.lease import Lease
from gitsup.store.payload import UNSET, Payload
from gitsup.store.record import TaskRecord
from gitsup.supervision.context import TaskContext
from gitsup.supervision.finaliser import Finaliser
from gitsup.supervision.gate import Gate
from gitsup.supervision.journal import EventSink, Journal
from gitsup.supervision.launcher import Launcher, WorkerFactory
from gitsup.supervision.machine import TaskMachine
from gitsup.supervision.publisher import Publisher
from gitsup.supervision.taskio import (
    Abandon,
    AddReason,
    Adopted,
    AnswerPermission,
    Begin,
    Close,
    ContinueBudget,
    Decide,
    Effect,
    Emit,
    Finish,
    Finished,
    HoldByUser,
    HumanDecision,
    HumanMessage,
    ImportWork,
    RecordDecision,
    Recover,
    Reopen,
    ResolveAsk,
    ResumeAuto,
    SendTurn,
    Spawn,
    Spawned,
    StopRequest,
    StopWorker,
    TimerFired,
    Transition,
    TurnSent,
    UserPause,
    UserPaused,
    Verify,
    WorkImported,
)
from gitsup.supervision.verifier import Verifier
from gitsup.verification.decider import DECIDER_MEMORY, DecisionTime, make_decider
from gitsup.verification.review import Attempt
from gitsup.workers.base import (
    WorkerAdapter,
    WorkerError,
    WorkerExited,
    WorkerInputStalled,
    WorkerSetup,
)

__all__ = [
    "STOP_REQUEST_FILE",
    "Supervisor",
    "default_worker_factory",
    "stop_reason",
    "supervisor_identity",
]


_RETRIES = 3  # how often an effect that failed with an OSError is tried again
LIVENESS_POLL = 1.0  # seconds between checks of the worker's recorded identity
LIVENESS_GRACE = 10.0  # how long a gone worker's adapter has to report its exit first


class _ControlPoke:
    """SIGUSR2: control requests wait in the task's `control/` dir (gitsup/store/control.py)."""


class _AdoptRefused(WorkerError):
    """A persisted worker identity did not match: not re-adopted, nothing changed."""


def default_worker_factory(spec: TaskSpec, ctx: WorkerSetup) -> WorkerAdapter:
    """The adapter the kind registry names for the spec's `[worker] kind`."""
    from gitsup.workers.kinds import worker_kind

    return worker_kind(spec.worker.kind).adapter_class()(ctx)


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
        publish: bool | None = None,
    ) -> None:
        """`publish`: push the task to the review remote at every turn's end and at its end
        (gitsup/supervision/publisher.py); None: as `git config sup.cluster.publish` says."""
        self.repo = repo
        self.layout = layout
        self.spec = spec
        self.task = TaskId(record.id)
        self.worktree = Path(record.worktree)
        self.journal = Journal(repo, layout, record, spec, on_event=on_event)
        self.store = self.journal.store
        self.log = self.journal.log
        self.machine = TaskMachine(
            spec,
            self.task,
            state=State(record.state),
            turns=record.turns,
            cost_usd=record.cost_usd,
            repair_rounds=record.repair_rounds,
            now=time.monotonic(),
        )
        self.inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._abort = threading.Event()
        self._abort_reason: str | None = None
        self._abort_signal: str | None = None  # the signal name when a signal asked first
        self._gone_since: float | None = None  # when the worker's identity was first gone

        def emit(payload: Payload) -> Event | None:
            return self.emit(payload)  # late-bound: every event goes through Supervisor.emit

        def on_call(call: ModelCall) -> None:
            if not self.machine.terminal:  # a call that returns after the end is not logged
                self.emit(call)

        self.ctx = TaskContext(
            repo,
            layout,
            spec,
            self.journal,
            emit=emit,
            save=self.save,
            abort=self._abort,
            abort_reason=lambda: self._abort_reason or "stop requested",
            clock=self._decision_time,
            on_call=on_call,
        )
        self.launcher = Launcher(self.ctx, lease, inbox=self.inbox, worker_factory=worker_factory)
        self.gate = Gate(self.ctx, sandboxed=self.launcher.policy_sandboxed)
        self.finaliser = Finaliser(self.ctx, self.launcher)
        self.publisher = Publisher(self.ctx, self.finaliser.limits, enabled=publish)
        self.verifier = Verifier(
            self.ctx, self.launcher, self.finaliser, review_attempt=review_attempt
        )

    @property
    def record(self) -> TaskRecord:
        return self.journal.record

    @record.setter
    def record(self, value: TaskRecord) -> None:
        self.journal.record = value

    @property
    def lease(self) -> Lease:
        return self.launcher.lease

    @property
    def worker(self) -> WorkerAdapter | None:
        return self.launcher.worker

    @property
    def sandbox_enforced(self) -> bool:
        """Whether the kernel sandbox is in force for everything this task runs."""
        return self.launcher.sandbox_enforced

    # --- events and the record ----------------------------------------------------------

    def emit(self, payload: Payload) -> Event | None:
        """Write `payload` (None: a worker's flood past its cap, dropped and counted)."""
        return self.journal.emit(payload)

    def save(self) -> None:
        self._sync_counters()
        self.journal.save(State(self.record.state))

    def _sync_counters(self) -> None:
        m, r = self.machine, self.record
        r.turns, r.cost_usd, r.repair_rounds = m.turns, m.cost_usd, m.repair_rounds

    def _transition(self, target: State, reason: str) -> None:
        previous = State(self.record.state)
        self.record.state = target
        if target == State.STOPPED:
            self.record.stop_signal = self._abort_signal
        self.emit(et.StateChanged(from_=previous.value, to=target.value, reason=reason))
        if target not in TERMINAL:
            # A terminal state is saved by `Close`, after `task_finished`: a record that says
            # the task ended finds its event log complete.
            self.save()
        self.journal.seal(f"{previous.value} -> {target.value}" + (f": {reason}" if reason else ""))

    # --- stop requests and signals ------------------------------------------------------

    def request_stop(self, reason: str, signame: str | None = None) -> None:
        if self._abort_reason is None:
            self._abort_reason, self._abort_signal = reason, signame
        self._abort.set()
        self.inbox.put(StopRequest(reason))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGUSR1:
            self.inbox.put(ResumeAuto())
            return
        if signum == signal.SIGUSR2:
            self.inbox.put(_ControlPoke())
            return
        self.request_stop(
            stop_reason(self.layout.task_dir(self.task), signum), signal.Signals(signum).name
        )

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {
            s: signal.signal(s, self._on_signal)
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
        }
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    # --- the three ways in ------------------------------------------------------------------

    def run(self) -> TaskRecord:
        """Supervise a new task from its first worker to its end."""
        return self._guarded(lambda: self._drive(Begin()))

    def adopt(self, previous: Mapping[str, Any], *, action: str = "re-adopted") -> TaskRecord:
        """Re-adopt a persistent worker that survived its supervisor (or, `action`
        `adopted`, a pane a person started: `git sup adopt-tmux`), then supervise on."""

        def body() -> None:
            try:
                ident = self.launcher.adopt()
            except WorkerError as exc:
                # Refused (identity mismatch): nothing was taken over; the caller
                # (recover_task) parks the task after proving the old worker gone.
                self.record = self.store.load(self.task)
                raise _AdoptRefused(str(exc)) from exc
            assert self.launcher.worker is not None
            self._drive(Adopted(self.launcher.worker.capabilities.repairable))
            self.emit(
                et.Recovered(
                    previous=dict(previous),
                    state=self.record.state,
                    action=action,
                    **ident.as_dict(),
                )
            )
            self.save()

        return self._guarded(body)

    def resume(self, *, park: bool, previous: Mapping[str, Any]) -> TaskRecord:
        """Continue (or park) a task whose supervisor died, after its old worker is
        provably gone. A new worker gets an explicit recovery turn; nothing is re-sent
        silently."""

        def body() -> None:
            state = self.machine.state
            verify = state == State.VERIFYING
            action = "park" if park else ("verify" if verify else "new worker turn")
            self.emit(
                et.Recovered(
                    previous=dict(previous),
                    state=state.value,
                    turns_before=self.record.turns,
                    action=action,
                )
            )
            self.record.reasons.append(
                f"recovered after the supervisor died in state {state.value}"
            )
            self.save()
            missing = not os.path.isdir(self.worktree)
            if not park and not missing and state not in (State.STARTING, State.VERIFYING):
                self.launcher.spawns = max(self.launcher.spawns, 1)  # the next prompt resumes
            self._drive(Recover(park=park, worktree_missing=missing))

        return self._guarded(body)

    def reopen(self, r: Reopen, *, by: str) -> TaskRecord:
        """A parked task goes on as the same task (same id, log, worktree, wip and
        candidate): a new worker with more time or a repair round, or (`extend` 0) a
        verification of what it left. The caller (gitsup/tasks/reopen.py) checked that it
        may and holds the worktree's lease."""

        def body() -> None:
            before = self.record.status.value
            self.emit(
                et.TaskReopened(
                    how="close_out" if r.how == "extend" and r.extend <= 0 else r.how,
                    by=by,
                    status_before=before,
                    extend=r.extend if r.how == "extend" else UNSET,
                    rounds=r.rounds if r.rounds is not None else UNSET,
                    message=r.message or UNSET,
                )
            )
            r_ = self.record
            r_.status, r_.finished_at, r_.exit_code = Status.PENDING, None, None
            r_.worker, r_.spawn_pending, r_.paused_by_user = None, False, None
            what = {"extend": f"{r.extend:g}s more", "repair": "a repair round"}[r.how]
            if r.how == "extend" and r.extend <= 0:
                what = "closed out now"
            r_.reasons.append(f"reopened by {by}: {what}")
            self.launcher.spawns = max(self.launcher.spawns, 1)  # no setup phase again
            self._drive(r)

        return self._guarded(body)

    def _guarded(self, body: Callable[[], None]) -> TaskRecord:
        """The guard all three share: signals become stop requests; an internal error ends
        the task (recorded) instead of leaving it running unsupervised."""
        with self._signals():
            try:
                self.gate.decider = make_decider(
                    self.spec,
                    cwd=str(self.worktree),
                    env=self.launcher.judge_env(),
                    network=self.launcher.net.agent_network(
                        "decider", self.spec.decider.machine_kind()
                    ),
                    wrap=self.launcher.judge_wrap("decider"),
                    wrap_for=self.launcher.read_only_wrappers()[1],
                    abort=self._abort,
                    memory=self.layout.task_dir(self.task) / DECIDER_MEMORY,
                    on_call=self.ctx.on_call,
                )
                self.record.supervisor = supervisor_identity()
                body()
                self._loop()
            except BaseException as exc:
                if not self.machine.terminal and not isinstance(exc, _AdoptRefused):
                    self.record.reasons.append(f"internal error: {type(exc).__name__}: {exc}")
                    with contextlib.suppress(BaseException):
                        self._drive(Abandon())
                raise
            finally:
                # a turn's push still in flight (the task's end waited for it already)
                self.publisher.wait()
        return self.record

    def _decision_time(self) -> DecisionTime:
        """The deadline, the time left and whether the task is closing out, for a decision."""
        m, mono = self.machine, time.monotonic()
        dl = m.deadline_at()
        close_out = m.past_deadline(mono) or "deadline_approaching" in m.fired
        wall = None if dl is None else time.time() + (dl - mono)
        return DecisionTime.at(wall, time.time(), close_out=close_out)

    # --- the loop -----------------------------------------------------------------------------

    def _loop(self) -> None:
        self.inbox.put(_ControlPoke())  # requests written before the handler was in place
        while not self.machine.terminal:
            nxt = self.machine.next_timer()
            timeout = None if nxt is None else max(0.0, nxt[0] - time.monotonic())
            if not self.journal.flush():  # events an append could not write: tried again
                timeout = 1.0 if timeout is None else min(timeout, 1.0)
            if self._watch_liveness():
                timeout = LIVENESS_POLL if timeout is None else min(timeout, LIVENESS_POLL)
            try:
                item = self.inbox.get(timeout=timeout)
            except queue.Empty:
                if nxt is not None and time.monotonic() >= nxt[0]:
                    self._drive(TimerFired(nxt[1]))
                continue
            if isinstance(item, _ControlPoke):
                self._control()
            else:
                self._drive(item)

    def _watch_liveness(self) -> bool:
        """The worker's recorded identity (pid and start time, its cgroup), polled from the
        supervisor's side in every live state: a worker gone without its adapter reporting
        an exit for LIVENESS_GRACE seconds is taken as exited (`vanished`), so a task in
        `waiting` or `verifying` knows it too. True while there is a worker to watch."""
        m = self.machine
        if m.terminal or m.finishing or not m.has_worker or m.worker_gone:
            self._gone_since = None
            return False
        why = self.launcher.identity_gone()
        now = time.monotonic()
        if why is None:
            self._gone_since = None
        elif self._gone_since is None:
            self._gone_since = now
        elif now - self._gone_since >= LIVENESS_GRACE:
            self._gone_since = None
            self.journal.add_reason(f"the worker vanished without an exit event: {why}")
            self._drive(WorkerExited(returncode=None, classification="vanished"))
        return True

    def _control(self) -> None:
        """Take the control requests waiting in the task dir: each becomes an input of the
        machine, which answers with an event naming its ref (or a refusal is recorded)."""
        from gitsup.store import control

        for req in control.take(self.layout.task_dir(self.task)):
            item, why = (None, req.refused) if req.refused else _control_input(req)
            if item is not None and (self.machine.terminal or self.machine.finishing):
                item, why = None, "the task is ending"
            if item is None:
                by = req.data.get("by")
                self.emit(
                    et.ControlRefused(
                        ref=req.ref,
                        command=req.kind,
                        reason=why or "refused",
                        by=str(by) if isinstance(by, str) else UNSET,
                    )
                )
                continue
            self._drive(item)

    def _drive(self, item: object) -> None:
        """Feed one input to the machine and carry out its effects; what an effect finds
        is the next input."""
        todo = [item]
        while todo:
            effects = self.machine.on(todo.pop(0), time.monotonic())
            self._sync_counters()
            for effect in effects:
                nxt = self._do_retrying(effect)
                if nxt is not None:
                    todo.append(nxt)

    def _do_retrying(self, e: Effect) -> object | None:
        """`_do`; an effect that is safe to repeat (an import, a reason, a decision) and
        failed with an OSError (a full disk, EIO) is tried again, a few times, before the
        failure ends the task; each failure is recorded (`recoverable_failure`)."""
        for attempt in range(_RETRIES + 1):
            try:
                return self._do(e)
            except OSError as exc:
                if (
                    not isinstance(e, ImportWork | AddReason | RecordDecision)
                    or attempt == _RETRIES
                ):
                    raise
                self.emit(
                    et.RecoverableFailure(
                        what=f"{type(e).__name__.lower()} effect",
                        error=str(exc),
                        action=f"retry {attempt + 1} of {_RETRIES}",
                    )
                )
                time.sleep(0.2 * (attempt + 1))
        return None

    def _do(self, e: Effect) -> object | None:
        if isinstance(e, Emit):
            self.emit(e.payload)
        elif isinstance(e, Transition):
            self._transition(e.target, e.reason)
        elif isinstance(e, AddReason):
            self.journal.add_reason(e.text, once=e.once)
        elif isinstance(e, RecordDecision):
            self.record.decisions.append(dict(e.decision))
        elif isinstance(e, StopWorker):
            self.launcher.stop_worker(e.why, announce=e.announce)
        elif isinstance(e, Spawn):
            if self.launcher.spawns == 0:  # the setup phase, before the first worker
                failed = self._setup()
                if self._abort.is_set():  # a stop asked for during the setup
                    return Spawned(aborted=self._abort_reason or "stop requested")
                if failed:
                    return Spawned(failure=tuple(failed))
            res = self.launcher.spawn(e.prompt, e.message)
            if res.aborted is not None:
                return replace(res, aborted=self._abort_reason or "stop requested")
            return res
        elif isinstance(e, ImportWork):
            self._hold()
            imported = WorkImported(self.finaliser.import_work())
            self.publisher.turn()
            return imported
        elif isinstance(e, Decide):
            decided = self.gate.decide_turn(
                e.turn, turns=self.record.turns, alive=self.launcher.worker_alive
            )
            if self._abort.is_set():  # a stop asked for while the decider ran
                return StopRequest(self._abort_reason or "stop requested")
            return decided
        elif isinstance(e, AnswerPermission):
            return self.gate.answer(e.request, self.launcher.worker)
        elif isinstance(e, ResolveAsk):
            return self.gate.resolve(
                e.ask, e.allow, e.message, self.launcher.worker, fallback=e.fallback
            )
        elif isinstance(e, SendTurn):
            return self._send(e)
        elif isinstance(e, Verify):
            self._hold()
            return self.verifier.verify(e.park_reason)
        elif isinstance(e, HoldByUser):
            return self._pause_by_user(e.request)
        elif isinstance(e, Finish):
            self.record.paused_by_user = None
            final = self.finaliser.finalise(e.final, e.verified_head)
            return Finished(final, "; ".join(self.record.reasons[-3:]))
        elif isinstance(e, Close):
            self._sync_counters()
            self.finaliser.close(e.final)
            self.publisher.end()
            self.journal.close()  # again: a failed publication reopened the log to say so
        return None

    def _setup(self) -> list[str]:
        """`[environment] setup` once, in the task sandbox, after the preflight (which the
        spawn repeats); what fails ends the task before any model call."""
        if self.spec.environment.setup is None and not self._has_recipe():
            return []
        problems = self.launcher.preflight()
        if problems:
            return [f"preflight: {p}" for p in problems]
        return self.verifier.setup()

    def _has_recipe(self) -> bool:
        from gitsup.environment.recipe import ENVIRONMENT_FILE

        return (self.repo.main_workdir / ENVIRONMENT_FILE).is_file()

    def _hold(self) -> None:
        """Verifying starts: what is verified is exactly what the worker left, and nothing of
        it runs meanwhile (Launcher.hold). A limit it ran into is the machine's to know first;
        in these states that only records it (the verdict parks)."""
        for hit in self.launcher.hold():
            for effect in self.machine.on(hit, time.monotonic()):
                self._do(effect)

    def _pause_by_user(self, p: UserPause) -> UserPaused:
        """`git sup pause`/`resume`: the worker frozen or thawed (Launcher.pause_by_user);
        the record says who paused it, for `ls` and `show`."""
        ok, how, n = self.launcher.pause_by_user(p.on)
        if ok:
            self.record.paused_by_user = {"since": time.time(), "by": p.by} if p.on else None
            self.save()
        return UserPaused(p, ok, how, n)

    def _send(self, e: SendTurn) -> TurnSent:
        w = self.launcher.worker
        if w is None or not w.capabilities.repairable or not w.alive:
            return TurnSent(e.purpose, ok=False)
        self.launcher.release()
        try:
            sent = w.send_turn(e.message, key=e.key)
        except WorkerInputStalled as exc:
            return TurnSent(e.purpose, ok=False, stalled=str(exc))
        except WorkerError as exc:
            self.emit(et.ProtocolNoise(error=f"send failed: {exc}"))
            return TurnSent(e.purpose, ok=False)
        return TurnSent(e.purpose, ok=True, sent=bool(sent))


def _control_input(
    req: Any,
) -> tuple[HumanDecision | HumanMessage | ContinueBudget | UserPause | None, str | None]:
    """A control request as an input of the task machine, or why it is refused. The CLI
    checked the values; a request is still checked here, where it takes effect."""
    d, by, via, ref = req.data, req.by[:200], req.via[:40], req.ref
    if req.kind == "answer":
        rid, decision, message = d.get("request_id"), d.get("decision"), d.get("message", "")
        if not isinstance(rid, str) or decision not in ("allow", "deny"):
            return None, "an answer needs a request id and allow or deny"
        if not isinstance(message, str):
            return None, "the message is not text"
        return HumanDecision(rid, decision == "allow", message[:8000], by, via, ref), None
    if req.kind in ("pause", "resume"):
        return UserPause(req.kind == "pause", by, via, ref), None
    if req.kind == "send":
        text = d.get("text")
        if not isinstance(text, str) or not text.strip():
            return None, "an empty message"
        return HumanMessage(text[: 64 * 1024], by, via, ref), None
    turns, cost, extend = d.get("add_turns", 0), d.get("add_cost_usd", 0.0), d.get("extend", 0.0)
    ok = (
        isinstance(turns, int)
        and not isinstance(turns, bool)
        and turns >= 0
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in (cost, extend))
        and 0 <= float(cost) < float("inf")
        and 0 <= float(extend) < float("inf")
    )
    if not ok:
        return None, "add_turns, add_cost_usd and extend must be numbers, 0 or more"
    return ContinueBudget(turns, float(cost), float(extend), by, via, ref), None


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
    from gitsup.host.contain import _own_cgroup_v2

    return {**ProcessId.current().as_dict(), "cgroup": _own_cgroup_v2()}
