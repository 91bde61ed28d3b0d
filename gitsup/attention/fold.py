"""What each task is doing and whether it needs a person, folded from its events.

`Tracker` folds one task's events (in order) into a live picture: phase, what it waits
for, turns, cost, last activity, and the reasons it needs a human. The same fold runs in
`git sup watch` (over the event logs on disk, read incrementally), in the status line of
a foreground `git sup start`, and in the supervisor's notifier, so all three agree.

A task needs a human when it is paused for human input, parked, blocked on a request the
decider failed to answer, its budget (turns, cost, deadline) is nearly spent, or its
supervisor is gone while the task has not ended.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsup import jsonio
from gitsup.layout import Layout
from gitsup.names import RECORD_FILE, SPEC_FILE

NEARLY = 0.8  # a budget is nearly spent at 80 %
TERMINAL_STATES = frozenset({"completed", "blocked", "failed", "stopped"})


@dataclass
class BudgetLimits:
    max_turns: int | None = None
    max_cost_usd: float | None = None
    deadline: float | None = None  # seconds after the start

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> BudgetLimits:
        b = (spec or {}).get("budget") or {}
        if not isinstance(b, Mapping):
            return cls()

        def num(key: str) -> float | None:
            v = b.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        turns = num("max_turns")
        return cls(int(turns) if turns is not None else None, num("max_cost_usd"), num("deadline"))


@dataclass
class Tracker:
    """The fold of one task's events. Feed events in seq order."""

    task: str
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    state: str = "idle"
    status: str = "pending"
    started_at: float | None = None
    finished_at: float | None = None
    last_ts: float | None = None
    last_type: str = ""
    turns: int = 0
    worker_cost: float = 0.0
    call_cost: float = 0.0
    checks_total: int = 0
    checks_done: int = 0
    checks_failed: int = 0
    reviewing: bool = False
    repair_round: int = 0
    deadline_warned: bool = False
    decider_failed: bool = False
    goal: str = ""
    last_reason: str = ""
    queue_repair: str = ""  # the repair task the integration queue started for it
    seq: int = 0
    pending: dict[str, str] = field(default_factory=dict)  # request id -> tool, being decided
    # asks waiting for a person (a human decider): request id -> request_id, tool, summary, since
    asks: dict[str, dict[str, Any]] = field(default_factory=dict)
    budget_paused: str = ""  # why the task waits for `git sup continue` ("" when it does not)
    paused_for_ask: bool = False  # paused by an ask, not by a person typing into the worker
    user_paused: str = ""  # who paused the task with `git sup pause` ("" when nobody did)

    @property
    def cost(self) -> float:
        return round(self.worker_cost + self.call_cost, 6)

    def feed(self, ev: Mapping[str, Any]) -> None:
        t = str(ev.get("type", ""))
        d = ev.get("data") or {}
        if not isinstance(d, Mapping):
            d = {}
        ts = ev.get("ts")
        if isinstance(ts, int | float):
            self.last_ts = float(ts)
            if self.started_at is None:
                self.started_at = float(ts)
        self.seq = int(ev.get("seq") or self.seq)
        if t in ("worker_output", "protocol_noise", "notification"):
            if t == "worker_output":
                self.last_type = t
            return
        self.last_type = t
        if t == "task_started":
            checks = d.get("checks")
            self.checks_total = len(checks) if isinstance(checks, list) else 0
            self.goal = str(d.get("goal") or "")
        elif t == "state_changed":
            self.state = str(d.get("to") or self.state)
            reason = str(d.get("reason") or "")
            self.paused_for_ask = self.state == "paused" and reason.startswith("needs human:")
            if self.state == "verifying":
                self.checks_done = self.checks_failed = 0
                self.reviewing = False
            if d.get("reason"):
                self.last_reason = str(d["reason"])
        elif t == "permission_pending":
            self.pending[str(d.get("request_id"))] = str(d.get("tool") or "a tool")
        elif t == "permission_decided":
            self.pending.pop(str(d.get("request_id")), None)
            self.asks.pop(str(d.get("request_id")), None)
        elif t == "human_ask":
            rid = str(d.get("request_id"))
            self.asks[rid] = {
                "request_id": rid,
                "tool": str(d.get("tool") or "a tool"),
                "summary": str(d.get("summary") or ""),
                "since": ts if isinstance(ts, int | float) else None,
            }
        elif t in ("human_answer", "human_timeout"):
            self.asks.pop(str(d.get("request_id")), None)
        elif t in ("recovered", "worker_started"):
            # a new supervisor or worker: what the old one waited for is gone with it
            self.asks.clear()
            self.budget_paused = ""
            self.paused_for_ask = False
        elif t == "task_paused":
            self.user_paused = str(d.get("by") or "unknown")
        elif t == "task_resumed":
            self.user_paused = ""
        elif t == "budget_paused":
            self.budget_paused = str(d.get("reason") or "budget exhausted")
        elif t == "budget_continued":
            self.budget_paused = str(d.get("still_exceeded") or "")
        elif t == "acceptance_result":
            self.checks_done += 1
            if not d.get("passed"):
                self.checks_failed += 1
        elif t == "review_started":
            self.reviewing = True
        elif t == "review_result":
            if not d.get("attempt"):
                self.reviewing = False
        elif t == "turn_completed":
            n = d.get("num_turns")
            self.turns += int(n) if isinstance(n, int) and n > 0 else 1
            c = d.get("cost_usd")
            if isinstance(c, int | float) and not d.get("paused"):
                self.worker_cost += float(c)
        elif t == "model_call":
            c = d.get("cost_usd")
            if isinstance(c, int | float):
                self.call_cost += float(c)
        elif t == "repair_requested":
            r = d.get("round")
            self.repair_round = int(r) if isinstance(r, int) else self.repair_round + 1
        elif t == "deadline_approaching":
            self.deadline_warned = True
        elif t == "decision" and d.get("error"):
            self.decider_failed = True
        elif t == "decision":
            self.decider_failed = False
        elif t == "task_finished":
            self.user_paused = ""
            self.pending.clear()
            self.asks.clear()
            self.budget_paused = ""
            self.state = str(d.get("state") or self.state)
            self.status = str(d.get("status") or self.status)
            self.finished_at = self.last_ts
        elif t == "integrated":
            self.status = "integrated"

    # --- derived --------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_STATES

    def waiting_for(self) -> str:
        s = self.state
        if s == "idle":
            return "start"
        if s == "starting":
            return "the worker to start"
        if self.user_paused and not self.ended:
            return f"a human: `git sup resume {self.task}` (paused by {self.user_paused})"
        if self.asks and not self.ended:
            return "a human: " + ", ".join(f"`git sup answer {self.task} {r}`" for r in self.asks)
        if self.budget_paused and not self.ended:
            return f"a human: `git sup continue {self.task}`"
        if s == "running" and self.pending:
            return (
                "a permission being decided (" + ", ".join(sorted(set(self.pending.values()))) + ")"
            )
        if s == "running":
            return (
                f"the worker (repair round {self.repair_round})"
                if self.repair_round
                else "the worker"
            )
        if s == "waiting":
            return "the decider"
        if s == "paused" and self.paused_for_ask:
            return "the worker (answered)"
        if s == "paused":
            return "a human (then `git sup resume-auto`)"
        if s == "verifying":
            if self.reviewing:
                return "review"
            return f"checks {self.checks_done}/{self.checks_total}"
        if self.status == "parked" and self.queue_repair:
            return f"its queue repair task {self.queue_repair}"
        if self.status == "parked":
            return "a human: the candidate is parked"
        return "-"

    def budget_notes(self, now: float) -> list[str]:
        """Budgets at or over NEARLY of their limit (only while the task runs)."""
        if self.ended:
            return []
        out: list[str] = []
        b = self.budget
        if b.max_turns and self.turns >= NEARLY * b.max_turns:
            out.append(f"turns {self.turns}/{b.max_turns}")
        if b.max_cost_usd and self.worker_cost >= NEARLY * b.max_cost_usd:
            out.append(f"cost ${self.worker_cost:.2f}/${b.max_cost_usd:g}")
        if self.deadline_warned or (
            b.deadline and self.started_at and now - self.started_at >= NEARLY * b.deadline
        ):
            out.append("deadline near")
        return out

    def attention(self, now: float | None = None) -> list[str]:
        """Why a person is needed now (empty: nobody is)."""
        now = time.time() if now is None else now
        out: list[str] = []
        if not self.ended:
            if self.user_paused:
                out.append(f"paused by {self.user_paused} (`git sup resume {self.task}`)")
            out += [f"needs human: {a['tool']} {a['summary']}" for a in self.asks.values()]
            if self.budget_paused:
                out.append(f"needs human: {self.budget_paused} (`git sup continue {self.task}`)")
        if self.state == "paused" and not self.paused_for_ask:
            out.append("paused for human input")
        if self.status == "parked" and not self.queue_repair:
            out.append("parked" + (f": {self.last_reason}" if self.last_reason else ""))
        if self.decider_failed and not self.ended:
            out.append("the decider failed to answer")
        notes = self.budget_notes(now)
        if notes:
            out.append("budget nearly spent: " + ", ".join(notes))
        return out


