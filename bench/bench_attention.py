"""Attention benchmark: `git sup watch` redraw with 200 tasks, `git sup report` at scale.

    .venv/bin/python bench/bench_attention.py [--quick]

Prints numbers and ratios; asserts nothing. Everything happens in a temporary directory
with a hermetic Git environment.

1. watch redraw with 200 tasks (goal <= 50 ms): one update = fold what was appended to
   the event logs + render the screen (ANSI, to an in-memory terminal 200 columns wide).
   Baseline in the same run: reading and parsing the 200 task records (what `ls` reads).
2. report of a task with 5,000 events and a 5 MB diff (goal <= 2 s, in-process and through
   the console script). Baseline in the same run: `git diff` of the same two commits.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
BIN = Path(sys.executable).parent
GIT_SUP = str(BIN / "git-sup")

sys.path.insert(0, str(REPO_ROOT / "bench"))
from bench_foundation import git, hermetic_env  # noqa: E402


def fmt(x: float) -> str:
    return f"{x * 1000:8.1f} ms"


def best(fn: object, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _event(seq: int, task: str, t: str, data: dict[str, object]) -> str:
    return json.dumps(
        {"seq": seq, "ts": time.time() - 3600 + seq, "task": task, "type": t, "data": data},
        separators=(",", ":"),
    )


def _events(task: str, n: int) -> list[str]:
    lines = [_event(1, task, "task_started", {"goal": "bench", "checks": ["tests", "lint"]})]
    kinds = ["worker_output", "permission_decided", "turn_completed", "state_changed"]
    for seq in range(2, n + 1):
        k = kinds[seq % len(kinds)]
        data: dict[str, object] = {
            "worker_output": {"stream": "assistant", "text": "working on it " * 8},
            "permission_decided": {
                "tool": "Bash",
                "verdict": "allow",
                "rule": "read-only",
                "answer": "allow",
                "input": {"command": "pytest -q <tests>"},
            },
            "turn_completed": {"subtype": "success", "cost_usd": 0.01, "usage": {}, "round": 0},
            "state_changed": {"from": "running", "to": "waiting", "reason": "turn completed"},
        }[k]
        lines.append(_event(seq, task, k, data))
    return lines


def make_tasks(common: Path, n: int, events_each: int) -> list[str]:
    from gitsup.ids import new_task_id

    tasks = common / "sup" / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    ids = []
    states = ["running", "waiting", "verifying", "completed", "blocked", "paused"]
    for i in range(n):
        tid = str(new_task_id())
        d = tasks / tid
        d.mkdir()
        state = states[i % len(states)]
        status = {"completed": "ready", "blocked": "parked"}.get(state, "pending")
        rec = {
            "version": 1,
            "id": tid,
            "state": state,
            "status": status,
            "goal": f"task number {i}",
            "turns": 3,
            "cost_usd": 0.03,
            "created_at": time.time() - 3600,
            "reasons": ["checks failed"] if status == "parked" else [],
        }
        (d / "task.json").write_text(json.dumps(rec))
        (d / "spec.json").write_text(json.dumps({"budget": {"deadline": 14400, "max_turns": 100}}))
        (d / "events.jsonl").write_text("\n".join(_events(tid, events_each)) + "\n")
        ids.append(tid)
    return ids


def bench_watch(root: Path, n: int) -> None:
    from gitsup.attention.fold import Board
    from gitsup.cli.attention_cmd import render_frame
    from gitsup.layout import Layout

    common = root / "watch.git"
    ids = make_tasks(common, n, 50)
    layout = Layout(common)
    board = Board(layout)
    t0 = time.perf_counter()
    rows = board.refresh()
    cold = time.perf_counter() - t0
    screen = io.StringIO()

    def redraw() -> None:
        # a few tasks moved on since the last frame
        for tid in random.sample(ids, 5):
            path = common / "sup" / "tasks" / tid / "events.jsonl"
            seq = sum(1 for _ in path.open())
            with path.open("a") as f:
                f.write(_event(seq + 1, tid, "acceptance_result", {"passed": True}) + "\n")
        rs = board.refresh()
        screen.write(render_frame(rs, time.time(), width=200, height=300))

    def baseline() -> None:
        for tid in ids:
            json.loads((common / "sup" / "tasks" / tid / "task.json").read_bytes())

    reps = 20
    redraw_t = best(redraw, reps)
    base_t = best(baseline, reps)
    print(f"1. watch, {len(rows)} tasks ({n * 50} events)")
    print(f"   first load (all events folded) {fmt(cold)}")
    print(f"   redraw (fold appends + render)  {fmt(redraw_t)}   goal <= 50 ms")
    print(f"   baseline: read {n} task records {fmt(base_t)}   ratio {redraw_t / base_t:5.1f}x")


def bench_report(root: Path, quick: bool) -> None:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.report import render_task

    repo = root / "report-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("bench\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    baseline = git(repo, "rev-parse", "HEAD")
    rng = random.Random(1)
    target = (1 if quick else 5) * 1024 * 1024
    per_file = 100 * 1024
    for i in range(target // per_file):
        lines = [f"line {j} value = {rng.random()!r}  # <b>&amp;" for j in range(per_file // 40)]
        (repo / f"f{i:03}.py").write_text("\n".join(lines) + "\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "big change")
    cand = git(repo, "rev-parse", "HEAD")
    from gitsup.ids import new_task_id

    tid = str(new_task_id())
    tdir = repo / ".git" / "sup" / "tasks" / tid
    tdir.mkdir(parents=True)
    rec = {
        "version": 1,
        "id": tid,
        "state": "completed",
        "status": "ready",
        "goal": "big",
        "baseline": baseline,
        "candidate": cand,
        "branch": "main",
        "created_at": time.time(),
    }
    (tdir / "task.json").write_text(json.dumps(rec))
    (tdir / "events.jsonl").write_text("\n".join(_events(tid, 5000)) + "\n")
    ctx = SupRepo.discover(repo)
    page_len = 0

    def inproc() -> None:
        nonlocal page_len
        page_len = len(render_task(ctx, tid))

    def cli() -> None:
        subprocess.run(
            [GIT_SUP, "report", tid, "--output", str(root / "page.html")], cwd=repo, check=True
        )

    def baseline_diff() -> None:
        subprocess.run(["git", "diff", baseline, cand], cwd=repo, check=True, capture_output=True)

    diff_bytes = len(
        subprocess.run(["git", "diff", baseline, cand], cwd=repo, capture_output=True).stdout
    )
    t_in = best(inproc, 3)
    t_cli = best(cli, 3)
    t_base = best(baseline_diff, 3)
    print(f"2. report: 5000 events, {diff_bytes / 1e6:.1f} MB diff, page {page_len / 1e6:.1f} MB")
    print(f"   in-process           {fmt(t_in)}   goal <= 2 s")
    print(f"   git sup report (CLI) {fmt(t_cli)}   goal <= 2 s")
    print(f"   baseline: git diff   {fmt(t_base)}   ratio {t_cli / t_base:5.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gitsup-bench-attention-") as tmp:
        root = Path(tmp)
        hermetic_env(root / "home")
        os.chdir(root)
        bench_watch(root, 50 if args.quick else 200)
        bench_report(root, args.quick)


if __name__ == "__main__":
    main()
