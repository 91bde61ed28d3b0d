"""Task commands that set up and read: init, show, ls, log."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt, ProtectedOpt, TaskArg
from gitsup.cli.output import emit_json, emit_json_rows, emit_jsonl, out
from gitsup.cli.task_render import (
    check_tail,
    not_captured_text,
    print_group,
    queue_evidence_lines,
)
from gitsup.durations import format_duration

if TYPE_CHECKING:
    from gitsup.layout import Layout


@app.command("init")
def init_cmd(
    protected: ProtectedOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Set up gitsup in this repository (idempotent)."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    ctx = SupRepo.discover()
    ctx.refuse_in_task("init")
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


@app.command("show")
def show_cmd(task: TaskArg, json_out: JsonOpt = False) -> None:
    """Show one task: state, status, baseline, candidate, checks, review, turns, cost;
    or a best-of-N group (id g…): its attempts side by side, ranked."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import show_dict

    ctx = SupRepo.discover()
    from gitsup.tasks.attempts import compare, is_group_id

    if is_group_id(task):
        g = compare(ctx, task)
        if json_out:
            emit_json(g)
        else:
            print_group(g)
        return
    from gitsup.cluster import submitted_here

    if submitted_here(ctx.layout, task):
        from gitsup.cli.cluster_cmd import show_cluster

        show_cluster(ctx, task, json_out=json_out)
        return
    record = ctx.store.load(task)
    d = show_dict(ctx, record)
    if json_out:
        emit_json(d)
        return
    out(f"task      {record.id}")
    out(f"state     {record.state.value}   status {record.status.value}")
    from gitsup.state import TERMINAL

    paused = record.paused_by_user
    if paused and record.state not in TERMINAL:
        since = dt.datetime.fromtimestamp(float(paused.get("since") or 0), dt.UTC)
        out(
            f"paused    by {paused.get('by', '?')} since {since:%H:%M:%S} UTC "
            f"(`git sup resume {record.id}`)"
        )
    out(f"goal      {record.goal.splitlines()[0] if record.goal else ''}")
    out(
        f"baseline  {record.baseline}"
        + (f"  (from {record.source_branch})" if record.source_branch else "")
    )
    out(f"branch    {record.branch}")
    out(f"worktree  {record.worktree}")
    out(f"candidate {record.candidate or '-'}")
    env = record.environment or {}
    for e in env.get("include", []):
        out(f"include   {e['path']} ({e['method']})")
    for r in env.get("refused", []):
        out(f"include   refused: {r}")
    for ask in d["pending"]:
        out(f"needs human: {ask['tool']} {ask['summary']}")
        out(f"  git sup answer {record.id} {ask['request_id']} allow|deny [-m MESSAGE]")
    if d["policy_change"]:
        out(
            f"POLICY    changes .gitsup/: {', '.join(d['policy_change'])} "
            "(integrate and queue add refuse it without --allow-policy-change)"
        )
    if record.wip:
        out(f"wip       {record.wip}  (refs/sup/{record.id}/wip: uncommitted work saved)")
    for item in record.not_captured:
        out(f"NOT saved {not_captured_text(item)}")
    if record.discarded_at:
        out(
            f"discarded {dt.datetime.fromtimestamp(record.discarded_at, dt.UTC):%Y-%m-%d %H:%M:%S} UTC (worktree removed)"
        )
    out(
        f"turns     {record.turns}   cost ${record.cost_usd:.4f}   repair rounds {record.repair_rounds}"
    )
    out(f"events    {d['events']}")
    setup = record.setup
    if setup:  # the setup phase (docs/environments.md)
        ok = bool(setup.get("passed"))
        how = "passed" if ok else ("TIMEOUT" if setup.get("timed_out") else "FAILED")
        cached = f", caches {', '.join(setup['caches'])}" if setup.get("caches") else ""
        out(
            f"setup     {how} in {float(setup.get('duration') or 0):.2f}s"
            f" ({' '.join(setup.get('command') or [])}, exit {setup.get('exit_code')}{cached})"
        )
        if not ok:
            for line in check_tail(str(setup.get("output_tail", ""))):
                out(f"          | {line}")
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
    if d["comments"]:
        from gitsup.cli.task_render import comment_lines

        out("comments")
        for line in comment_lines({"task": record.id, "comments": d["comments"]}):
            out(f"  {line}")
    if d.get("queue_evidence"):
        sent_back = set(d["queue_evidence"]) - {"flaky", "tree"}
        out(
            "queue     checks on the composed tree "
            + ("(why the queue sent it back)" if sent_back else "(flaky, not blamed)")
        )
        for line in queue_evidence_lines(d["queue_evidence"]):
            out(line)


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
    from gitsup.attention.fold import attention_of
    from gitsup.tasks.listing import Listing, list_tasks, reconcile_interrupted

    listing = Listing.discover()  # libgit2 only if something needs it
    reconcile_interrupted(listing.layout)
    records = list(listing.store.iter_raw())  # read once, for both
    needs = attention_of(listing.layout, {r["id"]: r for r in records})
    rows = list_tasks(listing, records)
    if attention:
        rows = [r for r in rows if r.id in needs]
    from gitsup.tasks.overlap import overlaps

    ov = overlaps(listing, records)
    listing.save()
    remote = _on_cluster(listing.layout, attention=attention)
    if json_out:  # creation order, as always; `attention` says who needs a human
        emit_json_rows(
            [
                {**r.as_dict(), "attention": needs.get(r.id, []), "overlaps": ov.get(r.id, [])}
                for r in rows
            ]
            + remote
        )
        return
    rows.sort(key=lambda r: r.id not in needs)  # stable: creation order within each group
    for c in remote:
        need = f"  [! needs a human: {'; '.join(c['attention'])}]" if c["attention"] else ""
        out(f"{c['id']:16} on the cluster: {c['where']} ({c['cluster']}){need}")
    if not rows:
        if not remote:
            out("no task needs a human" if attention else "no tasks")
        return
    out(f"{'ID':16} {'STATE':10} {'STATUS':10} {'AGE':>7} {'BEHIND':>12}  GOAL")
    for r in rows:
        behind = "-" if r.behind is None else f"{r.behind} {r.source_branch}"
        status = f"{r.status}*" if r.discarded else r.status
        need = f"  [! needs a human: {'; '.join(needs[r.id])}]" if r.id in needs else ""
        need += f"  [overlaps {' '.join(ov[r.id])}]" if r.id in ov else ""
        need += f"  [queue repair: {r.queue_repair}]" if r.queue_repair else ""
        out(f"{r.id:16} {r.state:10} {status:10} {_age(r.age):>7} {behind:>12}  {r.goal}{need}")
    if any(r.discarded for r in rows):
        out("* discarded: worktree removed, refs kept")


