"""Task commands: init, start, show, ls, log, stop, discard."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt, ProtectedOpt
from gitsup.cli.output import emit_json, emit_jsonl, fold, out, paint, progress, use_colour
from gitsup.durations import format_duration
from gitsup.errors import Exit, GitsupError

if TYPE_CHECKING:
    from gitsup.events import Event
    from gitsup.record import TaskRecord
    from gitsup.spec import TaskSpec
    from gitsup.tasks import SupRepo


@app.command("init")
def init_cmd(
    protected: ProtectedOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Set up gitsup in this repository (idempotent)."""
    from gitsup.tasks import SupRepo, init_repo

    ctx = SupRepo.discover()
    res = init_repo(ctx, protected=protected, explicit=True)
    if json_out:
        emit_json(res.__dict__)
        return
    out(f"gitsup state: {res.sup_dir}")
    out("protected branches: " + " ".join(res.protected))
    for c in res.changed:
        out(f"  {c}")
    if not res.changed:
        out("  (already set up; nothing changed)")


def _spec_from_cli(
    goal: str | None,
    spec_file: Path | None,
    base: str | None,
    checks: list[str] | None,
    check_sh: list[str] | None,
    no_default_check: bool,
    worker: str | None,
    worker_kind: str | None,
    review: str | None,
    deadline: str | None,
    no_output_timeout: str | None,
    max_turns: int | None,
    max_cost: float | None,
    no_commit: bool,
    closeout_grace: str | None = None,
) -> TaskSpec:
    from gitsup.spec import load_spec, spec_from_mapping

    over: dict[str, Any] = {}
    if goal is not None:
        over["goal"] = goal
    if base is not None:
        over["base"] = base
    given: list[dict[str, Any]] = [
        {"name": _check_name(c, i), "argv": c} for i, c in enumerate(checks or [])
    ]
    given += [{"name": f"{len(given) + i + 1}-sh", "sh": c} for i, c in enumerate(check_sh or [])]
    if given:
        over["checks"] = given
    if no_default_check:
        over["default_check"] = False
    w: dict[str, Any] = {}
    if worker is not None:
        w["argv"] = worker
        w.setdefault("kind", "process")
    if worker_kind is not None:
        w["kind"] = worker_kind
    if w:
        over["worker"] = w
    if review is not None:
        over["review"] = {"kind": review}
    b: dict[str, Any] = {}
    if deadline is not None:
        b["deadline"] = deadline
    if no_output_timeout is not None:
        b["no_output_timeout"] = no_output_timeout
    if closeout_grace is not None:
        b["closeout_grace"] = closeout_grace
    if max_turns is not None:
        b["max_turns"] = max_turns
    if max_cost is not None:
        b["max_cost_usd"] = max_cost
    if b:
        over["budget"] = b
    if no_commit:
        over["autonomy"] = {"require_local_commit": False}
    if spec_file is not None:
        return load_spec(spec_file, over)
    if goal is None:
        raise GitsupError(
            "a task needs a goal",
            hint='git sup start "what to do" --check "pytest -q", or --spec task.toml',
        )
    return spec_from_mapping(over, "command line")


def _check_name(cmd: str, i: int) -> str:
    first = cmd.strip().split()[0] if cmd.strip() else f"check{i + 1}"
    return f"{i + 1}-{Path(first).name or 'check'}"


_QUIET_TYPES = {"worker_output", "protocol_noise"}
_CHECK_TAIL_LINES = 12


class ProgressRenderer:
    """One line per event on stderr: elapsed time, how long each phase took, colour on a
    terminal (NO_COLOR honoured), folded worker output that says how much was folded."""

    def __init__(self, budget: Any = None) -> None:
        import time

        from gitsup.attention import BudgetLimits, Tracker

        self._clock = time.monotonic
        self._t0 = self._clock()
        self._phase_t0 = self._t0
        self._stopped_shown = False
        self._colour = use_colour()
        # On a terminal, the task's status line (as `git sup watch` shows it) stays below.
        self._tracker = Tracker("", budget=budget or BudgetLimits())
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
                self._line(f"  NOT captured: {_not_captured_text(item)}", "yellow")
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


