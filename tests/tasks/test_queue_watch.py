"""`git sup watch` shows a live queue runner: what is under test in each slot and the
predicted order. A real `git sup queue run --slots 2` whose confined checks are held while a
file exists, watched through the real CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.boundary.conftest import Setup, make_task
from tests.conftest import GIT_SUP, PYTHON, git, run_sup
from tests.helpers.sup import wait_for
from tests.tasks.test_queue_slots import _init


def test_watch_shows_the_queue_slots_and_predicted_order(repo: Path) -> None:
    _init(repo)
    qs = Setup(repo, repo.parent, repo.parent, repo.parent)
    hold = repo.parent / "hold"
    hold.write_text("the checks wait while this exists\n")
    slow = [PYTHON, "-c", f"import os, time\nwhile os.path.exists({str(hold)!r}): time.sleep(0.1)"]
    tasks = [
        make_task(qs, files=((f"f{i}.txt", f"{i}\n"),), checks=[{"name": "slow", "argv": slow}])
        for i in range(4)
    ]
    ids = [t["id"] for t in tasks]
    assert run_sup(repo, "queue", "add", *ids).returncode == 0
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    status = common / "sup/queue/main/runner.json"
    runner = subprocess.Popen(
        [GIT_SUP, "queue", "run", "--slots", "2"],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def busy() -> dict[str, Any] | None:
        try:
            st: dict[str, Any] = json.loads(status.read_text())
        except (OSError, ValueError):
            return None
        return st if len(st.get("under_test", [])) == 2 else None

    try:
        assert wait_for(lambda: busy() is not None, timeout=120)
        plain = run_sup(repo, "watch", "--once")
        streamed = run_sup(repo, "watch", "--once", "--json")
        held = busy()
    finally:
        hold.unlink()
        runner.wait(timeout=300)
    assert runner.returncode == 0
    assert plain.returncode == 0 and streamed.returncode == 0, plain.stderr + streamed.stderr
    assert held is not None
    # the plain lines: the runner, each slot with its candidates, the predicted order
    text = plain.stdout
    assert "queue into main:" in text, text
    assert f"runner pid {runner.pid}, 2 slot(s)" in text, text
    for u in held["under_test"]:
        assert f"slot {u['slot']}: " in text and " ".join(u["tasks"]) in text, text
    assert f"predicted order: {' '.join(held['predicted'])}" in text, text
    assert set(held["predicted"]) <= set(ids) and held["predicted"]
    # the JSON stream: one `queue` line with the runner's status
    lines = [json.loads(x) for x in streamed.stdout.splitlines()]
    queue = [x for x in lines if x["kind"] == "queue"]
    assert len(queue) == 1 and queue[0]["into"] == "main", lines
    got = queue[0]["runner"]
    assert got["pid"] == runner.pid and got["slots"] == 2, got
    assert len(got["under_test"]) == 2 and got["predicted"], got
    # once the runner is gone, nothing of it is shown
    after = run_sup(repo, "watch", "--once")
    assert "queue into" not in after.stdout and "slot" not in after.stdout, after.stdout
    assert not [
        x
        for x in map(json.loads, run_sup(repo, "watch", "--once", "--json").stdout.splitlines())
        if x["kind"] == "queue"
    ]
    # the terminal frame shows the same lines below the tasks
    import time

    from gitsup.cli.attention_cmd import render_frame

    frame = render_frame([], time.time(), colour=False, queues={"main": held})
    assert "queue into main:" in frame and f"runner pid {runner.pid}, 2 slot(s)" in frame
    assert f"predicted order: {' '.join(held['predicted'])}" in frame, frame
