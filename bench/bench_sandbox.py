"""What the task sandbox costs: at spawn, and on a check's wall time.

    .venv/bin/python bench/bench_sandbox.py [--spawns N] [--checks N]

Both are measured against a baseline in the same run, interleaved so that load from other
processes hits both alike:

1. Spawn: `true` through today's bootstrap (join a fresh cgroup when the host has one)
   versus the same bootstrap with the task's `--sandbox` (mount and PID namespaces,
   Landlock, capabilities dropped, the system call filter). Goal: the median difference is
   at most +10 ms. Also shown: the sandbox without the PID namespace and the filter, to
   see what those two add.
2. A check: a Python workload that imports modules, writes, reads and stats files in the
   worktree and runs `git status`, with and without the sandbox. Goal: ratio <= 1.05.
3. An integration's check: that workload as `git sup integrate` runs it, a throw-away
   worktree made and removed around it, through the confined runner
   (gitsup/verification/confined.py: sandbox plan, a cgroup and a loopback network namespace
   per check) versus a plain `run_check` with gitsup's environment (how integrate ran it
   before). Reported as the ratio of the medians.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gitsup.host.contain import bootstrap_argv, create_cgroup, find_cgroup_base  # noqa: E402
from gitsup.host.sandbox import build_plan, default_rules, probe  # noqa: E402

CHECK = """
import json, os, pathlib, subprocess, email.parser, http.client, unittest, decimal
d = pathlib.Path("bench-out"); d.mkdir(exist_ok=True)
for i in range(400):
    p = d / f"f{i}.json"
    p.write_text(json.dumps({"i": i, "data": list(range(50))}))
    json.loads(p.read_text()); os.stat(p)
for p in d.iterdir():
    p.unlink()
