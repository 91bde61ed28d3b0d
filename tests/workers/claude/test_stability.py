"""The claude worker holds under stress, through `git sup` with the real Claude Code CLI against
the scripted model: signals sent to the worker itself, agent descendants (a setsid'd one too)
reaped with the task's cgroup, duplicate permission records, a takeover after the supervisor
died mid-turn, and required and optional checks side by side."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.conftest import GIT_SUP, run_sup
from tests.helpers.require import require
from tests.helpers.sup import (
    common_dir,
    kill_marked,
    kill_tree,
    marked,
    read_record,
    task_ids,
    wait_for,
    wait_unmarked,
)
from tests.helpers.supervised import COMMIT, FIX_CALC, bash, step, text, write
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude

Model = Callable[..., ScriptedModel]


class Task:
    """One `git sup start --json` in the background, its id once it exists."""

    def __init__(self, repo: Path, proc: subprocess.Popen[str]) -> None:
        self.repo, self.proc = repo, proc
        wait_for(lambda: len(task_ids(repo)) == 1, timeout=60, what="the task record")
        (self.id,) = task_ids(repo)

    def record(self) -> dict[str, Any]:
        return read_record(self.repo, self.id)

    def events(self) -> list[dict[str, Any]]:
        log = common_dir(self.repo) / "sup" / "tasks" / self.id / "events.jsonl"
        return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]

    def of(self, type: str) -> list[dict[str, Any]]:
        return [e.get("data", {}) for e in self.events() if e.get("type") == type]

    def finish(self, timeout: float = 120) -> tuple[int, dict[str, Any]]:
        out, err = self.proc.communicate(timeout=timeout)
        assert out.strip(), err
        return self.proc.returncode, json.loads(out)


@pytest.fixture
def start(
    claude_bin: str, scripted_model: Model, repo: Path, tmp_path: Path
) -> Iterator[Callable[..., tuple[Task, ScriptedModel]]]:
    procs: list[subprocess.Popen[str]] = []

    def go(scripts: Any, spec: str = "", binary: str | None = None) -> tuple[Task, ScriptedModel]:
        model = scripted_model(scripts)
        env = claude_env(model.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": binary or claude_bin})
        path = tmp_path / "task.toml"
        path.write_text(
            'goal = "Fix add() in calc.py and commit."\n[worker]\nkind = "claude"\n'
            '[review]\nkind = "none"\n[budget]\ndeadline = "5m"\n' + spec
        )
        proc = subprocess.Popen(
            [GIT_SUP, "start", "--spec", str(path), "--json", "-q"],
            cwd=repo,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return Task(repo, proc), model

    yield go
    for proc in procs:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait(10)


# Descendants the agent leaves behind, the way an agent would: a script it wrote and ran in the
# foreground (the gate refuses `&`), forking a plain child and a setsid'd one (a new session,
# out of the worker's process group). Each carries a marker in its command line.
def _spawn_descendants(tag: str) -> list[dict[str, Any]]:
    source = (
        "import subprocess\n"
        "quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"subprocess.Popen(['sleep', '3{tag}1.0417'], **quiet)\n"
        f"subprocess.Popen(['sleep', '3{tag}2.0417'], start_new_session=True, **quiet)\n"
        "print('spawned')\n"
    )
    return [step(write("${CWD}/spawn.py", source)), step(bash("python3 spawn.py", "Start helpers"))]


def _hang_after_descendants(tag: str) -> dict[str, Any]:
    return {"default": [step(FIX_CALC), *_spawn_descendants(tag), {"hang": 60}]}


def _claude_pid(task: Task, model: ScriptedModel, steps: int) -> int:
    """The claude process itself once the model has been called `steps` times (then it is
    mid-turn): the one descendant of the recorded worker pid (the sandbox's bootstrap, when
    there is one) that runs the agent's executable."""
    wait_for(lambda: len(model.step_requests("default")) >= steps, timeout=90, what="the turn")
    pid = int(wait_for(lambda: task.record().get("worker", {}).get("pid"), 30, what="a pid"))
    top = psutil.Process(pid)
    found = [p for p in [top, *top.children(recursive=True)] if _is_claude(p)]
    assert len(found) == 1, [p.cmdline() for p in [top, *top.children(recursive=True)]]
    return found[0].pid


