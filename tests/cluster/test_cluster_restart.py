"""The Temporal server killed and restarted on the same database while a task runs: the task
completes, once, on its host (a server of its own: the other cluster tests share theirs)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import Cluster, DevServer, free_port
from tests.cluster.test_cluster import submit, wait_for
from tests.conftest import run_sup
from tests.helpers.require import require
from tests.helpers.sup import write_worker

# Says it works, waits for the test's word (given after the server restarted), fixes add.
FIX_WHEN_TOLD = """
import os, pathlib, subprocess, time
d = pathlib.Path({shared!r})
with open(d / "runs.log", "a") as f:
    f.write(os.environ["GITSUP_TASK"] + "\\n")
(d / ("working-" + os.environ["GITSUP_TASK"])).write_text("x")
end = time.time() + 300
while not (d / "go").exists() and time.time() < end:
    time.sleep(0.1)
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
"""


@pytest.fixture(scope="module")
def devserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    require("temporal", "the cluster tests run Temporal's dev server")
    d = tmp_path_factory.mktemp("temporal-restart")
    server = DevServer(free_port(), d / "dev.db", None, d / "dev.log")  # type: ignore[arg-type]
    server.start()
    yield server
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.proc.pid, signal.SIGTERM)
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()


def test_a_server_restart_mid_task_loses_nothing(cluster: Cluster, tmp: Path) -> None:
    host = cluster.host("alpha")
    worker = write_worker(tmp, FIX_WHEN_TOLD.format(shared=str(cluster.shared)))
    res = submit(cluster, worker, "--detach")
    assert res.returncode == 0, res.stderr
    task = res.stdout.strip()
    wait_for(cluster.shared / f"working-{task}")
    cluster.server.kill()  # SIGKILL: a crash, not a shutdown
    # down for longer than the heartbeat timeout (5s): back up, the server times the task's
    # attempt out and retries it; the host follows the task it runs on, nothing restarts
    time.sleep(8)
    cluster.server.start()  # the same port and database
    (cluster.shared / "go").write_text("x")
    res = run_sup(cluster.submitter, "wait", task, "--json", timeout=300)
    assert res.returncode == 0, (res.stdout, res.stderr, host.log.read_text())
    final = json.loads(res.stdout)
    assert (final["status"], final["host"]) == ("ready", "alpha"), final
    assert (cluster.shared / "runs.log").read_text().split() == [task]
    assert host.record(task)["candidate"] == final["candidate"]


def test_a_host_silent_past_its_heartbeat_timeout_keeps_its_task(
    cluster: Cluster, tmp: Path
) -> None:
    """A host that stops answering for longer than the heartbeat timeout (a partition, a
    hang) and comes back: Temporal retries the task's activity, the only host takes the retry
    and follows the task it still runs; the timed-out attempt does not stop it."""
    host = cluster.host("alpha")
    worker = write_worker(tmp, FIX_WHEN_TOLD.format(shared=str(cluster.shared)))
    res = submit(cluster, worker, "--detach")
    assert res.returncode == 0, res.stderr
    task = res.stdout.strip()
    wait_for(cluster.shared / f"working-{task}")
    assert host.proc is not None
    host.proc.send_signal(signal.SIGSTOP)  # the host process only; its task runs on
    try:
        time.sleep(12)  # past the 5s heartbeat timeout and the retry's backoff
    finally:
        host.proc.send_signal(signal.SIGCONT)
    (cluster.shared / "go").write_text("x")
    res = run_sup(cluster.submitter, "wait", task, "--json", timeout=300)
    assert res.returncode == 0, (res.stdout, res.stderr, host.log.read_text())
    final = json.loads(res.stdout)
    assert (final["status"], final["host"]) == ("ready", "alpha"), final
    assert (cluster.shared / "runs.log").read_text().split() == [task]
