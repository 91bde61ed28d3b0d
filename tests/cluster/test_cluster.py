"""Tasks on a real Temporal dev server, run by hosts that are separate `git sup host run`
processes (own HOME, clone and worktree root), submitted from another clone through the
real CLI; the review remote is a gated bare repository."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tests.boundary.conftest import push, rejected
from tests.cluster.conftest import Cluster, Host
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
    submitted = time.time()
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
        # its supervisor was the host's spare, started (and loaded) before the task existed
        supervisor = record["supervisor"]
        assert isinstance(supervisor, dict) and supervisor["start_time"] < submitted, supervisor
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
        # Git is the record: the host published the task's refs and notes to the review
        # remote, and `wait` brought them into the submitter's clone
        candidate = results[task]["candidate"]
        for ref in ("baseline", "candidate", "log", "record"):
            assert git(cluster.origin, "rev-parse", f"refs/sup/{task}/{ref}")
        assert git(cluster.origin, "rev-parse", f"refs/sup/{task}/candidate") == candidate
        assert json.loads(git(cluster.origin, "notes", "--ref=sup", "show", candidate))
        assert git(cluster.submitter, "rev-parse", f"refs/sup/{task}/candidate") == candidate
        res = run_sup(cluster.submitter, "show", task, "--json")
        assert res.returncode == 0, res.stderr
        shown = json.loads(res.stdout)
        assert (shown["host"], shown["status"], shown["candidate"]) == (name, "ready", candidate)
    # each task ran its worker exactly once
    assert sorted((cluster.shared / "runs.log").read_text().split()) == sorted(ids)


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
    # from a branch that moved on (another baseline): refused, and the task's baseline on
    # the review remote is still the one it runs on (a fast-forward the gate would allow)
    ref = f"refs/sup/{task}/baseline"
    baseline = git(cluster.origin, "rev-parse", ref)
    (cluster.submitter / "later.txt").write_text("later\n")
    git(cluster.submitter, "add", "later.txt")
    git(cluster.submitter, "commit", "-q", "-m", "later")
    moved = submit(cluster, worker, "--id", task, "--detach")
    assert moved.returncode == 2, (moved.stdout, moved.stderr)
    assert f"task {task} was submitted already" in moved.stderr
    assert git(cluster.origin, "rev-parse", ref) == baseline
    done = run_sup(cluster.submitter, "wait", task, timeout=300)
    assert done.returncode == 0, (done.stdout, done.stderr)
    # and once it ended, still refused (foreground too)
    third = submit(cluster, worker, "--id", task)
    assert third.returncode == 2, (third.stdout, third.stderr)
    assert (cluster.shared / "runs.log").read_text().split() == [task]


def test_a_submission_whose_workflow_never_started_can_be_made_again(
    cluster: Cluster, tmp: Path
) -> None:
    from tests.cluster.conftest import free_port

    cluster.host("alpha")
    worker = write_worker(tmp, FIX_AFTER_BARRIER.format(tmp=str(cluster.shared), n=1))
    task = "20260101-5ec0d0"
    # the cluster is away: the baseline went to the review remote, no workflow started
    res = run_sup(
        cluster.submitter, "start", "fix add", "--cluster", f"127.0.0.1:{free_port()}",
        "--worker", worker, "--review", "none", "--id", task, "--detach",
    )  # fmt: skip
    assert res.returncode == 1 and "cannot reach the cluster" in res.stderr, res.stderr
    assert git(cluster.origin, "rev-parse", f"refs/sup/{task}/baseline")
    # the same id submitted again runs (its baseline is on the remote, the cluster knows it not)
    res = submit(cluster, worker, "--id", task)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert (cluster.shared / "runs.log").read_text().split() == [task]


# The review remote's own hook (run before its gate): holds a push of a task's baseline while
# the file HOLD exists, having said so in the file HELD.
HOLD_BASELINE = """#!/bin/sh
input=$(cat)
case "$input" in
*/baseline*)
    touch {held}
    while [ -e {hold} ]; do sleep 0.05; done ;;
