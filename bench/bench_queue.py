"""The integration queue: 16 queued candidates, one culprit, checks taking T seconds.

    .venv/bin/python bench/bench_queue.py [--n 16] [--t 0.3] [--culprit 0 7 15]
    .venv/bin/python bench/bench_queue.py --slots 4 --t 2 --culprit 7 [--verbose]

With `--slots N` the modes are instead:
  serial         `queue run` (batch of 16, bisection: one composition at a time)
  slots          `queue run --slots N` (up to N compositions under test at once)
Goals: slots wall <= 0.5x serial, slots check runs <= 1.5x serial, overhead <= 100 ms per
candidate (the wall time the runner did not wait for a check, `waited_seconds`).
Besides the wall time, which depends on how busy the machine is, each mode reports its
critical path in check rounds (`check_rounds`: check attempts, retries included, that
happened one after another, each started on what the ones before had shown): serially every
attempt is one, so the ratio of rounds is what the wall time ratio tends to when checks
dominate. `--verbose` prints the schedule: per tested composition its slot, start and end,
the candidates it holds (c0..c15, in queue order), attempts and depth on the critical path.

For each culprit position, the same 16 ready candidates (each adds one file; the culprit
also adds BROKEN, which makes the check fail on any tree that holds it) are integrated into
main twice, in two identical repositories:
  batched        `queue run` (batch of 16, bisection on failure)
  one-at-a-time  `queue run --batch 1` (every candidate tested alone on the moving target)
Reported: check runs (compositions tested), fresh runs after a failure (retries), wall time,
and the queue's own overhead per candidate: (wall - the time it waited for checks) /
candidates.
Goals: batched check runs <= 0.6x one-at-a-time; overhead <= 100 ms per candidate.
Everything happens in a temporary directory; the checks run in the task sandbox.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def git(cwd: Path, *args: str) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {res.stderr}")
    return res.stdout.strip()


def hermetic(tmp: Path) -> None:
    home = tmp / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    os.environ.update(
        {
            "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
            "GIT_AUTHOR_NAME": "bench",
            "GIT_AUTHOR_EMAIL": "bench@example.invalid",
            "GIT_COMMITTER_NAME": "bench",
            "GIT_COMMITTER_EMAIL": "bench@example.invalid",
        }
    )
    os.environ.pop("GITSUP_TASK", None)


def ready_task(repo: Path, name: str, files: dict[str, str], check: list[str]) -> str:
    """A finished task with a ready candidate (what `git sup start` leaves behind)."""
    from gitsup.ids import Oid, TaskId
    from gitsup.layout import task_refs
    from gitsup.spec import spec_from_mapping
    from gitsup.state import State, Status
    from gitsup.store.record import CandidateNote
    from gitsup.store.suprepo import SupRepo
    from gitsup.store.taskgit import import_work
    from gitsup.tasks.lifecycle import prepare_task

    ctx = SupRepo.discover(repo)
    spec = spec_from_mapping(
        {
            "goal": name,
            "checks": [{"name": "check", "argv": check}],
            "worker": {"kind": "process", "argv": "true"},
            "review": {"kind": "none"},
        },
        "bench",
    )
    record, lease = prepare_task(ctx, spec)
    ctx.leases.release(lease)
    wt = Path(record.worktree)
    for rel, text in files.items():
        (wt / rel).write_text(text)
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", name)
    head = Oid(git(wt, "rev-parse", "HEAD"))
    tid = TaskId(record.id)
    import_work(ctx.repo, ctx.layout, tid, Oid(record.baseline), record.branch)
    ctx.repo.update_ref(task_refs(tid)["candidate"], head, old=None, message="bench")
    note = CandidateNote(
        task=record.id,
        status=Status.READY,
        baseline=record.baseline,
        candidate=head,
        branch=record.branch,
        goal=name,
        checks=[],
        review=None,
        turns=1,
        cost_usd=0.0,
        created_at=record.created_at,
        finished_at=time.time(),
    )
    ctx.repo.write_note(head, note.to_text())
    record.state, record.status = State.COMPLETED, Status.READY
    record.candidate = record.head = head
    ctx.store.save(record)
    return record.id


def make_repo(tmp: Path, n: int, culprit: int, t: float) -> tuple[Path, list[str]]:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    repo = tmp / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("bench\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "initial")
    init_repo(SupRepo.discover(repo), explicit=True)
    check = [
        sys.executable,
        "-c",
        f"import os, sys, time; time.sleep({t}); sys.exit(1 if os.path.exists('BROKEN') else 0)",
    ]
    ids = []
    for i in range(n):
        files = {f"f{i:02d}.txt": f"{i}\n"}
        if i == culprit:
            files["BROKEN"] = "this breaks the check\n"
        ids.append(ready_task(repo, f"c{i}", files, check))
    return repo, ids


def run_queue(repo: Path, ids: list[str], batch: int, slots: int = 1) -> dict[str, Any]:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks import queue, queue_state

    cwd = os.getcwd()
    os.chdir(repo)
    try:
        ctx = SupRepo.discover(repo)
        queue_state.add(ctx, ids, "main")
        t0 = time.perf_counter()
        [res] = queue.run(ctx, "main", batch=batch, slots=slots)
        wall = time.perf_counter() - t0
    finally:
        os.chdir(cwd)
    # the queue's own time: the wall time it did not spend waiting for a check (with
    # slots, for the first of those running)
    inside = res.waited_seconds
    return {
        "runs": res.check_runs,
        "wall": wall,
        "checks_s": res.check_seconds,
        "integrated": len(res.integrated),
        "sent_back": len(res.sent_back),
        "retries": res.check_retries,
        "overhead_ms": max(0.0, wall - inside) / len(ids) * 1000,
        "rounds": res.check_rounds,
        "timeline": res.timeline,
    }


def spans(tasks: list[str], ids: list[str]) -> str:
    """The candidates of a composition as runs of queue positions: c0..c6+c8..c15."""
    pos = sorted(ids.index(t) for t in tasks)
    out: list[str] = []
    start = prev = pos[0]
    for p in [*pos[1:], None]:
        if p is not None and p == prev + 1:
            prev = p
            continue
        out.append(f"c{start}" if start == prev else f"c{start}..c{prev}")
        if p is not None:
            start = prev = p
    return "+".join(out)


def show_timeline(timeline: list[dict[str, Any]], ids: list[str]) -> None:
    for x in sorted(timeline, key=lambda x: (x["start"], x["slot"])):
        what = "confirm " if x["confirming"] else ""
        print(
            f"{'':>9}slot {x['slot']} {x['start']:>6.2f}-{x['end']:>6.2f}s "
            f"{'pass' if x['passed'] else 'FAIL'} {what}{spans(x['tasks'], ids)} "
            f"({len(x['tasks'])}) attempts {x['attempts']} depth {x['depth']}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--t", type=float, default=0.3, help="seconds one check run takes")
    ap.add_argument("--culprit", type=int, nargs="*", default=[0, 7, 15])
    ap.add_argument("--slots", type=int, default=0, help="compare N slots with serial batching")
    ap.add_argument("--verbose", action="store_true", help="print each mode's schedule")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    print(f"{args.n} candidates, one culprit, check T={args.t}s, load {os.getloadavg()[0]:.1f}")
    print(
        f"{'culprit':>7} {'mode':14} {'runs':>5} {'retry':>5} {'rounds':>6} {'wall s':>7} "
        f"{'in checks s':>11} {'overhead ms/cand':>16} {'integrated':>10}"
    )
    for pos in args.culprit:
        row = {}
        modes = (
            (("serial", args.n, 1), ("slots", args.n, args.slots))
            if args.slots
            else (("batched", args.n, 1), ("one-at-a-time", 1, 1))
        )
        for mode, batch, slots in modes:
            with tempfile.TemporaryDirectory(prefix="gitsup-bench-queue-") as d:
                tmp = Path(d)
                hermetic(tmp)
                repo, ids = make_repo(tmp, args.n, pos, args.t)
                r = run_queue(repo, ids, batch, slots)
                row[mode] = r
                print(
                    f"{pos:>7} {mode:14} {r['runs']:>5.0f} {r['retries']:>5.0f} "
                    f"{r['rounds']:>6.0f} {r['wall']:>7.2f} {r['checks_s']:>11.2f} "
                    f"{r['overhead_ms']:>16.1f} {r['integrated']:>10.0f}"
                )
                if args.verbose:
                    show_timeline(r["timeline"], ids)
        if args.slots:
            a, b = row["slots"], row["serial"]
            assert (a["integrated"], a["sent_back"]) == (b["integrated"], b["sent_back"])
            print(
                f"{'':>7} ratio {args.slots} slots/serial: runs {a['runs'] / b['runs']:.2f}x "
                f"(goal <= 1.5), wall {a['wall'] / b['wall']:.2f}x (goal <= 0.5), "
                f"rounds {a['rounds']:.0f}/{b['rounds']:.0f} = {a['rounds'] / b['rounds']:.2f}x, "
                f"load {os.getloadavg()[0]:.1f}"
            )
            continue
        ratio = row["batched"]["runs"] / row["one-at-a-time"]["runs"]
        wall = row["batched"]["wall"] / row["one-at-a-time"]["wall"]
        print(f"{'':>7} ratio batched/one-at-a-time: runs {ratio:.2f}x, wall {wall:.2f}x")


if __name__ == "__main__":
    main()