def _not_captured_text(item: dict[str, Any]) -> str:
    return f"{item.get('path')} ({item.get('bytes', '?')} bytes: {item.get('why')})"


@app.command("start")
def start_cmd(
    goal: Annotated[str | None, typer.Argument(help="What the worker should do.")] = None,
    spec_file: Annotated[Path | None, typer.Option("--spec", help="A task.toml spec file.")] = None,
    base: Annotated[
        str | None, typer.Option("--base", help="Baseline revision (default HEAD).")
    ] = None,
    check: Annotated[
        list[str] | None,
        typer.Option(
            "--check", help="An acceptance check command (repeat); run as argv, no shell."
        ),
    ] = None,
    check_sh: Annotated[
        list[str] | None,
        typer.Option("--check-sh", help="An acceptance check run with `sh -c` (repeat)."),
    ] = None,
    no_default_check: Annotated[
        bool,
        typer.Option(
            "--no-default-check",
            help="Without checks, do not run the default `git diff --check <baseline> HEAD`.",
        ),
    ] = False,
    worker: Annotated[
        str | None,
        typer.Option("--worker", help="Worker command (a process worker unless --worker-kind)."),
    ] = None,
    worker_kind: Annotated[
        str | None, typer.Option("--worker-kind", help="process | claude | tmux | acp")
    ] = None,
    review: Annotated[
        str | None, typer.Option("--review", help="claude | command | acp | none")
    ] = None,
    deadline: Annotated[
        str | None, typer.Option("--deadline", help="Wall-clock limit, e.g. 4h.")
    ] = None,
    no_output_timeout: Annotated[
        str | None, typer.Option("--no-output-timeout", help="Stop after this long without output.")
    ] = None,
    closeout_grace: Annotated[
        str | None,
        typer.Option(
            "--closeout-grace",
            help="After the deadline, a busy worker may finish its turn this long "
            "(capped by the deadline; 0: none).",
        ),
    ] = None,
    max_turns: Annotated[int | None, typer.Option("--max-turns")] = None,
    max_cost: Annotated[float | None, typer.Option("--max-cost", help="Max cost in USD.")] = None,
    no_commit: Annotated[
        bool, typer.Option("--no-commit-required", help="Do not require a local commit.")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Run the supervisor in the background.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
    json_out: JsonOpt = False,
    attempts: Annotated[
        int | None,
        typer.Option("--attempts", min=1, max=16, help="Best-of-N: N tasks, ranked by evidence."),
    ] = None,
    queue: Annotated[
        bool, typer.Option("--queue", help="With --attempts: queue the chosen candidate.")
    ] = False,
) -> None:
    """Start a task and supervise it to a terminal state.

    Exit codes: 0 ready, 3 parked, 4 failed, 5 stopped, 2 bad input, 1 internal error,
    130 interrupted (Ctrl-C stops the task and keeps its work).
    """
    from gitsup.tasks import SupRepo, run_task, show_dict, status_exit

    spec = _spec_from_cli(
        goal,
        spec_file,
        base,
        check,
        check_sh,
        no_default_check,
        worker,
        worker_kind,
        review,
        deadline,
        no_output_timeout,
        max_turns,
        max_cost,
        no_commit,
        closeout_grace=closeout_grace,
    )
    ctx = SupRepo.discover()
    n = attempts if attempts is not None else spec.attempts.n
    if queue and (n < 2 or detach):
        raise GitsupError(
            "--queue goes with --attempts N (N >= 2) in the foreground",
            hint="otherwise queue the ready candidate: `git sup queue add ID`",
        )
    if n > 1:
        _start_group(ctx, spec, n, detach=detach, queue=queue, json_out=json_out)
        return
    if detach:
        from gitsup.detach import start_detached

        record = start_detached(ctx, spec)
        if json_out:
            emit_json(show_dict(ctx, record))
        else:
            out(record.id)
            progress(
                f"task {record.id} runs in the background; `git sup wait {record.id}` waits for it"
            )
        return

    def prepared(rec: TaskRecord) -> None:
        if not quiet:
            progress(
                f"task {rec.id}: worktree {rec.worktree} on {rec.branch} at {rec.baseline[:12]}"
            )

    from gitsup.attention import BudgetLimits

    renderer = ProgressRenderer(BudgetLimits.from_spec(spec.model_dump(mode="json")))
    record = run_task(ctx, spec, on_event=None if quiet else renderer, on_prepared=prepared)
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        _print_summary(ctx, record)
    if "stopped: signal SIGINT" in record.reasons:
        # Ctrl-C: the task was stopped and its work kept; the caller was interrupted
        raise typer.Exit(Exit.INTERRUPTED)
    raise typer.Exit(status_exit(record))


def _start_group(
    ctx: SupRepo, spec: TaskSpec, n: int, *, detach: bool, queue: bool, json_out: bool
) -> None:
    from gitsup.attempts import start_group

    res = start_group(ctx, spec, n, wait=not detach, queue_into="" if queue else None)
    if json_out:
        emit_json(res)
    else:
        out(res["group"])
        if detach:
            progress(f"{n} attempts run in the background; `git sup show {res['group']}`")
        else:
            _print_group(res)
    if not detach and not res.get("chosen"):
        raise typer.Exit(Exit.PARKED)


def _print_group(g: dict[str, Any]) -> None:
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


def _print_summary(ctx: SupRepo, record: TaskRecord) -> None:
    out(f"task {record.id}: {record.status.value} ({record.state.value})")
    if record.candidate:
        out(f"candidate: {record.candidate}  (refs/sup/{record.id}/candidate)")
    if record.wip:
        out(f"uncommitted work saved: {record.wip}  (refs/sup/{record.id}/wip)")
    for item in record.not_captured:
        out(f"  NOT saved: {_not_captured_text(item)}")
    for r in record.reasons:
        out(f"  reason: {r}")
    if record.candidate:
        out(f"inspect: git log --notes=sup {record.baseline[:12]}..refs/sup/{record.id}/candidate")


@app.command("show")
def show_cmd(
    task: Annotated[str, typer.Argument(help="Task id.")], json_out: JsonOpt = False
) -> None:
    """Show one task: state, status, baseline, candidate, checks, review, turns, cost;
    or a best-of-N group (id g…): its attempts side by side, ranked."""
    from gitsup.tasks import SupRepo, show_dict

    ctx = SupRepo.discover()
    from gitsup.attempts import compare, is_group_id

    if is_group_id(task):
        g = compare(ctx, task)
        if json_out:
            emit_json(g)
        else:
            _print_group(g)
        return
    record = ctx.store.load(task)
    d = show_dict(ctx, record)
    if json_out:
        emit_json(d)
        return
    out(f"task      {record.id}")
    out(f"state     {record.state.value}   status {record.status.value}")
    out(f"goal      {record.goal.splitlines()[0] if record.goal else ''}")
    out(
        f"baseline  {record.baseline}"
        + (f"  (from {record.source_branch})" if record.source_branch else "")
    )
    out(f"branch    {record.branch}")
    out(f"worktree  {record.worktree}")
    out(f"candidate {record.candidate or '-'}")
    if record.wip:
        out(f"wip       {record.wip}  (refs/sup/{record.id}/wip: uncommitted work saved)")
    for item in record.not_captured:
        out(f"NOT saved {_not_captured_text(item)}")
    if record.discarded_at:
        out(
            f"discarded {dt.datetime.fromtimestamp(record.discarded_at, dt.UTC):%Y-%m-%d %H:%M:%S} UTC (worktree removed)"
        )
    out(
        f"turns     {record.turns}   cost ${record.cost_usd:.4f}   repair rounds {record.repair_rounds}"
    )
    out(f"events    {d['events']}")
    if record.checks:
        out("checks")
        for c in record.checks:
            mark = "pass" if c.passed else ("TIMEOUT" if c.timed_out else "FAIL")
            req = "required" if c.required else "optional"
            out(
                f"  {mark:7} {c.name} ({req}, exit {c.exit_code}, {c.duration:.2f}s): {' '.join(c.argv)}"
            )
            if not c.passed:
                for line in check_tail(c.output_tail):
                    out(f"          | {line}")
    if record.review:
        out(f"review    {record.review.kind}: {record.review.verdict or '-'}")
    for r in record.reasons:
        out(f"reason    {r}")


def _age(seconds: float) -> str:
    return format_duration(seconds)


@app.command("ls")
def ls_cmd(
    json_out: JsonOpt = False,
    attention: Annotated[
        bool, typer.Option("--attention", help="Only the tasks that need a human.")
    ] = False,
) -> None:
    """List tasks with state, status, age, branch and how far their baseline is behind;
    tasks that need a human first (marked !)."""
    from gitsup.attention import attention_of
    from gitsup.tasks import SupRepo, list_tasks

    ctx = SupRepo.discover()
    records = list(ctx.store.iter_raw())  # read once, for both
    needs = attention_of(ctx.layout, {r["id"]: r for r in records})
    rows = list_tasks(ctx, records)
    if attention:
        rows = [r for r in rows if r.id in needs]
    from gitsup.overlap import overlaps

    ov = overlaps(ctx, records)
    if json_out:  # creation order, as always; `attention` says who needs a human
        emit_json(
            [
                {**r.as_dict(), "attention": needs.get(r.id, []), "overlaps": ov.get(r.id, [])}
                for r in rows
            ]
        )
        return
    rows.sort(key=lambda r: r.id not in needs)  # stable: creation order within each group
    if not rows:
        out("no task needs a human" if attention else "no tasks")
        return
    out(f"{'ID':16} {'STATE':10} {'STATUS':10} {'AGE':>7} {'BEHIND':>12}  GOAL")
    for r in rows:
        behind = "-" if r.behind is None else f"{r.behind} {r.source_branch}"
        status = f"{r.status}*" if r.discarded else r.status
        need = f"  [! needs a human: {'; '.join(needs[r.id])}]" if r.id in needs else ""
        need += f"  [overlaps {' '.join(ov[r.id])}]" if r.id in ov else ""
        out(f"{r.id:16} {r.state:10} {status:10} {_age(r.age):>7} {behind:>12}  {r.goal}{need}")
    if any(r.discarded for r in rows):
        out("* discarded: worktree removed, refs kept")


@app.command("log")
def log_cmd(
    task: Annotated[str, typer.Argument(help="Task id.")], json_out: JsonOpt = False
) -> None:
    """Print the task's events, one per line."""
    from gitsup.tasks import SupRepo, read_events

    ctx = SupRepo.discover()
    for ev in read_events(ctx, task):
        if json_out:
            emit_jsonl(ev.as_dict())
        else:
            when = dt.datetime.fromtimestamp(ev.ts, dt.UTC).strftime("%H:%M:%S")
            data = json.dumps(ev.data, separators=(",", ":"))
            if len(data) > 200:
                data = data[:200] + "…"
            out(f"{ev.seq:5} {when} {ev.type:20} {data}")
    sys.stdout.flush()


@app.command("stop")
def stop_cmd(
    task: Annotated[str, typer.Argument(help="Task id.")],
    wait: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for the task to stop.")
    ] = 60.0,
    json_out: JsonOpt = False,
) -> None:
    """Stop a running task (its supervisor stops the worker and parks the work)."""
    from gitsup.tasks import SupRepo, show_dict, stop_task

    ctx = SupRepo.discover()
    record = stop_task(ctx, task, wait=wait)
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        out(f"task {record.id}: {record.state.value}")
        if record.wip:
            out(f"uncommitted work saved in refs/sup/{record.id}/wip")


