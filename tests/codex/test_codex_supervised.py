"""The real Codex CLI (`codex app-server`) as a supervised worker, scripted model.

Every test runs the real `codex` binary against the Responses-API stand-in on 127.0.0.1
(`gitsup.scripted_openai`), through `gitsup.tasks.run_task`, in a real repository, with
the sandbox and network isolation the host allows (as for every worker).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.codex.conftest import COMMIT, FIX_CALC, Run, bash, step, text
from tests.conftest import git


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