def _on_cluster(layout: Layout, *, attention: bool) -> list[dict[str, Any]]:
    """The tasks this clone submitted that run on the cluster now (docs/cluster.md): `id`,
    `state` (`running`; `unknown` when the cluster cannot be reached), `where`, `cluster`,
    `pending` (asks waiting for `git sup answer`), `attention` (as a local task's)."""
    if not (layout.root / "cluster").is_dir():
        return []
    from gitsup.cluster.settings import require_sdk
    from gitsup.errors import GitsupError

    try:
        require_sdk()
    except GitsupError:  # no cluster here: nothing it runs to list
        return []
    from gitsup.cluster.submit import running_here
    from gitsup.store.suprepo import SupRepo

    rows = []
    for res in running_here(SupRepo.discover()):
        asks = list(res.get("pending") or [])
        need = [f"needs human: {a.get('tool')} {a.get('summary')}" for a in asks]
        if attention and not need:
            continue
        rows.append(
            {
                "id": res["task"],
                "state": res["state"],
                "where": res.get("where"),
                "cluster": res["cluster"],
                "pending": asks,
                "attention": need,
            }
        )
    return rows


@app.command("log")
def log_cmd(task: TaskArg, json_out: JsonOpt = False) -> None:
    """Print the task's events, one per line."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import read_events

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
