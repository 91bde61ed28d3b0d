"""A host whose attempt of a task the cluster timed out stops its copy of the task only when no
attempt of it came back here within the grace (`HostWork._stop_if_unfollowed`): not merely
when none is running at the end of the grace, since a later attempt that also timed out leaves
a gap before the next (the retry's backoff). A real task in a real clone, stopped for real."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gitsup.cluster.hostwork import HostWork
from gitsup.ids import parse_task_id
from tests.conftest import run_sup
from tests.helpers.sup import write_worker

HANG = "import time\ntime.sleep(600)\n"


def _state(repo: Path, task: str) -> str:
    return str(json.loads(run_sup(repo, "show", task, "--json").stdout)["state"])


def test_a_timed_out_attempt_stops_the_task_only_when_none_came_back(repo: Path, tmp: Path) -> None:
    worker = write_worker(tmp, HANG)
    res = run_sup(repo, "start", "hang", "--detach", "-q", "--worker", worker, "--review", "none")
    assert res.returncode == 0, res.stderr
    task = parse_task_id(res.stdout.strip().split()[-1])
    host = HostWork(repo, "alpha")
    try:

        async def check(arrived_after: bool) -> None:
            loop = asyncio.get_running_loop()
            since = loop.time()
            if arrived_after:
                # a later attempt came here and has gone again (it timed out in its turn)
                host._arrived[task] = since + 0.01
            await host._stop_if_unfollowed(task, 0.05, since)

        asyncio.run(check(arrived_after=True))
        assert _state(repo, task) not in ("stopped", "completed", "failed")
        asyncio.run(check(arrived_after=False))
        assert _state(repo, task) == "stopped"
    finally:
        run_sup(repo, "stop", task)
