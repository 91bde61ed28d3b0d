"""The cost ledger: what each task spent, per turn, repair round, reviewer and decider call.

Recorded where it happens: `turn_completed` events carry the worker's cost, tokens and
repair round; `model_call` events carry each reviewer and decider call (reported here by
gitsup/verification/agent_call.py and by command reviewers that print `cost_usd`). The candidate note
holds the breakdown (`cost`). `git sup cost` sums it from Git: the sealed event logs
(`refs/sup/<id>/log`) and the notes, falling back to the local write-ahead log for events
not sealed yet.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitsup import jsonio
from gitsup.names import RECORD_FILE
from gitsup.store.eventtypes import ModelCall
from gitsup.store.payload import UNSET

if TYPE_CHECKING:
    from gitsup.store.suprepo import SupRepo

# Where a reviewer's or decider's model calls are reported: handed to the call by whoever
# runs it (the task's supervisor writes each as a `model_call` event); None: not counted.
CallSink = Callable[[ModelCall], object]


def report_call(
    sink: CallSink | None,
    role: str,
    cost_usd: float | None,
    usage: Mapping[str, Any] | None,
    models: Sequence[str] = (),
) -> None:
    if sink is None:
        return
    try:
        sink(
            ModelCall(
                role=role,
                cost_usd=float(cost_usd) if cost_usd is not None else None,
                usage=dict(usage or {}),
                models=list(models) if models else UNSET,
            )
        )
    except Exception:  # accounting never breaks a review or a decision
        return


def role_of(label: str) -> str:
    if label.endswith("-review") or label == "review":
        return "reviewer"
    if label.startswith("decider"):
        return "decider"
    return label


def report_from_output(sink: CallSink | None, role: str, output: str) -> None:
    """A command reviewer/decider may print `"cost_usd"` (and `"usage"`) in its JSON."""
    try:
        obj = json.loads(output)
    except ValueError:
        return
    if isinstance(obj, dict) and isinstance(obj.get("cost_usd"), int | float):
        usage = obj.get("usage")
        report_call(sink, role, float(obj["cost_usd"]), usage if isinstance(usage, dict) else None)


# --- one task ---------------------------------------------------------------------------

TOKEN_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


@dataclass
class TaskCost:
    task: str
    turns: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    by_day: dict[str, float] = field(default_factory=dict)

    @property
    def worker_usd(self) -> float:
        return round(sum(float(t["cost_usd"]) for t in self.turns), 6)

    def role_usd(self, role: str) -> float:
        return round(sum(float(c["cost_usd"]) for c in self.calls if c["role"] == role), 6)

    @property
    def total_usd(self) -> float:
        return round(self.worker_usd + sum(float(c["cost_usd"]) for c in self.calls), 6)

    @property
    def stand_in_usd(self) -> float:
        """The part of `total_usd` priced for a model API on this machine (127.0.0.1): the
        scripted stand-in, or a local gateway; the agent prices it as if it were the real
        model, so it is said apart."""
        items = (*self.turns, *self.calls)
        return round(sum(float(i["cost_usd"]) for i in items if i.get("stand_in")), 6)

    def tokens(self) -> dict[str, int]:
        out = dict.fromkeys(TOKEN_KEYS, 0)
        for item in (*self.turns, *self.calls):
            for k in TOKEN_KEYS:
                v = (item.get("usage") or {}).get(k)
                if isinstance(v, int):
                    out[k] += v
        return out

    def rounds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for t in self.turns:
            key = "initial" if not t["round"] else f"repair {t['round']}"
            out[key] = round(out.get(key, 0.0) + t["cost_usd"], 6)
        return out

    def breakdown(self) -> dict[str, Any]:
        return {
            "total_usd": self.total_usd,
            "stand_in_usd": self.stand_in_usd,
            "worker_usd": self.worker_usd,
            "reviewer_usd": self.role_usd("reviewer"),
            "decider_usd": self.role_usd("decider"),
            "rounds": self.rounds(),
            "turns": self.turns,
            "calls": self.calls,
            "tokens": self.tokens(),
        }


def _day(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d")


def task_cost(
    task: str, events: Iterable[Mapping[str, Any]], since: float | None = None
) -> TaskCost:
    """Fold events into a TaskCost; events before `since` (a UNIX time) are left out."""
    tc = TaskCost(task)
    rnd = 0
    local = False  # the worker's model API is on this machine
    for ev in events:
        t = ev.get("type")
        d = ev.get("data") or {}
        ts = float(ev.get("ts") or 0.0)
        if t == "worker_started":
            net = d.get("network")
            local = isinstance(net, dict) and net.get("model_local") is True
            continue
        if t == "repair_requested":
            r = d.get("round")
            rnd = int(r) if isinstance(r, int) else rnd + 1
            continue
        if t not in ("turn_completed", "model_call"):
            continue
        cost = d.get("cost_usd")
        if not isinstance(cost, int | float) or (t == "turn_completed" and d.get("paused")):
            cost = 0.0
        if since is not None and ts < since:
            continue
        usage = d.get("usage") if isinstance(d.get("usage"), dict) else {}
        item = {"seq": ev.get("seq"), "ts": ts, "cost_usd": float(cost), "usage": usage}
        if local:
            item["stand_in"] = True
        if t == "turn_completed":
            r = d.get("round")
            tc.turns.append({**item, "round": int(r) if isinstance(r, int) else rnd})
        else:
            tc.calls.append({**item, "role": str(d.get("role") or "call")})
        day = _day(ts)
        tc.by_day[day] = round(tc.by_day.get(day, 0.0) + float(cost), 6)
    return tc


# --- the repository -----------------------------------------------------------------------


def sealed_events(ctx: SupRepo, task: str) -> list[dict[str, Any]]:
    """The task's events from Git (sealed segments), then any newer ones from the WAL."""
    from gitsup.ids import TaskId
    from gitsup.layout import task_refs
    from gitsup.store.events import EventLog

    events: list[dict[str, Any]] = []
    tip = ctx.repo.ref_target(task_refs(TaskId(task))["log"])
    if tip is not None:
        for _name, data in ctx.repo.read_tree_blobs(tip):
            for line in data.splitlines():
                try:
                    ev = jsonio.loads(line)
                except ValueError:
                    continue
                if isinstance(ev, dict) and "seq" in ev:
                    events.append(ev)
    events.sort(key=lambda e: int(e.get("seq", 0)))
    last = int(events[-1]["seq"]) if events else 0
    path = ctx.layout.events(TaskId(task))
    if path.exists() or path.parent.exists():
        for ev in EventLog(path, TaskId(task)).read():
            if ev.seq > last:
                events.append(ev.as_dict())
    return events


