"""How the task commands show a task: live progress of a running one, a finished one's
summary, a best-of-N group side by side. Defines no command (importing it registers none)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from gitsup.cli.output import fold, out, paint, progress, use_colour
from gitsup.durations import format_duration

if TYPE_CHECKING:
    from gitsup.store.events import Event
    from gitsup.store.eventtypes import WorkerStopped
    from gitsup.store.record import TaskRecord
    from gitsup.store.suprepo import SupRepo


_QUIET_TYPES = {"worker_output", "protocol_noise"}
_CHECK_TAIL_LINES = 12


class ProgressRenderer:
    """One line per event on stderr: elapsed time, how long each phase took, colour on a
    terminal (NO_COLOR honoured), folded worker output that says how much was folded."""

    def __init__(self, budget: Any = None) -> None:
        import time

        from gitsup.attention.fold import BudgetLimits, Tracker

        self._clock = time.monotonic
        self._t0 = self._clock()
        self._phase_t0 = self._t0
        self._stopped_shown = False
        self._refused: dict[tuple[str, int], int] = {}
        self._outcome: tuple[str, str] | None = None
        self._colour = use_colour()
        # On a terminal, the task's status line (as `git sup watch` shows it) stays below.
        self._tracker = Tracker("", budget=budget or BudgetLimits())
        self._status_line = self._colour

    def __call__(self, ev: Event) -> None:
        import time

        from gitsup.attention.fold import tracker_line

        self._tracker.feed(ev.as_dict())
        if self._status_line:
            sys.stderr.write("\r\033[K")
        self._render(ev)
        if self._status_line and ev.type != "task_finished":
            sys.stderr.write(paint(tracker_line(self._tracker, time.time())[:200], "dim", True))
            sys.stderr.flush()

    def _line(self, text: str, colour: str | None = None) -> None:
        el = self._clock() - self._t0
        stamp = paint(f"[{format_duration(el) if el >= 60 else f'{el:.1f}s'}]", "dim", self._colour)
        progress(f"{stamp} {paint(text, colour, self._colour) if colour else text}")

    def _flush_outcome(self) -> None:
        if self._outcome is not None:
            text, colour = self._outcome
            self._outcome = None
            self._line(text, colour)

    def _render(self, ev: Event) -> None:
        d = ev.data
        t = ev.type
        if t in _QUIET_TYPES:
            if t == "worker_output":
                for line in fold(str(d.get("text", ""))):
                    progress(f"  | {line}")
            return
        from gitsup.store import eventtypes as et
        from gitsup.store.payload import given

        match ev.payload:
            case et.StateChanged() as p:
                now = self._clock()
                took = now - self._phase_t0
                self._phase_t0 = now
                text = f"{p.from_} -> {p.to}" + (f" ({p.reason})" if p.reason else "")
                self._line(f"{text} [{p.from_} took {took:.1f}s]", "bold")
                self._flush_outcome()
            case et.WorkerStarted() as p:
                self._stopped_shown = False
                self._line(f"worker started: {p.kind} pid {p.pid}")
            case et.WorkerStopped() as p:
                verified = given(p.verified_empty)
                if given(p.cgroup) and verified and self._stopped_shown:
                    return  # the same stop, its cgroup proved empty
                if self._stopped_shown and not given(p.guarantee) and verified is None:
                    return
                self._stopped_shown = True
                colour = "yellow" if given(p.guarantee) else None
                self._line("worker stopped: " + _stopped_text(p), colour)
            case et.PermissionDecided() as p:
                if given(p.cancelled):
                    return
                self._line(
                    f"permission {given(p.tool)}: {given(p.verdict)} [{given(p.rule)}]"
                    f" -> {given(p.answer)}"
                )
            case et.AcceptanceStarted() as p:
                self._line(f"check {p.name}: running")
            case et.AcceptanceResult() as p:
                self._line(
                    f"check {p.name}: {'passed' if p.passed else 'FAILED'} "
                    f"(exit {p.exit_code}, {p.duration}s)",
                    "green" if p.passed else "red",
                )
                if not p.passed:
                    for line in check_tail(p.output_tail):
                        progress(f"  | {line}")
            case et.TurnCompleted() as p:
                if given(p.is_error):
                    sub = p.subtype
                    self._line(
                        "turn ended with an error" + (f" ({sub})" if sub != "success" else ""),
                        "red",
                    )
                else:
                    self._line(f"turn completed ({p.subtype})")
            case et.ModelError() as p:
                what = {"auth": "authentication failed", "unreachable": "unreachable"}.get(
                    p.kind, "error"
                )
                self._line(f"model API {what}: {p.message}", "red")
                self._line(f"  what to do: {p.hint}", "yellow")
            case et.WorkerInputStalled() as p:
                self._line(f"worker input stalled: {p.reason}", "red")
            case et.WorkerLeftBehind() as p:
                self._line(f"worker left behind: {'; '.join(p.what)}", "red")
            case et.CandidateReady() | et.CandidateParked() | et.CandidateFailed() as p:
                colour = {"candidate_ready": "green", "candidate_failed": "red"}.get(t, "yellow")
                cand = given(p.candidate)
                # the outcome is written before the terminal transition; it reads after it
                self._outcome = (t.replace("_", " ") + (f": {cand[:12]}" if cand else ""), colour)
            case et.WipSaved() as p if p.not_captured:
                self._line(f"uncommitted work saved in {p.ref}")
                for item in p.not_captured:
                    self._line(f"  NOT captured: {not_captured_text(item)}", "yellow")
            case et.StopRequested() as p:
                self._line(f"stop requested: {p.reason}", "yellow")
            case et.EgressRefused() as p:
                key = (p.host, p.port)
                seen = self._refused.get(key, 0)
                folded = given(p.repeats)  # refusals the log folded into this record
                self._refused[key] = seen + (folded if folded else 1)
                if not seen:  # repeats are counted, shown at the summary
                    self._line(egress_refused_text(p.host, p.port, p.reason, p.who), "yellow")
            case et.EgressSummary() as p:
                repeats = ", ".join(
                    f"{h}:{port} x{n}" for (h, port), n in self._refused.items() if n > 1
                )
                self._line(
                    f"egress ({p.who}): {p.connections} connection(s), {p.refused} refused"
                    + (f" (repeated: {repeats})" if repeats else "")
                )
            case et.TaskFinished():
                self._flush_outcome()
            case _:
                self._line(t.replace("_", " ") + (f": {brief(d)}" if d else ""))


def egress_refused_text(host: str, port: int, reason: str, who: str = "") -> str:
    """A refused connection as what it is, and the setting that would allow it."""
    where = f"{host}:{port}" if port else host or "?"
    allow = (
        f"; allow it with `git config --add sup.egress {where}` (or [isolation] egress)"
        if port and "not an allowed" in reason
        else ""
    )
    by = f" ({who})" if who else ""
    return f"network{by}: {where} refused by the egress gate: {reason}{allow}"


def brief(data: Any, width: int = 160) -> str:
    """An event's fields as `key=value` pairs cut between pairs (never inside a value), with
    how many were left out."""
    if not isinstance(data, dict):
        return json.dumps(data)[:width]
    parts: list[str] = []
    used = 0
    for k, v in data.items():
        text = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        if len(text) > 60:
            text = f"<{type(v).__name__}, {len(text)} chars>"
        part = f"{k}={text}"
        if parts and used + len(part) > width:
            parts.append(f"(+{len(data) - len(parts)} more)")
            break
        parts.append(part)
        used += len(part) + 1
    return " ".join(parts)


def _stopped_text(p: WorkerStopped) -> str:
    from gitsup.store.payload import given

    if given(p.guarantee):
        return f"{given(p.containment)} ({given(p.guarantee)})"
    if given(p.cgroup):
        return "cgroup " + ("verified empty" if given(p.verified_empty) else "NOT verified empty")
    if given(p.reason):
        return f"{given(p.reason)} ({given(p.how)})"
    rc, sig = given(p.returncode), given(p.signal)
    return f"exited ({given(p.classification)}, rc={rc}" + (f", signal {sig})" if sig else ")")


def check_tail(text: str, lines: int = _CHECK_TAIL_LINES) -> list[str]:
    return fold(text, lines=lines, width=200)


def queue_evidence_lines(evidence: dict[str, Any] | None, indent: str = "  ") -> list[str]:
    """Why the queue sent a candidate back, as lines: the conflicting paths, or each failing
    composition check with the tail of its output (the same tail as a task's own check)."""
    if not evidence:
        return []
    lines = []
    conflicts = evidence.get("conflicts") or []
    if conflicts:
        lines.append(f"{indent}conflicting paths: {', '.join(conflicts[:20])}")
    for name in evidence.get("flaky") or []:
        lines.append(f"{indent}FLAKY   {name} (failed, then passed when run again on the tree)")
    composed = evidence.get("composed_on")
    for f in evidence.get("failed") or []:
        where = f" (composed on {str(composed)[:12]})" if composed else ""
        lines.append(f"{indent}FAIL    {f.get('name', '?')}{where}")
        lines += [f"{indent}        | {x}" for x in check_tail(str(f.get("output_tail", "")))]
    return lines


def queue_runner_lines(runner: dict[str, Any], indent: str = "  ") -> list[str]:
    """A live queue runner (its `runner.json`): its slots, what is under test in each, and
    the predicted order (`git sup queue`, `git sup watch`)."""
    lines = [f"{indent}runner pid {runner['pid']}, {runner['slots']} slot(s)"]
    for u in runner.get("under_test", []):
        lines.append(
            f"{indent}  slot {u['slot']}: {len(u['tasks'])} candidate(s) on "
            f"{u['tree'][:12]} ({', '.join(u['checks'])}): {' '.join(u['tasks'])}"
        )
    if runner.get("predicted"):
        lines.append(f"{indent}  predicted order: {' '.join(runner['predicted'])}")
    return lines


def not_captured_text(item: dict[str, Any]) -> str:
    return f"{item.get('path')} ({item.get('bytes', '?')} bytes: {item.get('why')})"


def group_next_steps(g: dict[str, Any], branch: str | None) -> list[str]:
    """What to do with a best-of-N group's choice: integrate or queue it, or look closer."""
    chosen = g.get("chosen")
    if not chosen:
        return ["no attempt is ready; look at them: `git sup show <id>` (ids above)"]
    into = g.get("queued_into")
    if into:
        return [f"next: `git sup queue run --into {into}` (the chosen {chosen} is queued)"]
    target = branch or "<branch>"
    return [
        f"next: `git sup integrate {chosen} --into {target}`, "
        f"or `git sup queue add {chosen} --into {target}`; "
        f"`git sup report {chosen} -o page.html` to review it first"
    ]


def print_group(g: dict[str, Any]) -> None:
    out(f"group {g['group']}: {len(g['members'])} attempts from {g['baseline'][:12]}")
    out(
        f"  {'TASK':16} {'STATUS':10} {'CHECKS':>7} {'REVIEW':8} {'FINDINGS':>8} "
        f"{'FILES':>5} {'LINES':>6} {'COST':>8} {'TIME':>7}  WORKER"
    )
    for r in g["ranking"]:
        mark = "*" if r["task"] == g.get("chosen") else " "
        secs = "-" if r["seconds"] is None else f"{r['seconds']:.1f}s"
        out(
            f"{mark} {r['task']:16} {r['status']:10} {r['checks_passed']:>3}/{r['checks_total']:<3} "
            f"{r['verdict'] or '-':8} {r['findings']:>8} {r['files']:>5} {r['lines']:>6} "
            f"${r['cost_usd']:>7.4f} {secs:>7}  {r['worker']}"
        )
    if g.get("chosen"):
        out(f"chosen: {g['chosen']} (recorded in the note on {g['ref']})")
    elif g.get("finished"):
        out("no attempt has a ready candidate")
    else:
        out("still running: the choice is made when every attempt has finished")
    if g.get("queued_into"):
        out(f"queued into {g['queued_into']}: `git sup queue run`")


def print_summary(ctx: SupRepo, record: TaskRecord) -> None:
    out(f"task {record.id}: {record.status.value} ({record.state.value})")
    if record.candidate:
        out(f"candidate: {record.candidate}  (refs/sup/{record.id}/candidate)")
    if record.wip:
        out(f"uncommitted work saved: {record.wip}  (refs/sup/{record.id}/wip)")
    for item in record.not_captured:
        out(f"  NOT saved: {not_captured_text(item)}")
    for r in record.reasons:
        out(f"  reason: {r}")
    if record.candidate:
        out(f"inspect: git log --notes=sup {record.baseline[:12]}..refs/sup/{record.id}/candidate")


def comment_lines(listed: dict[str, Any]) -> list[str]:
    """The comments as text lines (`comment --list`, `show`), every person's word escaped."""
    lines: list[str] = []
    for c in [*listed.get("revises", []), *listed.get("comments", [])]:
        where = f"{safe_text(str(c.get('path')))}:{c.get('line')}"
        origin = f" (of task {c['task']})" if c.get("task") != listed.get("task") else ""
        status = str(c.get("status"))
        o = c.get("outcome")
        if o:
            status += f" -> {o.get('task')}: {o.get('status')}"
        lines.append(f"{c.get('id')}{origin} {where} [{status}] {safe_text(str(c.get('by')), 80)}")
        for text in str(c.get("message", "")).splitlines()[:20]:
            lines.append("    " + safe_text(text))
    return lines


def safe_text(text: str, limit: int = 400) -> str:
    from gitsup.supervision.prompts import printable

    s = printable(text)
    return s if len(s) <= limit else s[:limit] + "…"


def print_cluster_result(result: dict[str, Any]) -> None:
    """A cluster task's final record as its workflow returned it (docs/cluster.md)."""
    task = result.get("task")
    where = f" on {result['host']}" if result.get("host") else ""
    out(f"task {task}: {result.get('state')} ({result.get('status')}){where}")
    if result.get("candidate"):
        out(f"candidate {result['candidate']} (refs/sup/{task}/candidate)")
    if result.get("wip"):
        out(f"uncommitted work saved in refs/sup/{task}/wip")
    for reason in result.get("reasons") or []:
        out(f"  {reason}")