d.rmdir()
subprocess.run(["git", "status", "--porcelain"], check=True, capture_output=True)
sum(i * i for i in range(300000))
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def setup(root: Path) -> tuple[Path, list[str], dict[str, str], list[str]]:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(50):
        (repo / f"m{i}.py").write_text(f"X = {i}\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@e", "commit", "-qm", "init")
    wt = root / "wt"
    git(repo, "worktree", "add", "-q", "-b", "sup/bench", str(wt))
    task_dir = repo / ".git" / "sup" / "tasks" / "bench"
    task_dir.mkdir(parents=True)
    host = probe()
    plans = [
        build_plan(
            mode="auto",
            rules=default_rules(),
            worktree=wt,
            common_dir=repo / ".git",
            task_dir=task_dir,
            branch="sup/bench",
            env={**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@e"},
            programs=[[sys.executable, "-c", "x"]],
            host=h,
        )
        for h in (host, dataclasses.replace(host, pidns=False, seccomp=False))
    ]
    if not plans[0].enforced:
        print(f"note: the sandbox is not fully enforced here: {host.missing}")
    return wt, plans[0].argv(), plans[0].env, plans[1].argv()


CPU: list[float] = []  # CPU time (user + system) of each timed run's processes


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spawns", type=int, default=60)
    ap.add_argument("--checks", type=int, default=8)
    ap.add_argument("--integrations", type=int, default=6)
    args = ap.parse_args()
    base = find_cgroup_base()
    with tempfile.TemporaryDirectory(prefix="gitsup-bench-sandbox-") as d:
        wt, sandbox, env, lesser = setup(Path(d))
        cgroups = []

        def wrap(argv: list[str], sb: list[str]) -> list[str]:
            cg = None
            if base is not None:
                cg = create_cgroup(f"bench-{os.getpid()}-{len(cgroups)}", base)
                cgroups.append(cg)
            return bootstrap_argv(argv, cgroup=cg, netns=None, sandbox=sb)

        try:
            plain_s, boxed_s, lesser_s = [], [], []
            CPU.clear()
            for _ in range(args.spawns):
                plain_s.append(timed(wrap(["true"], []), wt, env))
                boxed_s.append(timed(wrap(["true"], sandbox), wt, env))
                lesser_s.append(timed(wrap(["true"], lesser), wt, env))
            cpu = [CPU[i::3] for i in range(3)]  # plain, boxed, lesser: CPU time, load-proof
            p, b = statistics.median(plain_s), statistics.median(boxed_s)
            diff = statistics.median(y - x for x, y in zip(plain_s, boxed_s, strict=True))
            added = statistics.median(y - x for x, y in zip(lesser_s, boxed_s, strict=True))
            print(
                f"spawn (median of {args.spawns}): bootstrap {p * 1000:.1f} ms, "
                f"with sandbox {b * 1000:.1f} ms; median paired difference "
                f"{diff * 1000:+.1f} ms ({'ok' if diff <= 0.010 else 'OVER'} goal +10 ms); "
                f"of which the PID namespace and the system call filter {added * 1000:+.1f} ms"
            )
            plain_cpu, boxed_cpu, lesser_cpu = cpu
            box_cpu = statistics.median(y - x for x, y in zip(plain_cpu, boxed_cpu, strict=True))
            add_cpu = statistics.median(y - x for x, y in zip(lesser_cpu, boxed_cpu, strict=True))
            print(
                f"spawn CPU time (median): bootstrap {statistics.median(plain_cpu) * 1000:.1f} ms, "
                f"sandbox {box_cpu * 1000:+.1f} ms, of which the PID namespace and the filter "
                f"{add_cpu * 1000:+.1f} ms; load average {os.getloadavg()[0]:.1f}"
            )
            check = [sys.executable, "-c", CHECK]
            # The check creates and deletes 400 files, and the filesystem's inode allocator
            # makes the run right after such a run measurably slower (about 7-9% here on ext4:
            # see the order effect printed below). Each pair therefore alternates which runs
            # first, so that effect falls on both sides equally.
            plain_c, boxed_c, first, second = [], [], [], []
            for i in range(args.checks + args.checks % 2):
                if i % 2 == 0:
                    plain_c.append(timed(wrap(check, []), wt, env))
                    boxed_c.append(timed(wrap(check, sandbox), wt, env))
                else:
                    boxed_c.append(timed(wrap(check, sandbox), wt, env))
                    plain_c.append(timed(wrap(check, []), wt, env))
                first.append(timed(wrap(check, []), wt, env))
                second.append(timed(wrap(check, []), wt, env))
            p, b = statistics.median(plain_c), statistics.median(boxed_c)
            print(
                f"check wall time (median of {len(plain_c)}, order alternated): "
                f"{p * 1000:.0f} ms outside, {b * 1000:.0f} ms inside, ratio {b / p:.3f} "
                f"({'ok' if b / p <= 1.05 else 'OVER'} goal 1.05); order effect, the same "
                f"check outside twice in a row: second / first "
                f"{statistics.median(second) / statistics.median(first):.3f}"
            )
            integration(wt, args.integrations)
        finally:
            for cg in cgroups:
                cg.kill(timeout=2)
                cg.remove()


def integration(wt: Path, n: int) -> None:
    from gitsup.git import GitRepo
    from gitsup.host import proc
    from gitsup.ids import Oid
    from gitsup.spec import Check
    from gitsup.verification.checks import run_check
    from gitsup.verification.confined import ConfinedChecks

    repo = GitRepo.open(wt.parent / "repo")
    commit = Oid(git(wt.parent / "repo", "rev-parse", "main"))
    check = Check(name="bench", argv=[sys.executable, "-c", CHECK])

    def plain() -> float:
        t = time.perf_counter()
        root = Path(tempfile.mkdtemp(prefix="gitsup-bench-integrate-"))
        try:
            repo.add_detached_worktree(root / "worktree", commit)
            env = proc.child_env({"GITSUP_INTEGRATION": "bench"}, drop=("GITSUP_TASK",))
            assert run_check(check, cwd=root / "worktree", env=env).passed
            repo.remove_detached_worktree(root / "worktree")
        finally:
            subprocess.run(["rm", "-rf", str(root)], check=True)
        return time.perf_counter() - t

    def confined() -> float:
        t = time.perf_counter()
        with ConfinedChecks(
            repo, prefix="gitsup-bench-integrate-", marker="bench", label="queue"
        ) as box:
            [r] = box.run(commit, [check])
            assert r.passed, r.output_tail
        return time.perf_counter() - t

    plain_i, boxed_i = [], []
    for _ in range(n):
        plain_i.append(plain())
        boxed_i.append(confined())
    p, b = statistics.median(plain_i), statistics.median(boxed_i)
    print(
        f"integration check, worktree included (median of {n}): {p * 1000:.0f} ms plain "
        f"run_check, {b * 1000:.0f} ms confined, ratio {b / p:.3f} ({(b - p) * 1000:+.0f} ms)"
    )


if __name__ == "__main__":
    main()