# --- reading many tasks from disk (watch, ls) ---------------------------------------------


@dataclass
class _Tail:
    tracker: Tracker
    offset: int = 0
    inode: int = -1
    record_key: tuple[int, int] = (-1, -1)
    record: dict[str, Any] = field(default_factory=dict)
    spec_read: bool = False


class Board:
    """Every task of a repository, kept current by reading only what was appended."""

    def __init__(
        self,
        layout: Layout,
        *,
        tail_bytes: int | None = None,
        records: Mapping[str, dict[str, Any]] | None = None,
        only_given: bool = False,
    ) -> None:
        """`tail_bytes`: on the first read of a log, fold only its last bytes (enough for
        who-needs-a-human, which the record and the latest events decide; `ls` uses it).
        `records`: task records the caller already read (by id), used on the first refresh
        instead of reading them again; `only_given`: these tasks only."""
        self.layout = layout
        self._given = dict(records) if records is not None else {}
        self._only = list(self._given) if only_given else None
        self.tail_bytes = tail_bytes
        self._tails: dict[str, _Tail] = {}
        self.new_events: list[dict[str, Any]] = []

    def refresh(self, *, keep_events: bool = False) -> list[TaskStatus]:
        self.new_events = []
        now = time.time()
        rows: list[TaskStatus] = []
        try:
            names = self._only if self._only is not None else os.listdir(self.layout.tasks)
        except FileNotFoundError:
            names = []
        base = str(self.layout.tasks)
        for name in names:
            tdir = os.path.join(base, name)
            tail = self._tails.get(name)
            if tail is None:
                tail = self._tails[name] = _Tail(Tracker(name))
            given = self._given.pop(name, None)
            if given:
                tail.record = given
            elif not self._read_record(tdir, tail):
                continue
            rec = tail.record
            if (
                self.tail_bytes is not None
                and rec.get("state") in TERMINAL_STATES
                and rec.get("status") != "parked"
            ):
                # Ended and not parked: nobody is needed, whatever the events say.
                rows.append(status_of(tail.tracker, rec, now))
                continue
            ended = self.tail_bytes is not None and rec.get("state") in TERMINAL_STATES
            if not tail.spec_read and not ended:  # an ended task's budget needs no one
                tail.spec_read = True
                try:
                    with open(os.path.join(tdir, SPEC_FILE), "rb") as f:
                        spec = json.loads(f.read())
                except (OSError, ValueError):
                    spec = {}
                tail.tracker.budget = BudgetLimits.from_spec(
                    spec if isinstance(spec, dict) else None
                )
            self._read_events(os.path.join(tdir, "events.jsonl"), tail, keep_events)
            rows.append(status_of(tail.tracker, tail.record, now))
        return sort_rows(rows)

    @staticmethod
    def _read_record(tdir: str, tail: _Tail) -> bool:
        path = os.path.join(tdir, RECORD_FILE)
        try:
            st = os.stat(path)
        except OSError:
            return False
        key = (st.st_mtime_ns, st.st_size)
        if key != tail.record_key:
            try:
                with open(path, "rb") as f:
                    raw = jsonio.loads(f.read())
            except (OSError, ValueError):
                return bool(tail.record)
            if isinstance(raw, dict):
                tail.record, tail.record_key = raw, key
        return bool(tail.record)

    def _read_events(self, path: str, tail: _Tail, keep: bool) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            if st.st_ino != tail.inode or st.st_size < tail.offset:
                if tail.inode != -1:
                    # Rotated: the earlier events were already folded; go on in the new file.
                    tail.offset = 0
                tail.inode = st.st_ino
            start = tail.offset
            skip_partial = False
            if start == 0 and self.tail_bytes is not None and st.st_size > self.tail_bytes:
                start, skip_partial = st.st_size - self.tail_bytes, True
            if st.st_size == start:
                return
            data = os.pread(fd, st.st_size - start, start)
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1
        tail.offset = start + end
        if skip_partial:
            data = data[data.find(b"\n") + 1 : end]
            end = len(data)
        for line in data[:end].splitlines():
            try:
                ev = jsonio.loads(line)
            except ValueError:
                continue
            if not isinstance(ev, dict) or "seq" not in ev or ev.get("seq", 0) <= tail.tracker.seq:
                continue
            tail.tracker.feed(ev)
            if keep:
                self.new_events.append(ev)


