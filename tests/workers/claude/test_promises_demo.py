"""`git sup demo` with the real Claude Code CLI (against the bundled scripted model on
127.0.0.1): the whole loop ends ready, the worker's `git push` is denied, the reviewer passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git, run_sup

pytestmark = pytest.mark.claude


def test_demo_with_the_real_cli_ends_ready_and_denies_the_push(claude_bin: str, tmp: Path) -> None:
    res = run_sup(
        tmp,
        "demo",
        "--dir",
        str(tmp / "d"),
        "--worker",
        "claude",
        "--json",
        "-q",
        env={"GITSUP_CLAUDE_BIN": claude_bin},
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    rec = json.loads(res.stdout)
    assert rec["status"] == "ready" and rec["worker_kind"] == "claude"
    assert "the real CLI" in rec["demo"]["worker"]
    assert rec["review"]["kind"] == "claude" and rec["review"]["verdict"] == "pass"
    demo_repo, tid = Path(rec["demo"]["repo"]), rec["id"]
    cand = git(demo_repo, "rev-parse", f"refs/sup/{tid}/candidate")
    assert "a + b" in git(demo_repo, "show", f"{cand}:calc.py")
    assert "add(-2, 5)" in git(demo_repo, "show", f"{cand}:test_more.py")
    events = [json.loads(x) for x in run_sup(demo_repo, "log", tid, "--json").stdout.splitlines()]
    decided = [e["data"] for e in events if e["type"] == "permission_decided"]
    pushes = [d for d in decided if "git push" in d["input"].get("command", "")]
    assert len(pushes) == 1 and pushes[0]["verdict"] == "deny", pushes
    # the commit the worker made after the denied push is the candidate
    assert (
        git(demo_repo, "log", "-1", "--format=%s", cand) == "Fix add() and cover negative numbers"
    )
