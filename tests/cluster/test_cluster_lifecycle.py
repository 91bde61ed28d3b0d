"""A host's life cycle on a real Temporal dev server: a host stopped with SIGTERM hands its
tasks over to another host (which continues from the state it published), within a bound."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
from pathlib import Path

import psutil

from tests.cluster.conftest import Cluster, Host
from tests.cluster.test_cluster import submit, wait_for
from tests.conftest import git, run_sup
from tests.helpers.sup import write_worker

# The first run writes a file it does not commit and works until it is stopped; a later run
# (on another host) keeps that file when it finds it (else writes its own), fixes add and
# commits both.
HALF_THEN_FINISH = """
import os, pathlib, subprocess, time
d = pathlib.Path({shared!r})
log = d / "runs.log"
run = len(log.read_text().split()) + 1 if log.exists() else 1
with open(log, "a") as f:
    f.write(os.environ["GITSUP_TASK"] + "\\n")
half = pathlib.Path("half.txt")
if run == 1:
    half.write_text("half done by run 1\\n")
    (d / ("working-" + os.environ["GITSUP_TASK"])).write_text("x")
    print("working", flush=True)
    time.sleep(600)
if not half.exists():
    half.write_text(f"half done by run {{run}}\\n")
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "add", "calc.py", "half.txt"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "fix add"], check=True)
print("finished", flush=True)
"""


def events(host: Host, task: str) -> list[dict[str, object]]:
    res = run_sup(host.clone, "log", task, "--json", env=host.env)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines() if line.strip()]


def running_in(c: Cluster, host: Host) -> list[int]:
    """The processes still running in the host's clone or worktrees."""
    marks = (str(host.clone), str(c.tmp / f"worktrees-{host.name}"))
    out = []
    for p in psutil.process_iter(["pid", "cwd", "cmdline"]):
        where = (p.info["cwd"] or "") + " " + " ".join(p.info["cmdline"] or [])
        if any(m in where for m in marks):
            out.append(p.pid)
    return out


def start_half(c: Cluster) -> str:
    worker = write_worker(c.tmp, HALF_THEN_FINISH.format(shared=str(c.shared)))
    res = submit(c, worker, "--detach")
    assert res.returncode == 0, res.stderr
    task = res.stdout.strip()
    wait_for(c.shared / f"working-{task}")
    return task


def ended_ready_on(c: Cluster, task: str, host: Host) -> dict[str, object]:
    res = run_sup(c.submitter, "wait", task, "--json", timeout=300)
    assert res.returncode == 0, (res.stdout, res.stderr, host.log.read_text())
    final = json.loads(res.stdout)
    assert (final["status"], final["host"]) == ("ready", host.name), final
    candidate = str(final["candidate"])
    # one candidate, on the remote
    assert git(c.origin, "rev-parse", f"refs/sup/{task}/candidate") == candidate
    assert git(c.origin, "rev-list", "--count", f"refs/sup/{task}/baseline..{candidate}") == "1"
    assert len((c.shared / "runs.log").read_text().split()) == 2
    return final


def test_a_host_stopped_with_sigterm_hands_its_task_over(cluster: Cluster) -> None:
    a = cluster.host("alpha")
    task = start_half(cluster)
    b = cluster.host("beta")
    assert a.proc is not None
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(timeout=120) == 0, a.log.read_text()
    # nothing of the task runs on alpha any more; it is not ended there but handed over
    assert running_in(cluster, a) == []
    record = a.record(task)
    assert record["state"] not in ("stopped", "completed", "failed"), record
    assert any("handed over: host alpha shut down" in r for r in record["reasons"]), record  # type: ignore[attr-defined]
    handed = [e["data"] for e in events(a, task) if e["type"] == "handed_over"]
    assert len(handed) == 1 and handed[0]["host"] == "alpha", handed  # type: ignore[index]
    # its state at the hand-over is published: the uncommitted file is in the wip (the
    # remote's, or one the other host, continuing from it, published on top of it since)
    wip = str(handed[0]["wip"])  # type: ignore[index]
    published = git(cluster.origin, "rev-parse", f"refs/sup/{task}/wip")
    res = subprocess.run(["git", "merge-base", "--is-ancestor", wip, published], cwd=cluster.origin)
    assert res.returncode == 0, (wip, published)
    assert git(cluster.origin, "show", f"{wip}:half.txt") == "half done by run 1"
    final = ended_ready_on(cluster, task, b)
    # nothing lost: the file written on alpha and never committed there is in the candidate
    assert git(cluster.origin, "show", f"{final['candidate']}:half.txt") == "half done by run 1"
    log = events(b, task)
    changed = [e["data"] for e in log if e["type"] == "host_changed"]
    assert [(h["from"], h["to"], h["continued_from"]) for h in changed] == [  # type: ignore[index]
        ("alpha", "beta", "wip")
    ], changed
    assert [e["type"] for e in log].count("handed_over") == 1


