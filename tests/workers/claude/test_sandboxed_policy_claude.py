"""Everyday agent commands inside an enforced sandbox, through `git sup start` with the real
Claude Code CLI against the scripted model: reading the environment and outside the worktree,
inline `node -e` / `python -c` are allowed and run (their output reaches the model), while a push
and inline code that pushes are still refused, and the origin's `main` does not move. With
`[sandbox] mode = "off"` the same steps keep the unsandboxed verdicts. The refusals speak the
project's ecosystem (a package.json project is told about `npm test`, not pytest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.conftest import git, run_sup
from tests.helpers.require import requires
from tests.helpers.supervised import bash, step, text
from tests.workers.claude.conftest import claude_env

pytestmark = [
    pytest.mark.claude,
    requires("landlock", "mountns"),
]

PUSH_IN_NODE = "node -e \"require('child_process').execSync('git push origin HEAD:main')\""


def steps(common: Path) -> list[tuple[str, str | None, str, str]]:
    """(command, what its output shows when it ran (`|`: any of), verdict inside the sandbox,
    verdict outside)."""
    # inline code writing the repository's config: the classifier leaves it to the kernel
    tamper = f"node -e \"require('fs').appendFileSync('{common}/config', '# escaped')\""
    return [
        ("echo $PATH", "/usr/bin", "allow", "ask"),
        ("printenv PATH", "/usr/bin", "allow", "ask"),
        ("ls /tmp", None, "allow", "ask"),
        ("node -e 'console.log(6 * 7)'", "42", "allow", "ask"),
        ("python -c 'print(6 * 9)'", "54", "allow", "ask"),
        (tamper, "EROFS|EACCES", "allow", "ask"),
        ("git push origin main", None, "deny", "deny"),
        (PUSH_IN_NODE, None, "ask", "ask"),
    ]


def _run(
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    repo: Path,
    tmp_path: Path,
    mode: str,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    venv = tmp_path / f"venv-{mode}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    model = scripted_model(
        {"default": [step(bash(cmd)) for cmd, *_ in steps(repo / ".git")] + [step(text("Looked."))]}
    )
    env: dict[str, Any] = claude_env(model.url, tmp_path / f"claude-config-{mode}")
    path = os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"])
    env.update(GITSUP_CLAUDE_BIN=claude_bin, VIRTUAL_ENV=str(venv), PATH=path)
    spec = tmp_path / f"task-{mode}.toml"
    spec.write_text(f'goal = "look around"\n[sandbox]\nmode = "{mode}"\n')
    res = run_sup(
        repo,
        "start",
        "--spec",
        str(spec),
        "--worker-kind",
        "claude",
        "--review",
        "none",
        "--check",
        "node -v",
        "--no-commit-required",
        "--json",
        env=env,
        timeout=300,
    )
    assert res.stdout, res.stderr
    rec = json.loads(res.stdout)
    log = repo / ".git" / "sup" / "tasks" / rec["id"] / "events.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    decided = [e["data"] for e in events if e["type"] == "permission_decided"]
    results = [
        e["data"]["text"]
        for e in events
        if e["type"] == "worker_output" and "tool_result" in e["data"].get("text", "")
    ]
    return rec, decided, results


@pytest.fixture
def node_repo(repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The project with a package.json, and a bare origin whose main is the repo's main."""
    (repo / "package.json").write_text('{"name": "calc", "scripts": {"test": "node -v"}}\n')
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "package.json")
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(origin))
    git(repo, "remote", "add", "origin", str(origin))
    return repo, origin


@pytest.mark.parametrize("mode", ["required", "off"])
def test_everyday_commands_inside_an_enforced_sandbox(
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    node_repo: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)
    repo, origin = node_repo
    main_before = git(origin, "rev-parse", "refs/heads/main")
    STEPS = steps(repo / ".git")
    rec, decided, results = _run(claude_bin, scripted_model, repo, tmp_path, mode)
    sandboxed = mode == "required"
    assert (rec.get("sandbox") or {}).get("enforced", False) is sandboxed, rec.get("sandbox")
    by_command = {d["input"]["command"]: d for d in decided if d["tool"] == "Bash"}
    assert set(by_command) == {cmd for cmd, *_ in STEPS}, sorted(by_command)
    assert len(results) == len(STEPS), results  # one tool result per step, in order
    for (cmd, shows, inside, outside), result in zip(STEPS, results, strict=True):
        d = by_command[cmd]
        assert (d["verdict"], d["sandboxed"]) == (inside if sandboxed else outside, sandboxed), (
            cmd,
            d,
        )
        assert d["answer"] == ("allow" if d["verdict"] == "allow" else "deny"), (cmd, d)
        if d["answer"] == "allow":
            # it ran: what the shell printed (or the kernel's refusal, for `ls /tmp`, which the
            # sandbox hides), not the gate's refusal
            assert "Blocked by the gitsup policy gate" not in result, (cmd, result)
            assert shows is None or any(x in result for x in shows.split("|")), (cmd, result)
        else:
            assert "Blocked by the gitsup policy gate" in result, (cmd, result)
            # the refusal speaks the project's ecosystem: npm, never pytest
            assert "pytest" not in d["message"], d["message"]
    # a refusal whose hint names the project's tools: npm in a package.json project
    assert "npm" in by_command[PUSH_IN_NODE]["message"], by_command[PUSH_IN_NODE]["message"]
    assert git(origin, "rev-parse", "refs/heads/main") == main_before
    assert "# escaped" not in (repo / ".git" / "config").read_text()  # seen from outside