def _is_claude(p: psutil.Process) -> bool:
    try:
        argv = p.cmdline()
    except psutil.Error:
        return False
    return bool(argv) and "claude" in Path(argv[0]).name and "-p" in argv


def _markers(tag: str) -> list[str]:
    return [f"3{tag}1.0417", f"3{tag}2.0417"]


def _assert_nothing_left(rec: dict[str, Any], tag: str) -> None:
    for m in _markers(tag):
        assert wait_unmarked(m, timeout=10), f"{m!r} outlived the task"
    cg = rec["worker"]["cgroup"]
    assert cg, "the worker ran in no cgroup"
    assert not Path(cg).exists(), f"the task's cgroup {cg} was left behind"


@pytest.mark.parametrize(
    ("sig", "tag"), [(signal.SIGTERM, "15"), (signal.SIGINT, "02")], ids=["SIGTERM", "SIGINT"]
)
def test_a_signal_to_the_worker_parks_with_its_work_kept_and_reaps_descendants(
    start: Callable[..., tuple[Task, ScriptedModel]], sig: int, tag: str
) -> None:
    require("cgroup", "the descendants are reaped with the task's cgroup")
    task, model = start(_hang_after_descendants(tag))
    try:
        pid = _claude_pid(task, model, 4)
        assert all(marked(m) for m in _markers(tag)), "the descendants did not start"
        os.kill(pid, sig)
        code, rec = task.finish()
    finally:
        for m in _markers(tag):
            kill_marked(m)
    assert rec["status"] == "parked", (rec["status"], rec.get("reasons"))
    assert code == 3
    assert rec["wip"], "the worker's uncommitted fix was not kept"
    assert (
        "a + b"
        in subprocess.run(
            ["git", "show", f"{rec['wip']}:calc.py"], cwd=task.repo, capture_output=True, text=True
        ).stdout
    )
    stopped = [d for d in task.of("worker_stopped") if "classification" in d]
    if sig == signal.SIGTERM or stopped:
        assert [d["classification"] for d in stopped] == ["exited_without_result"], stopped
        assert any("without completing its turn" in x for x in rec["reasons"]), rec["reasons"]
        assert task.of("turn_completed") == []
    else:
        # SIGINT: Claude Code may instead end the turn as interrupted and take no further
        # turn; the task parks all the same, with the work kept
        assert any("could not be sent" in x for x in rec["reasons"]), rec["reasons"]
    _assert_nothing_left(rec, tag)


def test_a_stopped_worker_goes_on_after_sigcont_and_its_descendants_are_reaped(
    start: Callable[..., tuple[Task, ScriptedModel]], repo: Path
) -> None:
    require("cgroup", "the descendants are reaped with the task's cgroup")
    tag = "19"
    scripts = {
        "default": [
            step(FIX_CALC),
            *_spawn_descendants(tag),
            # answered late: the reply waits in the socket while the worker is stopped
            {"hang": 2, "content": [COMMIT]},
            step(text("Fixed and committed.")),
        ]
    }
    task, model = start(scripts)
    try:
        pid = _claude_pid(task, model, 4)
        assert all(marked(m) for m in _markers(tag)), "the descendants did not start"
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED, 10, what="stop")
        # stopped past the late answer: nothing moves until SIGCONT
        wait_for(lambda: model.step_requests("default")[-1].step == 3, 10, what="the call")
        time.sleep(3)
        assert len(model.step_requests("default")) == 4, "the stopped worker went on"
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
        os.kill(pid, signal.SIGCONT)
        code, rec = task.finish()
    finally:
        for m in _markers(tag):
            kill_marked(m)
    assert rec["status"] == "ready", (rec["status"], rec.get("reasons"))
    assert code == 0
    assert rec["candidate"]
    show = subprocess.run(
        ["git", "show", f"{rec['candidate']}:calc.py"], cwd=repo, capture_output=True, text=True
    )
    assert "a + b" in show.stdout
    _assert_nothing_left(rec, tag)


