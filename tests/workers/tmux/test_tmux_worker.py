"""The tmux transport end to end: real tmux, the real Claude Code TUI, scripted model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.host.procid import ProcessId
from gitsup.spec import spec_from_mapping
from gitsup.state import State, Status
from gitsup.store.records import TaskStore
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import read_events, run_task
from tests.conftest import GIT_SUP, git, run_sup
from tests.workers.tmux.conftest import claude_env, seed_config

COMMIT_STEPS: list[Any] = [
    [
        {"type": "text", "text": "Fixing add."},
        {
            "type": "tool_use",
            "name": "Write",
            "input": {
                "file_path": "${CWD}/calc.py",
                "content": "def add(a, b):\n    return a + b\n",
            },
        },
    ],
    {"bash": "git commit -qam 'fix add'"},
    {"text": "Fixed add and committed."},
]

PYTEST_CHECK = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def tmux_spec(claude_bin: str, model: ScriptedModel, config: Path, **worker: Any) -> dict[str, Any]:
    return {
        "goal": "Fix add in calc.py so the test passes.",
        "checks": [{"name": "pytest", "argv": PYTEST_CHECK}],
        "review": {"kind": "none"},
        "budget": {"no_output_timeout": 90, "deadline": 300},
        "worker": {
            "kind": "tmux",
            "argv": [claude_bin],
            "env": {**claude_env(model.url, config), **worker.pop("env", {})},
            **worker,
        },
    }


def events_of(repo: Path, task: str) -> list[dict[str, Any]]:
    return [e.as_dict() for e in read_events(SupRepo.discover(repo), task)]


def test_task_completes_through_the_tui(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    model = scripted_model({"default": {"steps": COMMIT_STEPS}})
    config = seed_config(tmp / "claude-config")
    spec = spec_from_mapping(tmux_spec(claude_bin, model, config), "test")
    ctx = SupRepo.discover(repo)
    seen: list[str] = []
    record = run_task(ctx, spec, on_event=lambda e: seen.append(e.type))
    evs = events_of(repo, record.id)
    assert record.status == Status.READY, (record.reasons, evs[-15:])
    types = [e["type"] for e in evs]
    assert "workspace_trust_accepted" in types
    tc = [e for e in evs if e["type"] == "turn_completed"]
    assert tc and tc[0]["data"]["result"] == "Fixed add and committed."
    started = next(e for e in evs if e["type"] == "worker_started")["data"]
    sock = Path(started["extra"]["socket"])
    # owned session: the tmux server was killed and verified gone
    assert not sock.exists()
    stopped = [e["data"] for e in evs if e["type"] == "worker_stopped"]
    assert any("verified gone" in str(d.get("how", "")) for d in stopped), stopped
    log = Path(started["extra"]["log"])
    assert log.exists() and log.stat().st_size > 0


def test_push_denied_at_pretooluse_even_when_bash_is_pre_allowed(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    steps = [{"bash": "git push origin HEAD:main"}, *COMMIT_STEPS]
    model = scripted_model({"default": {"steps": steps}})
    config = seed_config(tmp / "claude-config")
    allow_bash = json.dumps({"permissions": {"allow": ["Bash"]}})
    # The worktree's own settings cannot switch the hooks off: they are not loaded.
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.local.json").write_text('{"disableAllHooks": true}')
    git(repo, "add", ".claude")
    git(repo, "commit", "-qm", "project settings")
    spec = spec_from_mapping(
        tmux_spec(claude_bin, model, config, extra_args=["--settings", allow_bash]), "test"
    )
    record = run_task(SupRepo.discover(repo), spec)
    evs = events_of(repo, record.id)
    assert record.status == Status.READY, (record.reasons, evs[-10:])
    decided = [e["data"] for e in evs if e["type"] == "permission_decided"]
    push = [d for d in decided if "push" in str(d.get("input"))]
    assert push and push[0]["answer"] == "deny" and push[0]["rule"] == "D1.push"
    assert push[0]["request_id"].startswith("PreToolUse")
    # Bash was pre-allowed: Claude Code asked no PermissionRequest for the commit.
    assert not [
        d
        for d in decided
        if d["request_id"].startswith("PermissionRequest") and d["tool"] == "Bash"
    ]
    # The model was told why, through the hook's deny.
    bodies = json.dumps([r.body for r in model.requests])
    assert "PreToolUse:Bash hook error" in bodies and "publishes to a remote" in bodies
    assert git(repo, "log", "-1", "--format=%s", "main") == "project settings"


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def inline_toml(value: Any) -> str:
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{json.dumps(k)} = {inline_toml(v)}" for k, v in value.items()) + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(inline_toml(v) for v in value) + "]"
    return json.dumps(value)


def start_detached(repo: Path, tmp: Path, spec: dict[str, Any]) -> str:
    toml = tmp / "task.toml"
    toml.write_text("".join(f"{json.dumps(k)} = {inline_toml(v)}\n" for k, v in spec.items()))
    res = run_sup(repo, "start", "--detach", "--spec", str(toml), timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1]


def tmux(sock: str, *args: str) -> str:
    res = subprocess.run(["tmux", "-S", sock, *args], capture_output=True, text=True, timeout=10)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def task_types(repo: Path, task: str) -> list[str]:
    return [e["type"] for e in events_of(repo, task)]


def worker_extra(repo: Path, task: str) -> dict[str, Any]:
    rec = TaskStore(SupRepo.discover(repo).layout).load(task)
    extra = (rec.worker or {}).get("extra") or {}
    return dict(extra)


def test_typing_into_the_pane_pauses_until_resume_auto(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    # The tool runs until the test has seen the takeover (the TUI submits the typed prompt
    # when the running step ends), however loaded the machine is: it waits for a file the
    # test writes into the worktree, and removes it. It is a test run the policy allows (a
    # plain `sleep` is asked about, so denied at once).
    slow = (
        "import os\nimport time\n\n\ndef test_wait():\n"
        "    end = time.monotonic() + 180\n"
        "    while not os.path.exists('release.flag') and time.monotonic() < end:\n"
        "        time.sleep(0.1)\n"
        "    if os.path.exists('release.flag'):\n"
        "        os.remove('release.flag')\n"
    )
    steps = [
        [
            {
                "type": "tool_use",
                "name": "Write",
                "input": {"file_path": "${CWD}/wait_a_while.py", "content": slow},
            }
        ],
        {"bash": "pytest -q -p no:cacheprovider wait_a_while.py"},
        {"text": "Waited."},
        COMMIT_STEPS[0],
        {"bash": "git add -A && git commit -qm 'fix add'"},
        *COMMIT_STEPS[2:],
    ]
    model = scripted_model({"default": {"steps": steps}})
    config = seed_config(tmp / "claude-config")
    task = start_detached(repo, tmp, tmux_spec(claude_bin, model, config))
    extra = wait_for(lambda: worker_extra(repo, task), 60, "the worker")
    tmux_sockets.append(Path(extra["socket"]))
    wait_for(
        lambda: any(
            e["type"] == "permission_decided" and e["data"].get("tool") == "Bash"
            for e in events_of(repo, task)
        ),
        60,
        "the long test run",
    )
    # A person types into the pane while the worker runs its tool.
    # Keystrokes can be lost while the TUI redraws on a loaded machine: a person would
    # type again, and so does the test (at most three times).
    for _attempt in range(3):
        tmux(extra["socket"], "send-keys", "-t", extra["pane_id"], "-l", "please fix add as well")
        tmux(extra["socket"], "send-keys", "-t", extra["pane_id"], "Enter")
        try:
            wait_for(lambda: "human_takeover" in task_types(repo, task), 20, "the takeover")
            break
        except AssertionError:
            continue
    wait_for(lambda: "human_takeover" in task_types(repo, task), 1, "the takeover")
    # the record says `paused` right after the event (the transition saves it): read it then
    store = TaskStore(SupRepo.discover(repo).layout)
    rec = wait_for(
        lambda: (r := store.load(task)).state == State.PAUSED and r, 10, "the paused record"
    )
    assert rec.state == State.PAUSED
    assert rec.worktree
    (Path(rec.worktree) / "release.flag").write_text("go")  # the long test run ends
    # Turns that end while paused are recorded, nothing is decided.
    wait_for(
        lambda: sum(t == "turn_completed" for t in task_types(repo, task)) >= 1, 60, "a turn end"
    )
    time.sleep(1.0)
    assert TaskStore(SupRepo.discover(repo).layout).load(task).state == State.PAUSED
    assert "decision" not in task_types(repo, task)
    # The TUI either hands the typed prompt to the model within the running turn or as a
    # turn of its own once the step ends (both happen with 2.1.328); either way nothing is
    # decided until `resume-auto`, and then the task finishes (a repair round asks for the
    # fix when the typed prompt did not bring it).
    res = run_sup(repo, "resume-auto", task)
    assert res.returncode == 0, res.stderr
    res = run_sup(repo, "wait", task, "--timeout", "90", timeout=120)
    evs = events_of(repo, task)
    assert res.returncode == 0, (res.stdout, res.stderr, evs[-10:])
    human = [e["data"]["text"] for e in evs if e["type"] == "human_input"]
    assert human and set(human) == {"please fix add as well"}
    assert "resume_auto" in [e["type"] for e in evs]


def model_steps(model: ScriptedModel) -> int:
    return sum(r.kind == "step" for r in model.requests)


def kill_supervisor(repo: Path, task: str) -> None:
    rec = TaskStore(SupRepo.discover(repo).layout).load(task)
    owner = ProcessId.from_dict(rec.supervisor)
    assert owner is not None and owner.alive()
    os.kill(owner.pid, signal.SIGKILL)
    wait_for(lambda: not owner.alive(), 10, "the supervisor to die")


def test_pane_survives_supervisor_kill_and_is_readopted(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    steps = [COMMIT_STEPS[0], {"hang": 8, "bash": "git commit -qam 'fix add'"}, COMMIT_STEPS[2]]
    model = scripted_model({"default": {"steps": steps}})
    config = seed_config(tmp / "claude-config")
    task = start_detached(repo, tmp, tmux_spec(claude_bin, model, config))
    extra = wait_for(lambda: worker_extra(repo, task), 60, "the worker")
    sock = extra["socket"]
    tmux_sockets.append(Path(sock))
    # under `auto` the TUI runs in a gated namespace; its gate is a process of its own
    gate = ProcessId.from_dict(extra.get("egress_gate"))
    assert gate is not None and gate.alive(), extra
    assert extra["egress_gate"]["netns"] == extra["netns"]
    # Kill while the model hangs on step 2: no hook is in flight then (a permission
    # dialog whose hook died with the supervisor would wait for a person in the pane).
    wait_for(lambda: model_steps(model) >= 2, 60, "the second model call")
    kill_supervisor(repo, task)
    # The pane and its gate keep running without their supervisor.
    assert (
        tmux(sock, "display-message", "-p", "-t", extra["pane_id"], "#{pane_pid} #{pane_dead}")
        == f"{extra['pane_pid']} 0"
    )
    assert gate.alive()
    res = run_sup(repo, "recover", task, "--takeover", "--json", timeout=120)
    evs = events_of(repo, task)
    assert res.returncode == 0, (res.stderr[-2000:], evs[-10:])
    recovered = [e["data"] for e in evs if e["type"] == "recovered"]
    assert recovered and recovered[0]["action"] == "re-adopted"
    again = recovered[0]["extra"]  # the same gate, found again
    assert again["egress_gate_reused"] is True and again["egress_gate"]["pid"] == gate.pid, again
    decided = [e["data"] for e in evs if e["type"] == "permission_decided"]
    assert any("commit" in str(d.get("input")) for d in decided)  # answered by the new supervisor
    # An adopted session is detached at the end, never killed; its gate is stopped.
    stopped = [str(e["data"].get("how")) for e in evs if e["type"] == "worker_stopped"]
    assert any(h.startswith("detached") for h in stopped), stopped
    assert tmux(sock, "display-message", "-p", "-t", extra["pane_id"], "#{pane_pid}") == str(
        extra["pane_pid"]
    )
    assert not gate.alive()  # stopped by the supervisor that adopted it, at the end
    # The pane lives on in the worktree: its lease stays held, and the record says why.
    ctx = SupRepo.discover(repo)
    rec = TaskStore(ctx.layout).load(task)
    assert any(f"detached worker pid {extra['pane_pid']}" in x for x in rec.left_behind), rec
    assert [le for le in ctx.leases.all() if le.task == task], "the lease was released"


WAIT_FOR_FLAG = (
    "import os\nimport time\n\n\ndef test_wait():\n"
    "    end = time.monotonic() + 180\n"
    "    while not os.path.exists('release.flag') and time.monotonic() < end:\n"
    "        time.sleep(0.1)\n"
    "    if os.path.exists('release.flag'):\n"
    "        os.remove('release.flag')\n"
)


def test_a_dead_gate_is_replaced_on_takeover(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    """Supervisor and gate both killed while the TUI runs a tool (nothing in flight):
    `recover --takeover` serves the namespace with a new gate on the same ports, and the
    TUI's next model request goes through it."""
    steps = [
        [
            {
                "type": "tool_use",
                "name": "Write",
                "input": {"file_path": "${CWD}/wait_a_while.py", "content": WAIT_FOR_FLAG},
            }
        ],
        {"bash": "pytest -q -p no:cacheprovider wait_a_while.py"},
        COMMIT_STEPS[0],
        {"bash": "git add -A && git commit -qm 'fix add'"},
        *COMMIT_STEPS[2:],
    ]
    model = scripted_model({"default": {"steps": steps}})
    config = seed_config(tmp / "claude-config")
    task = start_detached(repo, tmp, tmux_spec(claude_bin, model, config))
    extra = wait_for(lambda: worker_extra(repo, task), 60, "the worker")
    tmux_sockets.append(Path(extra["socket"]))
    gate = ProcessId.from_dict(extra.get("egress_gate"))
    assert gate is not None and gate.alive(), extra
    # the Bash call's last hook (PermissionRequest) answered: the tool runs, nothing in flight
    wait_for(
        lambda: any(
            e["type"] == "permission_decided"
            and e["data"].get("tool") == "Bash"
            and str(e["data"].get("request_id")).startswith("PermissionRequest")
            for e in events_of(repo, task)
        ),
        60,
        "the long test run",
    )
    kill_supervisor(repo, task)
    os.kill(gate.pid, signal.SIGKILL)
    wait_for(lambda: not gate.alive(), 10, "the gate to die")
    recover = subprocess.Popen(
        [GIT_SUP, "recover", task, "--takeover", "--json"],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: "recovered" in task_types(repo, task), 60, "the takeover")
        again = next(e["data"] for e in events_of(repo, task) if e["type"] == "recovered")
        new_gate = ProcessId.from_dict(again["extra"]["egress_gate"])
        assert again["extra"]["egress_gate_reused"] is False, again
        assert new_gate is not None and new_gate.pid != gate.pid and new_gate.alive()
        assert again["extra"]["egress_gate"]["netns"] == extra["netns"]
        (
            Path(TaskStore(SupRepo.discover(repo).layout).load(task).worktree) / "release.flag"
        ).write_text("go")
        _out, err = recover.communicate(timeout=150)
    finally:
        if recover.poll() is None:
            recover.kill()
            recover.wait()
    evs = events_of(repo, task)
    assert recover.returncode == 0, (err[-3000:], [(e["type"], e["data"]) for e in evs][-14:])
    rec = TaskStore(SupRepo.discover(repo).layout).load(task)
    assert rec.status == Status.READY, (rec.reasons, evs[-10:])
    # the commit's model request and hooks went through the new gate
    decided = [e["data"] for e in evs if e["type"] == "permission_decided"]
    assert any("commit" in str(d.get("input")) for d in decided)
    assert not new_gate.alive()