def test_a_second_sigterm_ends_the_hand_over_and_the_task_still_moves(
    cluster: Cluster,
) -> None:
    # a drain of no time at all: the host gives up handing over at once and ends what it
    # runs; the cluster moves the task after the heartbeat timeout, as for a dead host (here
    # nothing was published yet: the other host starts it again from its baseline)
    a = cluster.host("alpha", "--drain-timeout", "0")
    task = start_half(cluster)
    b = cluster.host("beta")
    assert a.proc is not None
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(timeout=120) == 1, a.log.read_text()
    assert "stopped before handing over 1 task(s)" in a.log.read_text()
    assert running_in(cluster, a) == []
    ended_ready_on(cluster, task, b)


HOLD_WIP = """#!/bin/sh
input=$(cat)
case "$input" in
*/wip*)
    if [ -e {hold} ]; then
        touch {held}
        while [ -e {hold} ]; do sleep 0.05; done
    fi ;;
esac
exit 0
"""


def test_a_host_that_gives_up_a_hand_over_ends_the_push_it_had_in_flight(
    cluster: Cluster,
) -> None:
    # the hand-over's publication hangs at the review remote past the drain: the host gives
    # up, and what it still ran (that push, its remote side) ends with it rather than going
    # on without a host; the task moves as for a dead host
    a = cluster.host("alpha", "--drain-timeout", "2")
    task = start_half(cluster)
    hold, held = cluster.tmp / "hold", cluster.tmp / "held"
    hook = cluster.origin / "hooks" / "pre-receive.local"
    hook.write_text(HOLD_WIP.format(hold=shlex.quote(str(hold)), held=shlex.quote(str(held))))
    hook.chmod(0o755)
    hold.write_text("")
    assert a.proc is not None
    try:
        a.proc.send_signal(signal.SIGTERM)
        wait_for(held)
        assert a.proc.wait(timeout=120) == 1, a.log.read_text()
        assert "stopped before handing over 1 task(s)" in a.log.read_text()
        assert running_in(cluster, a) == []
        # the push was ended, not left waiting: nothing of it is still at the remote
        at_remote = [
            p.info["cmdline"]
            for p in psutil.process_iter(["cwd", "cmdline"])
            if (p.info["cwd"] or "").startswith(str(cluster.origin))
        ]
        assert at_remote == []
    finally:
        hold.unlink(missing_ok=True)
    hook.unlink()
    b = cluster.host("beta")
    ended_ready_on(cluster, task, b)


def test_a_host_that_rewrites_the_spec_cannot_change_the_task(cluster: Cluster) -> None:
    # alpha (hostile) rewrites the task's spec before it hands the task over: no checks at
    # all. beta continues with the spec the workflow holds, and refuses a record that
    # disagrees: the task ends failed, nothing runs on beta.
    a = cluster.host("alpha")
    task = start_half(cluster)
    b = cluster.host("beta")
    spec_file = Path(git(a.clone, "rev-parse", "--git-common-dir"))
    if not spec_file.is_absolute():
        spec_file = a.clone / spec_file
    spec_file = spec_file / "sup" / "tasks" / task / "spec.json"
    spec = json.loads(spec_file.read_text())
    spec["checks"], spec["default_check"] = [], False
    spec_file.write_text(json.dumps(spec))
    assert a.proc is not None
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(timeout=120) == 0, a.log.read_text()
    published = json.loads(git(cluster.origin, "show", f"refs/sup/{task}/record:spec.json"))
    assert published["checks"] == [] and published["default_check"] is False
    res = run_sup(cluster.submitter, "wait", task, "--json", timeout=300)
    assert res.returncode == 4, (res.stdout, res.stderr, b.log.read_text())
    final = json.loads(res.stdout)
    assert "is not the one it was submitted with" in " ".join(final["reasons"]), final
    # beta made nothing of it, and the worker never ran there
    assert git(b.clone, "for-each-ref", f"refs/heads/sup/{task}") == ""
    assert not (cluster.tmp / "worktrees-beta" / task).exists()
    assert len((cluster.shared / "runs.log").read_text().split()) == 1
    assert git(cluster.origin, "for-each-ref", f"refs/sup/{task}/candidate") == ""


