"""The cluster on this machine: dispatch overhead, where it goes, throughput, failover.

    .venv/bin/python bench/bench_cluster.py [--runs 5] [--tasks 50] [--hosts 3] [--heartbeat 3]
    .venv/bin/python bench/bench_cluster.py --quick        # a few minutes: --runs 3 --tasks 15
    .venv/bin/python bench/bench_cluster.py --only dispatch,profile

A gated bare review remote, a submitter clone and hosts (`git sup host run`, each with its own
clone, HOME and worktree root) on Temporal's dev server (`git sup cluster dev`), all on
127.0.0.1 in a temporary directory. The task: a process worker that commits one file, the
default check. Four parts, in one run:

- dispatch: the wall time of `git sup start` in the foreground to its exit, locally in the
  submitter's clone and with `--cluster` on one host (submit: baseline pushed, workflow
  started; the host fetches the baseline, prepares and runs the task, publishes its refs and
  notes; the submitter gets the result and fetches the task). The medians and the ratio
  cluster/local (goal <= 1.2x).
- profile: one cluster task with every `git` process (submitter, host, supervisor, gates)
  logged by a wrapper on PATH, and the host's task events: a timeline of where the time goes.
- throughput: `--tasks` tasks submitted `--detach` (4 at a time) over `--hosts` hosts (2 slots each); the
  time until the review remote holds every candidate (tasks/min), then the proof that none
  was lost (each candidate on the remote, one commit over its baseline, the task ready) and
  none ran twice (each worker run appends its task id to a shared file: one line per task;
  each task lives in exactly one host's clone, its log with one `worker_started`).
- failover: `sup.cluster.heartbeat` short; a task's check blocks on host A after its first
  turn was published, host B idles; every process of A is killed (-9). Measured: the kill to
  B's `host_changed` and to B's first `worker_started` (goal <= heartbeat + 5 s).

The machine is shared: the load average is printed with the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench_queue  # noqa: E402 - beside this file: its Git helpers
from bench_queue import git  # noqa: E402

GIT_SUP = str(Path(sys.executable).parent / "git-sup")
WORKER = (
    "import os, pathlib, subprocess\n"
    "shared = os.environ.get('GITSUP_SANDBOX_EXTRA_WRITE')\n"
    "if shared:\n"
    "    with open(os.path.join(shared, 'runs.log'), 'a') as f:\n"
    "        f.write(os.environ.get('GITSUP_TASK', '?') + '\\n')\n"
    "pathlib.Path('done.txt').write_text('done\\n')\n"
    "subprocess.run(['git', 'add', 'done.txt'], check=True)\n"
    "subprocess.run(['git', 'commit', '-q', '-m', 'done'], check=True)\n"
)
# the failover task's check: its first run (on host A) says so and blocks; later runs pass
CHECK_ONCE_BLOCKING = (
    "import pathlib, time\n"
    "d = pathlib.Path({shared!r})\n"
    "if not (d / 'check-ran').exists():\n"
    "    (d / 'check-ran').write_text('x')\n"
    "    time.sleep(600)\n"
)
GIT_LOG_WRAPPER = """#!/bin/bash
s=$(date +%s.%N)
{git} "$@"
rc=$?
printf '%s %s %s\\t%s\\n' "$s" "$(date +%s.%N)" "$PWD" "$*" >> {log}
exit $rc
"""


SUBMITTERS = 4  # submissions at once in the throughput part


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def sup(cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.monotonic()
    res = subprocess.run(
        [GIT_SUP, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False, env=env
    )
    took = time.monotonic() - start
    if res.returncode != 0:
        raise SystemExit(f"git sup {' '.join(args)} failed ({res.returncode}): {res.stderr}")
    return took, res.stdout


@dataclass
class Host:
    name: str
    clone: Path
    proc: subprocess.Popen[bytes]

    def events(self, task: str) -> list[dict[str, object]]:
        path = self.clone / ".git" / "sup" / "tasks" / task / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@dataclass
class Bench:
    tmp: Path
    repo: Path
    origin: Path
    address: str
    shared: Path
    server: subprocess.Popen[bytes] | None = None
    hosts: list[Host] = field(default_factory=list)

    def host(self, name: str, env: dict[str, str] | None = None) -> Host:
        home = self.tmp / f"home-{name}"
        home.mkdir()
        (home / ".gitconfig").write_text(
            "[init]\n\tdefaultBranch = main\n[user]\n\tname = Host\n\temail = h@example.invalid\n"
        )
        clone = self.tmp / f"clone-{name}"
        git(self.tmp, "clone", "-q", str(self.origin), str(clone))
        git(clone, "config", "sup.reviewRemote", "origin")
        git(clone, "config", "sup.worktreeRoot", str(self.tmp / f"worktrees-{name}"))
        log = self.tmp / f"host-{name}.log"
        full = {
            **os.environ,
            **(env or {}),
            "HOME": str(home),
            "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
        }
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [GIT_SUP, "host", "run", "--cluster", self.address, "--name", name],
                cwd=clone,
                env=full,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        end = time.monotonic() + 120
        while f"host {name} serves" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"host {name} did not serve: {log.read_text()}")
            time.sleep(0.1)
        h = Host(name, clone, proc)
        self.hosts.append(h)
        return h

    def stop_hosts(self) -> None:
        for h in self.hosts:
            if h.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(h.proc.pid, signal.SIGTERM)
                try:
                    h.proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    kill_machine(self, h)
        self.hosts.clear()


def kill_machine(b: Bench, host: Host) -> float:
    """kill -9 of every process of a host (the host process, its tasks' supervisors,
    workers and checks: every process whose cwd or command line is in its clone or
    worktrees); the time of the first kill."""
    import psutil

    marks = (str(host.clone), str(b.tmp / f"worktrees-{host.name}"))
    first = 0.0
    for _ in range(50):
        victims = [host.proc.pid] if host.proc.poll() is None else []
        for p in psutil.process_iter(["pid", "cwd", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                where = (p.info["cwd"] or "") + " " + " ".join(p.info["cmdline"] or [])
                if p.pid != os.getpid() and any(m in where for m in marks):
                    victims.append(p.pid)
        if not victims:
            break
        first = first or time.time()
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    host.proc.wait()
    return first


def setup(tmp: Path) -> Bench:
    bench_queue.hermetic(tmp)
    os.environ["GITSUP_OWN_TOOLS"] = "0"
    shared = tmp / "shared"
    shared.mkdir()
    os.environ["GITSUP_SANDBOX_EXTRA_WRITE"] = str(shared)
    from gitsup.git import GitRepo
    from gitsup.integration.setup import install_gate

    repo = tmp / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("bench\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "initial")
    sup(repo, "init")
    origin = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", str(origin))
    install_gate(origin, review_remote=True, source=GitRepo.open(repo))
    git(repo, "push", "-q", str(origin), "main")
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "config", "sup.reviewRemote", "origin")
    port = free_port()
    b = Bench(tmp, repo, origin, f"127.0.0.1:{port}", shared)
    b.server = subprocess.Popen(
        [GIT_SUP, "cluster", "dev", "--port", str(port), "--db", str(tmp / "dev.db")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    end = time.monotonic() + 60
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        if time.monotonic() > end:
            raise SystemExit("the dev server did not listen")
        time.sleep(0.1)
    return b


def task_args(b: Bench, *extra: str) -> list[str]:
    worker = b.tmp / "worker.py"
    if not worker.exists():
        worker.write_text(WORKER)
    return ["--worker", shlex.join([sys.executable, str(worker)]), "--review", "none", *extra]


def dispatch(b: Bench, runs: int) -> None:
    b.host("dispatch")
    task = task_args(b, "-q")
    sup(b.repo, "start", "warm-up", *task)  # the first start pays the imports' caches
    sup(b.repo, "start", "warm-up", "--cluster", b.address, *task)
    local, cluster = [], []
    for i in range(runs):
        local.append(sup(b.repo, "start", f"local {i}", *task)[0])
        cluster.append(sup(b.repo, "start", f"cluster {i}", "--cluster", b.address, *task)[0])
    b.stop_hosts()
    lm, cm = statistics.median(local), statistics.median(cluster)
    print(f"== dispatch: {runs} runs each (trivial process worker, default check)")
    print(f"local   git sup start            median {lm:.2f}s  ({fmt(local)})")
    print(f"cluster git sup start --cluster  median {cm:.2f}s  ({fmt(cluster)})")
    print(f"ratio cluster/local: {cm / lm:.2f}x (goal <= 1.2x)   load {load()}")


def fmt(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def profile(b: Bench) -> None:
    """One cluster task with every git process logged: the timeline."""
    shim = b.tmp / "shim"
    shim.mkdir()
    log = b.tmp / "git-calls.log"
    real = shutil.which("git") or "/usr/bin/git"
    (shim / "git").write_text(
        GIT_LOG_WRAPPER.format(git=shlex.quote(real), log=shlex.quote(str(log)))
    )
    (shim / "git").chmod(0o755)
    env = {"PATH": f"{shim}:{os.environ['PATH']}"}
    h = b.host("profile", env)
    full = {**os.environ, **env}
    sup(b.repo, "start", "warm-up", "--cluster", b.address, *task_args(b, "-q"), env=full)
    for where in ("local", "cluster"):
        cluster = ["--cluster", b.address] if where == "cluster" else []
        t0 = time.time()
        _, out = sup(b.repo, "start", "profiled", *cluster, *task_args(b, "--json"), env=full)
        t1 = time.time()
        res = json.loads(out)
        task = res.get("task") or res["id"]
        rows = timeline(b, log, t0, {str(b.repo): "submitter", str(h.clone): "host"})
        owner = h if cluster else None
        events = owner.events(task) if owner else Host("", b.repo, h.proc).events(task)
        for ev in events:
            rows.append(
                (float(ev["ts"]) - t0, 0.0, f"event {ev['type']} {str(ev.get('data', ''))[:80]}")
            )  # type: ignore[arg-type]
        if cluster:
            rows += [(at - t0, 0.0, f"temporal {what}") for at, what in history(b.address, task)]
        rows.sort()
        n = sum(1 for *_, w in rows if w.startswith("git"))
        total = sum(t for _, t, w in rows if w.startswith("git"))
        print(f"== profile: one {where} task, {t1 - t0:.2f}s; git processes and the task's events")
        for at, took, what in rows:
            print(f"{at:7.3f}s {took * 1000:6.0f}ms  {what}")
        print(f"{n} git processes, {total:.2f}s in all (with the wrapper's cost)   load {load()}")
        if cluster:  # the submitter's own share: to the workflow's start, from its end
            marks = {w: at for at, _, w in rows if w.startswith("temporal workflow_execution")}
            began = marks.get("temporal workflow_execution_started")
            ended = marks.get("temporal workflow_execution_completed")
            if began is not None and ended is not None:
                print(
                    f"submitter: {began:.2f}s to the workflow's start, "
                    f"{t1 - t0 - ended:.2f}s from its end to the exit"
                )
    b.stop_hosts()


def history(address: str, task: str) -> list[tuple[float, str]]:
    """The workflow's history events: (time, type)."""
    import asyncio

    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    async def go() -> list[tuple[float, str]]:
        client = await Client.connect(address)
        out = []
        size = 0
        async for e in client.get_workflow_handle(task).fetch_history_events():
            name = EventType.Name(e.event_type).removeprefix("EVENT_TYPE_").lower()
            out.append((e.event_time.ToDatetime().timestamp(), name))
            size += e.ByteSize()
        out.append((out[-1][0], f"history: {len(out)} events, {size} bytes"))
        return out

    return asyncio.run(go())