# The real CLI behind a transport that delivers every permission request twice, and tells on
# its stderr (kept in the task's log) the id of each answer the supervisor writes back.
DUPLICATING_SHIM = """#!/usr/bin/python3
import json, subprocess, sys, threading
agent = subprocess.Popen([AGENT, *sys.argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def feed():
    for line in sys.stdin.buffer:
        record = json.loads(line)
        if record.get("type") == "control_response":
            sys.stderr.write("shim-answer " + record["response"]["request_id"] + "\\n")
            sys.stderr.flush()
        agent.stdin.write(line)
        agent.stdin.flush()
    agent.stdin.close()
threading.Thread(target=feed, daemon=True).start()
for line in agent.stdout:
    copies = 2 if b'"can_use_tool"' in line else 1
    sys.stdout.buffer.write(line * copies)
    sys.stdout.buffer.flush()
sys.exit(agent.wait())
"""

QUESTION = {
    "type": "tool_use",
    "name": "AskUserQuestion",
    "input": {
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
    },
}


def test_duplicate_permission_records_are_answered_and_recorded_once(
    start: Callable[..., tuple[Task, ScriptedModel]],
    claude_bin: str,
    tmp_path: Path,
) -> None:
    shim = tmp_path / "shim" / "claude"
    shim.parent.mkdir()
    # the sandbox lets the worker execute from the agent's own directory: the real binary
    # goes next to the shim (a hard link; a copy where the test's temporary files are on
    # another file system than the agent's install)
    agent = str(shim.parent / "claude.exe")
    try:
        os.link(Path(claude_bin).resolve(), agent)
    except OSError:
        shutil.copy2(Path(claude_bin).resolve(), agent)
    shim.write_text(DUPLICATING_SHIM.replace("[AGENT,", f"[{agent!r},"))
    shim.chmod(0o755)
    scripts = {
        "default": [
            step(text("One question first."), QUESTION),
            # one assistant message in several parts: text, then two tool calls
            step(text("Fixing now."), FIX_CALC, COMMIT),
            # the final answer spread over two text blocks
            step(text("Fixed add()."), text("Committed the fix.")),
        ]
    }
    task, model = start(scripts, binary=str(shim))
    code, rec = task.finish()
    assert rec["status"] == "ready", (rec["status"], rec.get("reasons"))
    assert code == 0
    stderr = "".join(o["text"] for o in task.of("worker_output") if o["stream"] == "stderr")
    answers = [x.split()[1] for x in stderr.splitlines() if x.startswith("shim-answer ")]
    decided = [d for d in task.of("permission_decided") if not d.get("cancelled")]
    assert [d["tool"] for d in decided] == ["AskUserQuestion", "Write", "Bash"], decided
    # each request decided, recorded and answered once, though delivered twice
    ids = [d["request_id"] for d in decided]
    assert len(set(ids)) == 3 and sorted(answers) == sorted(ids), (ids, answers)
    noise = [n for n in task.of("protocol_noise") if "duplicate" in n.get("error", "")]
    assert len(noise) == 3, task.of("protocol_noise")
    # the question's answer reached the model once, before it went on
    second = model.step_requests("default")[1].body["messages"]
    assert json.dumps(second).count("Supervisor answer:") == 1
    done = task.of("turn_completed")
    assert done and "Committed the fix." in done[-1]["result"], done