esac
exit 0
"""


def _connected(pid: int, port: int) -> bool:
    import psutil

    with contextlib.suppress(psutil.Error):
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED:
                return True
    return False


def _workflow_exists(address: str, task: str) -> bool:
    import asyncio

    from temporalio.client import Client
    from temporalio.service import RPCError, RPCStatusCode

    async def go() -> bool:
        client = await Client.connect(address)
        try:
            await client.get_workflow_handle(task).describe()
        except RPCError as exc:
            assert exc.status == RPCStatusCode.NOT_FOUND, exc
            return False
        return True

    return asyncio.run(go())


def test_the_workflow_starts_only_once_the_baseline_is_on_the_review_remote(
    cluster: Cluster, tmp: Path
) -> None:
    cluster.host("alpha")
    worker = write_worker(tmp, FIX_AFTER_BARRIER.format(tmp=str(cluster.shared), n=1))
    hold, held = tmp / "hold", tmp / "held"
    hook = cluster.origin / "hooks" / "pre-receive.local"
    hook.write_text(HOLD_BASELINE.format(hold=shlex.quote(str(hold)), held=shlex.quote(str(held))))
    hook.chmod(0o755)
    hold.write_text("")
    task = "20260101-0bde70"
    # the submitter pushes the baseline and connects to the cluster at the same time
    proc = subprocess.Popen(
        [GIT_SUP, "start", "fix add", "--cluster", cluster.address, "--worker", worker,
         "--check", PYTEST_CHECK, "--review", "none", "--id", task],
        cwd=cluster.submitter, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(held)
        port = int(cluster.address.rsplit(":", 1)[1])
        end = time.monotonic() + 120
        while not _connected(proc.pid, port):
            assert proc.poll() is None and time.monotonic() < end, proc.communicate()
            time.sleep(0.05)
        # connected, the baseline still on its way: the workflow is not there, however long
        # the push takes (a second more here, for a start that would come right after)
        time.sleep(1)
        assert not _workflow_exists(cluster.address, task)
        assert proc.poll() is None
        assert not git(cluster.origin, "for-each-ref", f"refs/sup/{task}/")
    finally:
        hold.unlink()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (out, err)
    assert _workflow_exists(cluster.address, task)
    assert git(cluster.origin, "rev-parse", f"refs/sup/{task}/baseline") == git(
        cluster.submitter, "rev-parse", "main"
    )
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
    # and it is on the review remote, and in the submitter's clone
    assert git(cluster.origin, "rev-parse", f"refs/sup/{task}/wip") == stopped["wip"]
    assert git(cluster.submitter, "show", f"{stopped['wip']}:half.txt") == "half done"
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
    # a host needs the review remote (every task's record goes there) and publishes to it
    res = run_sup(repo, "host", "run", "--cluster", "127.0.0.1:1")
    assert res.returncode == 2 and "sup.reviewRemote" in res.stderr, res.stderr
    git(repo, "config", "sup.reviewRemote", "origin")
    git(repo, "config", "sup.cluster.publish", "false")
    res = run_sup(repo, "host", "run", "--cluster", "127.0.0.1:1")
    assert res.returncode == 2 and "sup.cluster.publish" in res.stderr, res.stderr
    # mTLS takes a certificate and its key, both files
    git(repo, "config", "sup.cluster.tlsCert", str(repo / "calc.py"))
    res = run_sup(repo, "host", "run", "--cluster", "127.0.0.1:1")
    assert res.returncode == 2 and "go together" in res.stderr, res.stderr
    git(repo, "config", "sup.cluster.tlsKey", str(repo / "no-such-key.pem"))
    res = run_sup(repo, "host", "run", "--cluster", "127.0.0.1:1")
    assert res.returncode == 2 and "no such file" in res.stderr, res.stderr
    assert GIT_SUP and sys.executable


# The first run of the check (on the first host) blocks until that host is killed; a later
# run checks add.
CHECK_ONCE_BLOCKING = """
import os, pathlib, sys, time
d = pathlib.Path({shared!r})
if not (d / "check-ran").exists():
    (d / "check-ran").write_text("x")
    (d / ("checking-" + os.environ.get("GITSUP_TASK", "?"))).write_text("x")
    time.sleep(600)
sys.path.insert(0, ".")
from calc import add
assert add(1, 2) == 3
"""

# Fixes add, writes a file of its own and commits both; a second run (after a takeover)
# finds its work in place and keeps it.
FIX_ONCE = """
import os, pathlib, subprocess
log = pathlib.Path({shared!r}) / "runs.log"
run = len(log.read_text().split()) + 1 if log.exists() else 1
with open(log, "a") as f:
    f.write(os.environ["GITSUP_TASK"] + "\\n")
p = pathlib.Path("calc.py")
if "a + b" in p.read_text():
    print("already fixed", flush=True)
else:
    p.write_text(p.read_text().replace("a - b", "a + b"))
    pathlib.Path("work.txt").write_text(f"written by run {{run}}\\n")
    subprocess.run(["git", "add", "calc.py", "work.txt"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "fix add"], check=True)
    print("fixed", flush=True)
