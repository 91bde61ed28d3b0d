"""Policy-gate benchmark: classifier throughput and latency, and the CLI batch mode end to end.

Run: .venv/bin/python bench/bench_policy.py [--n 20000]
Prints numbers only (no asserts). The corpus is the labelled test corpus plus realistic routine
commands; "uncached" makes every command unique (varying a path or a message) and clears the
per-policy decision cache, so every decision parses and classifies from scratch.

The classifier rows (issue 18: all-unique commands without cache, p50/p99 of one decision) are
also printed as ratios against a baseline measured in the same run on the same commands: the
stdlib tokenizer `shlex.split` (the least any classifier must do: read the words once). The
uncached throughput is per CPU second, interleaved with the baseline chunk by chunk, so a
machine shared with other work skews neither. Goal: >= 30,000 decisions/s, p50 <= 30 us.

`--instructions` also counts the instructions of one all-unique decision and of one baseline
tokenization under valgrind (when installed): the same number on every run of the same code,
whatever else the machine does, so two versions can be compared exactly. (The classifier runs
about as many instructions per command as `shlex.split`, yet takes about 2.5x its time: it
walks many distinct code paths and tables per decision, so cache and branch misses, not
instructions, make most of the difference; see docs/policy.md.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gitsup.policy import Policy, classify_command, load_policy
from gitsup.policy.examples import check_examples
from gitsup.policy.rules import registry

ROOT = Path(__file__).resolve().parent.parent
W = "/home/dev/repo"
HOME = "/home/dev"

ROUTINE = [
    "git status",
    "git diff",
    "git diff --stat",
    "git log --oneline -10",
    "ls -la src",
    "cat src/{f}.py",
    "rg -n {f} src",
    "grep -rn {f} tests",
    "pytest -q tests/test_{f}.py",
    "python -m pytest -x -k {f}",
    "git add src/{f}.py && git commit -m 'Update {f}'",
    "git commit -m \"$(cat <<'EOF'\nFix {f}\n\nCo-Authored-By: Claude <noreply@anthropic.com>\nEOF\n)\"",
    "sed -n '1,80p' src/{f}.py",
    "head -50 src/{f}.py",
    "find . -name '{f}*.py'",
    "ruff check src/{f}.py",
    "mypy src/{f}.py",
    "npm test -- {f}",
    "cd src && ls {f}",
    "git show HEAD:src/{f}.py | head",
    "timeout 300 pytest tests/{f}",
    "python -c 'import {f}'",
    "curl -s https://example.com/{f}",
    "rm -rf build/{f}",
]


def corpus() -> list[str]:
    rows = []
    for line in (ROOT / "tests" / "policy" / "corpus.jsonl").read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line)[2])
    return rows


def mixed(n: int, unique: bool, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    labelled = corpus()
    out: list[str] = []
    for i in range(n):
        if rnd.random() < 0.75:
            tpl = rnd.choice(ROUTINE)
            name = f"mod{i}" if unique else rnd.choice(["app", "cli", "core", "util"])
            out.append(tpl.replace("{f}", name))
        else:
            cmd = rnd.choice(labelled)
            out.append(f"{cmd} # {i}" if unique and "\n" not in cmd else cmd)
    return out


def throughput(cmds: list[str], policy: Policy, *, cache: bool, sandboxed: bool = False) -> float:
    policy._cache.clear()
    start = time.perf_counter()
    for c in cmds:
        if not cache:
            policy._cache.clear()
        classify_command(c, worktree=W, policy=policy, home=HOME, sandboxed=sandboxed)
    return len(cmds) / (time.perf_counter() - start)


def tokenize(cmd: str) -> None:
    with contextlib.suppress(ValueError):
        shlex.split(cmd, comments=True)


def uncached_rows(cmds: list[str], policy: Policy, chunk: int = 250) -> tuple[float, float]:
    """(classifier, baseline) decisions per CPU second, without the cache. CPU time, and the
    two interleaved chunk by chunk, so a machine shared with other work skews neither."""
    cpu = base = 0
    for i in range(0, len(cmds), chunk):
        part = cmds[i : i + chunk]
        t = time.process_time_ns()
        for c in part:
            tokenize(c)
        base += time.process_time_ns() - t
        t = time.process_time_ns()
        for c in part:
            policy._cache.clear()
            classify_command(c, worktree=W, policy=policy, home=HOME)
        cpu += time.process_time_ns() - t
    return len(cmds) / (cpu / 1e9), len(cmds) / (base / 1e9)


def latencies(cmds: list[str], policy: Policy) -> tuple[list[float], list[float]]:
    """Wall time of one uncached decision and of the baseline on the same command (us)."""
    out: list[float] = []
    base: list[float] = []
    for c in cmds:
        t = time.perf_counter_ns()
        tokenize(c)
        base.append((time.perf_counter_ns() - t) / 1000.0)
        policy._cache.clear()
        t = time.perf_counter_ns()
        classify_command(c, worktree=W, policy=policy, home=HOME)
        out.append((time.perf_counter_ns() - t) / 1000.0)
    return out, base


def cli_batch(cmds: list[str]) -> tuple[float, float]:
    exe = str(Path(sys.executable).parent / "git-sup")
    data = "".join(json.dumps(c) + "\n" for c in cmds)
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, HOME=d)
        start = time.perf_counter()
        res = subprocess.run(
            [exe, "policy", "check", "--json", "--cwd", d, "-"],
            input=data,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        wall = time.perf_counter() - start
        lines = res.stdout.count("\n")
        if res.returncode != 0 or lines != len(cmds):
            sys.stderr.write(
                f"cli batch failed: rc={res.returncode} lines={lines}\n{res.stderr[-2000:]}\n"
            )
        # start-up cost: one command
        start = time.perf_counter()
        subprocess.run(
            [exe, "policy", "check", "--json", "--cwd", d, "-"],
            input='"ls"\n',
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        startup = time.perf_counter() - start
    return len(cmds) / wall, startup


# -- instruction counts (valgrind) -------------------------------------------------------------
def _run_only(what: str, count: int) -> None:
    """Judge (or tokenize) the first `count` all-unique commands and nothing else: the body of
    one `instructions` measurement."""
    policy = load_policy()
    classify_command("git status", worktree=W, policy=policy, home=HOME)
    tokenize("git status")
    for c in mixed(3000, unique=True)[:count]:
        if what == "shlex":
            tokenize(c)
        else:
            policy._cache.clear()
            classify_command(c, worktree=W, policy=policy, home=HOME)


def _instructions(what: str, count: int) -> int:
    """Instructions the process executes (valgrind's cachegrind, no cache simulation)."""
    res = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--run-only",
            what,
            "--n",
            str(count),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONHASHSEED="0"),
        check=True,
    )
    for line in res.stderr.splitlines():
        if "I   refs:" in line or "I refs:" in line:
            return int(line.rsplit(":", 1)[1].replace(",", "").strip())
    raise SystemExit(f"no instruction count in valgrind's output:\n{res.stderr[-2000:]}")


