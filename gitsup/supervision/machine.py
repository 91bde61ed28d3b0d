"""The task machine: what the supervisor decides, without doing any of it.

`TaskMachine.on(input, now)` takes one input (a worker event, a timer firing, a stop or
resume request, the outcome of something the supervisor did) and returns the effects to
carry out, in order. It holds the state, the counters (turns, cost, repair rounds), the
budgets and the timers; it never reads a clock, a file or a process. The supervisor loop
(gitsup/supervision/supervisor.py) executes the effects; an effect that asks something of the world
(spawn, import, decide, gate, verify, send, finish) is always the last of its list, and what
it found comes back as the next input.

Transitions are the honest ones (gitsup/state.py): a task that fails or parks goes there
directly from where it is, never through states it did not pass.
"""

from __future__ import annotations

from typing import Literal

from gitsup.spec import TaskSpec
from gitsup.state import TERMINAL, State, check_reopen, check_transition
from gitsup.store import eventtypes as et
from gitsup.store.payload import UNSET, Unset, typed
from gitsup.supervision import prompts
from gitsup.supervision.taskio import (
    Abandon,
    AddReason,
    Adopted,
    AnswerPermission,
    Begin,
    Close,
    ContinueBudget,
    Decide,
    Decided,
    Effect,
    Emit,
    Finish,
    Finished,
    Gated,
    HoldByUser,
    HumanDecision,
    HumanMessage,
    ImportWork,
    LimitHit,
    PendingAsk,
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
    Verified,
    Verify,
    WorkImported,
)
from gitsup.verification.decider import TurnDecision
from gitsup.workers.base import (
    HumanInput,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerExited,
    WorkerNote,
    WorkerOutput,
)
from gitsup.workers.stream_json import model_failure

# --- the machine --------------------------------------------------------------------------


