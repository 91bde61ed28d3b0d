"""The supervisor never trusts the worker's transport: a duplicate `result` record is one
completion, a worker that stops reading its input cannot hang the supervisor, and the
worktree lease is released only when cleanup proved the worker gone.

The first two drive a stand-in for the Claude Code CLI (a Python script speaking
stream-json) through `git sup start`: the real CLI never misbehaves this way on purpose.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gitsup.host.procid import ProcessId
from gitsup.spec import spec_from_mapping
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import run_task
from gitsup.workers.base import TurnCompleted, WorkerIdentity, WorkerSetup
from gitsup.workers.process import ProcessWorker
from tests.conftest import PYTHON, run_sup
from tests.helpers.sup import check_cmd, kill_tree, run_cli_inproc, start_json, write_spec

QUICK_CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")

FAKE_CLAUDE_HEAD = f"""#!{PYTHON}
import json, os, subprocess, sys

if "--version" in sys.argv:
    print("2.1.328 (stand-in)")
    sys.exit(0)

def out(obj):
    sys.stdout.write(json.dumps(obj) + "\\n")
    sys.stdout.flush()

def result(text):
    return {{"type": "result", "subtype": "success", "is_error": False, "result": text,
            "num_turns": 1, "session_id": "s1", "total_cost_usd": 0.0}}
"""

# Ends the first turn twice (one write), fixes and commits on the second (the repair).
DUPLICATE = """
turn = 0
for line in sys.stdin:
    turn += 1
    if turn == 1:
        r = json.dumps(result("first")) + "\\n"
        sys.stdout.write(r + r)
        sys.stdout.flush()
    else:
        open("calc.py", "w").write("def add(a, b):\\n    return a + b\\n")
        subprocess.run(["git", "commit", "-qam", "fix add"], check=True)
        out(result("fixed"))
"""

# Reads its first message, shrinks its input pipe to one page, asks to write a big file,
# and never reads again.
STALL = """
import fcntl
sys.stdin.readline()
fcntl.fcntl(0, 1031, 4096)  # F_SETPIPE_SZ
out({"type": "control_request", "request_id": "r1", "request": {
    "subtype": "can_use_tool", "tool_name": "Write",
    "input": {"file_path": os.path.join(os.getcwd(), "big.txt"), "content": "x" * 200000}}})