@dataclass(frozen=True)
class TaskStatus:
    id: str
    state: str
    status: str
    goal: str
    elapsed: float
    deadline: float | None
    turns: int
    max_turns: int | None
    cost_usd: float
    max_cost_usd: float | None
    last_activity: float | None
    last_event: str
    waiting_for: str
    attention: list[str]
    discarded: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def status_of(tr: Tracker, rec: Mapping[str, Any], now: float) -> TaskStatus:
    """One row: the record says state, status, turns and cost; the events say the rest."""
    state = str(rec.get("state") or tr.state)
    status = str(rec.get("status") or tr.status)
    tr.state, tr.status = state, status
    turns = int(rec.get("turns") or tr.turns)
    tr.turns = max(tr.turns, turns)
    created = float(rec.get("created_at") or tr.started_at or now)
    finished = rec.get("finished_at")
    end = float(finished) if isinstance(finished, int | float) else now
    reasons = rec.get("reasons")
    if isinstance(reasons, list) and reasons and status == "parked":
        tr.last_reason = str(reasons[-1])
    tr.queue_repair = str(rec.get("queue_repair") or "")
    paused = rec.get("paused_by_user")
    if "paused_by_user" in rec or not tr.user_paused:  # the record knows best
        tr.user_paused = str(paused.get("by") or "unknown") if isinstance(paused, dict) else ""
    if tr.user_paused and state not in TERMINAL_STATES:
        state = "paused"  # shown as such; the task's own state is the record's
    attention = tr.attention(now)
    if state not in TERMINAL_STATES and not _supervisor_alive(rec):
        attention.append("its supervisor is not running (`git sup recover`)")
    goal = str(rec.get("goal") or tr.goal)
    return TaskStatus(
        id=str(rec.get("id") or tr.task),
        state=state,
        status=status,
        goal=goal.splitlines()[0][:80] if goal else "",
        elapsed=round(end - created, 1),
        deadline=tr.budget.deadline,
        turns=tr.turns,
        max_turns=tr.budget.max_turns,
        cost_usd=round(max(float(rec.get("cost_usd") or 0.0), tr.worker_cost) + tr.call_cost, 6),
        max_cost_usd=tr.budget.max_cost_usd,
        last_activity=tr.last_ts,
        last_event=tr.last_type,
        waiting_for=tr.waiting_for(),
        attention=attention,
        discarded=bool(rec.get("discarded_at")),
    )


