"""Time and stop are authoritative: `git sup stop` takes effect in every phase (starting,
running, verifying, reviewing, deciding) within seconds and a stop never ends `completed`;
the deadline bounds the close-out grace; a timer set to 0 is off or refused.

Real `git sup` processes, real workers, real slow checks, reviewers and deciders; waits
are on events with bounded polls."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PYTHON, run_sup
from tests.helpers.require import requires
from tests.helpers.sup import (
    FIX_AND_COMMIT,
    check_cmd,
    kill_tree,
    marked,
    popen_sup,
    read_record,
    run_cli_inproc,
    start_json,
    task_ids,
    wait_for,
    write_spec,
    write_worker,
)

QUICK_CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")
# Writes its pid, then sleeps, deaf to SIGTERM: a slow check/reviewer/decider that does not
# want to be stopped.
SLOW = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(120)
print('{"verdict": "pass", "findings": [], "action": "verify"}')
"""


def _events(repo: Path, task: str) -> list[dict[str, Any]]:
    rc, out, err = run_cli_inproc(repo, "log", task, "--json")
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


def _types(repo: Path, task: str) -> list[str]:
    return [e["type"] for e in _events(repo, task)]


def _stop_when(
    repo: Path, proc: subprocess.Popen[str], event: str, pidfile: Path | None
) -> dict[str, Any]:
    """Wait for `event`, then `git sup stop`; the task must end stopped within seconds."""
    try:
        tid = wait_for(lambda: task_ids(repo), 30, what="the task")[0]
        wait_for(lambda: event in _types(repo, tid), 60, what=event)
        if pidfile is not None:
            wait_for(pidfile.exists, 30, what="the slow program to start")
        t0 = time.monotonic()
        res = run_sup(repo, "stop", tid, "--wait", "30", "--json")
        took = time.monotonic() - t0
        assert res.returncode == 0, res.stderr
        rc = proc.wait(30)
        assert rc == 5, proc.stderr.read() if proc.stderr else ""
        assert took < 15, took
        rec = read_record(repo, tid)
        assert rec["state"] == "stopped" and rec["status"] == "stopped", rec
        assert any("`git sup stop`" in r for r in rec["reasons"]), rec["reasons"]
        types = _types(repo, tid)
        assert "stop_requested" in types and types[-1] == "task_finished"
        assert "candidate_ready" not in types
        if pidfile is not None:  # the pid file's path is on the slow program's command line
            assert int(pidfile.read_text()) > 0
            wait_for(lambda: not marked(str(pidfile)), 10, what="the slow program to be stopped")
        return rec
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)


def _slow(tmp: Path, name: str) -> tuple[list[str], Path]:
    pidfile = tmp / f"{name}.pid"
    return [*shlex.split(write_worker(tmp, SLOW, f"{name}.py")), str(pidfile)], pidfile


def test_stop_while_a_check_runs(repo: Path, tmp: Path) -> None:
    argv, pidfile = _slow(tmp, "check")
    spec = write_spec(
        tmp,
        f"""
        goal = "fix add"
        [[checks]]
        name = "slow"
        argv = {json.dumps(argv)}
        [worker]
        kind = "process"
        argv = {json.dumps(shlex.split(write_worker(tmp, FIX_AND_COMMIT)))}
        [review]
        kind = "none"
        """,
    )
    proc = popen_sup(repo, "start", "--spec", str(spec), "--json", "-q")
    rec = _stop_when(repo, proc, "acceptance_started", pidfile)
    assert rec["review"] is None


