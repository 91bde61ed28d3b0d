"""Tasks on a real Temporal dev server, run by hosts that are separate `git sup host run`
processes (own HOME, clone and worktree root), submitted from another clone through the
real CLI; the review remote is a gated bare repository."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.boundary.conftest import push, rejected
from tests.cluster.conftest import Cluster
from tests.conftest import GIT_SUP, PYTHON, git, run_sup
from tests.helpers.sup import PYTEST_CHECK, write_worker

# Fixes add and commits, once both tasks of the test have started (each on its host: every
# host has one slot, so the second task can only start on the other host).
FIX_AFTER_BARRIER = """
import os, pathlib, subprocess, time
d = pathlib.Path({tmp!r})
(d / ("started-" + os.environ["GITSUP_TASK"])).write_text("x")
end = time.time() + 120
while len(list(d.glob("started-*"))) < {n} and time.time() < end:
    time.sleep(0.1)
with open(d / "runs.log", "a") as f:
    f.write(os.environ["GITSUP_TASK"] + "\\n")
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
print("fixed", flush=True)
"""

# Writes a file, says so, then works for a long time (until stopped).
SLOW = """
import os, pathlib, time
pathlib.Path("half.txt").write_text("half done\\n")
(pathlib.Path({tmp!r}) / ("working-" + os.environ["GITSUP_TASK"])).write_text("x")
print("working", flush=True)
time.sleep(600)
"""


def submit(c: Cluster, worker: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_sup(
        c.submitter,
        "start",
        "fix add",
        "--cluster",
        c.address,
        "--worker",
        worker,
        "--check",
        PYTEST_CHECK,
        "--review",
        "none",
        *args,
    )


def wait_for(path: Path, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.1)


def test_two_tasks_run_on_two_hosts_and_end_ready(cluster: Cluster, tmp: Path) -> None:
    a = cluster.host("alpha", "--slots", "1")
    b = cluster.host("beta", "--slots", "1")
    worker = write_worker(tmp, FIX_AFTER_BARRIER.format(tmp=str(cluster.shared), n=2))
    ids = []
    for _ in range(2):
        res = submit(cluster, worker, "--detach")
        assert res.returncode == 0, res.stderr
        ids.append(res.stdout.strip())
    results = {}
    for task in ids:
        res = run_sup(cluster.submitter, "wait", task, "--json", timeout=300)
        assert res.returncode == 0, json.loads(res.stdout)["reasons"]
        results[task] = json.loads(res.stdout)
    assert {r["state"] for r in results.values()} == {"completed"}
    assert {r["status"] for r in results.values()} == {"ready"}
    hosts = {task: r["host"] for task, r in results.items()}
    assert sorted(hosts.values()) == ["alpha", "beta"], hosts
    for task, name in hosts.items():
        host = a if name == "alpha" else b
        record = host.record(task)
        assert record["host"] == name and record["state"] == "completed"
        assert record["candidate"] == results[task]["candidate"]
        # the host's name is in its worker_started event too
        res = run_sup(host.clone, "log", task, "--json", env=host.env)
        assert res.returncode == 0, res.stderr
        started = [
            json.loads(line)
            for line in res.stdout.splitlines()
            if line.strip() and json.loads(line)["type"] == "worker_started"
        ]
        assert [e["data"]["host"] for e in started] == [name]
        # the baseline the task ran on is the one the submitter pushed to the review remote
        assert git(cluster.origin, "rev-parse", f"refs/sup/{task}/baseline") == git(
            cluster.submitter, "rev-parse", "main"
        )
    # each task ran its worker exactly once
    assert sorted((cluster.shared / "runs.log").read_text().split()) == sorted(ids)
    # `show` from the submitter's clone says how each ended
    res = run_sup(cluster.submitter, "show", ids[0])
    assert res.returncode == 0, res.stderr
    assert f"task {ids[0]}: completed (ready) on {hosts[ids[0]]}" in res.stdout


def test_the_same_task_id_submitted_twice_runs_once(cluster: Cluster, tmp: Path) -> None:
    cluster.host("alpha")
    cluster.host("beta")
    worker = write_worker(tmp, FIX_AFTER_BARRIER.format(tmp=str(cluster.shared), n=1))
    task = "20260101-c1a5e0"
    first = submit(cluster, worker, "--id", task, "--detach")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == task
    second = submit(cluster, worker, "--id", task, "--detach")
    assert second.returncode == 2, (second.stdout, second.stderr)
    assert f"task {task} was submitted already" in second.stderr
    done = run_sup(cluster.submitter, "wait", task, timeout=300)
    assert done.returncode == 0, (done.stdout, done.stderr)
    # and once it ended, still refused (foreground too)
    third = submit(cluster, worker, "--id", task)
    assert third.returncode == 2, (third.stdout, third.stderr)
    assert (cluster.shared / "runs.log").read_text().split() == [task]


def test_stop_ends_a_remote_task_stopped_with_its_work_saved(cluster: Cluster, tmp: Path) -> None:
    host = cluster.host("alpha")
    worker = write_worker(tmp, SLOW.format(tmp=str(cluster.shared)))
    res = submit(cluster, worker, "--detach")
    assert res.returncode == 0, res.stderr
    task = res.stdout.strip()
    wait_for(cluster.shared / f"working-{task}")
    res = run_sup(cluster.submitter, "show", task)
    assert res.returncode == 0, res.stderr
    assert "on alpha" in res.stdout, res.stdout
    res = run_sup(cluster.submitter, "stop", task, "--json")
    assert res.returncode == 0, (res.stdout, res.stderr)
    stopped = json.loads(res.stdout)
    assert stopped["state"] == "stopped" and stopped["host"] == "alpha"
    assert stopped["wip"], stopped
    record = host.record(task)
    assert record["state"] == "stopped" and record["wip"] == stopped["wip"]
    # the file the worker wrote is in the saved work
    assert git(host.clone, "show", f"{stopped['wip']}:half.txt") == "half done"
    res = run_sup(cluster.submitter, "wait", task)
    assert res.returncode == 5, (res.stdout, res.stderr)


def test_a_host_cannot_move_the_protected_branch(cluster: Cluster) -> None:
    host = cluster.host("alpha")
    before = git(cluster.origin, "rev-parse", "main")
    (host.clone / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(host.clone, "commit", "-q", "-am", "straight to main")
    res = push(host.clone, "origin", "HEAD:main", env=host.env)
    rejected(res, "main")
    assert git(cluster.origin, "rev-parse", "main") == before


def test_cluster_commands_without_the_extra_say_how_to_get_it(repo: Path) -> None:
    code = (
        "import sys; sys.modules['temporalio'] = None; "
        "sys.argv = ['git-sup', *sys.argv[1:]]; "
        "from gitsup.cli.main import run; run()"
    )
    for args in (["cluster", "dev"], ["host", "run", "--cluster", "127.0.0.1:1"]):
        res = subprocess.run(
            [PYTHON, "-c", code, *args], cwd=repo, capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 2, (res.stdout, res.stderr)
        assert res.stderr.splitlines() == [
            "git sup: error: the cluster needs Temporal's Python SDK: pip install 'gitsup[cluster]'"
        ]


def test_a_bad_cluster_address_is_bad_input(repo: Path) -> None:
    for args in (
        ["start", "x", "--worker", "true", "--cluster", "not an address"],
        ["host", "run", "--cluster", "127.0.0.1"],
        ["start", "x", "--worker", "true", "--id", "20260101-abcdef"],
    ):
        res = run_sup(repo, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "Traceback" not in res.stderr
    assert GIT_SUP and sys.executable