def instructions(count: int) -> None:
    """Instructions per decision and per baseline tokenization: the same on every run of the
    same code (no timer, no other load), so a change is measured exactly. Each is the count of
    `count` commands minus that of none (start-up, imports, policy load)."""
    per = {}
    for what in ("classify", "shlex"):
        per[what] = (_instructions(what, count) - _instructions(what, 0)) / count
    print(
        f"instructions per all-unique decision (valgrind, {count} commands): "
        f"{per['classify']:,.0f} (baseline shlex.split {per['shlex']:,.0f}; "
        f"{per['classify'] / per['shlex']:.2f}x)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="also count instructions per decision under valgrind (deterministic; ~1 min)",
    )
    ap.add_argument("--run-only", choices=["classify", "shlex"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_only:
        _run_only(args.run_only, args.n)
        return
    policy = load_policy()
    classify_command("git status", worktree=W, policy=policy, home=HOME)  # warm up
    realistic = mixed(args.n, unique=False)
    unique = mixed(args.n, unique=True)
    print(f"commands: {args.n} (75% routine templates, 25% labelled corpus)")
    print(f"realistic mix, with cache:   {throughput(realistic, policy, cache=True):>10,.0f} cmd/s")
    print(
        f"realistic mix, cache off:    {throughput(realistic, policy, cache=False):>10,.0f} cmd/s"
    )
    rate, base = uncached_rows(unique, policy)
    print(
        f"all-unique commands, no cache: {rate:>8,.0f} cmd/s per CPU second "
        f"(baseline shlex.split {base:,.0f}/s; classifier costs {base / rate:.2f}x the baseline)"
    )
    rate = throughput(realistic, policy, cache=False, sandboxed=True)
    print(f"realistic mix, sandboxed, cache off: {rate:>10,.0f} cmd/s")
    lat, blat = latencies(unique[:5000], policy)
    q = statistics.quantiles(lat, n=100)
    bq = statistics.quantiles(blat, n=100)
    print(
        f"latency of one uncached decision: p50 {q[49]:.0f} us ({q[49] / bq[49]:.2f}x baseline "
        f"{bq[49]:.0f} us), p99 {q[98]:.0f} us ({q[98] / bq[98]:.2f}x baseline {bq[98]:.0f} us), "
        f"max {max(lat):.0f} us"
    )
    policy._cache.clear()
    classify_command("git status", worktree=W, policy=policy, home=HOME)
    t = time.perf_counter_ns()
    classify_command("git status", worktree=W, policy=policy, home=HOME)
    print(f"latency of one cached decision: {(time.perf_counter_ns() - t) / 1000:.1f} us")
    policy._cache.clear()
    t = time.perf_counter()
    check_examples(policy)
    examples = time.perf_counter() - t
    count = sum(
        len(r.spec.match)
        + len(r.spec.not_match)
        + len(r.spec.match_sandboxed)
        + len(r.spec.not_match_sandboxed)
        for r in registry().values()
    )
    print(f"rule examples self-test at policy load: {examples * 1000:.0f} ms ({count} examples)")
    rate, startup = cli_batch(realistic)
    print(
        f"`git sup policy check --json -` end to end: {rate:,.0f} cmd/s "
        f"({args.n} lines; process start-up {startup * 1000:.0f} ms)"
    )
    if args.instructions:
        if shutil.which("valgrind") is None:
            print("instructions per decision: valgrind is not installed (skipped)")
        else:
            instructions(min(args.n, 3000))


if __name__ == "__main__":
    main()
