"""The queue's composition checks on the cluster's task hosts: `git sup queue run --cluster`
runs the branch's workflow on the integrator, whose runner decides, signs and pushes while
each composition's checks run as an activity on a task host, in that host's confined runner.

Each host has a temporary directory of its own (TMPDIR), where its confined runner makes the
throw-away worktree a check runs in: the check's working directory says, from outside, which
machine ran it."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cluster.conftest import Cluster, Host
from tests.cluster.test_cluster import wait_for
from tests.cluster.test_cluster_queue import key_home
from tests.conftest import GIT_SUP, PYTHON, git, run_sup
from tests.helpers.sup import write_worker

# Adds the file it is given (and one of its own); commits.
ADDS = """
import os, pathlib, subprocess
task = os.environ["GITSUP_TASK"]
pathlib.Path({name!r}).write_text({name!r} + "\\n")
subprocess.run(["git", "add", {name!r}], check=True)
subprocess.run(["git", "commit", "-q", "-m", "add " + {name!r}], check=True)
"""

# The candidates' required check. In the queue (GITSUP_INTEGRATION): it logs where it runs,
# tries to read the integrator's key and to push a commit to main, and fails on a tree that
# holds both A and B (B is the culprit only once composed after A). With `hold`, a queue run
# waits for the test's go.
CHECK = """
import json, os, pathlib, subprocess, sys, time
out = pathlib.Path({shared!r})
where = os.environ.get("GITSUP_INTEGRATION", "")
if where:
    entry = {{"cwd": os.getcwd(), "home": os.environ.get("HOME", ""),
             "files": sorted(p for p in os.listdir(".") if len(p) == 1)}}
    try:
        entry["key"] = "read " + str(len(pathlib.Path({key!r}).read_bytes()))
    except OSError as exc:
        entry["key"] = "refused: " + type(exc).__name__
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "straight to main"])
    res = subprocess.run(["git", "push", {origin!r}, "HEAD:refs/heads/main"],
                         capture_output=True, text=True)
    entry["push"] = res.returncode
    with open(out / "checks.log", "a") as f:
        f.write(json.dumps(entry) + "\\n")
    if {hold}:
        end = time.time() + 300
        while not (out / "go").exists() and time.time() < end:
            time.sleep(0.1)
sys.exit(1 if os.path.exists("A") and os.path.exists("B") else 0)
"""


def _host(c: Cluster, name: str, *args: str, setup: Callable[[Path], None] | None = None) -> Host:
    """A host whose confined runner works in a TMPDIR of its own."""
    own = c.tmp / f"tmp-{name}"
    own.mkdir(exist_ok=True)
    c.env = {**c.env, "TMPDIR": str(own)}
    try:
        return c.host(name, *args, setup=setup)
    finally:
        c.env = {k: v for k, v in c.env.items() if k != "TMPDIR"}


def _key(c: Cluster) -> Path:
    """The integrator's signing key, in its HOME (made once)."""
    home = c.tmp / "home-integrator"
    if not home.exists():
        key_home(c, Path.home())
    key = home / ".config" / "gitsup" / "signing" / "id_ed25519"
    assert key.is_file()
    return key


def _integrator(c: Cluster) -> Host:
    _key(c)

    def trust(clone: Path) -> None:  # the operator's configuration, as the key is
        for v in git(c.submitter, "config", "--get-all", "sup.trustRoot", check=False).split():
            git(clone, "config", "--add", "sup.trustRoot", v)

    return _host(c, "integrator", "--integrator", "--slots", "1", setup=trust)


def _candidates(c: Cluster, tmp: Path, names: list[str], *, hold: bool = False) -> list[str]:
    key = _key(c)
    check = tmp / "check.py"
    check.write_text(
        CHECK.format(shared=str(c.shared), key=str(key), origin=str(c.origin), hold=hold)
    )
    ids = []
    for name in names:
        worker = write_worker(tmp, ADDS.format(name=name), f"worker-{name}.py")
        res = run_sup(
            c.submitter,
            "start",
            f"add {name}",
            "--cluster",
            c.address,
            "--worker",
            worker,
            "--check",
            shlex.join([PYTHON, str(check)]),
            "--review",
            "none",
            "--detach",
        )
        assert res.returncode == 0, res.stderr
        ids.append(res.stdout.strip())
    for task in ids:
        res = run_sup(c.submitter, "wait", task, "--json", timeout=300)
        assert res.returncode == 0, res.stdout
    res = run_sup(c.submitter, "queue", "add", *ids)
    assert res.returncode == 0, res.stderr
    return ids


