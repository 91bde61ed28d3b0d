"""`git sup answer`, `send` and `continue` against a running process worker, through the real
CLI: what each refuses (exit 2, one line) and that a refused request changes nothing."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from tests.conftest import run_sup
from tests.helpers.sup import common_dir, wait_for

SLEEPER = shlex.join([sys.executable, "-c", "import time; time.sleep(120)"])


def test_what_a_running_process_worker_refuses(repo: Path) -> None:
    res = run_sup(
        repo, "start", "--detach", "--worker", SLEEPER, "--review", "none", "-q", "ask nothing"
    )
    assert res.returncode == 0, res.stderr
    tid = res.stdout.strip().split()[-1]
    wait_for(
        lambda: json.loads(run_sup(repo, "show", tid, "--json").stdout)["state"] == "running",
        timeout=60,
        what="running",
    )
    shown = json.loads(run_sup(repo, "show", tid, "--json").stdout)
    assert shown["pending"] == []
    cases = [
        (("answer", "nosuchtask", "r1", "allow"), "not a task id"),
        (("answer", "20991231-ffffff", "r1", "allow"), "no task"),
        (("answer", tid, "r1", "maybe"), "allow or deny"),
        (("answer", tid, "r1", "allow"), "no open request"),
        (("answer", tid, "r1", "allow", "-m", "x"), "-m goes with deny"),
        (("send", tid, "hello"), "cannot take messages"),
        (("send", tid, "  "), "empty"),
        (("continue", tid, "--add-turns", "1"), "not paused on its budget"),
        (("continue", tid, "--add-cost", "-1"), "0 or more"),
        (("continue", tid, "--extend", "10"), "needs a unit"),
    ]
    for args, says in cases:
        r = run_sup(repo, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert says in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    # nothing reached the supervisor: no request file, no event
    assert not list((common_dir(repo) / "sup" / "tasks" / tid / "control").glob("*"))
    log = run_sup(repo, "log", tid, "--json").stdout
    types = {json.loads(line)["type"] for line in log.splitlines()}
    assert not types & {"human_answer", "worker_message_sent", "budget_continued"}
    assert run_sup(repo, "stop", tid).returncode == 0
    r = run_sup(repo, "send", tid, "hello")
    assert r.returncode == 2 and "already ended" in r.stderr, r.stderr
