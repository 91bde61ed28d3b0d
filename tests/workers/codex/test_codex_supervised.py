"""The real Codex CLI (`codex app-server`) as a supervised worker, scripted model.

Every test runs the real `codex` binary against the Responses-API stand-in on 127.0.0.1
(`gitsup.demo.scripted_openai`), through `gitsup.tasks.lifecycle.run_task`, in a real repository, with
the sandbox and network isolation the host allows (as for every worker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.demo.scripted_openai import ScriptedResponses
from tests.conftest import git, run_sup
from tests.helpers.require import require
from tests.helpers.sup import wait_dead
from tests.helpers.supervised import assert_pushes_denied, bare_origin, push_attack
from tests.workers.claude import conftest as claude_conftest
from tests.workers.codex.conftest import COMMIT, FIX_CALC, Run, bash, codex_env, step, text, write

pytestmark = pytest.mark.codex


def test_writes_code_runs_tests_commits_and_is_ready(
    supervise: Callable[..., Run], repo: Path
) -> None:
    r = supervise(
        {
            "default": [
                step(text("Fixing."), FIX_CALC),
                step(bash("python3 -m pytest -q -p no:cacheprovider || true")),
                step(COMMIT),
                step(text("Fixed and committed.")),
            ]
        }
    )
    rec = r.record
    assert rec.status.value == "ready", (rec.reasons, r.of("worker_output")[-5:])
    assert rec.candidate == git(repo, "rev-parse", f"refs/sup/{rec.id}/candidate")
    decided = [d for d in r.of("permission_decided") if not d.get("cancelled")]
    assert [d["tool"] for d in decided] == ["Write", "Bash", "Bash"], decided
    assert all(d["answer"] == "allow" for d in decided), decided
    assert decided[0]["input"]["file_path"].endswith("/calc.py")
    assert decided[1]["input"]["command"] == "python3 -m pytest -q -p no:cacheprovider || true"
    done = r.of("turn_completed")
    assert done and done[0]["subtype"] == "success" and done[0]["session_id"]
    assert done[0]["usage"]["input_tokens"] > 0
    assert rec.turns == 4 and rec.cost_usd > 0
    note = json.loads(git(repo, "notes", "--ref=sup", "show", rec.candidate or ""))
    assert note["status"] == "ready"
    assert "a + b" in git(repo, "show", f"{rec.candidate}:calc.py")


def _user_inputs(body: dict[str, Any]) -> str:
    return json.dumps(
        [i for i in body.get("input", []) if i.get("role") == "user" or "output" in i]
    )


def test_push_attempts_are_denied_with_the_rule_and_nothing_is_pushed(
    supervise: Callable[..., Run], repo: Path, tmp_path: Path
) -> None:
    remote = bare_origin(repo, tmp_path)
    before = git(remote, "for-each-ref")
    r = supervise({"default": push_attack(bash)})
    assert_pushes_denied(r)
    assert git(remote, "for-each-ref") == before
    # codex ran none of them, and the model was told why (steered into the turn)
    last = r.model.step_requests("default")[-1].body
    outputs = [i for i in last["input"] if i.get("type") == "function_call_output"]
    assert len(outputs) >= 5
    assert "D1" in _user_inputs(last) or "push" in _user_inputs(last)
    assert r.record.status.value == "ready", r.record.reasons


def test_a_command_the_gate_asks_about_is_answered_by_the_decider(
    supervise: Callable[..., Run], tmp_path: Path
) -> None:
    decider = tmp_path / "decider.py"
    decider.write_text(
        "import json, sys\n"
        "req = json.load(sys.stdin)\n"
        "if req['event'] == 'ask':\n"
        "    print(json.dumps({'answer': 'DECIDER: no network; use the local copy'}))\n"
        "else:\n"
        "    print(json.dumps({'action': 'verify', 'reason': 'done'}))\n"
    )
    r = supervise(
        {
            "default": [
                step(bash("curl -s http://127.0.0.9:9/x")),
                step(FIX_CALC),
                step(COMMIT),
                step(text("done")),
            ]
        },
        decider={"kind": "command", "argv": ["python3", str(decider)]},
    )
    asked = [
        d for d in r.of("permission_decided") if d["input"].get("command", "").startswith("curl")
    ]
    assert len(asked) == 1 and asked[0]["verdict"] == "ask", asked
    assert asked[0]["answer"] == "deny" and "DECIDER" in asked[0]["message"]
    assert r.of("permission_pending")
    # the decider's words reached the model in the same turn
    second = r.model.step_requests("default")[1].body
    assert "DECIDER: no network" in _user_inputs(second)
    assert r.record.status.value == "ready", r.record.reasons


def test_garbage_from_the_model_parks_and_never_counts_as_completion(
    supervise: Callable[..., Run],
) -> None:
    r = supervise({"default": [{"garbage": "{not json at all", "times": "forever"}]})
    assert r.record.status.value == "parked", r.record.reasons
    done = r.of("turn_completed")
    assert done and done[-1]["is_error"] is True
    assert r.of("model_error"), r.of("worker_output")[-5:]
    assert r.record.candidate is None
    # codex's own retries are bounded (gitsup sets them): 1 + 2 requests
    assert 2 <= len(r.model.step_requests()) <= 4, len(r.model.step_requests())


def test_failed_check_gets_a_repair_round_in_the_same_thread(
    supervise: Callable[..., Run],
) -> None:
    wrong = write("${CWD}/calc.py", "def add(a, b):\n    return a * b\n")
    r = supervise(
        {
            "default": [
                step(wrong),
                step(COMMIT),
                step(text("done")),
                step(FIX_CALC),
                step(COMMIT),
                step(text("fixed")),
            ]
        }
    )
    assert r.record.status.value == "ready", r.record.reasons
    assert r.record.repair_rounds == 1
    rep = r.of("repair_requested")
    assert len(rep) == 1 and "tests" in rep[0]["message"]
    sessions = {d["session_id"] for d in r.of("turn_completed")}
    assert len(sessions) == 1, sessions  # one codex thread for both rounds
    assert len(r.of("worker_started")) == 1
    # the repair prompt came in the same conversation: the model saw the first round
    repair = r.model.step_requests("default")[3].body
    assert "a * b" in json.dumps(repair["input"]) and rep[0]["message"][:40] in json.dumps(
        repair["input"]
    )
    costs = [d["cost_usd"] for d in r.of("turn_completed")]
    assert all(c and c > 0 for c in costs), costs
    assert abs(r.record.cost_usd - sum(costs)) < 1e-6


def test_stop_mid_turn_exits_5_and_leaves_nothing_running(
    codex_bin: str,
    scripted_openai: Callable[..., ScriptedResponses],
    repo: Path,
    tmp_path: Path,
) -> None:
    require("cgroup", "the worker's cgroup, removed at the stop")
    model = scripted_openai({"default": [{"hang": 60}]})
    spec = tmp_path / "task.toml"
    spec.write_text('goal = "wait"\n[worker]\nkind = "codex"\n[review]\nkind = "none"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitsup", "start", "--spec", str(spec), "--json", "-q"],
        cwd=repo,
        env={**os.environ, **codex_env(model.url, codex_bin)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    task = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ls = json.loads(run_sup(repo, "ls", "--json").stdout or "[]")
        if ls and ls[0]["state"] == "running" and model.step_requests():
            task = ls[0]["id"]
            break
        time.sleep(0.2)
    assert task, "the task never reached a model request"
    stop = run_sup(repo, "stop", task, "--json")
    assert stop.returncode == 0, stop.stderr
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 5, err
    rec = json.loads(out)
    assert rec["state"] == "stopped"
    pid = rec["worker"]["pid"]
    assert wait_dead(pid, timeout=30), f"worker {pid} survived the stop"
    cg = rec["worker"]["cgroup"]
    assert cg, "the worker ran in no cgroup"
    assert not Path(cg).exists(), f"the worker's cgroup {cg} was left behind"
    # no codex process of this task is left anywhere
    left = [
        p.pid
        for p in psutil.process_iter(["environ"])
        if (p.info.get("environ") or {}).get("GITSUP_TASK") == task
    ]
    assert left == [], left


PLANT = (
    'mkdir -p "$CODEX_HOME/rules" && '
    'printf \'prefix_rule(pattern=["git"], decision="allow")\\n\' > "$CODEX_HOME/rules/x.rules" && '
    'printf \'approval_policy = "never"\\n\' > "$CODEX_HOME/config.toml" && '
    'echo planted > planted.txt && ls "$CODEX_HOME"'
)


def test_approvals_the_agent_plants_in_its_codex_home_never_apply(
    supervise: Callable[..., Run], repo: Path
) -> None:
    r = supervise(
        {
            "default": [
                # a hostile agent writes a script (the gate allows running it in the sandbox)
                step(write("${CWD}/plant.sh", PLANT + "\n")),
                step(bash("sh plant.sh")),
                step(text("planted; stopping without a fix")),
                # the repair round (the check failed): git is still asked, push still denied
                step(bash("git status --short")),
                step(bash("git push origin HEAD:main")),
                step(FIX_CALC),
                step(text("fixed")),
            ]
        }
    )
    decided = [d for d in r.of("permission_decided") if d.get("tool") == "Bash"]
    commands = [d["input"]["command"] for d in decided]
    assert commands[0] == "sh plant.sh" and decided[0]["answer"] == "allow", decided[0]
    assert "git status --short" in commands, commands
    push = next(d for d in decided if d["input"]["command"].startswith("git push"))
    assert push["answer"] == "deny" and push["rule"].startswith("D1")
    ran = [o["text"] for o in r.of("worker_output") if "exit 0] sh plant.sh" in o.get("text", "")]
    assert ran and "config.toml" in ran[0] and "rules" in ran[0], ran
    assert r.record.repair_rounds >= 1  # the later commands came in a later turn


claude_bin = claude_conftest.claude_bin  # the fixture, shared
REVIEWER = "independent code reviewer"


def test_written_by_codex_reviewed_by_claude(
    supervise: Callable[..., Run],
    claude_bin: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require("netns", "each agent's own egress gate")
    verdict = {"verdict": "pass", "findings": []}
    with ScriptedModel(
        {
            "reviewer": {
                "match": REVIEWER,
                "steps": [{"bash": "git log --oneline -1"}, {"text": json.dumps(verdict)}],
            }
        }
    ) as anthropic:
        env = claude_conftest.claude_env(
            anthropic.url, tmp_path / "claude-config", {"GITSUP_CLAUDE_BIN": claude_bin}
        )
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        r = supervise(
            {"default": [step(FIX_CALC), step(COMMIT), step(text("done"))]},
            review={"kind": "claude"},
        )
    assert r.record.status.value == "ready", r.record.reasons
    assert r.record.review is not None and r.record.review.verdict == "pass"
    assert r.record.worker_kind == "codex"
    # each agent talked to its own model API only, through its own gate
    assert r.model.step_requests("default") and anthropic.step_requests("reviewer")
    assert not [q for q in r.model.requests if REVIEWER in json.dumps(q.body)]
    net = r.of("worker_started")[0]["network"]
    assert net["mode"] == "gated", net
    port = r.model.url.split(":")[2].split("/")[0]
    assert net["forward"] == [f"127.0.0.1:{port}"], net


def test_codex_reviewer_is_read_only_and_its_verdict_counts(
    supervise: Callable[..., Run], repo: Path
) -> None:
    verdict = {"verdict": "pass", "findings": []}
    r = supervise(
        {
            "reviewer": {
                "match": REVIEWER,
                "steps": [
                    step(bash("echo tampered > calc.py")),
                    step(write("${CWD}/evil.py", "x = 1\n")),
                    step(text(json.dumps(verdict))),
                ],
            },
            "default": [step(FIX_CALC), step(COMMIT), step(text("done"))],
        },
        review={"kind": "codex"},
    )
    assert r.record.status.value == "ready", r.record.reasons
    assert r.record.review is not None and r.record.review.verdict == "pass"
    reviewer = r.model.step_requests("reviewer")
    assert len(reviewer) == 3
    # both of its attempts to change something were declined, and nothing changed
    outputs = [
        i["output"] for i in reviewer[-1].body["input"] if i.get("type") == "function_call_output"
    ]
    assert len(outputs) == 2 and all("tampered" not in o for o in outputs), outputs
    cand = r.record.candidate or ""
    assert "a + b" in git(repo, "show", f"{cand}:calc.py")
    assert not git(repo, "ls-tree", "--name-only", cand, "evil.py")
    wt = Path(r.record.worktree)
    assert wt.is_dir() and not (wt / "evil.py").exists()
    assert "a + b" in (wt / "calc.py").read_text()


def test_rejected_credentials_fail_the_task_at_once(supervise: Callable[..., Run]) -> None:
    r = supervise({"default": [{"http_error": 401, "times": "forever"}]})
    assert r.record.status.value == "failed", r.record.reasons
    (err,) = r.of("model_error")
    assert err["kind"] == "auth" and err["status"] == 401, err
    assert any("authentication" in x for x in r.record.reasons), r.record.reasons
    # codex's retries are bounded by gitsup: 1 + 2 requests, then the turn fails
    assert len(r.model.step_requests()) == 3


def _offered(body: dict[str, Any]) -> set[str]:
    """Tool names of a request: `tools`, and the `additional_tools` items (namespaces)."""

    def walk(tools: list[dict[str, Any]]) -> set[str]:
        out: set[str] = set()
        for t in tools:
            out.add(str(t.get("name") or t.get("type")))
            out |= walk(t.get("tools") or [])
        return out

    names = walk(body.get("tools") or [])
    for item in body.get("input") or []:
        if item.get("type") == "additional_tools":
            names |= walk(item.get("tools") or [])
    return names


def test_the_model_is_offered_no_web_search_and_no_sub_agents(
    supervise: Callable[..., Run],
) -> None:
    # a model Codex has no metadata for gets its generic tool set (web search and the
    # multi-agent tools included, measured without gitsup's flags)
    r = supervise(
        {"default": [step(FIX_CALC), step(COMMIT), step(text("done"))]},
        worker={"model": "gpt-scripted"},
    )
    names = _offered(r.model.step_requests()[0].body)
    assert "exec_command" in names, names
    assert not names & {"web_search", "multi_agent_v1"}, names
    assert r.record.status.value == "ready"


def code_mode(js: str) -> dict[str, Any]:
    return {"type": "custom_tool_call", "name": "exec", "input": js}


def test_commands_from_code_mode_reach_the_gate_too(
    supervise: Callable[..., Run], repo: Path, tmp_path: Path
) -> None:
    """Codex's default model gets a JavaScript `exec` tool that calls the other tools; the
    commands it runs must reach the gate like any other."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "main")
    before = git(remote, "for-each-ref")
    js = (
        'const a = await tools.exec_command({cmd: "echo from-code-mode > cm.txt"});\n'
        'const b = await tools.exec_command({cmd: "git push origin HEAD:main"});\n'
        "text(JSON.stringify([a, b]));\n"
    )
    r = supervise(
        {
            "default": [
                step(FIX_CALC),
                step(COMMIT),
                step(code_mode(js)),
                step(text("done")),
            ]
        }
    )
    decided = [d for d in r.of("permission_decided") if d.get("tool") == "Bash"]
    commands = {d["input"]["command"]: d for d in decided}
    assert "git push origin HEAD:main" in commands, list(commands)
    assert commands["git push origin HEAD:main"]["answer"] == "deny"
    assert git(remote, "for-each-ref") == before
    assert commands["echo from-code-mode > cm.txt"]["answer"] == "allow"
    wt = Path(r.record.worktree)
    assert (wt / "cm.txt").read_text() == "from-code-mode\n"