def timeline(
    b: Bench, log: Path, t0: float, places: dict[str, str]
) -> list[tuple[float, float, str]]:
    places = {**places, str(b.origin): "remote", str(b.tmp / "worktrees-profile"): "task"}
    rows = []
    for line in log.read_text().splitlines():
        head, _, args = line.partition("\t")
        s, e, cwd = head.split(" ", 2)
        where = next((v for k, v in places.items() if cwd.startswith(k)), cwd)
        if float(s) >= t0:
            rows.append((float(s) - t0, float(e) - float(s), f"git {where:9} {args[:90]}"))
    return rows


def throughput(b: Bench, tasks: int, hosts: int) -> None:
    runs = b.shared / "runs.log"
    runs.unlink(missing_ok=True)
    hs = [b.host(f"t{i + 1}") for i in range(hosts)]
    t0 = time.monotonic()
    # submitted by several submitters at once (one submission is a process of its own)
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> str:
        args = ["start", f"task {i}", "--cluster", b.address, "--detach", *task_args(b, "-q")]
        return sup(b.repo, *args)[1].strip()

    with ThreadPoolExecutor(SUBMITTERS) as pool:
        ids = list(pool.map(one, range(tasks)))
    submitted = time.monotonic() - t0
    want = {f"refs/sup/{t}/candidate" for t in ids}
    while True:
        have = set(git(b.origin, "for-each-ref", "--format=%(refname)", "refs/sup/").split())
        if want <= have:
            break
        if time.monotonic() - t0 > 60 * tasks:
            raise SystemExit(f"lost: {sorted(want - have)}")
        time.sleep(0.2)
    took = time.monotonic() - t0
    # none lost: each ready, its candidate on the remote one commit over its baseline
    results = [json.loads(sup(b.repo, "wait", t, "--json")[1]) for t in ids]
    b.stop_hosts()
    bad = [r for r in results if r.get("status") != "ready"]
    one = [
        t
        for t in ids
        if git(b.origin, "rev-list", "--count", f"refs/sup/{t}/baseline..refs/sup/{t}/candidate")
        != "1"
    ]
    # none ran twice: one worker run per task, one host's clone holding it, one worker_started
    counts = Counter(runs.read_text().split())
    twice = [t for t in ids if counts[t] != 1]
    where: dict[str, list[str]] = {t: [] for t in ids}
    starts: dict[str, int] = {}
    for h in hs:
        for t in ids:
            evs = h.events(t)
            d = h.clone / ".git" / "sup" / "tasks" / t
            if evs and not (d / "fetched.json").exists():
                where[t].append(h.name)
                starts[t] = starts.get(t, 0) + sum(e["type"] == "worker_started" for e in evs)
    multi = [t for t in ids if len(where[t]) != 1 or starts.get(t) != 1]
    per_host = Counter(w[0] for w in where.values() if w)
    print(f"== throughput: {tasks} tasks over {hosts} hosts (2 slots each)")
    print(
        f"submitted in {submitted:.1f}s; all candidates on the remote after {took:.1f}s: "
        f"{tasks / took * 60:.1f} tasks/min   load {load()}"
    )
    print(f"per host: {dict(sorted(per_host.items()))}")
    print(
        f"lost or not ready: {len(bad) + len(one)}; run twice or on two hosts: "
        f"{len(twice) + len(multi)}"
    )
    if bad or one or twice or multi:
        raise SystemExit(f"FAILED: {bad[:3]} {one[:3]} {twice[:3]} {multi[:3]}")