def test_the_submitter_s_branch_follows_the_integrations_like_pull_ff_only(repo: Path) -> None:
    from gitsup.cluster.integrator import _follow
    from gitsup.ids import Oid
    from gitsup.store.suprepo import SupRepo

    ctx = SupRepo.discover(repo)
    ours = Oid(git(repo, "rev-parse", "main"))
    git(repo, "checkout", "-q", "-b", "integrated")
    (repo / "merged.txt").write_text("integrated\n")
    git(repo, "add", "merged.txt")
    git(repo, "commit", "-q", "-m", "an integration")
    tip = Oid(git(repo, "rev-parse", "HEAD"))
    git(repo, "checkout", "-q", "main")
    said: list[str] = []

    def follow() -> str:
        return _follow(ctx, "origin", "main", "refs/heads/main", ours, tip, said.append)

    # checked out with an untracked file: left, and said
    (repo / "scratch.txt").write_text("mine\n")
    assert follow() == "left"
    assert "uncommitted changes" in said[-1] and "git merge --ff-only origin/main" in said[-1]
    assert git(repo, "rev-parse", "main") == ours and not (repo / "merged.txt").exists()
    # with a local change to a tracked file: the same
    (repo / "scratch.txt").unlink()
    (repo / "calc.py").write_text("# mine\n")
    assert follow() == "left"
    assert git(repo, "rev-parse", "main") == ours
    assert (repo / "calc.py").read_text() == "# mine\n"
    # clean: a fast-forward, files and index with it
    git(repo, "checkout", "-q", "--", "calc.py")
    assert follow() == "moved"
    assert git(repo, "rev-parse", "main") == tip
    assert (repo / "merged.txt").read_text() == "integrated\n"
    assert git(repo, "status", "--porcelain") == ""
    # a branch with a commit of its own is not a fast-forward: left, and said
    (repo / "own.txt").write_text("own\n")
    git(repo, "add", "own.txt")
    git(repo, "commit", "-q", "-m", "my own")
    own = Oid(git(repo, "rev-parse", "main"))
    assert _follow(ctx, "origin", "main", "refs/heads/main", own, tip, said.append) == "left"
    assert "has commits the review remote's does not" in said[-1]
    assert git(repo, "rev-parse", "main") == own
    # not checked out: moved when behind
    git(repo, "checkout", "-q", "--detach")
    git(repo, "branch", "-f", "main", ours)
    assert follow() == "moved" and git(repo, "rev-parse", "main") == tip


# A host's signal handling with what forks it: pyroute2 (the network namespace calls) forks
# the process without exec and stops the child with SIGTERM.
FORKED_CHILD_STOPPED = """
import asyncio, os, signal, sys, time
from pyroute2.process import ChildProcess
from gitsup.cluster.hostwork import on_stop_signals

def slow():
    time.sleep(1.0)
    return b""

async def main():
    stop = asyncio.Event()
    on_stop_signals(asyncio.get_running_loop(), stop.set)
    def in_thread():
        child = ChildProcess(target=slow, args=[])
        child.run()
        time.sleep(0.2)
        child.stop()  # SIGTERM to the child, alive
    await asyncio.to_thread(in_thread)
    await asyncio.sleep(1.0)
    print("after the child:", "stopped" if stop.is_set() else "serving", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # now this process itself
    await asyncio.wait_for(stop.wait(), 60)
    print("after its own SIGTERM: stopped", flush=True)

asyncio.run(main())
"""


def test_a_forked_child_s_sigterm_does_not_stop_the_host() -> None:
    import subprocess

    from tests.conftest import PYTHON

    res = subprocess.run(
        [PYTHON, "-c", FORKED_CHILD_STOPPED], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "after the child: serving",
        "after its own SIGTERM: stopped",
    ], (res.stdout, res.stderr)