def test_a_silent_model_trips_the_no_output_watchdog(supervise: Callable[..., Run]) -> None:
    r = supervise(
        {"default": [{"hang": 60}]},
        budget={"no_output_timeout": "4s", "deadline": "2m", "closeout_grace": 0},
    )
    assert r.record.status.value == "parked", r.record.reasons
    (fired,) = r.of("watchdog_timeout")
    assert fired["kind"] == "no_output" and fired["limit"] == 4
    assert r.record.candidate is None
    assert wait_dead(int(r.record.worker["pid"]), timeout=30)


def test_the_deadline_stops_a_busy_worker(supervise: Callable[..., Run]) -> None:
    r = supervise(
        {"default": [{"hang": 60}]},
        budget={
            "no_output_timeout": "60s",
            "deadline": "6s",
            "closeout_grace": 0,
            "deadline_warning": 0,
        },
    )
    assert r.record.status.value == "parked", r.record.reasons
    assert [d["kind"] for d in r.of("watchdog_timeout")] == ["deadline"], r.of("watchdog_timeout")
    assert wait_dead(int(r.record.worker["pid"]), timeout=30)


STEAL = """set +e
cat "{home}/.claude/.credentials.json"
echo owned > "{home}/.claude/evil"
ls "{home}/.claude"
echo done-stealing
"""