def failover(b: Bench, heartbeat: float) -> None:
    git(b.repo, "config", "sup.cluster.heartbeat", f"{heartbeat:g}s")
    (b.shared / "check-ran").unlink(missing_ok=True)
    a = b.host("fa")
    check = shlex.join([sys.executable, "-c", CHECK_ONCE_BLOCKING.format(shared=str(b.shared))])
    _, out = sup(
        b.repo,
        "start",
        "failover",
        "--cluster",
        b.address,
        "--detach",
        *task_args(b, "--check", check),
    )
    task = out.strip()
    end = time.monotonic() + 300
    # its check runs, and its first turn is published (pushed while the check runs)
    while (
        not (b.shared / "check-ran").exists()
        or subprocess.run(
            ["git", "rev-parse", "-q", "--verify", f"refs/sup/{task}/wip"],
            cwd=b.origin,
            capture_output=True,
        ).returncode
    ):
        if time.monotonic() > end:
            raise SystemExit("the failover task's check never ran after its first turn's push")
        time.sleep(0.1)
    hb = b.host("fb")
    killed = kill_machine(b, a)
    res = json.loads(sup(b.repo, "wait", task, "--json")[1])
    b.stop_hosts()
    git(b.repo, "config", "--unset", "sup.cluster.heartbeat")
    evs = hb.events(task)
    changed = next(float(e["ts"]) for e in evs if e["type"] == "host_changed")  # type: ignore[arg-type]
    started = next(
        float(e["ts"])
        for e in evs  # type: ignore[arg-type]
        if e["type"] == "worker_started" and float(e["ts"]) > changed
    )  # type: ignore[arg-type]
    print(f"== failover: heartbeat {heartbeat:g}s, host fa killed -9 after its first turn")
    print(
        f"kill -> fb continues (host_changed) {changed - killed:.2f}s; "
        f"-> fb's first worker_started {started - killed:.2f}s "
        f"(goal <= {heartbeat + 5:g}s); task {res['status']} on {res.get('host')}   "
        f"load {load()}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--heartbeat", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="--runs 3 --tasks 15")
    ap.add_argument("--only", default="dispatch,profile,throughput,failover")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.tasks = 3, 15
    parts = set(args.only.split(","))
    print(f"load average at the start: {load()} on {os.cpu_count()} cores (shared machine)")
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as d:
        b = setup(Path(d))
        try:
            if "dispatch" in parts:
                dispatch(b, args.runs)
            if "profile" in parts:
                profile(b)
            if "throughput" in parts:
                throughput(b, args.tasks, args.hosts)
            if "failover" in parts:
                failover(b, args.heartbeat)
        finally:
            b.stop_hosts()
            if b.server is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(b.server.pid, signal.SIGTERM)
                b.server.wait(timeout=60)


if __name__ == "__main__":
    main()