@app.command("discard")
def discard_cmd(
    task: Annotated[str, typer.Argument(help="Task id.")],
    force: Annotated[
        bool, typer.Option("--force", help="Discard even uncaptured uncommitted work.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Remove a task's worktree; its refs stay. Refuses to lose uncaptured work without --force."""
    from gitsup.tasks import SupRepo, discard_task

    ctx = SupRepo.discover()
    res = discard_task(ctx, task, force=force)
    if json_out:
        emit_json(res.__dict__)
        return
    for r in res.removed:
        out(f"removed {r}")
    for k in res.kept:
        out(f"kept    {k}")


@app.command("prune")
def prune_cmd(
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Also remove uncaptured work and branches no other ref reaches."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Remove ended tasks' worktrees and branches; their refs under refs/sup/ stay."""
    from gitsup.tasks import SupRepo, prune_tasks

    ctx = SupRepo.discover()
    res = prune_tasks(ctx, force=force, dry_run=dry_run)
    if json_out:
        emit_json(res.as_dict())
        return
    verb = "would remove" if dry_run else "removed"
    for r in res.removed:
        out(f"{verb} {r['task']}: {r['what']}")
    for k in res.kept:
        out(f"kept    {k['task']}: {k['what']} ({k['why']})")
    if not res.removed and not res.kept:
        out("nothing to prune")


@app.command("wait")
def wait_cmd(
    task: Annotated[str, typer.Argument(help="Task id.")],
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Give up after this many seconds.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Block until the task ends; exit with the same code as `start`."""
    from gitsup.detach import wait_task
    from gitsup.tasks import SupRepo, show_dict, status_exit

    ctx = SupRepo.discover()
    record = wait_task(ctx, task, timeout=timeout)
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        _print_summary(ctx, record)
    raise typer.Exit(status_exit(record))


@app.command("recover")
def recover_cmd(
    task: Annotated[str, typer.Argument(help="Task id.")],
    takeover: Annotated[
        bool,
        typer.Option(
            "--takeover", help="Take the task over (its supervisor must be provably dead)."
        ),
    ] = False,
    park: Annotated[
        bool, typer.Option("--park", help="Park the task instead of continuing it.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Continue (or park) a task whose supervisor died."""
    from gitsup.recovery import recover_task
    from gitsup.tasks import SupRepo, show_dict, status_exit

    ctx = SupRepo.discover()
    record = recover_task(
        ctx, task, takeover=takeover, park=park, on_event=None if quiet else ProgressRenderer()
    )
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        _print_summary(ctx, record)
    raise typer.Exit(status_exit(record))


@app.command("doctor")
def doctor_cmd(
    fix: Annotated[bool, typer.Option("--fix", help="Park or clean what is proven safe.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Reconcile task records and leases with processes, cgroups, worktrees and refs."""
    from gitsup.recovery import doctor
    from gitsup.tasks import SupRepo

    ctx = SupRepo.discover()
    findings = doctor(ctx, fix=fix)
    if json_out:
        emit_json([f.as_dict() for f in findings])
        return
    from gitsup.recovery import network_isolation, sandbox_summary

    out(network_isolation())
    out(f"sandbox: {sandbox_summary(ctx)}")
    from gitsup.agents import probe_agents
    from gitsup.proc import child_env

    for agent in probe_agents(child_env()):
        out(f"agent {agent.describe()}")
    if not findings:
        out(
            "nothing to report: every task, lease and cgroup is accounted for; the boundary is intact"
        )
        return
    for f in findings:
        line = f"{f.kind:18} {f.task or '-':16} {f.detail}"
        if f.fixed:
            line += f"  -> {f.fixed}"
        out(line)


@app.command("resume-auto")
def resume_auto_cmd(task: Annotated[str, typer.Argument(help="Task id.")]) -> None:
    """Let automatic turns continue after a person typed into the worker."""
    import os
    import signal

    from gitsup.procid import ProcessId
    from gitsup.state import State
    from gitsup.tasks import SupRepo

    ctx = SupRepo.discover()
    record = ctx.store.load(task)
    owner = ProcessId.from_dict(record.supervisor)
    if owner is None or not owner.alive():
        raise GitsupError(
            f"task {task} has no running supervisor", hint=f"`git sup recover {task} --takeover`"
        )
    if record.state != State.PAUSED:
        raise GitsupError(f"task {task} is {record.state.value}, not paused")
    os.kill(owner.pid, signal.SIGUSR1)
    out(f"task {task}: automatic turns resume")
