"""The real Claude Code CLI as a supervised worker: the whole loop, scripted model.

Every test runs the real `claude` binary against the scripted Messages-API stand-in on
127.0.0.1, through `gitsup.tasks.lifecycle.run_task` (or the CLI), in a real repository.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.spec import spec_from_mapping
from gitsup.store.events import Event
from gitsup.store.suprepo import SupRepo
from tests.conftest import git
from tests.helpers.sup import wait_for
from tests.helpers.supervised import (
    COMMIT,
    FIX_CALC,
    REVIEWER,
    Run,
    assert_pushes_denied,
    bare_origin,
    bash,
    push_attack,
    run_supervised,
    step,
    text,
    verdict,
)
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude


@pytest.fixture
def supervise(
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Run]:
    def go(scripts: Any, **spec: Any) -> Run:
        model = scripted_model(scripts)
        env = claude_env(model.url, tmp_path / "claude-config", {"GITSUP_CLAUDE_BIN": claude_bin})
        return run_supervised(repo, model, env, monkeypatch, {"kind": "claude"}, **spec)

    return go


def test_writes_code_runs_tests_commits_and_is_ready(
    supervise: Callable[..., Run], repo: Path
) -> None:
    r = supervise(
        {
            "default": [
                step(text("Fixing."), FIX_CALC),
                step(bash("python3 -m pytest -q || true")),
                step(COMMIT),
                step(text("Fixed and committed.")),
            ]
        }
    )
    rec = r.record
    assert rec.status.value == "ready", rec.reasons
    assert rec.candidate == git(repo, "rev-parse", f"refs/sup/{rec.id}/candidate")
    decided = [d for d in r.of("permission_decided") if not d.get("cancelled")]
    assert [d["tool"] for d in decided] == ["Write", "Bash", "Bash"]
    assert all(d["answer"] == "allow" for d in decided), decided
    assert all(d["rule"] for d in decided)
    done = r.of("turn_completed")
    assert done and done[0]["subtype"] == "success" and done[0]["session_id"]
    assert rec.turns == 4 and rec.cost_usd > 0
    note = json.loads(git(repo, "notes", "--ref=sup", "show", rec.candidate or ""))
    assert note["status"] == "ready" and note["turns"] == 4
    assert "a + b" in git(repo, "show", f"{rec.candidate}:calc.py")


def test_push_attempts_are_denied_and_nothing_is_pushed(
    supervise: Callable[..., Run], repo: Path, tmp_path: Path
) -> None:
    remote = bare_origin(repo, tmp_path)
    before = git(remote, "for-each-ref")
    r = supervise({"default": push_attack()})
    assert_pushes_denied(r)
    assert git(remote, "for-each-ref") == before
    # the model saw the denials as error tool results carrying the supervisor's message
    last = r.model.requests[-1].body["messages"]
    results = [
        b
        for m in last
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert sum(1 for b in results if b.get("is_error")) >= 3
    assert r.record.status.value == "ready"  # the local commit is still a fine candidate


def test_ask_user_question_is_answered_and_the_task_continues(
    supervise: Callable[..., Run],
) -> None:
    q = {
        "questions": [
            {
                "question": "Should add() also accept strings?",
                "header": "Scope",
                "options": [
                    {"label": "yes", "description": "y"},
                    {"label": "no", "description": "n"},
                ],
                "multiSelect": False,
            }
        ]
    }
    r = supervise(
        {
            "default": [
                step({"type": "tool_use", "name": "AskUserQuestion", "input": q}),
                step(FIX_CALC),
                step(COMMIT),
                step(text("done")),
            ]
        }
    )
    asked = [d for d in r.of("permission_decided") if d.get("tool") == "AskUserQuestion"]
    assert len(asked) == 1 and asked[0]["answer"] == "deny"
    assert asked[0]["message"].startswith("Supervisor answer:")
    second = r.model.step_requests("default")[1].body["messages"]
    assert "Supervisor answer:" in json.dumps(second)
    assert r.record.status.value == "ready", r.record.reasons


def test_garbage_model_output_never_counts_as_completion(supervise: Callable[..., Run]) -> None:
    r = supervise({"default": [{"garbage": "raw", "times": "forever"}]})
    assert r.record.status.value == "parked"
    done = r.of("turn_completed")
    assert done and done[-1]["is_error"] is True
    assert r.record.candidate is None


def test_max_turns_parks(supervise: Callable[..., Run]) -> None:
    r = supervise(
        {
            "default": [
                step(bash("ls")),
                step(bash("ls")),
                step(bash("ls")),
                step(FIX_CALC),
                step(COMMIT),
                step(text("done")),
            ]
        },
        budget={"max_turns": 2},
    )
    assert r.record.status.value == "parked"
    assert any("max_turns" in x for x in r.record.reasons), r.record.reasons


def test_max_cost_parks(supervise: Callable[..., Run]) -> None:
    r = supervise(
        {"default": [step(FIX_CALC), step(COMMIT), step(text("done"))]},
        budget={"max_cost_usd": 0.0001},
    )
    assert r.record.status.value == "parked"
    assert any("cost" in x for x in r.record.reasons), r.record.reasons
    assert r.of("budget_exceeded")


# --- the verification loop ----------------------------------------------------------------


def test_claude_reviewer_pass_makes_it_ready(supervise: Callable[..., Run]) -> None:
    r = supervise(
        {
            "reviewer": {
                "match": REVIEWER,
                "steps": [step(bash("git log --oneline -1")), verdict("pass")],
            },
            "default": [step(FIX_CALC), step(COMMIT), step(text("done"))],
        },
        review={"kind": "claude"},
    )
    assert r.record.status.value == "ready", r.record.reasons
    assert r.record.review is not None and r.record.review.verdict == "pass"
    # the reviewer is read-only: Bash is not even among its tools, and its call failed
    last = r.model.step_requests("reviewer")[-1].body
    assert {t["name"] for t in last.get("tools", [])} & {
        "Bash",
        "Write",
        "Edit",
        "NotebookEdit",
    } == set()
    results = [
        b
        for m in last["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert results and all(b.get("is_error") for b in results)
    assert r.of("review_started") and r.of("review_result")


def test_failed_check_gets_a_repair_round_then_ready(supervise: Callable[..., Run]) -> None:
    wrong = {
        "type": "tool_use",
        "name": "Write",
        "input": {"file_path": "${CWD}/calc.py", "content": "def add(a, b):\n    return a * b\n"},
    }
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
    assert "add(1, 2) == 3" in rep[0]["message"] or "assert" in rep[0]["message"]


def test_repeated_revise_finding_parks(supervise: Callable[..., Run]) -> None:
    finding = {
        "severity": "P2",
        "title": "add() lacks a docstring",
        "path": "calc.py",
        "line": 1,
        "detail": "document it",
    }
    r = supervise(
        {
            "reviewer": {"match": REVIEWER, "steps": [verdict("revise", [finding])]},
            "default": [
                step(FIX_CALC),
                step(COMMIT),
                step(text("done")),
                step(text("I think it is fine.")),
            ],
        },
        review={"kind": "claude"},
    )
    assert r.record.status.value == "parked"
    assert any("repeated" in x for x in r.record.reasons), r.record.reasons
    assert r.record.repair_rounds == 1


def test_p1_finding_parks(supervise: Callable[..., Run]) -> None:
    finding = {
        "severity": "P1",
        "title": "deletes user data",
        "path": "calc.py",
        "line": 2,
        "detail": "x",
    }
    r = supervise(
        {
            "reviewer": {"match": REVIEWER, "steps": [verdict("revise", [finding])]},
            "default": [step(FIX_CALC), step(COMMIT), step(text("done"))],
        },
        review={"kind": "claude"},
    )
    assert r.record.status.value == "parked"
    assert any("P1" in x for x in r.record.reasons), r.record.reasons
    assert r.record.repair_rounds == 0


def test_garbage_reviewer_parks_after_retries(supervise: Callable[..., Run]) -> None:
    r = supervise(
        {
            "reviewer": {"match": REVIEWER, "steps": [step(text("looks good to me!"))]},
            "default": [step(FIX_CALC), step(COMMIT), step(text("done"))],
        },
        review={"kind": "claude", "retries": 1},
    )
    assert r.record.status.value == "parked"
    assert r.record.review is not None and r.record.review.attempts == 2
    assert any("review failed" in x for x in r.record.reasons), r.record.reasons


def test_deadline_mid_turn_closes_out_then_watchdog(supervise: Callable[..., Run]) -> None:
    r = supervise(
        {"default": [step(FIX_CALC), {"hang": 60}]},
        budget={"deadline": "4s", "closeout_grace": "2s", "deadline_warning": "2s"},
    )
    assert r.record.status.value == "parked"
    types = [e.type for e in r.events]
    for t in ("deadline_approaching", "deadline_reached", "watchdog_timeout"):
        assert types.count(t) == 1, (t, types)
    reached = r.of("deadline_reached")[0]
    assert reached["busy"] is True
    assert r.record.wip is not None  # the uncommitted fix was saved


def test_noop_after_worker_is_paused_does_not_fire(repo: Path) -> None:
    """No-output timeout does not run while paused (a person drives the worker)."""
    from gitsup.supervision.taskio import ResumeAuto
    from gitsup.tasks.lifecycle import prepare_task
    from gitsup.workers.base import HumanInput

    script = repo.parent / "slow.sh"
    script.write_text(
        "#!/bin/sh\nsleep 4\necho 'def add(a, b):\n    return a + b' > calc.py\ngit commit -qam fix\n"
    )
    script.chmod(0o755)
    spec = spec_from_mapping(
        {
            "goal": "g",
            "worker": {"kind": "process", "argv": [str(script)]},
            "review": {"kind": "none"},
            "budget": {"no_output_timeout": "1s"},
        }
    )
    from gitsup.supervision.supervisor import Supervisor

    ctx = SupRepo.discover(repo)
    record, lease = prepare_task(ctx, spec)
    events: list[Event] = []
    took_over = threading.Event()

    def on_event(ev: Event) -> None:
        events.append(ev)
        if ev.type == "worker_started":
            # a person takes over at once, long before the 1 s no-output timeout
            sup.inbox.put(HumanInput("let me do this"))
        elif ev.type == "human_takeover":
            took_over.set()

    sup = Supervisor(ctx.repo, ctx.layout, record, spec, lease, on_event=on_event)

    def drive() -> None:
        if took_over.wait(60):
            time.sleep(5.0)  # paused for much longer than the no-output timeout
        sup.inbox.put(ResumeAuto())

    threading.Thread(target=drive, daemon=True).start()
    rec = sup.run()
    types = [e.type for e in events]
    assert "human_takeover" in types and "resume_auto" in types
    assert "watchdog_timeout" not in types, types
    assert rec.status.value == "ready", rec.reasons


def test_worker_killed_mid_turn_is_classified_not_completed(
    supervise: Callable[..., Run], repo: Path
) -> None:
    """A worker that dies without a `result` is never taken as a completed turn."""
    killer_done: list[int] = []
    pids: list[int] = []

    def kill_when_running(ev: Event, worktree: Path) -> None:
        if ev.type == "worker_started" and ev.data.get("pid"):
            pids.append(int(ev.data["pid"]))
        if ev.type == "permission_decided" and ev.data.get("tool") == "Write":
            # the Write runs after this answer; the model then hangs mid-turn

            def later() -> None:
                # once the Write has landed (it must be kept), kill the worker mid-turn
                wait_for(
                    lambda: "a + b" in (worktree / "calc.py").read_text(), 30, what="the Write"
                )
                os.kill(pids[0], 9)
                killer_done.append(pids[0])

            threading.Thread(target=later, daemon=True).start()

    from gitsup.supervision import supervisor as sup_mod

    original = sup_mod.Supervisor.emit

    def emit(self: Any, payload: Any) -> Event:
        ev = original(self, payload)
        kill_when_running(ev, Path(self.worktree))
        return ev

    sup_mod.Supervisor.emit = emit  # type: ignore[method-assign]
    try:
        r = supervise({"default": [step(FIX_CALC), {"hang": 60}]})
    finally:
        sup_mod.Supervisor.emit = original  # type: ignore[method-assign]
    assert killer_done
    assert r.record.status.value == "parked"
    assert r.of("turn_completed") == []
    stopped = [d for d in r.of("worker_stopped") if "classification" in d]
    assert stopped and stopped[0]["classification"] == "exited_without_result"
    assert any("without completing its turn" in x for x in r.record.reasons)
    assert r.record.wip is not None  # the Write that happened is kept


def test_one_turn_at_a_time_and_idempotent_sends(
    claude_bin: str, scripted_model: Callable[..., ScriptedModel], tmp_path: Path
) -> None:
    import queue

    from gitsup.workers.base import (
        PermissionAnswer,
        PermissionRequest,
        TurnCompleted,
        WorkerError,
        WorkerSetup,
    )
    from gitsup.workers.claude.worker import ClaudeWorker

    model = scripted_model({"default": [{"hang": 2}, step(text("one")), step(text("two"))]})
    env = claude_env(model.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    w = ClaudeWorker(WorkerSetup("20260101-abcdef", tmp_path, tmp_path, env, (), inbox))
    w.start("first")
    with pytest.raises(WorkerError, match="turn is active"):
        w.send_turn("second", key="k2")
    while True:
        ev = inbox.get(timeout=60)
        if isinstance(ev, PermissionRequest):
            w.answer(ev.request_id, PermissionAnswer(False, "no"))
        if isinstance(ev, TurnCompleted):
            break
    assert w.send_turn("second", key="k2") is True
    assert w.send_turn("second again", key="k2") is False  # a retried send is not a new turn
    while not isinstance(ev := inbox.get(timeout=60), TurnCompleted):
        pass
    assert ev.result == "two"
    assert w.stop(grace=2.0) in ("closed input", "terminated", "killed")
    assert not w.alive