def test_stop_while_the_reviewer_runs_never_ends_completed(repo: Path, tmp: Path) -> None:
    # The reviewer would say "pass" if it were waited for.
    argv, pidfile = _slow(tmp, "reviewer")
    spec = write_spec(
        tmp,
        f"""
        goal = "fix add"
        [[checks]]
        name = "quick"
        argv = {json.dumps(shlex.split(QUICK_CHECK))}
        [worker]
        kind = "process"
        argv = {json.dumps(shlex.split(write_worker(tmp, FIX_AND_COMMIT)))}
        [review]
        kind = "command"
        argv = {json.dumps(argv)}
        """,
    )
    proc = popen_sup(repo, "start", "--spec", str(spec), "--json", "-q")
    rec = _stop_when(repo, proc, "review_started", pidfile)
    assert rec["candidate"] is not None  # the work is kept, parked as stopped


def test_stop_while_the_decider_runs(repo: Path, tmp: Path) -> None:
    argv, pidfile = _slow(tmp, "decider")
    spec = write_spec(
        tmp,
        f"""
        goal = "fix add"
        [[checks]]
        name = "quick"
        argv = {json.dumps(shlex.split(QUICK_CHECK))}
        [worker]
        kind = "process"
        argv = {json.dumps(shlex.split(write_worker(tmp, FIX_AND_COMMIT)))}
        [review]
        kind = "none"
        [decider]
        kind = "command"
        argv = {json.dumps(argv)}
        """,
    )
    proc = popen_sup(repo, "start", "--spec", str(spec), "--json", "-q")
    _stop_when(repo, proc, "turn_completed", pidfile)
    tid = task_ids(repo)[0]
    assert "acceptance_started" not in _types(repo, tid)


def test_stop_while_running(repo: Path, tmp: Path) -> None:
    w = write_worker(tmp, "import time\nprint('working', flush=True)\ntime.sleep(120)\n")
    proc = popen_sup(repo, "start", "g", "--worker", w, "--review", "none", "--json", "-q")
    _stop_when(repo, proc, "worker_started", None)


@requires("tmux")
def test_stop_while_a_tui_never_starts_up(repo: Path, tmp: Path) -> None:
    # A "Claude Code" that never shows its input prompt: the worker stays in starting.
    fake = tmp / "claude"
    fake.write_text(f"#!{PYTHON}\nimport time\ntime.sleep(120)\n")
    fake.chmod(0o755)
    spec = write_spec(
        tmp,
        f"""
        goal = "fix add"
        [worker]
        kind = "tmux"
        argv = [{json.dumps(str(fake))}]
        env = {{ ANTHROPIC_BASE_URL = "http://127.0.0.1:9", ANTHROPIC_API_KEY = "x", CLAUDE_CONFIG_DIR = {json.dumps(str(tmp / "cfg"))} }}
        [review]
        kind = "none"
        """,
    )
    proc = popen_sup(repo, "start", "--spec", str(spec), "--json", "-q")
    try:
        tid = wait_for(lambda: task_ids(repo), 30, what="the task")[0]
        wait_for(lambda: read_record(repo, tid)["state"] == "starting", 30, what="starting")
        time.sleep(1.0)  # well inside the 60 s start-up wait
        assert read_record(repo, tid)["state"] == "starting"
        t0 = time.monotonic()
        res = run_sup(repo, "stop", tid, "--wait", "30")
        assert res.returncode == 0, res.stderr
        assert proc.wait(30) == 5
        assert time.monotonic() - t0 < 15
        rec = read_record(repo, tid)
        assert rec["state"] == "stopped", rec
        assert not any("could not start" in r for r in rec["reasons"]), rec["reasons"]
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)


# --- the deadline ---------------------------------------------------------------------------

CHATTY = """
import time
while True:
    print("still working", flush=True)
    time.sleep(0.1)
"""


def _deadline_run(
    repo: Path, tmp: Path, *flags: str
) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    w = write_worker(tmp, CHATTY, "chatty.py")
    t0 = time.monotonic()
    rc, rec, err = start_json(repo, "g", "--worker", w, "--review", "none", *flags)
    took = time.monotonic() - t0
    assert rc == 3, err
    return rec, _events(repo, rec["id"]), took


