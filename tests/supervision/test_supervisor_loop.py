"""The supervisor loop with a scripted worker (no agent, no worker process) in a real Git
repository: the effects of the task machine carried out for real — the permission gate
answers, the checks run, the candidate is written, the log records exactly the states the
task passed through."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitsup.spec import spec_from_mapping
from gitsup.store.events import Event
from gitsup.store.suprepo import SupRepo
from gitsup.supervision.supervisor import Supervisor
from gitsup.tasks.lifecycle import prepare_task
from gitsup.workers.base import PermissionRequest, TurnCompleted, WorkerExited, WorkerSetup
from tests.fakes import OneShotWorker, ScriptedWorker

Step = Callable[[WorkerSetup], list[object]]


def fix_and_commit(ctx: WorkerSetup) -> list[object]:
    (ctx.worktree / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run(["git", "commit", "-qam", "fix add"], cwd=ctx.worktree, check=True)
    return [
        PermissionRequest("r1", "Bash", {"command": "git status"}),
        PermissionRequest("r2", "Bash", {"command": "git push origin main"}),
        TurnCompleted(result="fixed", num_turns=1),
    ]


def wrong(op: str) -> Step:
    def step(ctx: WorkerSetup) -> list[object]:
        (ctx.worktree / "calc.py").write_text(f"def add(a, b):\n    return a {op} b\n")
        subprocess.run(["git", "commit", "-qam", "try"], cwd=ctx.worktree, check=True)
        return [TurnCompleted(result="done", num_turns=1)]

    return step


CHECK = ["python3", "-c", "from calc import add; assert add(1, 2) == 3"]


def supervise(
    repo: Path,
    steps: list[Step],
    *,
    worker: type[ScriptedWorker] = ScriptedWorker,
    on_event: Callable[[Supervisor, Event], None] | None = None,
    **spec: Any,
) -> tuple[Supervisor, list[Event], ScriptedWorker]:
    data: dict[str, Any] = {
        "goal": "fix add",
        "worker": {"kind": "process", "argv": ["true"]},
        "review": {"kind": "none"},
        "checks": [{"name": "add", "argv": CHECK}],
        "sandbox": {"mode": "off"},
        "isolation": {"network": "host"},
        **spec,
    }
    ctx = SupRepo.discover(repo)
    record, lease = prepare_task(ctx, spec_from_mapping(data))
    events: list[Event] = []
    made: list[ScriptedWorker] = []

    def factory(_spec: Any, wctx: WorkerSetup) -> ScriptedWorker:
        made.append(worker(wctx, steps))
        return made[0]

    def sink(ev: Event) -> None:
        events.append(ev)
        if on_event is not None:
            on_event(sup, ev)

    sup = Supervisor(
        ctx.repo,
        ctx.layout,
        record,
        spec_from_mapping(data),
        lease,
        on_event=sink,
        worker_factory=factory,
    )
    sup.run()
    return sup, events, made[0] if made else None  # type: ignore[return-value]


def states(events: list[Event]) -> list[str]:
    return [e.data["to"] for e in events if e.type == "state_changed"]


def test_a_scripted_task_is_ready_and_the_gate_answered(repo: Path) -> None:
    sup, events, w = supervise(repo, [fix_and_commit])
    assert sup.record.status.value == "ready", sup.record.reasons
    assert states(events) == ["starting", "running", "waiting", "verifying", "completed"]
    answers = dict(w.answers)
    assert answers["r1"].allow and not answers["r2"].allow  # no push from a task
    assert sup.record.candidate is not None and sup.record.turns == 1
    types = [e.type for e in events]
    assert types[-1] == "task_finished" and types.count("permission_decided") == 2


def test_a_repair_round_then_parked_when_rounds_are_spent(repo: Path) -> None:
    sup, events, w = supervise(repo, [wrong("*"), wrong("/")], autonomy={"max_repair_rounds": 1})
    assert sup.record.status.value == "parked"
    assert states(events) == [
        "starting",
        "running",
        "waiting",
        "verifying",
        "running",
        "waiting",
        "verifying",
        "blocked",
    ]
    assert "repair rounds exhausted (1)" in sup.record.reasons
    assert w.sent[1].startswith("The supervisor verified your work")
    assert sup.record.repair_rounds == 1 and sup.record.wip is None


def test_a_worker_that_cannot_repair_parks_directly_from_verifying(repo: Path) -> None:
    sup, events, _ = supervise(repo, [wrong("*")], worker=OneShotWorker)
    assert states(events)[-2:] == ["verifying", "blocked"]
    assert "worker (process) cannot take a repair turn" in sup.record.reasons


def test_a_stop_while_running_goes_straight_to_stopped(repo: Path) -> None:
    def stop_when_running(sup: Supervisor, ev: Event) -> None:
        if ev.type == "state_changed" and ev.data["to"] == "running":
            sup.request_stop("requested by test")

    sup, events, w = supervise(repo, [lambda ctx: []], on_event=stop_when_running)
    assert sup.record.status.value == "stopped"
    assert states(events) == ["starting", "running", "stopped"]
    assert w.stopped and "stopped: requested by test" in sup.record.reasons


def test_a_worker_gone_mid_turn_parks_without_invented_steps(repo: Path) -> None:
    sup, events, _ = supervise(repo, [lambda ctx: [WorkerExited(1, None, "crashed")]])
    assert sup.record.status.value == "parked"
    assert states(events) == ["starting", "running", "waiting", "verifying", "blocked"]
    # the finaliser took one step, with the reasons
    last = [e for e in events if e.type == "state_changed"][-1]
    assert "worker exited without completing its turn" in last.data["reason"]