def test_takeover_of_a_claude_worker_after_its_supervisor_died_mid_turn(
    start: Callable[..., tuple[Task, ScriptedModel]],
    claude_bin: str,
    repo: Path,
    tmp_path: Path,
) -> None:
    require("cgroup", "the old worker is proved gone by its cgroup")
    scripts = {
        "default": [
            step(FIX_CALC),
            # the supervisor dies while the worker waits for this answer; the new worker
            # resumes the conversation here (a step is counted from the assistant messages
            # in the request), so the answer comes within the CLI's API timeout
            {"hang": 12, "content": [COMMIT]},
            step(text("Fixed and committed.")),
        ]
    }
    task, model = start(scripts)
    old = _claude_pid(task, model, 2)
    before = task.record()["worker"]
    os.kill(task.proc.pid, signal.SIGKILL)
    task.proc.wait(30)
    assert psutil.pid_exists(old), "the worker died with its supervisor"
    env = claude_env(model.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    res = run_sup(repo, "recover", task.id, "--takeover", "--json", "-q", env=env, timeout=180)
    assert res.returncode == 0, (res.stderr, res.stdout[-2000:])
    rec = json.loads(res.stdout)
    assert rec["status"] == "ready", (rec["status"], rec.get("reasons"))
    # the old worker and its cgroup are gone; the new worker ran in a cgroup of its own
    assert not any(_is_claude(p) and p.pid == old for p in psutil.process_iter())
    assert not Path(before["cgroup"]).exists()
    assert rec["worker"]["cgroup"] != before["cgroup"]
    assert not Path(rec["worker"]["cgroup"]).exists()
    # one candidate, holding the fix
    candidate = subprocess.run(
        ["git", "rev-parse", f"refs/sup/{task.id}/candidate"],
        cwd=repo,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert candidate == rec["candidate"]
    assert len(task.of("candidate_ready")) == 1
    show = subprocess.run(
        ["git", "show", f"{candidate}:calc.py"], cwd=repo, capture_output=True, text=True
    )
    assert "a + b" in show.stdout
    # one log, continuous: seq from 1 without gaps, one start, the takeover in it, one end
    events = task.events()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types.count("task_started") == 1 and types.count("recovered") == 1
    assert types.count("task_finished") == 1 and types[-1] == "task_finished"
    assert types.index("recovered") > types.index("permission_decided")
    started = [e["data"]["pid"] for e in events if e["type"] == "worker_started"]
    assert len(started) == 2 and started[0] == before["pid"] != started[1]


CHECKS = """
[autonomy]
max_repair_rounds = 0
[[checks]]
name = "tests"
argv = ["{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
[[checks]]
name = "imports"
argv = ["{python}", "-c", "import calc"]
[[checks]]
name = "style"
argv = ["{python}", "-c", "import sys; sys.exit('style: {style}')"]
required = {style_required}
"""


@pytest.mark.parametrize("style_required", [False, True], ids=["optional", "required"])
def test_required_and_optional_checks(
    start: Callable[..., tuple[Task, ScriptedModel]], style_required: bool
) -> None:
    """Two required checks that pass and a third that fails: optional, the task is ready;
    required, it parks. Every result is recorded with whether it was required."""
    import sys

    spec = CHECKS.format(
        python=sys.executable,
        style="line too long",
        style_required=str(style_required).lower(),
    )
    task, _model = start({"default": [step(FIX_CALC), step(COMMIT), step(text("Fixed."))]}, spec)
    code, rec = task.finish()
    results = {r["name"]: r for r in task.of("acceptance_result")}
    assert set(results) >= {"tests", "imports", "style"}, results
    assert results["tests"]["passed"] and results["tests"]["required"]
    assert results["imports"]["passed"] and results["imports"]["required"]
    assert not results["style"]["passed"] and results["style"]["exit_code"] == 1
    assert results["style"]["required"] is style_required
    assert "line too long" in results["style"]["output_tail"]
    if style_required:
        assert (rec["status"], code) == ("parked", 3), rec.get("reasons")
        assert task.of("candidate_ready") == [] and len(task.of("candidate_parked")) == 1
        assert any("style" in x for x in rec["reasons"]), rec["reasons"]
    else:
        assert (rec["status"], code) == ("ready", 0), rec.get("reasons")
        assert rec["candidate"] and len(task.of("candidate_ready")) == 1
        assert not any("style" in x for x in rec["reasons"]), rec["reasons"]
