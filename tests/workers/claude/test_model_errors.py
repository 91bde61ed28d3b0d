"""Model and API failures are failures: the real Claude Code CLI, through `git sup start`,
against the scripted model (401, a 529 storm, a closed port, no credentials, a malformed
answer). None of them is a completed turn, a check run or a repair round."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.demo.scripted_model_steps import load_scenario
from tests.conftest import run_sup
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude

SCENARIOS = Path(__file__).resolve().parents[3] / "fixtures" / "scenarios"

FIX_CALC = {
    "type": "tool_use",
    "name": "Write",
    "input": {"file_path": "${CWD}/calc.py", "content": "def add(a, b):\n    return a + b\n"},
}
CHECK = [sys.executable, "-c", "from calc import add; assert add(1, 2) == 3"]


def _spec(tmp: Path, budget: str = "") -> Path:
    path = tmp / "task.toml"
    path.write_text(
        'goal = "Fix add() in calc.py and commit."\n'
        "[[checks]]\n"
        'name = "add"\n'
        f"argv = {json.dumps(CHECK)}\n"
        '[worker]\nkind = "claude"\n[review]\nkind = "none"\n'
        '[budget]\nno_output_timeout = "90s"\ndeadline = "3m"\n' + budget
    )
    return path


def _start(
    repo: Path, tmp: Path, env: dict[str, str], budget: str = "", quiet: bool = True
) -> tuple[int, dict[str, Any], list[dict[str, Any]], str, float]:
    t0 = time.monotonic()
    args = ["start", "--spec", str(_spec(tmp, budget)), "--json", *(["-q"] if quiet else [])]
    res = run_sup(repo, *args, env=env, timeout=240)
    took = time.monotonic() - t0
    rec = json.loads(res.stdout)
    log = run_sup(repo, "log", rec["id"], "--json", env=env)
    events = [json.loads(line) for line in log.stdout.splitlines()]
    return res.returncode, rec, events, res.stderr, took


# The CLI's own retry and connection behaviour, measured on the host network: through the
# egress gate (tests/workers/claude/test_egress_claude.py) a connection the model closed can cost an
# attempt, and a closed port is a dropped connection rather than a refused one.
HOST_NETWORK = '\n[isolation]\nnetwork = "host"\n'


def _of(events: list[dict[str, Any]], type: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == type]


def _env(model_url: str, tmp: Path, claude_bin: str, **extra: str) -> dict[str, str]:
    env = claude_env(model_url, tmp / "claude-config", {"GITSUP_CLAUDE_BIN": claude_bin})
    env.update(extra)
    return env


def _no_repair_no_checks(events: list[dict[str, Any]]) -> None:
    types = [e["type"] for e in events]
    assert "repair_requested" not in types, types
    assert "acceptance_started" not in types, types
    assert "decision" not in types, types


def test_a_401_fails_at_once_with_the_cli_message_and_what_to_do(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], repo: Path, tmp_path: Path
) -> None:
    model = scripted_model(load_scenario(SCENARIOS / "unauthorized-401.json"))
    rc, rec, events, err, _ = _start(
        repo, tmp_path, _env(model.url, tmp_path, claude_bin), quiet=False
    )
    assert rc == 4, (rec, err)
    # the progress says so too (it said "turn completed (success)")
    assert "turn ended with an error\n" in err and "turn completed (success)" not in err, err
    assert "model API authentication failed: Failed to authenticate" in err, err
    assert rec["state"] == "failed" and rec["status"] == "failed"
    assert any(
        r.startswith("model API authentication failed:") and "401" in r for r in rec["reasons"]
    ), rec["reasons"]
    assert any("ANTHROPIC_API_KEY" in r for r in rec["reasons"]), rec["reasons"]
    me = _of(events, "model_error")
    assert len(me) == 1 and me[0]["kind"] == "auth" and me[0]["status"] == 401
    _no_repair_no_checks(events)
    # `git sup show` says which
    show = run_sup(repo, "show", rec["id"], env=_env(model.url, tmp_path, claude_bin))
    assert "model API authentication failed" in show.stdout, show.stdout


def test_not_logged_in_fails_with_the_cli_message(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], repo: Path, tmp_path: Path
) -> None:
    model = scripted_model({"default": [{"text": "never reached"}]})
    env = _env(model.url, tmp_path, claude_bin)
    env.pop("ANTHROPIC_API_KEY")  # the base URL passes gitsup's preflight; the CLI refuses
    rc, rec, events, err, _ = _start(repo, tmp_path, env)
    assert rc == 4, (rec, err)
    assert rec["status"] == "failed"
    assert any("Not logged in" in r for r in rec["reasons"]), rec["reasons"]
    assert _of(events, "model_error")[0]["kind"] == "auth"
    assert not model.step_requests()
    _no_repair_no_checks(events)


def test_a_529_storm_parks_as_unreachable_after_bounded_retries(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], repo: Path, tmp_path: Path
) -> None:
    model = scripted_model(load_scenario(SCENARIOS / "overloaded-storm-529.json"))
    env = _env(model.url, tmp_path, claude_bin)
    del env["CLAUDE_CODE_MAX_RETRIES"], env["API_TIMEOUT_MS"]  # the supervisor bounds them
    clean = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CODE_MAX_RETRIES",)}
    clean.pop("API_TIMEOUT_MS", None)
    rc, rec, events, err, took = _start(repo, tmp_path, {**clean, **env}, budget=HOST_NETWORK)
    assert rc == 3, (rec, err)
    assert rec["status"] == "parked"
    assert any(r.startswith("model API unreachable:") for r in rec["reasons"]), rec["reasons"]
    me = _of(events, "model_error")
    assert len(me) == 1 and me[0]["kind"] == "unreachable" and me[0]["status"] == 529
    # at most 1 request + CLAUDE_CODE_MAX_RETRIES=3 set by the supervisor (the CLI's default
    # is 10, about 3 minutes); the CLI at times gives up one attempt early
    assert 3 <= len(model.step_requests()) <= 4, len(model.step_requests())
    retries = [d for d in _of(events, "worker_output") if d.get("stream") == "api_retry"]
    assert 2 <= len(retries) <= 3 and all(r["max_retries"] == 3 for r in retries), retries
    assert took < 60
    _no_repair_no_checks(events)


def test_a_closed_port_parks_as_unreachable(claude_bin: str, repo: Path, tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: connection refused
    rc, rec, events, err, _ = _start(
        repo,
        tmp_path,
        _env(f"http://127.0.0.1:{port}", tmp_path, claude_bin),
        budget=HOST_NETWORK,
    )
    assert rc == 3, (rec, err)
    assert any(
        r.startswith("model API unreachable:") and "ECONNREFUSED" in r for r in rec["reasons"]
    ), rec["reasons"]
    assert _of(events, "model_error")[0]["kind"] == "unreachable"
    _no_repair_no_checks(events)


def test_an_is_error_result_after_work_parks_and_keeps_the_work(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], repo: Path, tmp_path: Path
) -> None:
    # One good step (the fix is written), then the API answers garbage: an is_error result
    # of kind "api". The work is kept (wip), nothing counts as completion.
    model = scripted_model(
        {"default": [{"content": [FIX_CALC]}, {"garbage": "raw", "times": "forever"}]}
    )
    rc, rec, events, err, _ = _start(repo, tmp_path, _env(model.url, tmp_path, claude_bin))
    assert rc == 3, (rec, err)
    done = _of(events, "turn_completed")
    assert len(done) == 1 and done[0]["is_error"] is True
    me = _of(events, "model_error")
    assert len(me) == 1 and me[0]["kind"] == "api", me
    assert any(r.startswith("model API error:") for r in rec["reasons"]), rec["reasons"]
    assert rec["wip"] is not None
    _no_repair_no_checks(events)


def test_supervisor_stops_the_cli_it_started(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], repo: Path, tmp_path: Path
) -> None:
    """After a model failure the worker process is gone and the lease released."""
    model = scripted_model({"default": [{"http_error": 401, "times": "forever"}]})
    _rc, rec, _events, _err, _ = _start(repo, tmp_path, _env(model.url, tmp_path, claude_bin))
    pid = rec["worker"]["pid"]
    assert not Path(f"/proc/{pid}").exists() or "zombie" in (
        Path(f"/proc/{pid}/status").read_text().lower()
    )
    assert rec["left_behind"] == []
    doctor = run_sup(repo, "doctor", "--json")
    assert json.loads(doctor.stdout) == [], doctor.stdout


# --- the classification itself, on the record shapes measured with the CLI ------------------


@pytest.mark.parametrize(
    ("result", "data", "kind"),
    [
        ("Not logged in · Please run /login", {"terminal_reason": "api_error"}, "auth"),
        (
            "Failed to authenticate. API Error: 401 x",
            {"terminal_reason": "api_error", "api_error_status": 401},
            "auth",
        ),
        (
            "API Error: 529 overloaded",
            {"terminal_reason": "api_error", "api_error_status": 529, "api_error": "server_error"},
            "unreachable",
        ),
        (
            "API Error: Connection refused (ECONNREFUSED)",
            {"terminal_reason": "api_error", "api_error": "server_error"},
            "unreachable",
        ),
        ("Request timed out. Set API_TIMEOUT_MS.", {"terminal_reason": "api_error"}, "unreachable"),
        (
            "API Error: API returned an empty or malformed response (HTTP 200)",
            {"terminal_reason": "api_error", "api_error": "server_error"},
            "api",
        ),
        ("API Error: 400 bad request", {"api_error_status": 400}, "api"),
        ("Reached maximum number of turns (2)", {"terminal_reason": "max_turns"}, None),
        (None, {}, None),
    ],
)
def test_model_failure_kinds(result: str | None, data: dict[str, Any], kind: str | None) -> None:
    from gitsup.workers.base import TurnCompleted
    from gitsup.workers.stream_json import model_failure

    f = model_failure(TurnCompleted(is_error=True, result=result, data=data))
    assert (f.kind if f else None) == kind
    ok = model_failure(TurnCompleted(is_error=False, result=result, data=data))
    assert ok is None


def test_a_claude_reviewer_that_cannot_authenticate_says_so(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], repo: Path, tmp_path: Path
) -> None:
    model = scripted_model({"default": [{"http_error": 401, "times": "forever"}]})
    worker = tmp_path / "fix.py"
    worker.write_text(
        "import pathlib, subprocess\n"
        "p = pathlib.Path('calc.py')\n"
        "p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        "subprocess.run(['git', 'commit', '-q', '-am', 'fix add'], check=True)\n"
    )
    spec = tmp_path / "task.toml"
    spec.write_text(
        'goal = "Fix add() in calc.py and commit."\n'
        f'[[checks]]\nname = "add"\nargv = {json.dumps(CHECK)}\n'
        f'[worker]\nkind = "process"\nargv = {json.dumps([sys.executable, str(worker)])}\n'
        '[review]\nkind = "claude"\nretries = 0\n'
    )
    env = _env(model.url, tmp_path, claude_bin)
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q", env=env, timeout=120)
    rec = json.loads(res.stdout)
    assert res.returncode == 3, (rec.get("reasons"), res.stderr)
    assert any(
        "review failed" in r and "model API authentication failed" in r for r in rec["reasons"]
    ), rec["reasons"]