def _supervisor_alive(rec: Mapping[str, Any]) -> bool:
    sup = rec.get("supervisor")
    if not isinstance(sup, Mapping) or not isinstance(sup.get("pid"), int):
        # Not yet recorded (a task being prepared): not a lost supervisor.
        return True
    from gitsup.host.procid import ProcessId

    pid = ProcessId.from_dict(dict(sup))
    return bool(pid and pid.alive())


def sort_rows(rows: Iterable[TaskStatus]) -> list[TaskStatus]:
    """Tasks that need a human first, then running ones, then the rest; oldest first."""

    def key(r: TaskStatus) -> tuple[int, float, str]:
        group = 0 if r.attention else (1 if r.state not in TERMINAL_STATES else 2)
        return (group, -r.elapsed, r.id)

    return sorted(rows, key=key)


def attention_of(
    layout: Layout, records: Mapping[str, dict[str, Any]] | None = None
) -> dict[str, list[str]]:
    """Task id -> reasons, for every task that needs a human now (`records`: the task
    records by id, when the caller already read them)."""
    if records is None:
        board = Board(layout, tail_bytes=32 * 1024)
        return {r.id: r.attention for r in board.refresh() if r.attention}
    out: dict[str, list[str]] = {}
    rest: dict[str, dict[str, Any]] = {}
    for tid, rec in records.items():
        known = _ended_attention(rec)
        if known is None:
            rest[tid] = rec
        elif known:
            out[tid] = known
    if rest:  # the logs of these tasks may still say who is needed
        board = Board(layout, tail_bytes=32 * 1024, records=rest, only_given=True)
        out.update((r.id, r.attention) for r in board.refresh() if r.attention)
    return out