"""


def published_ref(origin: Path, ref: str, timeout: float = 120) -> str:
    """What `ref` names on the bare `origin`, once it is there."""
    end = time.monotonic() + timeout
    while not (out := git(origin, "for-each-ref", "--format=%(objectname)", ref)):
        assert time.monotonic() < end, f"{ref} never came to {origin}"
        time.sleep(0.1)
    return out


def kill_machine(c: Cluster, host: Host) -> None:
    """What a dead machine leaves: nothing of its gitsup runs (kill -9 of the host process,
    its tasks' supervisors, workers and checks: every process in its clone or worktrees)."""
    import psutil

    assert host.proc is not None
    marks = (str(host.clone), str(c.tmp / f"worktrees-{host.name}"))
    for _ in range(50):
        victims = []
        for p in psutil.process_iter(["pid", "cwd", "cmdline"]):
            where = (p.info["cwd"] or "") + " " + " ".join(p.info["cmdline"] or [])
            if p.pid != os.getpid() and any(m in where for m in marks):
                victims.append(p)
        if not victims:
            break
        for p in victims:
            with contextlib.suppress(psutil.Error):
                p.kill()
        time.sleep(0.1)
    host.proc.wait()


def test_a_killed_host_s_task_ends_ready_on_the_other_host(cluster: Cluster) -> None:
    a = cluster.host("alpha")
    shared = str(cluster.shared)
    check = shlex.join([PYTHON, "-c", CHECK_ONCE_BLOCKING.format(shared=shared)])
    worker = write_worker(cluster.tmp, FIX_ONCE.format(shared=shared))
    res = run_sup(
        cluster.submitter,
        "start",
        "fix add",
        "--cluster",
        cluster.address,
        "--worker",
        worker,
        "--check",
        check,
        "--review",
        "none",
        "--detach",
    )
    assert res.returncode == 0, res.stderr
    task = res.stdout.strip()
    wait_for(cluster.shared / f"checking-{task}")
    # the turn ended on alpha: its work is published (pushed while the checks run)
    published = published_ref(cluster.origin, f"refs/sup/{task}/wip")
    assert git(cluster.origin, "show", f"{published}:work.txt") == "written by run 1"
    kill_machine(cluster, a)
    b = cluster.host("beta")
    res = run_sup(cluster.submitter, "wait", task, "--json", timeout=300)
    assert res.returncode == 0, (res.stdout, res.stderr, b.log.read_text())
    final = json.loads(res.stdout)
    assert (final["status"], final["host"]) == ("ready", "beta"), final
    candidate = final["candidate"]
    # one candidate, on the remote, holding the work done on the dead host
    assert git(cluster.origin, "rev-parse", f"refs/sup/{task}/candidate") == candidate
    assert git(cluster.origin, "show", f"{candidate}:work.txt") == "written by run 1"
    # the worker ran twice: on alpha, then on beta (told it takes over)
    assert len((cluster.shared / "runs.log").read_text().split()) == 2
    assert (
        git(cluster.origin, "rev-list", "--count", f"refs/sup/{task}/baseline..{candidate}") == "1"
    )
    record = b.record(task)
    assert record["host"] == "beta" and record["state"] == "completed"
    res = run_sup(b.clone, "log", task, "--json", env=b.env)
    events = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    changed = [e["data"] for e in events if e["type"] == "host_changed"]
    assert [(h["from"], h["to"]) for h in changed] == [("alpha", "beta")], changed


# Runs on the review remote before its gate: holds the push that brings a task's
# candidate (the task's last publication) for a few seconds.
HOLD_THE_END = """#!/bin/sh
input=$(cat)
case "$input" in
*/candidate*) sleep 3 ;;
esac
"""


def test_the_result_goes_out_once_the_task_s_end_is_on_the_remote(cluster: Cluster) -> None:
    # The host returns a task's result before its supervisor has exited, on the sign of its
    # last publication: never before that publication is on the review remote. The remote
    # takes its time over it here; the submitter, once told the task ended, finds it there.
    cluster.host("alpha")
    hook = cluster.origin / "hooks" / "pre-receive.local"
    hook.write_text(HOLD_THE_END)
    hook.chmod(0o755)
    worker = write_worker(cluster.tmp, FIX_ONCE.format(shared=str(cluster.shared)))
    res = submit(cluster, worker, "--json")
    assert res.returncode == 0, (res.stdout, res.stderr)
    final = json.loads(res.stdout)
    task, candidate = final.get("task") or final["id"], final["candidate"]
    assert final["status"] == "ready" and candidate, final
    assert git(cluster.origin, "rev-parse", f"refs/sup/{task}/candidate") == candidate
    record = json.loads(
        git(cluster.origin, "cat-file", "blob", f"refs/sup/{task}/record:task.json")
    )
    assert (record["status"], record["candidate"]) == ("ready", candidate)
    assert git(cluster.submitter, "rev-parse", f"refs/sup/{task}/candidate") == candidate
