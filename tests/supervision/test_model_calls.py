"""A reviewer's model calls reach the task's cost ledger through the sink the supervisor
hands the review (no thread-bound state): a command reviewer that prints `cost_usd` in its
verdict is one `model_call` event in the task's log, and `git sup cost` counts it. Real
`git sup start` with a real process worker and a real command reviewer."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_sup
from tests.helpers.sup import FIX_AND_COMMIT, common_dir, start_json, worker_argv, write_spec

REVIEWER = """
import json, sys
json.load(sys.stdin)
print(json.dumps({"verdict": "pass", "findings": [], "cost_usd": 0.25,
                  "usage": {"input_tokens": 1200, "output_tokens": 30}}))
"""


def test_a_command_reviewers_cost_is_a_model_call_of_the_task(repo: Path, tmp: Path) -> None:
    worker = worker_argv(tmp, FIX_AND_COMMIT)
    reviewer = worker_argv(tmp, REVIEWER, name="reviewer.py")
    spec = write_spec(
        tmp,
        f"""
        goal = "make add() add"
        [worker]
        kind = "process"
        argv = {json.dumps(worker)}
        [review]
        kind = "command"
        argv = {json.dumps(reviewer)}
        """,
    )
    _rc, rec, err = start_json(repo, "--spec", str(spec), timeout=300)
    assert rec["status"] == "ready", (rec.get("reasons"), err)
    log = common_dir(repo) / "sup" / "tasks" / rec["id"] / "events.jsonl"
    calls = [
        e["data"]
        for e in map(json.loads, log.read_text().splitlines())
        if e.get("type") == "model_call"
    ]
    assert calls == [
        {
            "role": "reviewer",
            "cost_usd": 0.25,
            "usage": {"input_tokens": 1200, "output_tokens": 30},
        }
    ], calls
    res = run_sup(repo, "cost", "--json")
    assert res.returncode == 0, res.stderr
    (task,) = json.loads(res.stdout)["tasks"]
    assert task["reviewer_usd"] == 0.25 and task["calls"] == 1, task
