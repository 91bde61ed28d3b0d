"""`git sup queue`: the integration queue (gitsup/tasks/queue.py)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from gitsup.cli.main import app
from gitsup.cli.options import TaskArg, TaskListArg
from gitsup.cli.output import emit_json, out, progress
from gitsup.cli.task_render import queue_evidence_lines, queue_runner_lines

queue_app = typer.Typer(
    invoke_without_command=True,
    help="The integration queue: ready candidates reach a branch only through tested trees.",
)
app.add_typer(queue_app, name="queue")

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
IntoOpt = Annotated[
    str | None, typer.Option("--into", help="Target branch (default: the checked-out branch).")
]


def _show(states: list[Any], runners: dict[str, Any]) -> None:
    if not states:
        out("nothing queued")
        return
    for st in states:
        queued = st.queued()
        out(f"queue into {st.into}: {len(queued)} queued; {st.check_runs} check run(s) so far")
        runner = runners.get(st.into)
        if runner:
            for line in queue_runner_lines(runner):
                out(line)
        for e in st.entries:
            tail = f"  {e.reason}" if e.reason else ""
            commit = f" -> {e.integration_commit[:12]}" if e.integration_commit else ""
            out(f"  {e.task:16} {e.status:10} {e.candidate[:12]}{commit}{tail}")
            if e.status == "parked" or (e.evidence or {}).get("flaky"):
                for line in queue_evidence_lines(e.evidence, indent="    "):
                    out(line)


@queue_app.callback()
def queue_cmd(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the queues: entries in order with their outcome (integrated, parked, queued)."""
    if ctx.invoked_subcommand is not None:
        return
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.queue_state import list_queues, runner_status

    sup = SupRepo.discover()
    states = list_queues(sup)
    runners = {s.into: runner_status(sup, s.into) for s in states}
    if json_out:
        emit_json([{**s.as_dict(), "runner": runners[s.into]} for s in states])
        return
    _show(states, runners)


@queue_app.command("add")
def add_cmd(
    tasks: TaskListArg,
    into: IntoOpt = None,
    json_out: JsonOpt = False,
    allow_policy_change: Annotated[
        bool,
        typer.Option(
            "--allow-policy-change",
            help="Queue candidates that change .gitsup/ (their integrations carry a "
            "Sup-Policy-Change trailer); without it such a candidate is refused.",
        ),
    ] = False,
) -> None:
    """Queue ready candidates for integration into a branch. A candidate that changes
    .gitsup/ is refused unless --allow-policy-change is given."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.queue_state import add

    st = add(SupRepo.discover(), tasks, into, allow_policy_change=allow_policy_change)
    if json_out:
        emit_json(st.as_dict())
        return
    out(f"queued {' '.join(tasks)} into {st.into} ({len(st.queued())} queued)")


@queue_app.command("remove")
def remove_cmd(
    task: TaskArg,
    into: IntoOpt = None,
) -> None:
    """Take a queued candidate out of the queue."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.queue_state import remove

    st = remove(SupRepo.discover(), task, into)
    out(f"removed {task} from the queue into {st.into}")


@queue_app.command("run")
def run_cmd(
    into: IntoOpt = None,
    batch: Annotated[
        int | None,
        typer.Option(
            "--batch", min=1, help="Candidates tested together (default sup.queueBatch or 16)."
        ),
    ] = None,
    retries: Annotated[
        int | None,
        typer.Option(
            "--retries",
            min=0,
            help="Fresh runs of a failing check before its candidate is sent back; one that "
            "then passes is recorded as flaky (default sup.queue.retries or 1).",
        ),
    ] = None,
    slots: Annotated[
        int | None,
        typer.Option(
            "--slots",
            min=1,
            help="Compositions under test at once, each on top of the ones ahead as "
            "predicted (default sup.queue.slots or 1: one at a time, batching and bisection).",
        ),
    ] = None,
    detach: Annotated[bool, typer.Option("--detach", help="Run in the background.")] = False,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="Run it as the branch's workflow on the cluster's integrator HOST:PORT "
            "(docs/cluster.md).",
        ),
    ] = None,
    on_hosts: Annotated[
        str | None,
        typer.Option(
            "--on-hosts",
            help="Test the compositions on the cluster's task hosts at HOST:PORT, integrate "
            "here (what an integrator's queue run does; docs/cluster.md).",
        ),
    ] = None,
) -> None:
    """Integrate the queued candidates (resumes a queue whose runner died).

    Exit 0: everything queued was integrated; 3: some candidates were parked."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.queue import detach_run, run

    ctx = SupRepo.discover()
    if cluster is not None:
        knobs = {"batch": batch, "retries": retries, "slots": slots}
        _run_on_cluster(ctx, cluster, into, knobs, json_out=json_out, quiet=quiet)
        return
    hosts = None
    if on_hosts is not None and detach:
        from gitsup.errors import GitsupError

        raise GitsupError("--on-hosts runs in the foreground (the integrator's run): no --detach")
    if on_hosts is not None:
        from gitsup.cluster.settings import require_sdk

        require_sdk()
        from gitsup.cluster.checks import host_slots

        hosts = host_slots(ctx, on_hosts)
    if detach:
        pid, log = detach_run(ctx, into, batch, retries, slots)
        if json_out:
            emit_json({"pid": pid, "log": str(log)})
        else:
            out(f"queue runner started in the background (pid {pid}); output in {log}")
        return
    results = run(
        ctx,
        into,
        batch=batch,
        retries=retries,
        slots=slots,
        on_progress=None if quiet else progress,
        hosts=hosts,
    )
    if json_out:
        emit_json([r.as_dict() for r in results])
    else:
        for r in results:
            out(
                f"{r.into}: {len(r.integrated)} integrated, {len(r.sent_back)} sent back, "
                f"{r.check_runs} check run(s), {r.wall_seconds:.1f}s; now at {r.target[:12]}"
            )
            for f in r.flaky:
                out(
                    f"  flaky on {str(f['tree'])[:12]}: {', '.join(f['checks'])} "
                    "(failed, then passed when run again; nobody was blamed)"
                )
            for s in r.sent_back:
                out(f"  {s['task']}: {s['kind']}: {s['reason']}")
                for line in queue_evidence_lines(s.get("evidence"), indent="    "):
                    out(line)
    sys.exit(max((r.exit_code for r in results), default=0))


def _run_on_cluster(
    ctx: Any,
    address: str,
    into: str | None,
    knobs: dict[str, int | None],
    *,
    json_out: bool,
    quiet: bool,
) -> None:
    from gitsup.cluster.settings import require_sdk

    require_sdk()
    from gitsup.cluster.integrator import run_on_cluster
    from gitsup.cluster.settings import load

    results = run_on_cluster(
        ctx, load(ctx.repo, address), into, knobs, on_progress=None if quiet else progress
    )
    sent_back = False
    for res in results:
        for task, o in sorted(res["outcomes"].items()):
            sent_back = sent_back or o["status"] != "integrated"
            if not json_out:
                what = o["integration_commit"][:12] if o["status"] == "integrated" else o["reason"]
                out(f"{task}: {o['status']} into {res['into']} ({what})")
        if not json_out:
            out(f"{res['into']} is at {res['target'][:12]} (integrator {res['integrator']})")
    if json_out:
        emit_json(results if len(results) > 1 else results[0])
    if sent_back:
        from gitsup.errors import Exit

        raise typer.Exit(Exit.PARKED)