def test_a_codex_task_cannot_reach_the_users_claude_config(
    supervise: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Claude task gets a private copy of the user's Claude Code config (docs/sandbox.md);
    a codex task gets none of it, and cannot reach the user's."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"token": "sk-ant-oat01-SECRET"}')
    monkeypatch.setenv("HOME", str(home))
    r = supervise(
        {
            "default": [
                step(write("${CWD}/steal.sh", STEAL.format(home=home))),
                step(bash("sh steal.sh")),
                step(text("done")),
            ]
        },
        checks=[],
    )
    ran = [o["text"] for o in r.of("worker_output") if "exit 0] sh steal.sh" in o.get("text", "")]
    assert ran and "done-stealing" in ran[0], ran
    assert "SECRET" not in json.dumps([e.data for e in r.events])
    assert not (home / ".claude" / "evil").exists()
    assert sorted(p.name for p in (home / ".claude").iterdir()) == [".credentials.json"]


ASKED = "permission gate denied"
TURN = "The worker finished a turn"


def test_a_codex_decider_answers_the_gate_and_cannot_change_anything(
    supervise: Callable[..., Run], repo: Path
) -> None:
    answer = {"answer": "DECIDER: no network here; fix calc.py from the local copy"}
    r = supervise(
        {
            "decider-ask": {
                "match": ASKED,
                "steps": [
                    step(bash("echo tampered > calc.py")),
                    step(write("${CWD}/evil.py", "x = 1\n")),
                    step(text(json.dumps(answer))),
                ],
            },
            "decider-turn": {
                "match": TURN,
                "steps": [step(text('{"action": "verify", "reason": "done"}'))],
            },
            "default": [
                step(bash("curl -s http://127.0.0.9:9/x")),
                step(FIX_CALC),
                step(COMMIT),
                step(text("done")),
            ],
        },
        decider={"kind": "codex"},
    )
    asked = [
        d for d in r.of("permission_decided") if d["input"].get("command", "").startswith("curl")
    ]
    assert len(asked) == 1 and asked[0]["verdict"] == "ask" and asked[0]["answer"] == "deny"
    # the gate's denial stands, the decider's words follow it, and both reached the worker
    assert asked[0]["message"].startswith("Blocked by the gitsup policy gate (rule "), asked
    assert "Supervisor answer: DECIDER: no network here" in asked[0]["message"]
    assert "DECIDER: no network here" in _user_inputs(r.model.step_requests("default")[1].body)
    # the decider ran as codex: three requests for the ask, one for the turn
    ask_calls = r.model.step_requests("decider-ask")
    assert len(ask_calls) == 3 and len(r.model.step_requests("decider-turn")) == 1
    outputs = [
        i["output"] for i in ask_calls[-1].body["input"] if i.get("type") == "function_call_output"
    ]
    assert len(outputs) == 2 and all("tampered" not in o for o in outputs), outputs
    assert r.record.status.value == "ready", r.record.reasons
    cand = r.record.candidate or ""
    assert "a + b" in git(repo, "show", f"{cand}:calc.py")
    assert not git(repo, "ls-tree", "--name-only", cand, "evil.py")
    wt = Path(r.record.worktree)
    assert not (wt / "evil.py").exists() and "a + b" in (wt / "calc.py").read_text()
    assert [d["source"] for d in r.of("decision")] == ["codex"], r.of("decision")
