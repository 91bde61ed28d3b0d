"""Starting a task: `start` (one task, or best-of-N attempts), in the foreground or detached."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt
from gitsup.cli.output import emit_json, out, progress
from gitsup.cli.task_render import (
    ProgressRenderer,
    group_next_steps,
    print_group,
    print_summary,
)
from gitsup.errors import Exit, GitsupError

if TYPE_CHECKING:
    from gitsup.spec import TaskSpec
    from gitsup.store.record import TaskRecord
    from gitsup.store.suprepo import SupRepo


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
    from gitsup.durations import require_unit
    from gitsup.spec import load_spec, spec_from_mapping

    over: dict[str, Any] = {}
    if goal is not None:
        over["goal"] = goal
    if base is not None:
        over["base"] = base
    taken: list[str] = []
    given: list[dict[str, Any]] = [{"name": _check_name(c, taken), "argv": c} for c in checks or []]
    given += [{"name": _check_name(c, taken, shell=True), "sh": c} for c in check_sh or []]
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
    for value, option in (
        (deadline, "--deadline"),
        (no_output_timeout, "--no-output-timeout"),
        (closeout_grace, "--closeout-grace"),
    ):
        if value is not None:
            try:
                require_unit(value, option)
            except ValueError as exc:
                raise GitsupError(str(exc)) from None
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


def _check_name(cmd: str, taken: list[str], *, shell: bool = False) -> str:
    """A check given on the command line is named by its own words (the program by its
    file name: `/venv/bin/python -m pytest` is `python -m pytest`), cut at 60 characters;
    a repeated name gets ` (2)`, ` (3)` …"""
    import shlex

    try:
        words = shlex.split(cmd)
    except ValueError:
        words = cmd.split()
    if words and not shell:
        words[0] = Path(words[0]).name or words[0]
    name = " ".join(words) or "check"
    if shell:
        name = f"sh: {name}"
    if len(name) > 60:
        name = name[:59] + "…"
    base, n = name, 2
    while name in taken:
        name, n = f"{base} ({n})", n + 1
    taken.append(name)
    return name


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
        str | None, typer.Option("--worker-kind", help="process | claude | tmux | codex | acp")
    ] = None,
    review: Annotated[
        str | None, typer.Option("--review", help="claude | codex | command | acp | none")
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
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster", help="Submit to the Temporal cluster at HOST:PORT (a host runs it)."
        ),
    ] = None,
    task_id: Annotated[
        str | None,
        typer.Option(
            "--id", help="With --cluster: the task's id (a second submission is refused)."
        ),
    ] = None,
) -> None:
    """Start a task and supervise it to a terminal state.

    Exit codes: 0 ready, 3 parked, 4 failed, 5 stopped, 2 bad input, 1 internal error,
    130 interrupted (Ctrl-C stops the task and keeps its work).
    """
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import foreground_exit, run_task, show_dict

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
    ctx.refuse_in_task("start")
    n = attempts if attempts is not None else spec.attempts.n
    if task_id is not None and cluster is None:
        raise GitsupError("--id goes with --cluster")
    if cluster is not None:
        if n > 1 or queue:
            raise GitsupError("--attempts and --queue do not go with --cluster (yet)")
        _start_cluster(ctx, spec, cluster, task_id, detach=detach, json_out=json_out, quiet=quiet)
        return
    if queue and (n < 2 or detach):
        raise GitsupError(
            "--queue goes with --attempts N (N >= 2) in the foreground",
            hint="otherwise queue the ready candidate: `git sup queue add ID`",
        )
    if n > 1:
        _start_group(ctx, spec, n, detach=detach, queue=queue, json_out=json_out, quiet=quiet)
        return
    if detach:
        from gitsup.tasks.detach import start_detached

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

    from gitsup.attention.fold import BudgetLimits

    renderer = ProgressRenderer(BudgetLimits.from_spec(spec.model_dump(mode="json")))
    record = run_task(ctx, spec, on_event=None if quiet else renderer, on_prepared=prepared)
    if json_out:
        emit_json(show_dict(ctx, record))
    else:
        print_summary(ctx, record)
    raise typer.Exit(foreground_exit(record))


def _start_group(
    ctx: SupRepo,
    spec: TaskSpec,
    n: int,
    *,
    detach: bool,
    queue: bool,
    json_out: bool,
    quiet: bool = False,
) -> None:
    from gitsup.tasks.attempts import start_group

    res = start_group(
        ctx,
        spec,
        n,
        wait=not detach,
        queue_into="" if queue else None,
        on_progress=None if quiet else progress,
    )
    if json_out:
        emit_json(res)
    else:
        out(res["group"])
        if detach:
            progress(f"{n} attempts run in the background; `git sup show {res['group']}`")
        else:
            print_group(res)
            for line in group_next_steps(res, ctx.repo.head_branch()):
                out(line)
    if not detach and not res.get("chosen"):
        raise typer.Exit(Exit.PARKED)


def _start_cluster(
    ctx: SupRepo,
    spec: TaskSpec,
    address: str,
    task_id: str | None,
    *,
    detach: bool,
    json_out: bool,
    quiet: bool,
) -> None:
    from gitsup.cluster.settings import require_sdk

    require_sdk()
    from gitsup.cluster.settings import load
    from gitsup.cluster.submit import submit, submit_and_follow

    settings = load(ctx.repo, address)
    if detach:
        task = submit(ctx, settings, spec, task_id=task_id)
        if json_out:
            emit_json({"task": task, "cluster": settings.address})
        else:
            out(task)
            progress(f"task {task} submitted to {settings.describe()}; `git sup wait {task}`")
        return

    def submitted(task: str) -> None:
        if not quiet:
            progress(f"task {task} submitted to {settings.describe()}")

    task, result = submit_and_follow(
        ctx,
        settings,
        spec,
        task_id=task_id,
        on_submitted=submitted,
        on_progress=None if quiet else progress,
    )
    from gitsup.cli.cluster_cmd import fetch_after
    from gitsup.cli.task_render import print_cluster_result

    fetch_after(ctx, task)

    if json_out:
        emit_json(result)
    else:
        print_cluster_result(result)
    raise typer.Exit(int(result.get("exit", Exit.INTERNAL)))