def _ended_attention(rec: Mapping[str, Any]) -> list[str] | None:
    """Who-needs-a-human of an ended task from its record alone, as `status_of` would find
    it (an ended task's budget and decider no longer count; a parked one is needed, for the
    record's last reason); None when its events must say (parked with no reason recorded)."""
    if rec.get("state") not in TERMINAL_STATES:
        return None
    if rec.get("status") != "parked" or rec.get("queue_repair"):
        return []  # a queue repair task carries it on: the person is needed there
    reasons = rec.get("reasons")
    if isinstance(reasons, list) and reasons:
        last = str(reasons[-1])
        return ["parked" + (f": {last}" if last else "")]
    return None


# --- text ---------------------------------------------------------------------------------


def _dur(seconds: float | None) -> str:
    from gitsup.durations import format_duration

    if seconds is None:
        return "-"
    return format_duration(max(0.0, seconds))


def line_parts(r: TaskStatus, now: float) -> list[tuple[str, str]]:
    """A row as (text, style) cells: the same in `watch`, in plain output and in `start`."""
    clock = _dur(r.elapsed) + ("/" + _dur(r.deadline) if r.deadline else "")
    turns = f"{r.turns}" + (f"/{r.max_turns}" if r.max_turns else "")
    cost = f"${r.cost_usd:.2f}" + (f"/${r.max_cost_usd:g}" if r.max_cost_usd else "")
    last = "-" if r.last_activity is None else _dur(now - r.last_activity) + " ago"
    need = "; ".join(r.attention) if r.attention else r.waiting_for
    style = {
        "ready": "green",
        "integrated": "green",
        "failed": "red",
        "parked": "yellow",
        "stopped": "yellow",
    }.get(r.status, "cyan" if r.state not in TERMINAL_STATES else "")
    return [
        (f"{r.id:16}", "bold"),
        (f"{r.state:9}", style),
        (f"{r.status:10}", style),
        (f"{clock:>12}", ""),
        (f"{turns:>7}", ""),
        (f"{cost:>11}", ""),
        (f"{last:>9}", "dim"),
        (f"  {'! ' if r.attention else ''}{need}", "bold red" if r.attention else ""),
        (f"  {r.goal}", "dim"),
    ]


HEADER = (
    f"{'ID':16} {'STATE':9} {'STATUS':10} {'ELAPSED':>12} {'TURNS':>7} {'COST':>11} "
    f"{'LAST':>9}  WAITING FOR / NEEDS  GOAL"
)


def plain_line(r: TaskStatus, now: float) -> str:
    return " ".join(text for text, _ in line_parts(r, now)).rstrip()


def tracker_line(tr: Tracker, now: float) -> str:
    """The status line of one task from its tracker alone (a foreground `start`)."""
    cost = f"${tr.cost:.2f}" + (f"/${tr.budget.max_cost_usd:g}" if tr.budget.max_cost_usd else "")
    started = tr.started_at or now
    clock = _dur(now - started) + ("/" + _dur(tr.budget.deadline) if tr.budget.deadline else "")
    turns = f"{tr.turns}" + (f"/{tr.budget.max_turns}" if tr.budget.max_turns else "")
    need = tr.attention(now)
    return f"[{tr.state}] {clock} turns {turns} cost {cost} | " + (
        "NEEDS: " + "; ".join(need) if need else f"waiting for {tr.waiting_for()}"
    )