def _log(c: Cluster) -> list[dict[str, Any]]:
    path = c.shared / "checks.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ran_on(c: Cluster, entry: dict[str, Any]) -> str:
    for name in ("alpha", "beta", "integrator"):
        if entry["cwd"].startswith(str(c.tmp / f"tmp-{name}") + os.sep):
            return name
    raise AssertionError(f"a check ran outside every host's TMPDIR: {entry}")


def _queue_run(c: Cluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [GIT_SUP, "queue", "run", "--cluster", c.address, "--json", *args],
        cwd=c.submitter,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _signed_merges(c: Cluster, before: str) -> list[str]:
    main = git(c.origin, "rev-parse", "main")
    first = git(c.origin, "rev-list", "--first-parent", f"{before}..{main}").split()
    for m in first:
        assert git(c.origin, "cat-file", "-p", m).count("gpgsig") == 1, m
        assert len(git(c.origin, "rev-list", "--parents", "-1", m).split()) == 3, m
    return first


def test_compositions_are_tested_on_task_hosts_and_signed_on_the_integrator(
    cluster: Cluster, tmp: Path
) -> None:
    alpha = _host(cluster, "alpha", "--slots", "2")
    beta = _host(cluster, "beta", "--slots", "2")
    ids = _candidates(cluster, tmp, ["A", "B", "C"])
    tasks_log = len(_log(cluster))  # the tasks' own checks ran outside the queue
    assert tasks_log == 0
    before = git(cluster.origin, "rev-parse", "main")
    integ = _integrator(cluster)
    run = _queue_run(cluster, "--slots", "2")
    stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == 3, (stdout, stderr, integ.log.read_text())
    out = json.loads(stdout)
    status = {t: o["status"] for t, o in out["outcomes"].items()}
    assert status == {ids[0]: "integrated", ids[1]: "parked", ids[2]: "integrated"}, out
    assert "required checks fail" in out["outcomes"][ids[1]]["reason"]
    # every composition check ran on a task host, none on the integrator
    log = _log(cluster)
    assert log, "no composition check ran"
    where = {_ran_on(cluster, e) for e in log}
    assert where <= {"alpha", "beta"}, log
    assert out["run"]["confinement"]["host"] in ("alpha", "beta"), out["run"]
    assert any(e["files"] == ["A", "B"] for e in log)  # the culprit's composition
    # the good ones are signed merges on the remote's main (the gate took them), in order
    merges = _signed_merges(cluster, before)
    assert len(merges) == 2
    tasks = [
        git(cluster.origin, "log", "-1", "--format=%(trailers:key=Sup-Task,valueonly)", m)
        for m in reversed(merges)
    ]
    assert tasks == [ids[0], ids[2]]
    main = git(cluster.origin, "rev-parse", "main")
    assert git(cluster.origin, "ls-tree", "--name-only", main, "A", "B", "C").split() == [
        "A",
        "C",
    ]
    # the culprit went back with its evidence (its note says parked, with the failing check)
    git(cluster.submitter, "fetch", "-q", "origin", "+refs/notes/sup:refs/notes/sup-remote")
    cand = git(cluster.submitter, "rev-parse", f"refs/sup/{ids[1]}/candidate")
    note = json.loads(git(cluster.submitter, "notes", "--ref=sup-remote", "show", cand))
    assert note["status"] == "parked"
    assert note["queue_evidence"]["failed"][0]["output_tail"] is not None
    # a hostile check on a task host: no key, no push
    for e in log:
        assert e["key"].startswith("refused"), e
        assert e["push"] != 0, e
    assert "straight to main" not in git(cluster.origin, "log", "--all", "--format=%s")
    # the task hosts never ran an integration; the integrator ran no candidate code
    for h in (alpha, beta):
        assert not git(h.clone, "for-each-ref", "refs/sup/queue/")
    assert git(integ.clone, "for-each-ref", "refs/sup/queue/")


def test_a_host_killed_mid_check_loses_its_check_to_the_other(cluster: Cluster, tmp: Path) -> None:
    hosts = [_host(cluster, "alpha", "--slots", "1"), _host(cluster, "beta", "--slots", "1")]
    ids = _candidates(cluster, tmp, ["C"], hold=True)
    before = git(cluster.origin, "rev-parse", "main")
    _integrator(cluster)
    run = _queue_run(cluster)
    end = time.monotonic() + 300
    while not _log(cluster):
        assert run.poll() is None and time.monotonic() < end, run.communicate()
        time.sleep(0.1)
    first = _ran_on(cluster, _log(cluster)[0])
    victim = next(h for h in hosts if h.name == first)
    assert victim.proc is not None
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    (cluster.shared / "go").write_text("go")
    stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == 0, (stdout, stderr)
    out = json.loads(stdout)
    assert out["outcomes"][ids[0]]["status"] == "integrated"
    assert len(_signed_merges(cluster, before)) == 1  # integrated once
    survivors = {_ran_on(cluster, e) for e in _log(cluster)[1:]}
    assert survivors == {"beta" if first == "alpha" else "alpha"}, _log(cluster)
    wait_for(cluster.shared / "go")


# A lying task host: a real worker on the checks' task queue that answers "passed" for every
# check without running any, naming a tree of its choice.
LIAR = """
import asyncio, sys
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker
from gitsup.cluster.workflow import CHECK_ACTIVITY, CheckWorkflow, checks_queue

@activity.defn(name=CHECK_ACTIVITY)
async def lie(job):
    return {"host": "liar", "tree": {tree}, "env": job["env"],
            "results": [{"name": c["name"], "argv": c["argv"], "passed": True, "exit_code": 0}
                        for c in job["checks"]],
            "commands": len(job["checks"]), "retries": 0, "flaky": [], "seconds": 0.0,
            "confinement": {}}

async def main():
    client = await Client.connect(sys.argv[1])
    async with Worker(client, task_queue=checks_queue(sys.argv[2]),
                      workflows=[CheckWorkflow], activities=[lie]):
        print("serving", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


def test_a_host_that_answers_for_another_tree_is_not_believed(cluster: Cluster, tmp: Path) -> None:
    alpha = _host(cluster, "alpha", "--slots", "2")
    ids = _candidates(cluster, tmp, ["A", "B"])
    alpha.stop()  # from now on the liar is the only host that takes composition checks
    before = git(cluster.origin, "rev-parse", "main")
    script = tmp / "liar.py"
    script.write_text(LIAR.replace("{tree}", repr("0" * 40)))
    log = tmp / "liar.log"
    with open(log, "w") as fh:
        liar = subprocess.Popen(
            [PYTHON, str(script), cluster.address, cluster.env["GITSUP_TEST_QUEUE"]],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_text(log, "serving")
        _integrator(cluster)
        run = _queue_run(cluster)
        stdout, stderr = run.communicate(timeout=600)
    finally:
        liar.kill()
        liar.wait()
    assert run.returncode not in (0, 3), (stdout, stderr)
    assert "not the composition's" in stderr, stderr
    # nothing was signed or pushed on its word; nobody was blamed
    assert git(cluster.origin, "rev-parse", "main") == before
    res = run_sup(cluster.submitter, "queue", "--json")
    assert json.loads(res.stdout)[0]["queued"] == ids


def wait_for_text(path: Path, text: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while text not in path.read_text():
        assert time.monotonic() < end, path.read_text()
        time.sleep(0.1)


def test_on_hosts_with_a_bad_address_is_refused(repo: Path) -> None:
    res = run_sup(repo, "queue", "run", "--on-hosts", "not an address")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "not a Temporal frontend address" in res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) <= 2  # the error and its hint
    res = run_sup(repo, "queue", "run", "--on-hosts", "127.0.0.1:7233", "--detach")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "no --detach" in res.stderr
