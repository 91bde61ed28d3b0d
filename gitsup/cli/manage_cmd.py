"""Task commands that act on tasks: stop, discard, prune, wait, recover, repair, doctor,
resume-auto."""

from __future__ import annotations

from typing import Annotated

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt, TaskArg
from gitsup.cli.output import emit_json, out
from gitsup.cli.task_render import ProgressRenderer, print_summary
from gitsup.errors import GitsupError


@app.command("stop")
def stop_cmd(
    task: TaskArg,
    wait: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for the task to stop.")
    ] = 60.0,
    json_out: JsonOpt = False,
) -> None:
    """Stop a running task (its supervisor stops the worker and parks the work)."""
    from gitsup.cluster import submitted_here
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import show_dict, stop_task

    ctx = SupRepo.discover()
    if submitted_here(ctx.layout, task):
        from gitsup.cli.cluster_cmd import stop_cluster

        stop_cluster(ctx, task, wait=wait, json_out=json_out)
        return
    record = stop_task(ctx, task, wait=wait)
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        out(f"task {record.id}: {record.state.value}")
        if record.wip:
            out(f"uncommitted work saved in refs/sup/{record.id}/wip")


@app.command("discard")
def discard_cmd(
    task: TaskArg,
    force: Annotated[
        bool, typer.Option("--force", help="Discard even uncaptured uncommitted work.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Remove a task's worktree; its refs stay. Refuses to lose uncaptured work without --force."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import discard_task

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
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import prune_tasks

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
    task: TaskArg,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Give up after this many seconds.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Block until the task ends; exit with the same code as `start`."""
    from gitsup.cluster import submitted_here
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import show_dict, status_exit

    ctx = SupRepo.discover()
    if submitted_here(ctx.layout, task):
        from gitsup.cli.cluster_cmd import wait_cluster

        wait_cluster(ctx, task, timeout=timeout, json_out=json_out)
        return
    from gitsup.tasks.detach import wait_task

    record = wait_task(ctx, task, timeout=timeout)
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        print_summary(ctx, record)
    raise typer.Exit(status_exit(record))


@app.command("recover")
def recover_cmd(
    task: TaskArg,
    takeover: Annotated[
        bool,
        typer.Option(
            "--takeover", help="Take the task over (its supervisor must be provably dead)."
        ),
    ] = False,
    park: Annotated[
        bool, typer.Option("--park", help="Park the task instead of continuing it.")
    ] = False,
    allow_new_binary: Annotated[
        bool,
        typer.Option(
            "--allow-new-binary",
            help="Continue although the agent executable changed since the task started.",
        ),
    ] = False,
    extend: Annotated[
        str | None,
        typer.Option(
            "--extend",
            help="More time for a task its deadline or a watchdog parked (0: close out now).",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Continue (or park) a task whose supervisor died; complete the record of one that had
    ended; give a task its deadline parked more time (--extend)."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.supervision.recovery import recover_task
    from gitsup.tasks.lifecycle import show_dict, status_exit

    seconds = None if extend is None else _duration(extend, "--extend")
    ctx = SupRepo.discover()
    on_event = None if quiet else ProgressRenderer()
    if seconds is not None and not takeover:
        if park:
            raise GitsupError("--extend and --park go separately: --park ends, --extend goes on")
        from gitsup.tasks.human import who
        from gitsup.tasks.reopen import extend_task

        record = extend_task(
            ctx,
            task,
            seconds,
            by=who(ctx),
            on_event=on_event,
            allow_new_binary=allow_new_binary,
        )
    else:
        record = recover_task(
            ctx,
            task,
            takeover=takeover,
            park=park,
            on_event=on_event,
            allow_new_binary=allow_new_binary,
            extend=seconds,
        )
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        print_summary(ctx, record)
    raise typer.Exit(status_exit(record))


@app.command("repair")
def repair_cmd(
    task: TaskArg,
    message: Annotated[
        str,
        typer.Option("--message", "-m", help="What the new round is told, besides the findings."),
    ] = "",
    rounds: Annotated[
        int | None,
        typer.Option("--rounds", help="Repair rounds allowed from now on (default: the spec's)."),
    ] = None,
    allow_new_binary: Annotated[
        bool,
        typer.Option(
            "--allow-new-binary",
            help="Go on although the agent executable changed since the task started.",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Start a new repair round on a parked candidate, as the same task."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.human import who
    from gitsup.tasks.lifecycle import show_dict, status_exit
    from gitsup.tasks.reopen import repair_round

    ctx = SupRepo.discover()
    record = repair_round(
        ctx,
        task,
        message,
        by=who(ctx),
        rounds=rounds,
        on_event=None if quiet else ProgressRenderer(),
        allow_new_binary=allow_new_binary,
    )
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        print_summary(ctx, record)
    raise typer.Exit(status_exit(record))


def _duration(value: str, flag: str) -> float:
    from gitsup.durations import parse_duration, require_unit

    try:
        return parse_duration(require_unit(value, flag))
    except ValueError as exc:
        raise GitsupError(f"{flag}: {exc}" if flag not in str(exc) else str(exc)) from None


@app.command("doctor")
def doctor_cmd(
    fix: Annotated[bool, typer.Option("--fix", help="Park or clean what is proven safe.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Reconcile task records and leases with processes, cgroups, worktrees and refs."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.supervision.recovery import diagnose

    report = diagnose(SupRepo.discover(), fix=fix, probe=not json_out)
    findings = report.findings
    if json_out:
        emit_json([f.as_dict() for f in findings])
        return
    out(report.network or "")
    out(f"sandbox: {report.sandbox}")
    for agent in report.agents:
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
def resume_auto_cmd(task: TaskArg) -> None:
    """Let automatic turns continue after a person typed into the worker."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.human import resume_auto

    resume_auto(SupRepo.discover(), task)
    out(f"task {task}: automatic turns resume")