def test_replaced_pane_process_is_refused(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    steps = [COMMIT_STEPS[0], {"hang": 30, "text": "too late"}]
    model = scripted_model({"default": {"steps": steps}})
    config = seed_config(tmp / "claude-config")
    task = start_detached(repo, tmp, tmux_spec(claude_bin, model, config))
    extra = wait_for(lambda: worker_extra(repo, task), 60, "the worker")
    sock = extra["socket"]
    tmux_sockets.append(Path(sock))
    # Kill while the model hangs on step 2: no hook is in flight then (a permission
    # dialog whose hook died with the supervisor would wait for a person in the pane).
    wait_for(lambda: model_steps(model) >= 2, 60, "the second model call")
    kill_supervisor(repo, task)
    tmux(sock, "respawn-pane", "-k", "-t", extra["pane_id"], "sleep 300")
    res = run_sup(repo, "recover", task, "--takeover", "--json", timeout=120)
    rec = json.loads(res.stdout)
    assert res.returncode == 3, res.stderr  # parked
    assert any("refusing to re-adopt" in r and "pane pid" in r for r in rec["reasons"]), rec[
        "reasons"
    ]
    assert not [
        e
        for e in events_of(repo, task)
        if e["type"] == "recovered" and e["data"].get("action") == "re-adopted"
    ]