def test_the_default_closeout_grace_is_bounded_by_the_deadline(repo: Path, tmp: Path) -> None:
    # Before: the 30 min default grace outlived a short deadline.
    rec, events, took = _deadline_run(repo, tmp, "--deadline", "2s")
    reached = [e["data"] for e in events if e["type"] == "deadline_reached"]
    assert reached == [{"closeout_grace": 0.5, "busy": True}]
    assert took < 20
    assert any("deadline of 2s reached" in r for r in rec["reasons"]), rec["reasons"]


def test_closeout_grace_flag_and_its_cap(repo: Path, tmp: Path) -> None:
    _rec, events, _ = _deadline_run(repo, tmp, "--deadline", "2s", "--closeout-grace", "1s")
    assert [e["data"]["closeout_grace"] for e in events if e["type"] == "deadline_reached"] == [1.0]
    t = [e for e in events if e["type"] in ("deadline_reached", "watchdog_timeout")]
    assert [e["type"] for e in t] == ["deadline_reached", "watchdog_timeout"]
    _rec, events, took = _deadline_run(repo, tmp, "--deadline", "2s", "--closeout-grace", "10m")
    assert [e["data"]["closeout_grace"] for e in events if e["type"] == "deadline_reached"] == [2.0]
    assert took < 20


def test_closeout_grace_in_a_spec_is_bounded_too(repo: Path, tmp: Path) -> None:
    spec = write_spec(tmp, '[budget]\ncloseout_grace = "45m"\ndeadline = "1h"\n')
    from gitsup.spec import load_spec

    s = load_spec(spec, {"goal": "g"})
    assert s.budget.closeout() == 45 * 60
    s = load_spec(spec, {"goal": "g", "budget": {"deadline": "10m"}})
    assert s.budget.closeout() == 10 * 60
    s = load_spec(spec, {"goal": "g", "budget": {"deadline": 0, "closeout_grace": "5m"}})
    assert s.budget.closeout() == 0


# --- timers set to 0 -------------------------------------------------------------------------


def test_zero_turns_a_budget_timer_off_it_never_fires_at_once(repo: Path, tmp: Path) -> None:
    # deadline 0, no_output_timeout 0 and deadline_warning 0 are off: a silent worker that
    # takes a moment still finishes normally (before: every one fired at once).
    w = write_worker(
        tmp,
        "import time, pathlib, subprocess\ntime.sleep(1.5)\n" + FIX_AND_COMMIT,
        "slowfix.py",
    )
    rc, rec, err = start_json(
        repo,
        "fix add",
        "--worker",
        w,
        "--review",
        "none",
        "--check",
        QUICK_CHECK,
        "--deadline",
        "0",
        "--no-output-timeout",
        "0",
    )
    assert rc == 0, (rec.get("reasons"), err)
    types = [e["type"] for e in _events(repo, rec["id"])]
    for t in ("deadline_approaching", "deadline_reached", "watchdog_timeout"):
        assert t not in types, types


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[[checks]]\nname = "t"\nargv = ["true"]\ntimeout = 0\n', "checks.0.timeout"),
        ('[review]\nkind = "command"\nargv = ["true"]\ntimeout = "0s"\n', "review.timeout"),
        ('[decider]\nkind = "command"\nargv = ["true"]\ntimeout = 0\n', "decider.timeout"),
        ("[worker]\nstop_grace = 0\n", "worker.stop_grace"),
    ],
)
def test_zero_is_refused_for_timers_that_cannot_be_off(
    repo: Path, tmp: Path, toml: str, key: str
) -> None:
    spec = write_spec(tmp, 'goal = "g"\n' + toml)
    rc, _out, err = run_cli_inproc(repo, "start", "--spec", str(spec), "--worker", "true")
    assert rc == 2, err
    assert key in err and "must be more than 0" in err, err
    assert "Traceback" not in err
    assert task_ids(repo) == []


