"""What every worker kind does the same way, run once per kind of the registry
(gitsup/workers/kinds.py) through the real CLI: the real agents (Claude Code headless, in
tmux and behind its ACP adapter; Codex's app-server) against the scripted model stand-ins
on 127.0.0.1, and a plain process.

- a task whose worker edits a file and commits ends ready, its candidate holding the edit;
- `git sup stop` mid-turn ends it stopped (exit 5), its uncommitted work kept as its wip;
- a tool call the agent asks to make is answered by the policy: a push is denied with its
  rule and changes nothing, the task goes on and ends ready (agent kinds: a process asks
  nothing).

What only one agent does (its protocol, its settings, its transport) stays in its own suite
under tests/workers/<agent>/.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.demo.scripted_openai import ScriptedResponses
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import read_events
from gitsup.workers.kinds import KINDS
from tests.conftest import GIT_SUP, git, run_sup
from tests.helpers.agents import pinned_agent
from tests.helpers.require import require
from tests.helpers.sup import wait_dead
from tests.helpers.supervised import bare_origin, step, text, write
from tests.helpers.supervised import bash as claude_bash
from tests.workers.acp.conftest import PINNED_VERSION as ACP_VERSION
from tests.workers.claude.conftest import PINNED_VERSION as CLAUDE_VERSION
from tests.workers.claude.conftest import claude_env
from tests.workers.codex.conftest import PINNED_VERSION as CODEX_VERSION
from tests.workers.codex.conftest import codex_env
from tests.workers.tmux.conftest import claude_env as tui_env
from tests.workers.tmux.conftest import seed_config

pytestmark = pytest.mark.claude

ALL = list(KINDS)
AGENTS = [k.name for k in KINDS.values() if k.agent is not None]
FIXED = "def add(a, b):\n    return a + b\n"
PUSH = "git push origin HEAD:main"


class Kind:
    """One worker kind's way to run a generic script: the spec's [worker] section and the
    environment `git sup start` runs with, for steps made of `write`, `bash`, `text` and
    `hang` (the model then keeps the turn open)."""

    def __init__(self, name: str, tmp: Path, models: list[Any]) -> None:
        self.name, self.tmp, self.models = name, tmp, models
        self.model: Any = None

    def prepare(self, steps: list[tuple[str, ...]]) -> tuple[dict[str, Any], dict[str, str]]:
        if self.name == "process":
            return self._process(steps)
        shell = (lambda c: claude_bash(c, None)) if self.name == "codex" else claude_bash
        script: list[Any] = []
        for s in steps:
            if s[0] == "write":
                script.append(step(write("${CWD}/" + s[1], s[2])))
            elif s[0] == "bash":
                script.append(step(shell(s[1])))
            elif s[0] == "text":
                script.append(step(text(s[1])))
            else:
                script.append({"hang": 120})
        if self.name == "codex":
            binary = pinned_agent("GITSUP_CODEX_BIN", "codex", "codex", CODEX_VERSION)
            self.model = ScriptedResponses({"default": script}).start()
            self.models.append(self.model)
            return {"kind": "codex"}, {**os.environ, **codex_env(self.model.url, binary)}
        claude = pinned_agent("GITSUP_CLAUDE_BIN", "claude", "claude", CLAUDE_VERSION)
        self.model = ScriptedModel({"default": script}).start()
        self.models.append(self.model)
        env = claude_env(self.model.url, self.tmp / "claude-config", {"GITSUP_CLAUDE_BIN": claude})
        if self.name == "claude":
            return {"kind": "claude"}, env
        if self.name == "acp":
            acp = pinned_agent("GITSUP_ACP_BIN", "claude-agent-acp", "acp", ACP_VERSION)
            return {"kind": "acp", "argv": [acp]}, env
        require("tmux", "the TUI worker")
        config = seed_config(self.tmp / "tui-config")
        return {"kind": "tmux", "argv": [claude], "env": tui_env(self.model.url, config)}, env

    def _process(self, steps: list[tuple[str, ...]]) -> tuple[dict[str, Any], dict[str, str]]:
        lines = ["set -e"]
        for s in steps:
            if s[0] == "write":
                lines.append(f"printf %s {_q(s[2])} > {_q(s[1])}")
            elif s[0] == "bash":
                lines.append(s[1])
            elif s[0] == "text":
                lines.append(f"echo {_q(s[1])}")
            else:
                lines.append("exec sleep 120")
        script = self.tmp / "worker.sh"
        script.write_text("\n".join(lines) + "\n")
        return {"kind": "process", "argv": ["sh", str(script)]}, dict(os.environ)


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)  # strings, numbers and arrays of them read the same in TOML


@pytest.fixture
def kind(request: pytest.FixtureRequest, tmp: Path) -> Iterator[Kind]:
    models: list[Any] = []
    yield Kind(request.param, tmp, models)
    for m in models:
        m.stop()


def start(
    repo: Path, tmp: Path, worker: dict[str, Any], env: dict[str, str]
) -> subprocess.Popen[str]:
    spec = tmp / "task.toml"
    sections = {
        "worker": worker,
        "review": {"kind": "none"},
        "budget": {"no_output_timeout": "90s", "deadline": "4m", "closeout_grace": 0},
    }
    body = ['goal = "Fix add() in calc.py and commit."']
    for name, fields in sections.items():
        body.append(f"[{name}]")
        body += [f"{k} = {_toml(v)}" for k, v in fields.items()]
    body += [
        "[[checks]]",
        'name = "tests"',
        'argv = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"]',
    ]
    spec.write_text("\n".join(body) + "\n")
    return subprocess.Popen(
        [GIT_SUP, "start", "--spec", str(spec), "--json", "-q"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any]]:
    out, err = proc.communicate(timeout=300)
    assert out, err
    return proc.returncode, json.loads(out)


def events(repo: Path, task: str) -> list[dict[str, Any]]:
    return [e.as_dict() for e in read_events(SupRepo.discover(repo), task)]


# (a reply of text alone ends the agent's turn: only the last step is one)
EDIT_AND_COMMIT = [
    ("write", "calc.py", FIXED),
    ("bash", "git add -A && git commit -q -m 'Fix add'"),
    ("text", "Fixed and committed."),
]


@pytest.mark.parametrize("kind", ALL, indirect=True)
def test_a_task_that_edits_and_commits_ends_ready(kind: Kind, repo: Path, tmp: Path) -> None:
    worker, env = kind.prepare(EDIT_AND_COMMIT)
    code, rec = finish(start(repo, tmp, worker, env))
    assert (code, rec["status"]) == (0, "ready"), (rec.get("reasons"), events(repo, rec["id"])[-8:])
    assert rec["candidate"] == git(repo, "rev-parse", f"refs/sup/{rec['id']}/candidate")
    assert git(repo, "show", f"{rec['candidate']}:calc.py") + "\n" == FIXED
    started = [e["data"] for e in events(repo, rec["id"]) if e["type"] == "worker_started"]
    assert started and started[0]["kind"] == kind.name


@pytest.mark.parametrize("kind", ALL, indirect=True)
def test_a_stop_mid_turn_ends_stopped_with_the_work_kept(kind: Kind, repo: Path, tmp: Path) -> None:
    require("cgroup", "the worker's cgroup, removed at the stop")
    worker, env = kind.prepare([("write", "notes.txt", "half done\n"), ("hang",)])
    proc = start(repo, tmp, worker, env)
    task = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        ls = json.loads(run_sup(repo, "ls", "--json").stdout or "[]")
        if ls and ls[0]["state"] == "running":
            shown = json.loads(run_sup(repo, "show", ls[0]["id"], "--json").stdout)
            if (Path(shown["worktree"]) / "notes.txt").exists():
                task = ls[0]["id"]
                break
        time.sleep(0.2)
    assert task, (
        f"the worker never wrote its file: {proc.poll()} {events(repo, ls[0]['id'])[-5:] if ls else ''}"
    )
    stop = run_sup(repo, "stop", task, "--json")
    assert stop.returncode == 0, stop.stderr
    code, rec = finish(proc)
    assert (code, rec["state"]) == (5, "stopped"), rec
    assert rec["wip"], "the uncommitted work was not kept"
    assert git(repo, "show", f"{rec['wip']}:notes.txt") == "half done"
    assert wait_dead(rec["worker"]["pid"], timeout=30), "the worker survived the stop"
    assert rec["worker"]["cgroup"] and not Path(rec["worker"]["cgroup"]).exists()


@pytest.mark.parametrize("kind", AGENTS, indirect=True)
def test_a_call_the_agent_asks_to_make_is_answered_by_the_policy(
    kind: Kind, repo: Path, tmp: Path
) -> None:
    remote = bare_origin(repo, tmp)
    before = git(remote, "for-each-ref")
    worker, env = kind.prepare([("bash", PUSH), *EDIT_AND_COMMIT])
    code, rec = finish(start(repo, tmp, worker, env))
    evs = events(repo, rec["id"])
    decided = [e["data"] for e in evs if e["type"] == "permission_decided"]
    push = [d for d in decided if d.get("input", {}).get("command") == PUSH]
    assert push and push[0]["answer"] == "deny" and push[0]["rule"].startswith(("D1", "D3")), (
        decided
    )
    assert git(remote, "for-each-ref") == before
    assert (code, rec["status"]) == (0, "ready"), (rec.get("reasons"), evs[-8:])


def test_a_reviewer_s_single_call_runs_each_agent_s_own_headless_kind() -> None:
    """A reviewer or decider names an agent; its one call runs the kind of that agent that
    ends with its process (Claude Code headless, not its tmux pane), chosen in the registry."""
    from gitsup.errors import GitsupError
    from gitsup.workers.kinds import agent_names, one_shot_kind

    chosen = {agent: one_shot_kind(agent).name for agent in agent_names()}
    assert chosen == {"claude": "claude", "codex": "codex", "acp": "acp"}
    with pytest.raises(GitsupError, match="unknown agent 'tmux'"):
        one_shot_kind("tmux")