class TaskMachine:
    """One task's decisions. Counters start from the record (a recovered task goes on
    counting); `now` is monotonic seconds, given with every input."""

    def __init__(
        self,
        spec: TaskSpec,
        task: str,
        *,
        state: State = State.IDLE,
        turns: int = 0,
        cost_usd: float = 0.0,
        repair_rounds: int = 0,
        now: float = 0.0,
    ) -> None:
        self.spec = spec
        self.task = task
        self.state = state
        self.turns = turns
        self.cost_usd = cost_usd
        self.repair_rounds = repair_rounds
        self.started = now
        self.last_progress = now
        self.fired: set[str] = set()  # timers that fired (each fires once)
        self.turn_active = False
        self.worker_gone = False
        self.has_worker = False
        self.repairable = False
        self.finishing = False
        self.verified_head: str | None = None
        self._turn: TurnCompleted | None = None  # the turn waiting for its import
        self._deciding: TurnCompleted | None = None  # the turn the decider is asked about
        self._repair: Verified | None = None  # the repair round waiting for its send
        self.limits_hit: list[str] = []  # the cgroup limits the worker ran into (reasons)
        self._limit_kinds: set[str] = set()
        # A person in the loop: asks waiting for `git sup answer` (request id -> the ask and
        # since when), whether they paused the task, the turn a spent budget paused before
        # its decider, what `git sup continue` added, messages for the worker's next turn.
        self.asks: dict[str, tuple[PendingAsk, float]] = {}
        self._paused_for_asks = False
        self._budget_turn: TurnCompleted | None = None
        self._message_turn: TurnCompleted | None = None
        self._sending: HumanMessage | None = None
        self.messages: list[HumanMessage] = []
        self.extra_turns = 0
        self.extra_cost = 0.0
        self.extra_deadline = 0.0
        # The deadline clock stops while the task waits for a person (an ask, a spent budget:
        # "human"; `git sup pause`: "user"): what holds it, held since, held total.
        self._holds: set[str] = set()
        self._held_since: float | None = None
        self._held_total = 0.0
        # `git sup pause`: who paused the task and since when (monotonic), or None.
        self.user_paused: tuple[str, float] | None = None
        # `git sup repair --rounds N`: the repair rounds allowed in all (None: the spec's).
        self.repair_limit: int | None = None
        # a deadline given after the start (`recover --extend`), even when the spec has none
        self._deadline_given = False

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    # --- timers -----------------------------------------------------------------------

    def deadline_at(self) -> float | None:
        """When the deadline falls, or None: a deadline of 0 is off."""
        d = self.spec.budget.deadline
        if d <= 0 and not self._deadline_given:
            return None
        return self.started + d + self.extra_deadline + self._held_total

    def set_deadline(self, now: float, seconds: float) -> None:
        """The deadline falls `seconds` after `now` (`recover --takeover --extend`)."""
        self.extra_deadline = (
            now + seconds - self.started - self.spec.budget.deadline - self._held_total
        )
        self.fired -= {"deadline_approaching", "deadline_reached", "watchdog_timeout"}
        self._deadline_given = True

    @property
    def held(self) -> bool:
        """The task waits for a person: its deadline clock does not run."""
        return self._held_since is not None

    def _hold(self, now: float, why: str = "human") -> None:
        self._holds.add(why)
        if self._held_since is None:
            self._held_since = now

    def _unhold(self, now: float, why: str = "human") -> None:
        self._holds.discard(why)
        if self._held_since is not None and not self._holds:
            self._held_total += max(0.0, now - self._held_since)
            self._held_since = None

    def past_deadline(self, now: float) -> bool:
        dl = self.deadline_at()
        return "deadline_reached" in self.fired or (dl is not None and now >= dl)

    def next_timer(self) -> tuple[float, str] | None:
        """The next timer as (when, name), or None. A timer set to 0 is off: it never fires."""
        if self.terminal or self.finishing:
            return None
        b = self.spec.budget
        cands: list[tuple[float, str]] = []
        if self.asks:
            first = min(since for _, since in self.asks.values())
            cands.append((first + self.spec.decider.human_timeout, "human_timeout"))
        if self.held:
            return min(cands) if cands else None
        dl = self.deadline_at()
        if dl is not None:
            if "deadline_approaching" not in self.fired and 0 < b.deadline_warning < b.deadline:
                cands.append((dl - b.deadline_warning, "deadline_approaching"))
            if "deadline_reached" not in self.fired:
                cands.append((dl, "deadline_reached"))
            elif "watchdog_timeout" not in self.fired:
                cands.append((dl + b.closeout(), "deadline_closeout"))
        if self.state == State.RUNNING and b.no_output_timeout > 0:
            cands.append((self.last_progress + b.no_output_timeout, "no_output"))
        return min(cands) if cands else None

    # --- the one entry ----------------------------------------------------------------

    def on(self, item: object, now: float) -> list[Effect]:
        """The effects of one input, in order. A finished task ignores everything."""
        if isinstance(item, Finished):
            return self._finished(item)
        if isinstance(item, Abandon) and not self.terminal:
            return self._finish(State.BLOCKED if self.state == State.VERIFYING else State.FAILED)
        if isinstance(item, Reopen):
            return self._reopen(item, now)
        if self.terminal or self.finishing:
            return []
        if isinstance(item, StopRequest):
            return self._stop(item.reason)
        if isinstance(item, WorkerOutput):
            self.last_progress = now
            # redacted by the adapter where it read the output
            return [Emit(et.WorkerOutput(stream=item.stream, text=item.text, more=item.data))]
        if isinstance(item, ProtocolNoise):
            return [Emit(et.ProtocolNoise(line=item.line[:2000], error=item.error))]
        if isinstance(item, WorkerNote):
            return [Emit(item.payload)]
        if isinstance(item, PermissionRequest):
            return [AnswerPermission(item)]
        if isinstance(item, PermissionCancelled):
            out: list[Effect] = [
                Emit(et.PermissionDecided(request_id=item.request_id, cancelled=True))
            ]
            if self.asks.pop(item.request_id, None) is not None:
                out += self._resume_from_asks(now, "the worker withdrew its request")
            return out
        if isinstance(item, Gated):
            return self._gated(item, now)
        if isinstance(item, HumanDecision):
            return self._human_decision(item, now)
        if isinstance(item, HumanMessage):
            return self._human_message(item)
        if isinstance(item, ContinueBudget):
            return self._continue_budget(item, now)
        if isinstance(item, UserPause):
            return self._user_pause(item)
        if isinstance(item, UserPaused):
            return self._user_paused(item, now)
        if isinstance(item, TurnCompleted):
            return self._turn_completed(item, now)
        if isinstance(item, WorkImported):
            return self._imported(item, now)
        if isinstance(item, Decided):
            return self._decided(item, now)
        if isinstance(item, TurnSent):
            return self._sent(item, now)
        if isinstance(item, WorkerExited):
            return [*self._drop_asks(now, "the worker exited"), *self._worker_exited(item)]
        if isinstance(item, HumanInput):
            return self._human_input(item, now)
        if isinstance(item, ResumeAuto):
            return self._resume_auto(now)
        if isinstance(item, LimitHit):
            return self._limit_hit(item)
        if isinstance(item, TimerFired):
            return self._timer(item.name, now)
        if isinstance(item, Verified):
            return self._verified(item, now)
        if isinstance(item, Begin):
            return [
                self._go(State.STARTING, "spawning worker"),
                Spawn(prompts.task_prompt(self.spec)),
            ]
        if isinstance(item, Recover):
            return self._recover(item)
        if isinstance(item, Spawned):
            return self._spawned(item, now)
        if isinstance(item, Adopted):
            self.has_worker, self.repairable, self.worker_gone = True, item.repairable, False
            self.last_progress = now
            self.turn_active = self.state in (State.RUNNING, State.PAUSED)
            return []
        raise TypeError(f"not an input of the task machine: {item!r}")

    # --- helpers ------------------------------------------------------------------------

    def _go(self, target: State, reason: str = "") -> Transition:
        check_transition(self.state, target)
        self.state = target
        return Transition(target, reason)

    def _stop_worker(self, why: str) -> StopWorker:
        announce = not self.worker_gone
        self.worker_gone = True
        return StopWorker(why, announce)

    def _finish(self, final: State) -> list[Effect]:
        self.finishing = True
        dropped: list[Effect] = [
            _message_event(
                m, "dropped", f"the task ended {final.value} before the worker's turn did"
            )
            for m in self.messages
        ]
        self.messages = []
        return [
            *dropped,
            self._stop_worker(f"task {final.value}"),
            Finish(final, self.verified_head),
        ]

    def _finished(self, f: Finished) -> list[Effect]:
        if self.terminal:
            return []
        return [self._go(f.final, f.reason), Close(f.final)]

    def _stop(self, reason: str) -> list[Effect]:
        return [
            Emit(et.StopRequested(reason=reason)),
            AddReason(f"stopped: {reason}"),
            *self._finish(State.STOPPED),
        ]

    def _verify(self, park_reason: str | None = None) -> list[Effect]:
        """Enter verifying (from where the task is) and run the checks and the review."""
        out: list[Effect] = []
        if self.state == State.PAUSED:
            out.append(self._go(State.VERIFYING, park_reason or "verifying"))
        if self.state == State.RUNNING:
            out.append(self._go(State.WAITING, park_reason or "verifying"))
        if self.state != State.VERIFYING:
            out.append(self._go(State.VERIFYING, park_reason or "turn completed"))
        return [*out, Verify(park_reason)]

    def _park(self, reason: str) -> list[Effect]:
        """Stop the worker and verify, parking whatever the checks say."""
        return [self._stop_worker(reason), *self._verify(reason)]

    # --- start, recovery ------------------------------------------------------------------

    def _recover(self, r: Recover) -> list[Effect]:
        self.worker_gone = True
        if r.park or r.worktree_missing:
            why = "recovered: parked on request" if r.park else "recovered: worktree is missing"
            final = State.FAILED if self.state == State.STARTING else State.BLOCKED
            return [AddReason(why), *self._finish(final)]
        if self.state == State.VERIFYING:
            return self._verify()
        out: list[Effect] = []
        prompt = prompts.task_prompt(self.spec)
        if self.state != State.STARTING:
            prompt = prompts.recovery_prompt(self.spec)
        if self.state in (State.WAITING, State.PAUSED):
            out.append(self._go(State.RUNNING, "recovery: new worker"))
        return [*out, Spawn(prompt)]

    def _reopen(self, r: Reopen, now: float) -> list[Effect]:
        """A parked task goes on as the same task: its clocks start again from `now` (the
        spec's deadline, or `extend` seconds), its timers are unfired, and a new worker is
        spawned in the same worktree (its wip and candidate are there) with the message; or,
        with `extend` 0, what it left is verified now (close out: no new turn, no repair)."""
        check_reopen(self.state, State.STARTING)
        self.finishing = False
        self.fired.clear()
        self.worker_gone = self.has_worker = self.turn_active = self.repairable = False
        self.verified_head = None
        self.limits_hit, self._limit_kinds = [], set()
        self._holds, self._held_since, self._held_total = set(), None, 0.0
        self.started = self.last_progress = now
        if r.how == "extend":
            self.extra_deadline = r.extend - self.spec.budget.deadline
            self._deadline_given = r.extend > 0
            if r.extend <= 0:
                self.fired.update({"deadline_reached", "watchdog_timeout"})
                return [
                    self._reopen_go(State.VERIFYING, "reopened: close out now"),
                    Verify(None),
                ]
            message = r.message or prompts.extend_message(r.extend)
            return [
                self._reopen_go(State.STARTING, f"reopened: {r.extend:g}s more"),
                Spawn(prompts.reopened_prompt(self.spec, message), message),
            ]
        if r.rounds is not None:
            self.repair_limit = self.repair_rounds + r.rounds
        self.repair_rounds += 1
        req = et.RepairRequested(repair_round=self.repair_rounds, problems=[], message=r.message)
        return [
            Emit(req),
            self._reopen_go(State.STARTING, f"reopened: repair round {self.repair_rounds}"),
            Spawn(prompts.reopened_prompt(self.spec, r.message), r.message),
        ]

    def _reopen_go(self, target: State, reason: str) -> Transition:
        check_reopen(self.state, target)
        self.state = target
        return Transition(target, reason)

    def _spawned(self, s: Spawned, now: float) -> list[Effect]:
        if s.aborted is not None:
            return self._stop(s.aborted)
        if s.failure:
            return [*(AddReason(r) for r in s.failure), *self._finish(State.FAILED)]
        # worker_gone stays as it was: a recovered task (its worker gone) never takes a
        # repair round, even from the new worker it spawned.
        self.has_worker, self.repairable = True, s.repairable
        self.turn_active = True
        self.last_progress = now
        if self.state == State.STARTING:
            return [self._go(State.RUNNING, "worker started")]
        return []

    # --- permissions ----------------------------------------------------------------------

    def _stalled(self, why: str) -> tuple[str, list[Effect]]:
        reason = f"worker input stalled: {why}"
        return reason, [Emit(et.WorkerInputStalled(reason=why)), AddReason(reason, once=True)]

    def _gated(self, g: Gated, now: float) -> list[Effect]:
        out: list[Effect] = []
        if g.ask is not None:
            return self._ask_human(g.ask, now)
        park = g.park
        if g.stalled is not None:
            park, out = self._stalled(g.stalled)
        if park is None:
            return [*out, *self._resume_from_asks(now, "answered")]
        self._paused_for_asks = False
        self._unhold(now)
        return [*out, AddReason(park, once=True), *self._park(park)]

    # --- a person in the loop -----------------------------------------------------------------

    def _ask_human(self, ask: PendingAsk, now: float) -> list[Effect]:
        """An ask waits for `git sup answer`: the task pauses, its deadline clock held."""
        req = ask.request
        self.asks[req.request_id] = (ask, now)
        d = self.spec.decider
        out: list[Effect] = [
            Emit(
                et.HumanAsk(
                    request_id=req.request_id,
                    tool=req.tool_name,
                    summary=ask.summary,
                    rule=ask.rule,
                    timeout=d.human_timeout,
                    fallback=d.fallback,
                    phase=req.phase,
                )
            )
        ]
        if self.state == State.RUNNING:
            self._paused_for_asks = True
            self._hold(now)
            out.append(self._go(State.PAUSED, f"needs human: {req.tool_name} {ask.summary}"))
        return out

    def _resume_from_asks(self, now: float, why: str) -> list[Effect]:
        if self.asks or not self._paused_for_asks:
            return []
        self._paused_for_asks = False
        self._unhold(now)
        self.last_progress = now
        if self.state != State.PAUSED:
            return []
        return [self._go(State.RUNNING, why)]

    def _drop_asks(self, now: float, why: str) -> list[Effect]:
        """The worker's turn or process ended with asks open: they cannot be answered."""
        out: list[Effect] = [
            Emit(et.PermissionDecided(request_id=rid, cancelled=True)) for rid in self.asks
        ]
        self.asks.clear()
        return [*out, *self._resume_from_asks(now, why)]

    def _human_decision(self, h: HumanDecision, now: float) -> list[Effect]:
        entry = self.asks.pop(h.request_id, None)
        if entry is None:
            why = f"no open request {h.request_id!r} (unknown, or already answered)"
            return [Emit(et.ControlRefused(ref=h.ref, command="answer", reason=why, by=h.by))]
        ask = entry[0]
        decision = "allow" if h.allow else "deny"
        return [
            Emit(
                et.HumanAnswer(
                    request_id=h.request_id,
                    decision=decision,
                    message=h.message,
                    by=h.by,
                    via=h.via,
                    ref=h.ref,
                )
            ),
            ResolveAsk(ask, h.allow, h.message),
        ]

    def _human_timeout(self, now: float) -> list[Effect]:
        rid, (ask, since) = min(self.asks.items(), key=lambda kv: kv[1][1])
        if now < since + self.spec.decider.human_timeout:
            return []
        del self.asks[rid]
        waited = round(now - since, 1)
        fallback = self.spec.decider.fallback
        return [
            Emit(et.HumanTimeout(request_id=rid, waited=waited, fallback=fallback)),
            ResolveAsk(ask, False, fallback=True),
        ]

    def _human_message(self, m: HumanMessage) -> list[Effect]:
        if not self.has_worker or not self.repairable or self.worker_gone:
            why = f"the {self.spec.worker.kind} worker cannot take a message now"
            if not self.has_worker or not self.repairable:
                why = f"a {self.spec.worker.kind} worker cannot take messages"
            return [Emit(et.ControlRefused(ref=m.ref, command="send", reason=why, by=m.by))]
        self.messages.append(m)
        return [_message_event(m, "queued")]

    def _continue_budget(self, c: ContinueBudget, now: float) -> list[Effect]:
        if self._budget_turn is None:
            why = f"the task is not paused on its budget (state {self.state.value})"
            return [Emit(et.ControlRefused(ref=c.ref, command="continue", reason=why, by=c.by))]
        self.extra_turns += c.add_turns
        self.extra_cost = round(self.extra_cost + c.add_cost_usd, 6)
        self.extra_deadline += c.extend
        b = self.spec.budget
        still = self._budget_exceeded()
        event = et.BudgetContinued(
            max_turns=b.max_turns + self.extra_turns,
            max_cost_usd=None if b.max_cost_usd is None else b.max_cost_usd + self.extra_cost,
            deadline=0.0 if b.deadline <= 0 else b.deadline + self.extra_deadline,
            add_turns=c.add_turns,
            add_cost_usd=c.add_cost_usd,
            extend=c.extend,
            by=c.by,
            via=c.via,
            ref=c.ref,
            still_exceeded=still if still else UNSET,
        )
        if still:
            return [Emit(event)]
        tc, self._budget_turn = self._budget_turn, None
        self._unhold(now)
        return [Emit(event), *self._after_import(tc)]

    def _user_pause(self, p: UserPause) -> list[Effect]:
        """`git sup pause`/`resume`: checked here, carried out by the supervisor (HoldByUser),
        whose answer (UserPaused) moves the clocks."""
        command = "pause" if p.on else "resume"
        why = None
        if p.on and self.user_paused is not None:
            why = f"the task is already paused (by {self.user_paused[0]})"
        elif not p.on and self.user_paused is None:
            why = "the task is not paused"
        elif p.on and (not self.has_worker or self.worker_gone):
            why = f"no worker is running (state {self.state.value})"
        if why is not None:
            return [Emit(et.ControlRefused(ref=p.ref, command=command, reason=why, by=p.by))]
        return [HoldByUser(p)]

    def _user_paused(self, r: UserPaused, now: float) -> list[Effect]:
        p = r.request
        if not r.ok:
            command = "pause" if p.on else "resume"
            return [Emit(et.ControlRefused(ref=p.ref, command=command, reason=r.how, by=p.by))]
        if p.on:
            self.user_paused = (p.by, now)
            self._hold(now, "user")
            return [
                Emit(et.TaskPaused(by=p.by, via=p.via, ref=p.ref, how=r.how, processes=r.processes))
            ]
        since = self.user_paused[1] if self.user_paused is not None else now
        self.user_paused = None
        self._unhold(now, "user")
        self.last_progress = now  # the no-output watchdog starts over
        paused = round(max(0.0, now - since), 3)
        return [Emit(et.TaskResumed(by=p.by, via=p.via, ref=p.ref, how=r.how, paused=paused))]

    def _deliver_message(self, tc: TurnCompleted) -> list[Effect]:
        m = self.messages.pop(0)
        self._message_turn, self._sending = tc, m
        return [SendTurn(m.text, key=f"message-{m.ref}", purpose="message")]

    # --- turns -----------------------------------------------------------------------------

    def _turn_completed(self, tc: TurnCompleted, now: float) -> list[Effect]:
        if self.asks:
            dropped = self._drop_asks(now, "the worker ended its turn")
            return [*dropped, *self._turn_completed(tc, now)]
        self.turn_active = False
        if self.state == State.PAUSED:
            # A person drives the worker: record the turn, decide nothing.
            self.turns += int(tc.num_turns or 0)
            paused = et.TurnCompleted(
                subtype=tc.subtype, result=(tc.result or "")[:4000], paused=True
            )
            return [Emit(paused)]
        self.last_progress = now
        self.turns += int(tc.num_turns or 1)
        if tc.cost_usd:
            self.cost_usd = round(self.cost_usd + float(tc.cost_usd), 6)
        out: list[Effect] = [
            Emit(
                et.TurnCompleted(
                    subtype=tc.subtype,
                    is_error=tc.is_error,
                    result=(tc.result or "")[:4000],
                    cost_usd=tc.cost_usd,
                    num_turns=tc.num_turns,
                    session_id=tc.session_id,
                    usage=dict(tc.usage),
                    repair_round=self.repair_rounds,
                    models=list(tc.models) if tc.models else UNSET,
                )
            )
        ]
        if self.state == State.RUNNING:
            why = "turn ended with an error" if tc.is_error else "turn completed"
            out.append(self._go(State.WAITING, why))
        elif self.state != State.WAITING:
            return out
        failure = model_failure(tc)
        if failure is not None:
            # Never a completion, never a repair round. Credentials/configuration: failed
            # at once; unreachable/overloaded (after the CLI's own retries) or else: parked.
            if failure.kind == "auth":
                reason = f"model API authentication failed: {failure.message}"
            elif failure.kind == "unreachable":
                reason = f"model API unreachable: {failure.message}"
            else:
                reason = f"model API error: {failure.message}"
            final = State.FAILED if failure.kind == "auth" else State.BLOCKED
            # A turn can spend past the budget and then fail (the CLI may end a turn over
            # its budget with an API error): the record names both.
            over = self._budget_exceeded()
            budget: list[Effect] = (
                [AddReason(over), Emit(et.BudgetExceeded(reason=over))] if over else []
            )
            return [
                *out,
                Emit(typed("model_error", failure.as_dict())),
                AddReason(reason),
                AddReason(f"what to do: {failure.hint}"),
                *budget,
                self._stop_worker(reason),
                *self._finish(final),
            ]
        self._turn = tc
        return [*out, ImportWork()]

    def _imported(self, w: WorkImported, now: float) -> list[Effect]:
        tc, self._turn = self._turn, None
        if w.refused is not None:
            return self._finish(State.BLOCKED)
        if tc is None:
            return []
        over = self._budget_exceeded()
        if over and self.spec.budget.on_exhausted == "pause" and not self.limits_hit:
            self._budget_turn = tc
            self._hold(now)
            resume = f"git sup continue {self.task}"
            return [
                Emit(et.BudgetExceeded(reason=over)),
                Emit(et.BudgetPaused(reason=over, resume_with=resume)),
            ]
        if over:
            return [AddReason(over), Emit(et.BudgetExceeded(reason=over)), *self._park(over)]
        return self._after_import(tc)

    def _after_import(self, tc: TurnCompleted) -> list[Effect]:
        if self.limits_hit:
            return self._park(self.limits_hit[0])
        if self.messages and self.repairable and not self.worker_gone:
            return self._deliver_message(tc)
        self._deciding = tc
        return [Decide(tc)]

    def _limit_hit(self, hit: LimitHit) -> list[Effect]:
        """A cgroup limit ends the task: a running worker is stopped and its work verified and
        parked; in any other state the reason is kept and the verdict parks."""
        if hit.kind in self._limit_kinds:
            return []
        self._limit_kinds.add(hit.kind)
        reason = hit.reason
        self.limits_hit.append(reason)
        out: list[Effect] = [Emit(et.LimitReached(reason=reason)), AddReason(reason, once=True)]
        if self.state in (State.RUNNING, State.PAUSED):
            return [*out, *self._park(reason)]
        return out

    def _budget_exceeded(self) -> str | None:
        b = self.spec.budget
        max_turns = b.max_turns + self.extra_turns
        if self.turns > max_turns:
            return f"budget: {self.turns} turns exceed max_turns {max_turns}"
        if b.max_cost_usd is not None and self.cost_usd > b.max_cost_usd + self.extra_cost:
            limit = b.max_cost_usd + self.extra_cost
            return f"budget: cost ${self.cost_usd:.4f} exceeds max_cost_usd ${limit:g}"
        return None

    def _decided(self, d: Decided, now: float) -> list[Effect]:
        tc, self._deciding = self._deciding, None
        decision = d.decision
        if decision is None:
            decision = TurnDecision("park", reason="decider failed; parking", source=d.decider_kind)
        elif (
            decision.noop
            and tc is not None
            and tc.subtype == "exit"
            and not tc.is_error
            and not d.worker_alive
        ):
            decision = TurnDecision(
                "verify", reason="noop decision after a clean worker exit", source=decision.source
            )
        out: list[Effect] = [
            RecordDecision({"on": "turn_completed", **decision.as_dict()}),
            Emit(
                et.Decision(
                    action=decision.action,
                    message=decision.message,
                    reason=decision.reason,
                    source=decision.source,
                )
            ),
        ]
        if decision.action == "verify":
            return [*out, *self._verify()]
        if decision.action == "continue" and decision.message:
            if self.past_deadline(now):  # no new turn after the deadline
                over = et.DecisionOverridden(
                    decision="continue",
                    source=decision.source,
                    action="verify",
                    by="deadline",
                    reason="no new turn starts after the deadline",
                )
                return [*out, Emit(over), *self._verify()]
            key = f"continue-{self.turns}"
            return [*out, SendTurn(decision.message, key=key, purpose="continue")]
        return [*out, *self._verify(decision.reason or "decider parked the task")]

    def _sent(self, s: TurnSent, now: float) -> list[Effect]:
        out: list[Effect] = []
        if s.stalled is not None:
            out = self._stalled(s.stalled)[1]
        if s.ok and s.sent:
            self.turn_active = True
            self.last_progress = now
        if s.purpose == "message":
            return [*out, *self._message_sent(s)]
        if s.purpose == "continue":
            return out if s.ok else [*out, *self._verify("worker cannot take another turn")]
        if s.purpose == "repair":
            if s.ok:
                return [*out, self._go(State.RUNNING, f"repair round {self.repair_rounds}")]
            rep, self._repair = self._repair, None
            fixable = list(rep.reasons) if rep is not None else []
            return [*out, *self._conclude(["repair turn could not be sent to the worker"], fixable)]
        return out

    def _message_sent(self, s: TurnSent) -> list[Effect]:
        """A person's message went (or did not go) to the worker as its next turn; one that
        could not be sent leaves the turn before it to the decider."""
        tc, self._message_turn = self._message_turn, None
        m = self._sending
        self._sending = None
        out: list[Effect] = []
        if m is not None:
            status: Literal["delivered", "dropped"] = "delivered" if s.ok else "dropped"
            out.append(
                _message_event(m, status, UNSET if s.ok else "the worker could not take a turn")
            )
        if s.ok:
            return [*out, self._go(State.RUNNING, "a person's message")]
        if tc is None:
            return out
        self._deciding = tc
        return [*out, Decide(tc)]

    def _worker_exited(self, ex: WorkerExited) -> list[Effect]:
        self.worker_gone = True
        out: list[Effect] = [
            Emit(
                et.WorkerStopped(
                    returncode=ex.returncode, signal=ex.signal, classification=ex.classification
                )
            )
        ]
        if self.state != State.RUNNING:
            return out
        # Gone without ending its turn: classified, never taken as completion.
        reason = (
            f"worker exited without completing its turn ({ex.classification}, rc={ex.returncode})"
        )
        return [*out, AddReason(reason), self._go(State.WAITING, reason), *self._verify(reason)]

    # --- human takeover (tmux) ----------------------------------------------------------

    def _human_input(self, h: HumanInput, now: float) -> list[Effect]:
        self.last_progress = now
        self.turn_active = True
        out: list[Effect] = [Emit(et.HumanInput(text=h.text))]
        if self.state not in (State.RUNNING, State.WAITING):
            return out
        if self.state == State.WAITING:
            out.append(self._go(State.RUNNING, "a person typed into the worker"))
        out.append(Emit(et.HumanTakeover(resume_with=f"git sup resume-auto {self.task}")))
        out.append(self._go(State.PAUSED, "human takeover: automatic turns pause"))
        return out

    def _resume_auto(self, now: float) -> list[Effect]:
        if self.state != State.PAUSED or self._paused_for_asks:
            return [Emit(et.ResumeAuto(ignored=True, state=self.state.value))]
        out: list[Effect] = [
            Emit(et.ResumeAuto(turn_active=self.turn_active)),
            self._go(State.RUNNING, "automatic turns resume"),
        ]
        self.last_progress = now
        if self.turn_active:
            return out
        resumed = TurnCompleted(
            subtype="resumed", result="resumed after a human takeover", num_turns=0
        )
        return [*out, *self._turn_completed(resumed, now)]

    # --- timers -------------------------------------------------------------------------

    def _timer(self, name: str, now: float) -> list[Effect]:
        b = self.spec.budget
        if name == "deadline_approaching":
            self.fired.add(name)
            left = max(0.0, (self.deadline_at() or 0.0) - now)
            warn = et.DeadlineApproaching(seconds_left=round(left, 1))
            out: list[Effect] = [Emit(warn)]
            if self.has_worker and self.repairable and not self.turn_active:
                msg = prompts.deadline_warning(left)
                out.append(SendTurn(msg, key="deadline_approaching", purpose="deadline"))
            return out
        if name == "deadline_reached":
            self.fired.add(name)
            grace = b.closeout()
            busy = self.turn_active
            out = [Emit(et.DeadlineReached(closeout_grace=grace, busy=busy))]
            if busy and grace <= 0:
                return [*out, *self._watchdog("deadline")]
            if busy:
                return out
            # Idle at the deadline: its result is verified and reviewed like any other (no
            # repair round follows), not parked regardless.
            self.fired.add("watchdog_timeout")
            return [
                *out,
                self._stop_worker("deadline reached; the worker was idle"),
                *self._verify(),
            ]
        if name == "deadline_closeout":
            return self._watchdog("deadline")
        if name == "no_output":
            return self._watchdog("no_output")
        if name == "human_timeout":
            return self._human_timeout(now) if self.asks else []
        raise ValueError(f"unknown timer {name!r}")

    def _watchdog(self, kind: str) -> list[Effect]:
        self.fired.add("watchdog_timeout")
        b = self.spec.budget
        limit = b.no_output_timeout if kind == "no_output" else b.deadline
        what = (
            f"no output for {limit:g}s"
            if kind == "no_output"
            else f"deadline of {limit:g}s reached"
        )
        reason = f"watchdog: {what}"
        return [
            Emit(et.WatchdogTimeout(kind=kind, limit=limit)),
            AddReason(reason),
            *self._park(reason),
        ]

    # --- verification -----------------------------------------------------------------------

    def _verified(self, v: Verified, now: float) -> list[Effect]:
        if v.outcome == "stop":
            return self._stop(v.reasons[0] if v.reasons else "stop requested")
        self.verified_head = v.head
        if self.limits_hit and v.outcome in ("ready", "repair"):
            return self._conclude(list(self.limits_hit), list(v.reasons))
        if v.outcome == "ready":
            return self._finish(State.COMPLETED)
        if v.outcome == "park":
            return self._conclude(list(v.reasons), [])
        why_not = self._no_repair(v, now)
        if why_not is not None:
            return self._conclude([why_not], list(v.reasons))
        message = prompts.repair_message(list(v.reasons), list(v.results), list(v.findings))
        self.repair_rounds += 1
        self._repair = v
        req = et.RepairRequested(
            repair_round=self.repair_rounds, problems=list(v.reasons), message=message
        )
        return [
            Emit(req),
            SendTurn(message, key=f"repair-{self.repair_rounds}", purpose="repair"),
        ]

    def _no_repair(self, v: Verified, now: float) -> str | None:
        """Why no repair round starts, or None when one does."""
        rounds = self.spec.autonomy.max_repair_rounds
        if self.repair_limit is not None:
            rounds = self.repair_limit
        if self.past_deadline(now):
            return "deadline reached; no repair round starts after it"
        if self.repair_rounds >= rounds:
            return f"repair rounds exhausted ({rounds})"
        if not self.has_worker or not self.repairable:
            return f"worker ({self.spec.worker.kind}) cannot take a repair turn"
        if self.worker_gone or not v.worker_alive:
            return "worker is gone; a non-persistent worker is never restarted silently"
        return None

    def _conclude(self, hard: list[str], fixable: list[str]) -> list[Effect]:
        return [*(AddReason(p, once=True) for p in [*hard, *fixable]), *self._finish(State.BLOCKED)]


def _message_event(
    m: HumanMessage,
    status: Literal["queued", "delivered", "dropped"],
    why: str | Unset = UNSET,
) -> Emit:
    """`worker_message_sent`: what became of a person's message to the worker."""
    return Emit(
        et.WorkerMessageSent(text=m.text, by=m.by, via=m.via, ref=m.ref, status=status, why=why)
    )