import time
time.sleep(300)
"""


def _fake_claude(tmp: Path, body: str) -> Path:
    path = tmp / "fake-claude"
    path.write_text(FAKE_CLAUDE_HEAD + body)
    path.chmod(0o755)
    return path


def _spec(tmp: Path, fake: Path, extra: str = "") -> Path:
    return write_spec(
        tmp,
        f"""
        goal = "fix add"
        [[checks]]
        name = "quick"
        argv = {json.dumps(shlex.split(QUICK_CHECK))}
        [worker]
        kind = "claude"
        argv = [{json.dumps(str(fake))}]
        env = {{ ANTHROPIC_API_KEY = "sk-not-a-key" }}
        stop_grace = "1s"
        [review]
        kind = "none"
        [budget]
        no_output_timeout = "60s"
        """
        + extra,
    )


def _events(repo: Path, task: str) -> list[dict[str, Any]]:
    rc, out, err = run_cli_inproc(repo, "log", task, "--json")
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_a_duplicate_result_is_one_completion(repo: Path, tmp: Path) -> None:
    fake = _fake_claude(tmp, DUPLICATE)
    rc, rec, err = start_json(repo, "--spec", str(_spec(tmp, fake)))
    assert rc == 0, (rec.get("reasons"), err)
    events = _events(repo, rec["id"])
    done = [e for e in events if e["type"] == "turn_completed"]
    assert [d["data"]["result"] for d in done] == ["first", "fixed"]
    assert rec["repair_rounds"] == 1
    noise = [e["data"] for e in events if e["type"] == "protocol_noise"]
    assert any("duplicate" in n.get("error", "") for n in noise), noise


def test_a_worker_that_stops_reading_parks_the_task_saying_so(repo: Path, tmp: Path) -> None:
    fake = _fake_claude(tmp, STALL)
    t0 = time.monotonic()
    rc, rec, err = start_json(repo, "--spec", str(_spec(tmp, fake)), timeout=90)
    took = time.monotonic() - t0
    assert rc == 3, (rec.get("reasons"), err)
    assert rec["status"] == "parked"
    assert any(
        r.startswith("worker input stalled: the worker stopped reading its input")
        for r in rec["reasons"]
    ), rec["reasons"]
    types = [e["type"] for e in _events(repo, rec["id"])]
    assert "worker_input_stalled" in types
    assert took < 40  # the write gives up after max(5 s, 2 x stop_grace)
    pid = rec["worker"]["pid"]
    assert not ProcessId(pid, rec["worker"]["start_time"]).alive()


# --- the lease is released only when the worker is proven gone --------------------------------


class _UnstoppableWorker(ProcessWorker):
    """A process worker whose stop leaves its process running (what an adapter bug or a
    process that survives its stop looks like): a real process, outside the task marker."""

    def start(self, goal: str) -> WorkerIdentity:
        env = {k: v for k, v in self.ctx.env.items() if k != "GITSUP_TASK"}
        self.survivor = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(300)"],
            env=env,
            start_new_session=True,
        )
        ident = ProcessId.of(self.survivor.pid)
        self.ctx.inbox.put(TurnCompleted(subtype="exit", result="done"))
        return WorkerIdentity(pid=ident.pid, start_time=ident.start_time, pgid=ident.pid)

    def stop(self, *, grace: float = 5.0) -> str:
        return "closed input"  # says so, but the process keeps running

    @property
    def alive(self) -> bool:
        return False


def test_the_lease_stays_held_until_the_worker_is_proven_gone(repo: Path, tmp: Path) -> None:
    made: list[_UnstoppableWorker] = []

    def factory(spec: Any, ctx: WorkerSetup) -> _UnstoppableWorker:
        w = _UnstoppableWorker(ctx)
        made.append(w)
        return w

    spec = spec_from_mapping(
        {
            "goal": "g",
            "worker": {"kind": "process", "argv": ["true"], "stop_grace": "0.5s"},
            "review": {"kind": "none"},
            "isolation": {"cgroup": "off"},
            "autonomy": {"require_local_commit": False},
        }
    )
    ctx = SupRepo.discover(repo)
    try:
        rec = run_task(ctx, spec, worker_factory=factory)
        pid = made[0].survivor.pid
        assert rec.left_behind == [f"worker pid {pid} is still running"]
        assert any("lease stays held" in r for r in rec.reasons), rec.reasons
        lease = ctx.leases.get(rec.worktree)
        assert lease is not None and lease.task == rec.id
        types = [e["type"] for e in _events(repo, rec.id)]
        assert "worker_left_behind" in types
        # discard refuses, prune keeps it: the worker still runs in the worktree
        rc, _out, err = run_cli_inproc(repo, "discard", rec.id, "--force")
        assert rc == 2 and "left its worker behind" in err, err
        pruned = json.loads(run_sup(repo, "prune", "--json").stdout)
        assert any(k["task"] == rec.id and "left behind" in k["why"] for k in pruned["kept"])
        # `git sup doctor` shows it; --fix proves it gone (kills it), then releases the lease.
        doc = json.loads(run_sup(repo, "doctor", "--json").stdout)
        mine = [f for f in doc if f["task"] == rec.id]
        assert [f["kind"] for f in mine] == ["worker-left-behind"], doc
        assert str(pid) in mine[0]["detail"]
        fixed = json.loads(run_sup(repo, "doctor", "--fix", "--json").stdout)
        assert next(f["fixed"] for f in fixed if f["task"] == rec.id).endswith("lease released")
        made[0].survivor.wait(10)
        assert ctx.leases.get(rec.worktree) is None
        assert ctx.store.load(rec.id).left_behind == []
        assert json.loads(run_sup(repo, "doctor", "--json").stdout) == []
    finally:
        for w in made:
            kill_tree(w.survivor.pid)
            w.survivor.wait(10)


def test_a_worker_that_is_gone_releases_the_lease(repo: Path, tmp: Path) -> None:
    rc, rec, err = start_json(
        repo, "g", "--worker", f"{PYTHON} -c pass", "--review", "none", "--no-commit-required"
    )
    assert rc == 0, err
    assert rec["left_behind"] == []
    assert SupRepo.discover(repo).leases.get(rec["worktree"]) is None