def test_model_call_bounds_follow_the_budget() -> None:
    from gitsup.spec import spec_from_mapping
    from gitsup.workers.claude.worker import model_call_env

    b = spec_from_mapping({"goal": "g"}).budget
    assert model_call_env(b) == {"CLAUDE_CODE_MAX_RETRIES": "3", "API_TIMEOUT_MS": "300000"}
    b = spec_from_mapping({"goal": "g", "budget": {"no_output_timeout": "90s"}}).budget
    assert model_call_env(b)["API_TIMEOUT_MS"] == "45000"
    b = spec_from_mapping({"goal": "g", "budget": {"deadline": "20s"}}).budget
    assert model_call_env(b)["API_TIMEOUT_MS"] == "5000"
    b = spec_from_mapping({"goal": "g", "budget": {"deadline": 0, "no_output_timeout": 0}}).budget
    assert model_call_env(b)["API_TIMEOUT_MS"] == "300000"


def test_the_environment_wins_over_the_model_call_bounds(repo: Path, tmp: Path) -> None:
    w = write_worker(
        tmp,
        "import os\nprint(os.environ['CLAUDE_CODE_MAX_RETRIES'], os.environ['API_TIMEOUT_MS'])\n",
        "env.py",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CODE_MAX_RETRIES",)}
    env["API_TIMEOUT_MS"] = "1234"
    res = run_sup(
        repo, "start", "g", "--worker", w, "--review", "none", "--json", "-q",
        "--no-commit-required", env=env,
    )  # fmt: skip
    rec = json.loads(res.stdout)
    out = [
        e["data"]["text"]
        for e in _events(repo, rec["id"])
        if e["type"] == "worker_output" and e["data"].get("stream") == "stdout"
    ]
    assert "3 1234" in "".join(out), out


# --- idle at the deadline ----------------------------------------------------------------------

PASS_REVIEWER = (
    'import json, sys; json.load(sys.stdin); print(json.dumps({"verdict": "pass", "findings": []}))'
)


def test_an_idle_worker_at_the_deadline_is_verified_and_reviewed(repo: Path, tmp: Path) -> None:
    """A person took over (paused) and the worker's turn ended: at the deadline its result
    is checked and reviewed, and can be ready (before: parked regardless)."""
    from gitsup.spec import spec_from_mapping
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import run_task
    from gitsup.workers.base import HumanInput, WorkerIdentity, WorkerSetup
    from gitsup.workers.process import ProcessWorker

    class TakenOver(ProcessWorker):
        # The events a terminal transport reports when a person types into the worker.
        def start(self, goal: str) -> WorkerIdentity:
            self.ctx.inbox.put(HumanInput("I'll take it from here"))
            return super().start(goal)

    def factory(spec: Any, ctx: WorkerSetup) -> TakenOver:
        return TakenOver(ctx)

    worker = shlex.split(write_worker(tmp, FIX_AND_COMMIT))
    spec = spec_from_mapping(
        {
            "goal": "fix add",
            "checks": [{"name": "quick", "argv": shlex.split(QUICK_CHECK)}],
            "worker": {"kind": "process", "argv": worker},
            "review": {"kind": "command", "argv": [PYTHON, "-c", PASS_REVIEWER]},
            "budget": {"deadline": "3s", "deadline_warning": 0},
        }
    )
    events: list[Any] = []
    rec = run_task(SupRepo.discover(repo), spec, on_event=events.append, worker_factory=factory)
    types = [e.type for e in events]
    assert "human_takeover" in types
    reached = [e.data for e in events if e.type == "deadline_reached"]
    assert reached == [{"closeout_grace": 0.75, "busy": False}]
    assert "watchdog_timeout" not in types
    assert types.index("review_started") > types.index("deadline_reached")
    assert rec.status.value == "ready", rec.reasons
    assert rec.review is not None and rec.review.verdict == "pass"
