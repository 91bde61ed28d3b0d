"""A conflict in the integration queue goes back to the work: a candidate whose worker is
repairable (the real Claude Code CLI, scripted model) gets a repair task on the new base,
carrying the conflicting paths; its ready candidate re-enters the queue and is integrated."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.boundary.conftest import Setup, make_task
from tests.conftest import git, run_sup
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude

RESOLVED = "one\nTWO by c, then by e\nthree\n"


def test_conflict_becomes_a_repair_task_that_re_enters(
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    repo: Path,
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gitsup.spec import TaskSpec, Worker
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    (repo / "shared.txt").write_text("one\ntwo\nthree\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "shared")
    init_repo(SupRepo.discover(repo), explicit=True)
    setup = Setup(repo, tmp, tmp, tmp)
    has_e = [sys.executable, "-c", "assert 'by e' in open('shared.txt').read()"]
    c = make_task(setup, files=(("shared.txt", "one\nTWO by c\nthree\n"),), checks=[])
    e = make_task(
        setup,
        files=(("shared.txt", "one\nTWO by e\nthree\n"),),
        checks=[{"name": "has-e", "argv": has_e}],
    )
    # e's worker was Claude Code: repairable
    spec_path = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    spec_path = spec_path / "sup/tasks" / e["id"] / "spec.json"
    spec = TaskSpec.model_validate_json(spec_path.read_text())
    budget = spec.budget.model_copy(update={"no_output_timeout": 90.0, "deadline": 180.0})
    spec_path.write_text(
        spec.model_copy(
            update={"worker": Worker(kind="claude"), "budget": budget}
        ).model_dump_json()
    )
    model = scripted_model(
        {
            "default": {
                "steps": [
                    {
                        "content": [
                            {
                                "type": "tool_use",
                                "name": "Write",
                                "input": {"file_path": "${CWD}/shared.txt", "content": RESOLVED},
                            }
                        ]
                    },
                    {"bash": "git add -A && git commit -q -m 'Resolve shared.txt'"},
                    {"text": "Resolved and committed."},
                ]
            }
        }
    )
    env = claude_env(model.url, tmp / "claude-config", {"GITSUP_CLAUDE_BIN": claude_bin})
    for k, v in env.items():
        monkeypatch.setenv(k, v)

    assert run_sup(repo, "queue", "add", c["id"], e["id"]).returncode == 0
    res = run_sup(repo, "queue", "run", "--json", timeout=300)
    assert res.returncode == 3, res.stderr
    [out] = json.loads(res.stdout)
    assert out["integrated"] == [c["id"]]
    [back] = out["sent_back"]
    assert back["task"] == e["id"] and back["kind"] == "conflict"
    repair = back["repair_task"]
    assert repair
    waited = run_sup(repo, "wait", repair, timeout=300)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    rec = json.loads(run_sup(repo, "show", repair, "--json").stdout)
    assert "Conflicting paths: shared.txt" in rec["goal"] and e["candidate"] in rec["goal"]
    assert rec["baseline"] == git(repo, "rev-parse", "main")  # the new base
    assert any("Conflicting paths: shared.txt" in json.dumps(r.body) for r in model.requests)

    res = run_sup(repo, "queue", "run", "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["integrated"] == [repair]
    assert git(repo, "show", "main:shared.txt") + "\n" == RESOLVED
    state = json.loads(git(repo, "show", "refs/sup/queue/main/state:queue.json"))
    entries = {x["task"]: x for x in state["entries"]}
    assert entries[e["id"]]["status"] == "repaired"
    assert entries[e["id"]]["repair_task"] == repair
    assert entries[repair]["status"] == "integrated" and entries[repair]["repair_of"] == e["id"]
    # the original task no longer needs a human: its repair task carried it on
    rows = {r["id"]: r for r in json.loads(run_sup(repo, "ls", "--json").stdout)}
    assert rows[e["id"]]["attention"] == [] and rows[e["id"]]["queue_repair"] == repair
    assert f"[queue repair: {repair}]" in run_sup(repo, "ls").stdout
    assert e["id"] not in run_sup(repo, "ls", "--attention").stdout
    watched = [
        json.loads(x) for x in run_sup(repo, "watch", "--once", "--json").stdout.split("\n") if x
    ]
    (orig,) = [w for w in watched if w.get("id") == e["id"]]
    assert orig["attention"] == [] and repair in orig["waiting_for"], orig