def task_ids(ctx: SupRepo) -> list[str]:
    """Tasks known from Git (log refs) and from the local task directories."""
    ids: set[str] = set()
    refs = ctx.repo.common_dir / "refs" / "sup"
    if refs.is_dir():
        ids.update(p.name for p in refs.iterdir() if (p / "log").exists())
    packed = ctx.repo.common_dir / "packed-refs"
    if packed.exists():
        for line in packed.read_text(errors="replace").splitlines():
            parts = line.split(" ", 1)
            name = parts[-1]
            # refs/sup/<id>/log (not refs/sup/queue/<branch>/log)
            if (
                len(parts) == 2
                and name.startswith("refs/sup/")
                and name.endswith("/log")
                and name.count("/") == 3
            ):
                ids.add(name.split("/")[2])
    if ctx.layout.tasks.is_dir():
        ids.update(p.name for p in ctx.layout.tasks.iterdir() if (p / RECORD_FILE).exists())
    return sorted(ids)


def outcome(ctx: SupRepo, task: str) -> str:
    """integrated | ready | discarded | parked | failed | stopped | running."""
    from gitsup.ids import Oid, TaskId
    from gitsup.layout import task_refs

    raw: dict[str, Any] = {}
    path = ctx.layout.record(TaskId(task))
    try:
        loaded = json.loads(path.read_bytes())
        raw = loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError):
        raw = {}
    cand = raw.get("candidate") or ctx.repo.ref_target(task_refs(TaskId(task))["candidate"])
    if cand:
        note = None
        try:
            note = ctx.repo.read_note(Oid(str(cand)))
        except Exception:
            note = None
        if note:
            try:
                obj = json.loads(note)
            except ValueError:
                obj = {}
            if isinstance(obj, dict) and (
                obj.get("integrated_into") or obj.get("status") == "integrated"
            ):
                return "integrated"
    status = str(raw.get("status") or "")
    if status == "integrated":
        return "integrated"
    if raw.get("discarded_at"):
        return "discarded"
    if status in ("ready", "parked", "failed", "stopped"):
        return status
    return "running" if raw else "unknown"


def cost_summary(ctx: SupRepo, since: float | None = None) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = []
    by_day: dict[str, float] = {}
    by_outcome: dict[str, dict[str, Any]] = {}
    total = stand_in = 0.0
    tokens = dict.fromkeys(TOKEN_KEYS, 0)
    for task in task_ids(ctx):
        tc = task_cost(task, sealed_events(ctx, task), since)
        if since is not None and not tc.turns and not tc.calls:
            continue
        out = outcome(ctx, task)
        b = tc.breakdown()
        tasks.append(
            {
                "task": task,
                "outcome": out,
                "total_usd": b["total_usd"],
                "stand_in_usd": b["stand_in_usd"],
                "worker_usd": b["worker_usd"],
                "reviewer_usd": b["reviewer_usd"],
                "decider_usd": b["decider_usd"],
                "turns": len(tc.turns),
                "calls": len(tc.calls),
                "rounds": b["rounds"],
                "tokens": b["tokens"],
                "by_day": tc.by_day,
            }
        )
        total += tc.total_usd
        stand_in += tc.stand_in_usd
        for k, v in b["tokens"].items():
            tokens[k] += v
        for day, usd in tc.by_day.items():
            by_day[day] = round(by_day.get(day, 0.0) + usd, 6)
        o = by_outcome.setdefault(out, {"tasks": 0, "total_usd": 0.0})
        o["tasks"] += 1
        o["total_usd"] = round(o["total_usd"] + tc.total_usd, 6)
    integrated = by_outcome.get("integrated", {}).get("tasks", 0)
    return {
        "repository": str(ctx.repo.main_workdir),
        "since": since,
        "total_usd": round(total, 6),
        "stand_in_usd": round(stand_in, 6),
        "tokens": tokens,
        "tasks": tasks,
        "by_day": dict(sorted(by_day.items())),
        "by_outcome": by_outcome,
        "cost_per_integrated_change_usd": round(total / integrated, 6) if integrated else None,
    }
