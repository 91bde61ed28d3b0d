"""How the task commands show a task: live progress of a running one, a finished one's
summary, a best-of-N group side by side. Defines no command (importing it registers none)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from gitsup.cli.output import fold, out, paint, progress, use_colour
from gitsup.durations import format_duration

if TYPE_CHECKING:
    from gitsup.events import Event
    from gitsup.record import TaskRecord
    from gitsup.tasks import Context


_QUIET_TYPES = {"worker_output", "protocol_noise"}
_CHECK_TAIL_LINES = 12


class ProgressRenderer:
    """One line per event on stderr: elapsed time, how long each phase took, colour on a
    terminal (NO_COLOR honoured), folded worker output that says how much was folded."""

    def __init__(self, budget: Any = None) -> None:
        import time

        from gitsup.attention import Budget, Tracker

        self._clock = time.monotonic
        self._t0 = self._clock()
        self._phase_t0 = self._t0
        self._stopped_shown = False
        self._colour = use_colour()
        # On a terminal, the task's status line (as `git sup watch` shows it) stays below.
        self._tracker = Tracker("", budget=budget or Budget())
        self._status_line = self._colour

    def __call__(self, ev: Event) -> None:
        import time

        from gitsup.attention import tracker_line

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

    def _render(self, ev: Event) -> None:
        d = ev.data
        t = ev.type
        if t in _QUIET_TYPES:
            if t == "worker_output":
                for line in fold(str(d.get("text", ""))):
                    progress(f"  | {line}")
            return
        if t == "state_changed":
            now = self._clock()
            took = now - self._phase_t0
            self._phase_t0 = now
            text = f"{d.get('from')} -> {d.get('to')}" + (
                f" ({d['reason']})" if d.get("reason") else ""
            )
            self._line(f"{text} [{d.get('from')} took {took:.1f}s]", "bold")
        elif t == "worker_started":
            self._stopped_shown = False
            self._line(f"worker started: {d.get('kind')} pid {d.get('pid')}")
        elif t == "worker_stopped":
            if d.get("cgroup") and d.get("verified_empty") and self._stopped_shown:
                return  # the same stop, its cgroup proved empty
            if self._stopped_shown and not d.get("guarantee") and d.get("verified_empty") is None:
                return
            self._stopped_shown = True
            self._line(
                "worker stopped: " + _stopped_text(d), "yellow" if d.get("guarantee") else None
            )
        elif t == "permission_decided":
            if d.get("cancelled"):
                return
            self._line(
                f"permission {d.get('tool')}: {d.get('verdict')} [{d.get('rule')}] -> {d.get('answer')}"
            )
        elif t == "acceptance_started":
            self._line(f"check {d.get('name')}: running")
        elif t == "acceptance_result":
            ok = bool(d.get("passed"))
            self._line(
                f"check {d.get('name')}: {'passed' if ok else 'FAILED'} "
                f"(exit {d.get('exit_code')}, {d.get('duration')}s)",
                "green" if ok else "red",
            )
            if not ok:
                for line in check_tail(str(d.get("output_tail") or "")):
                    progress(f"  | {line}")
        elif t == "turn_completed":
            if d.get("is_error"):
                sub = d.get("subtype")
                self._line(
                    "turn ended with an error" + (f" ({sub})" if sub != "success" else ""), "red"
                )
            else:
                self._line(f"turn completed ({d.get('subtype')})")
        elif t == "model_error":
            what = {"auth": "authentication failed", "unreachable": "unreachable"}.get(
                str(d.get("kind")), "error"
            )
            self._line(f"model API {what}: {d.get('message')}", "red")
            self._line(f"  what to do: {d.get('hint')}", "yellow")
        elif t in ("worker_input_stalled", "worker_left_behind"):
            text = d.get("reason") or "; ".join(map(str, d.get("what") or []))
            self._line(f"{t.replace('_', ' ')}: {text}", "red")
        elif t in ("candidate_ready", "candidate_parked", "candidate_failed"):
            colour = {"candidate_ready": "green", "candidate_failed": "red"}.get(t, "yellow")
            self._line(
                t.replace("_", " ") + (f": {d['candidate'][:12]}" if d.get("candidate") else ""),
                colour,
            )
        elif t == "wip_saved" and d.get("not_captured"):
            self._line(f"uncommitted work saved in {d.get('ref')}")
            for item in d["not_captured"]:
                self._line(f"  NOT captured: {not_captured_text(item)}", "yellow")
        elif t == "stop_requested":
            self._line(f"stop requested: {d.get('reason')}", "yellow")
        elif t not in ("task_finished",):
            self._line(t.replace("_", " ") + (f": {json.dumps(d)[:160]}" if d else ""))


def _stopped_text(d: dict[str, Any]) -> str:
    if d.get("guarantee"):
        return f"{d.get('containment')} ({d['guarantee']})"
    if d.get("cgroup"):
        return "cgroup " + ("verified empty" if d.get("verified_empty") else "NOT verified empty")
    if d.get("reason"):
        return f"{d['reason']} ({d.get('how')})"
    rc, sig = d.get("returncode"), d.get("signal")
    return f"exited ({d.get('classification')}, rc={rc}" + (f", signal {sig})" if sig else ")")


def check_tail(text: str, lines: int = _CHECK_TAIL_LINES) -> list[str]:
    return fold(text, lines=lines, width=200)


def not_captured_text(item: dict[str, Any]) -> str:
    return f"{item.get('path')} ({item.get('bytes', '?')} bytes: {item.get('why')})"


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


def print_summary(ctx: Context, record: TaskRecord) -> None:
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
