"""What the task sandbox costs: at spawn, and on a check's wall time.

    .venv/bin/python bench/bench_sandbox.py [--spawns N] [--checks N] [--integrations N]
                                            [--shared-git]

Every figure compares paired samples taken in the same run, interleaved (and, for the
checks, in alternating order) so that load from other processes hits both sides alike. A
ratio is the median of the per-pair ratios, a difference the median of the per-pair
differences, each with a bootstrap 95% interval; the verdict against a goal is "ok" when the
whole interval is within it, "within noise" when the interval straddles no cost at all, and
"OVER" when the whole interval is beyond the goal. CPU time (user + system, from wait4's
rusage) is shown beside wall time: load from other processes barely moves it.

0. The Landlock rules of the plan (a task with a Git dir of its own; `--shared-git`: one
   without, whose 256 loose-object directories are writable one by one).
1. Spawn: `true` through today's bootstrap (join a fresh cgroup when the host has one)
   versus the same bootstrap with the task's `--sandbox` (mount and PID namespaces,
   Landlock, capabilities dropped, the system call filter). Goal: the median difference is
   at most +10 ms. Also shown: the sandbox without the PID namespace and the filter, to
   see what those two add.
2. A check: a Python workload that imports modules, writes, reads and stats files in the
   worktree and runs `git status`, with and without the sandbox. Goal: ratio <= 1.05. And
   the A/A order effect: the same check outside twice in a row, second / first.
3. A loopback-only network namespace for one command: a named one made and removed through
   pyroute2 (how confined checks got theirs before) versus the bootstrap's own
   (`--new-netns`, how they get it now).
4. An integration's check: that workload as `git sup integrate` runs it, a throw-away
   worktree made and removed around it, through the confined runner
   (gitsup/verification/confined.py: sandbox plan, a cgroup and a loopback network namespace
   per check) versus a plain `run_check` with gitsup's environment (how integrate ran it
   before).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


def setup(
    root: Path, *, shared_git: bool = False
) -> tuple[Path, list[str], dict[str, str], list[str]]:
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
    # a Git dir of the task's own, as every task has (the shared Git state's 256 writable
    # loose-object directories would add as many Landlock rules: --shared-git)
    task_dir.mkdir(parents=True)
    if not shared_git:
        (task_dir / "git").mkdir()
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
    cfg = plans[0].config
    n = {k: len(cfg[k]) for k in ("read", "listed", "write")}
    fanout = 256 * len(cfg["fanout"])
    print(
        f"Landlock rules: {sum(n.values()) + fanout + len(cfg['scratch'])} "
        f"({n['read']} read, {n['listed']} listed, {n['write']} write, {fanout} loose-object "
        f"directories; git state {plans[0].git_state})"
    )
    return wt, plans[0].argv(), plans[0].env, plans[1].argv()


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system, from wait4's rusage: the child and every
    descendant it waited for) of one run."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    took = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{argv[-1][:60]!r} exited {p.returncode}")
    return took, ru.ru_utime + ru.ru_stime


def interval(values: list[float], *, resamples: int = 2000) -> tuple[float, float, float]:
    """The median of `values` and a bootstrap 95% interval of it (percentiles of the medians
    of `resamples` resamples with replacement; seeded, so a run's numbers are reproducible)."""
    rng = random.Random(26)
    n = len(values)
    meds = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    return statistics.median(values), meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def verdict(lo: float, hi: float, goal: float, neutral: float) -> str:
    """What an interval says of a goal: met, missed, or not decided by this many samples.
    `neutral`: no cost (1.0 for a ratio, 0 for a difference)."""
    noise = lo <= neutral <= hi
    if hi <= goal:
        return f"ok goal {goal:g}" + (", within noise" if noise else "")
    if noise:
        return f"within noise, goal {goal:g} inside the interval"
    if lo > goal:
        return f"OVER goal {goal:g}"
    return f"undecided, goal {goal:g} inside the interval"


def ratio_line(
    what: str, inside: list[tuple[float, float]], outside: list[tuple[float, float]], goal: float
) -> str:
    """Paired samples (wall, cpu) -> the median per-pair ratio with its interval, for wall
    time and for CPU time."""
    wall = interval([b[0] / a[0] for a, b in zip(outside, inside, strict=True)])
    cpu = interval([b[1] / a[1] for a, b in zip(outside, inside, strict=True)])
    p = statistics.median(a[0] for a in outside)
    b = statistics.median(b[0] for b in inside)
    return (
        f"{what} (median of {len(inside)} pairs): {p * 1000:.0f} ms outside, "
        f"{b * 1000:.0f} ms inside, ratio {wall[0]:.3f} [95% {wall[1]:.3f}-{wall[2]:.3f}] "
        f"({verdict(wall[1], wall[2], goal, 1.0)}); CPU time ratio {cpu[0]:.3f} "
        f"[95% {cpu[1]:.3f}-{cpu[2]:.3f}] ({verdict(cpu[1], cpu[2], goal, 1.0)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spawns", type=int, default=60)
    ap.add_argument("--checks", type=int, default=64)
    ap.add_argument("--integrations", type=int, default=10)
    ap.add_argument("--shared-git", action="store_true", help="a task without a Git dir of its own")
    args = ap.parse_args()
    base = find_cgroup_base()
    print(f"load average at start {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="gitsup-bench-sandbox-") as d:
        wt, sandbox, env, lesser = setup(Path(d), shared_git=args.shared_git)
        cgroups = []

        def wrap(argv: list[str], sb: list[str]) -> list[str]:
            cg = None
            if base is not None:
                cg = create_cgroup(f"bench-{os.getpid()}-{len(cgroups)}", base)
                cgroups.append(cg)
            return bootstrap_argv(argv, cgroup=cg, netns=None, sandbox=sb)

        try:
            plain_s, boxed_s, lesser_s = [], [], []
            for _ in range(args.spawns):
                plain_s.append(run(wrap(["true"], []), wt, env))
                boxed_s.append(run(wrap(["true"], sandbox), wt, env))
                lesser_s.append(run(wrap(["true"], lesser), wt, env))
            p = statistics.median(x[0] for x in plain_s)
            b = statistics.median(x[0] for x in boxed_s)
            diff = interval([y[0] - x[0] for x, y in zip(plain_s, boxed_s, strict=True)])
            added = statistics.median(y[0] - x[0] for x, y in zip(lesser_s, boxed_s, strict=True))
            print(
                f"spawn (median of {args.spawns}): bootstrap {p * 1000:.1f} ms, "
                f"with sandbox {b * 1000:.1f} ms; median paired difference "
                f"{diff[0] * 1000:+.1f} ms [95% {diff[1] * 1000:+.1f}..{diff[2] * 1000:+.1f}] "
                f"({verdict(diff[1] * 1000, diff[2] * 1000, 10, 0)} ms); "
                f"of which the PID namespace and the system call filter {added * 1000:+.1f} ms"
            )
            cpu = interval([y[1] - x[1] for x, y in zip(plain_s, boxed_s, strict=True)])
            add_cpu = statistics.median(y[1] - x[1] for x, y in zip(lesser_s, boxed_s, strict=True))
            print(
                f"spawn CPU time (median): bootstrap "
                f"{statistics.median(x[1] for x in plain_s) * 1000:.1f} ms, sandbox "
                f"{cpu[0] * 1000:+.1f} ms [95% {cpu[1] * 1000:+.1f}..{cpu[2] * 1000:+.1f}], "
                f"of which the PID namespace and the filter {add_cpu * 1000:+.1f} ms; "
                f"load average {os.getloadavg()[0]:.1f}"
            )
            check = [sys.executable, "-c", CHECK]
            # The check creates and deletes 400 files, and the filesystem's inode allocator
            # can make the run right after such a run slower (see the order effect printed
            # below). Each pair therefore alternates which runs first, so that effect falls
            # on both sides equally; the A/A pair (the same check outside twice in a row)
            # shows how large it is here and now.
            plain_c, boxed_c, first, second = [], [], [], []
            for i in range(args.checks + args.checks % 2):
                if i % 2 == 0:
                    plain_c.append(run(wrap(check, []), wt, env))
                    boxed_c.append(run(wrap(check, sandbox), wt, env))
                else:
                    boxed_c.append(run(wrap(check, sandbox), wt, env))
                    plain_c.append(run(wrap(check, []), wt, env))
                first.append(run(wrap(check, []), wt, env))
                second.append(run(wrap(check, []), wt, env))
            print(ratio_line("check wall time, order alternated", boxed_c, plain_c, 1.05))
            aa = interval([b[0] / a[0] for a, b in zip(first, second, strict=True)])
            print(
                f"order effect, the same check outside twice in a row: second / first "
                f"{aa[0]:.3f} [95% {aa[1]:.3f}-{aa[2]:.3f}]; load average "
                f"{os.getloadavg()[0]:.1f}"
            )
            network(wt, env, args.spawns)
            integration(wt, args.integrations)
            integration(wt, args.integrations, "pass", "fixed cost, `python -c pass`")
            confined_phases(wt, args.integrations)
        finally:
            for cg in cgroups:
                cg.kill(timeout=2)
                cg.remove()


@contextlib.contextmanager
def phases() -> Iterator[dict[str, list[float]]]:
    """Times of the confined runner's steps while the block runs (wrapped in place)."""
    from gitsup.git import GitRepo
    from gitsup.verification import confined

    took: dict[str, list[float]] = {}

    def timed(f: Callable[..., Any], name: str) -> Callable[..., Any]:
        def g(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                took.setdefault(name, []).append(time.perf_counter() - t)

        return g

    def timed_cm(f: Callable[..., Any], name: str) -> Callable[..., Any]:
        @contextlib.contextmanager
        def g(*a: Any, **k: Any) -> Iterator[Any]:
            t = time.perf_counter()
            with f(*a, **k) as v:
                took.setdefault(f"{name} in", []).append(time.perf_counter() - t)
                yield v
                t = time.perf_counter()
            took.setdefault(f"{name} out", []).append(time.perf_counter() - t)

        return g

    box = confined.ConfinedChecks
    saved = [
        (GitRepo, "add_detached_worktree", timed),
        (box, "_plan", timed),
        (box, "_network", timed),
        (confined, "contained_run", timed_cm),
        (confined, "run_check", timed),
        (GitRepo, "remove_detached_worktree", timed),
    ]
    originals = [(o, k, getattr(o, k)) for o, k, _ in saved]
    names = {"add_detached_worktree": "worktree add", "_plan": "plan", "_network": "network",
             "contained_run": "cgroup", "run_check": "bootstrap and check",
             "remove_detached_worktree": "worktree remove"}  # fmt: skip
    for o, k, wrap in saved:
        setattr(o, k, wrap(getattr(o, k), names[k]))
    try:
        yield took
    finally:
        for o, k, f in originals:
            setattr(o, k, f)


def confined_phases(wt: Path, n: int) -> None:
    """Where a confined run of `python -c pass` spends its time, step by step (each run one
    ConfinedChecks, as `git sup integrate` makes)."""
    from gitsup.git import GitRepo
    from gitsup.ids import Oid
    from gitsup.spec import Check
    from gitsup.verification.confined import ConfinedChecks

    repo = GitRepo.open(wt.parent / "repo")
    commit = Oid(git(wt.parent / "repo", "rev-parse", "main"))
    check = Check(name="bench", argv=[sys.executable, "-c", "pass"])
    total = []
    with phases() as took:
        for _ in range(n):
            t = time.perf_counter()
            with ConfinedChecks(repo, prefix="gitsup-bench-", marker="b", label="queue") as box:
                [r] = box.run(commit, [check])
                assert r.passed, r.output_tail
            total.append(time.perf_counter() - t)
    print(
        f"where a confined run of `python -c pass` goes (median of {n}, ms): total "
        f"{statistics.median(total) * 1000:.1f}; "
        + ", ".join(f"{k} {statistics.median(v) * 1000:.1f}" for k, v in took.items())
        + f"; load average {os.getloadavg()[0]:.1f}"
    )


def network(wt: Path, env: dict[str, str], n: int) -> None:
    """A loopback-only network namespace for one command: a named one made and removed
    through pyroute2 around the run (how confined checks got theirs before) versus the
    bootstrap's own `--new-netns`. Wall time, and CPU time of gitsup's process and children."""
    from gitsup.host.contain import isolated_netns

    def cpu() -> float:
        s, c = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    def named() -> tuple[float, float]:
        t, c = time.perf_counter(), cpu()
        with isolated_netns("bench") as ns:
            run(bootstrap_argv(["true"], cgroup=None, netns=ns), wt, env)
        return time.perf_counter() - t, cpu() - c

    def own() -> tuple[float, float]:
        t, c = time.perf_counter(), cpu()
        run(bootstrap_argv(["true"], cgroup=None, netns=None, new_netns=True), wt, env)
        return time.perf_counter() - t, cpu() - c

    named(), own()  # pyroute2 imported, outside the samples
    before, after = [], []
    for _ in range(n):
        before.append(named())
        after.append(own())
    wall = interval([a[0] - b[0] for b, a in zip(before, after, strict=True)])
    c = interval([a[1] - b[1] for b, a in zip(before, after, strict=True)])
    print(
        f"network namespace, `true` in it (median of {n}): named through pyroute2 (before) "
        f"{statistics.median(b[0] for b in before) * 1000:.1f} ms, the bootstrap's own "
        f"(after) {statistics.median(a[0] for a in after) * 1000:.1f} ms; paired difference "
        f"{wall[0] * 1000:+.1f} ms [95% {wall[1] * 1000:+.1f}..{wall[2] * 1000:+.1f}], CPU time "
        f"{c[0] * 1000:+.1f} ms [95% {c[1] * 1000:+.1f}..{c[2] * 1000:+.1f}]"
    )


def integration(wt: Path, n: int, workload: str = CHECK, what: str = "integration check") -> None:
    from gitsup.git import GitRepo
    from gitsup.host import proc
    from gitsup.ids import Oid
    from gitsup.spec import Check
    from gitsup.verification.checks import run_check
    from gitsup.verification.confined import ConfinedChecks

    repo = GitRepo.open(wt.parent / "repo")
    commit = Oid(git(wt.parent / "repo", "rev-parse", "main"))
    check = Check(name="bench", argv=[sys.executable, "-c", workload])

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

    def cpu() -> float:
        s, c = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    def sample(f: Callable[[], float]) -> tuple[float, float]:
        c = cpu()
        took = f()
        return took, cpu() - c

    # paired and interleaved, the order alternated (as for the checks above); CPU time here
    # is gitsup's own process (its threads included) plus every child it waited for
    plain_i, boxed_i = [], []
    for i in range(n + n % 2):
        if i % 2 == 0:
            plain_i.append(sample(plain))
            boxed_i.append(sample(confined))
        else:
            boxed_i.append(sample(confined))
            plain_i.append(sample(plain))
    wall = interval([b[0] / a[0] for a, b in zip(plain_i, boxed_i, strict=True)])
    added = interval([b[0] - a[0] for a, b in zip(plain_i, boxed_i, strict=True)])
    ratio = interval([b[1] / a[1] for a, b in zip(plain_i, boxed_i, strict=True)])
    more = statistics.median(b[1] - a[1] for a, b in zip(plain_i, boxed_i, strict=True))
    p = statistics.median(a[0] for a in plain_i)
    b = statistics.median(b[0] for b in boxed_i)
    print(
        f"{what}, worktree included (median of {len(plain_i)} pairs): "
        f"{p * 1000:.0f} ms plain run_check, {b * 1000:.0f} ms confined, ratio {wall[0]:.3f} "
        f"[95% {wall[1]:.3f}-{wall[2]:.3f}] ({added[0] * 1000:+.0f} ms "
        f"[95% {added[1] * 1000:+.0f}..{added[2] * 1000:+.0f}]); CPU time ratio {ratio[0]:.3f} "
        f"[95% {ratio[1]:.3f}-{ratio[2]:.3f}] ({more * 1000:+.0f} ms); load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
