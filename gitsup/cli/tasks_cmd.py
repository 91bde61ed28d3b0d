"""Task commands: init, start, show, ls, log, stop, discard."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gitsup.cli.main import app
from gitsup.cli.output import emit_json, emit_jsonl, out, progress
from gitsup.durations import format_duration
from gitsup.errors import GitsupError
from gitsup.tasks import (
    Context,
    discard_task,
    init_repo,
    list_tasks,
    read_events,
    run_task,
    show_dict,
    status_exit,
    stop_task,
)

if TYPE_CHECKING:
    from gitsup.events import Event
    from gitsup.record import TaskRecord
    from gitsup.spec import TaskSpec

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


@app.command("init")
def init_cmd(
    protected: Annotated[
        list[str] | None,
        typer.Option(
            "--protected",
            help="A protected branch (repeat); default main master trunk develop integration.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Set up gitsup in this repository (idempotent)."""
    ctx = Context.discover()
    res = init_repo(ctx, protected=protected)
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
    worker: str | None,
    worker_kind: str | None,
    review: str | None,
    deadline: str | None,
    no_output_timeout: str | None,
    max_turns: int | None,
    max_cost: float | None,
    no_commit: bool,
) -> TaskSpec:
    from gitsup.spec import load_spec, spec_from_mapping

    over: dict[str, Any] = {}
    if goal is not None:
        over["goal"] = goal
    if base is not None:
        over["base"] = base
    if checks:
        over["checks"] = [{"name": _check_name(c, i), "argv": c} for i, c in enumerate(checks)]
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
    return f"{i + 1}-{Path(first).name}"


_QUIET_TYPES = {"worker_output", "protocol_noise"}


def _render_progress(ev: Event) -> None:
    d = ev.data
    t = ev.type
    if t in _QUIET_TYPES:
        if t == "worker_output":
            text = str(d.get("text", "")).rstrip()
            for line in text.splitlines()[-3:]:
                progress(f"  | {line[:160]}")
        return
    if t == "state_changed":
        progress(
            f"{d.get('from')} -> {d.get('to')}" + (f" ({d['reason']})" if d.get("reason") else "")
        )
    elif t == "worker_started":
        progress(f"worker started: {d.get('kind')} pid {d.get('pid')}")
    elif t == "permission_decided":
        if d.get("cancelled"):
            return
        progress(
            f"permission {d.get('tool')}: {d.get('verdict')} [{d.get('rule')}] -> {d.get('answer')}"
        )
    elif t == "acceptance_started":
        progress(f"check {d.get('name')}: running")
    elif t == "acceptance_result":
        progress(
            f"check {d.get('name')}: {'passed' if d.get('passed') else 'FAILED'} ({d.get('duration')}s)"
        )
    elif t == "turn_completed":
        progress(f"turn completed ({d.get('subtype')})")
    elif t in ("candidate_ready", "candidate_parked", "candidate_failed"):
        progress(
            f"{t.replace('_', ' ')}" + (f": {d['candidate'][:12]}" if d.get("candidate") else "")
        )
    elif t not in ("task_finished",):
        progress(t.replace("_", " ") + (f": {json.dumps(d)[:160]}" if d else ""))


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
    worker: Annotated[
        str | None,
        typer.Option("--worker", help="Worker command (a process worker unless --worker-kind)."),
    ] = None,
    worker_kind: Annotated[
        str | None, typer.Option("--worker-kind", help="process | claude | tmux")
    ] = None,
    review: Annotated[str | None, typer.Option("--review", help="claude | command | none")] = None,
    deadline: Annotated[
        str | None, typer.Option("--deadline", help="Wall-clock limit, e.g. 4h.")
    ] = None,
    no_output_timeout: Annotated[
        str | None, typer.Option("--no-output-timeout", help="Stop after this long without output.")
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
) -> None:
    """Start a task and supervise it to a terminal state.

    Exit codes: 0 ready, 3 parked, 4 failed, 5 stopped, 2 bad input, 1 internal error.
    """
    spec = _spec_from_cli(
        goal,
        spec_file,
        base,
        check,
        worker,
        worker_kind,
        review,
        deadline,
        no_output_timeout,
        max_turns,
        max_cost,
        no_commit,
    )
    ctx = Context.discover()
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

    record = run_task(ctx, spec, on_event=None if quiet else _render_progress, on_prepared=prepared)
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        _print_summary(ctx, record)
    raise typer.Exit(status_exit(record))


def _print_summary(ctx: Context, record: TaskRecord) -> None:
    out(f"task {record.id}: {record.status.value} ({record.state.value})")
    if record.candidate:
        out(f"candidate: {record.candidate}  (refs/sup/{record.id}/candidate)")
    if record.wip:
        out(f"uncommitted work saved: {record.wip}  (refs/sup/{record.id}/wip)")
    for r in record.reasons:
        out(f"  reason: {r}")
    if record.candidate:
        out(f"inspect: git log --notes=sup {record.baseline[:12]}..refs/sup/{record.id}/candidate")


@app.command("show")
def show_cmd(
    task: Annotated[str, typer.Argument(help="Task id.")], json_out: JsonOpt = False
) -> None:
    """Show one task: state, status, baseline, candidate, checks, review, turns, cost."""
    ctx = Context.discover()
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
    if record.review:
        out(f"review    {record.review.kind}: {record.review.verdict or '-'}")
    for r in record.reasons:
        out(f"reason    {r}")


def _age(seconds: float) -> str:
    return format_duration(seconds)


@app.command("ls")
def ls_cmd(json_out: JsonOpt = False) -> None:
    """List tasks with state, status, age, branch and how far their baseline is behind."""
    ctx = Context.discover()
    rows = list_tasks(ctx)
    if json_out:
        emit_json([r.as_dict() for r in rows])
        return
    if not rows:
        out("no tasks")
        return
    out(f"{'ID':16} {'STATE':10} {'STATUS':10} {'AGE':>7} {'BEHIND':>12}  GOAL")
    for r in rows:
        behind = "-" if r.behind is None else f"{r.behind} {r.source_branch}"
        out(f"{r.id:16} {r.state:10} {r.status:10} {_age(r.age):>7} {behind:>12}  {r.goal}")


@app.command("log")
def log_cmd(
    task: Annotated[str, typer.Argument(help="Task id.")], json_out: JsonOpt = False
) -> None:
    """Print the task's events, one per line."""
    ctx = Context.discover()
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
    ctx = Context.discover()
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
    ctx = Context.discover()
    res = discard_task(ctx, task, force=force)
    if json_out:
        emit_json(res.__dict__)
        return
    for r in res.removed:
        out(f"removed {r}")
    for k in res.kept:
        out(f"kept    {k}")


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

    ctx = Context.discover()
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

    ctx = Context.discover()
    record = recover_task(
        ctx, task, takeover=takeover, park=park, on_event=None if quiet else _render_progress
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

    ctx = Context.discover()
    findings = doctor(ctx, fix=fix)
    if json_out:
        emit_json([f.as_dict() for f in findings])
        return
    from gitsup.recovery import network_isolation

    out(network_isolation())
    if not findings:
        out("nothing to report: every task, lease and cgroup is accounted for")
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

    ctx = Context.discover()
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
