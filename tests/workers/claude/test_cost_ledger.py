"""The cost ledger against the real Claude Code CLI (scripted model): a run with a repair
round and a Claude reviewer. `git sup cost` must equal the sum of the CLI's own result
records (cumulative per session: the last of each session), and the candidate page of
the repaired task renders in headless Chromium."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitsup.store.ledger import cost_summary
from gitsup.store.suprepo import SupRepo
from gitsup.workers import stream_json
from tests.conftest import git, run_sup
from tests.helpers.browser import DomIndex, load
from tests.helpers.supervised import COMMIT, FIX_CALC, REVIEWER, Run, step, text, verdict
from tests.workers.claude.test_supervised import supervise

pytestmark = pytest.mark.claude
__all__ = ["supervise"]

WRONG = {
    "type": "tool_use",
    "name": "Write",
    "input": {"file_path": "${CWD}/calc.py", "content": "def add(a, b):\n    return a * b\n"},
}


def test_cost_equals_the_result_records_with_repair_and_reviewer(
    supervise: Callable[..., Run], repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results: list[dict[str, Any]] = []
    real = stream_json.parse_record

    def spy(line: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            obj = json.loads(line)
        except (ValueError, TypeError):
            obj = None
        if isinstance(obj, dict) and obj.get("type") == "result":
            results.append(obj)
        return real(line, *args, **kwargs)

    monkeypatch.setattr(stream_json, "parse_record", spy)
    r = supervise(
        {
            "reviewer": {"match": REVIEWER, "steps": [verdict("pass")]},
            "default": [
                step(WRONG),
                step(COMMIT),
                step(text("done")),
                step(FIX_CALC),
                step(COMMIT),
                step(text("fixed")),
            ],
        },
        review={"kind": "claude"},
    )
    assert r.record.status.value == "ready", r.record.reasons
    assert r.record.repair_rounds == 1
    per_session: dict[str, float] = {}
    for res in results:  # total_cost_usd is cumulative within a session
        per_session[res["session_id"]] = max(
            per_session.get(res["session_id"], 0.0), float(res["total_cost_usd"])
        )
    expected = sum(per_session.values())
    assert len(per_session) == 2 and expected > 0, results  # the worker and the reviewer
    summary = cost_summary(SupRepo.discover(repo))
    (task,) = summary["tasks"]
    assert summary["total_usd"] == pytest.approx(expected, abs=1e-6)
    assert task["reviewer_usd"] > 0 and task["worker_usd"] > 0
    assert task["worker_usd"] + task["reviewer_usd"] == pytest.approx(expected, abs=1e-6)
    assert set(task["rounds"]) == {"initial", "repair 1"}
    assert all(v > 0 for v in task["rounds"].values())
    assert task["tokens"]["input_tokens"] == sum(
        int((res.get("usage") or {}).get("input_tokens") or 0) for res in results
    )
    # every call went to the scripted stand-in on 127.0.0.1: its cost is said apart
    assert summary["stand_in_usd"] == summary["total_usd"] == task["stand_in_usd"]
    # the same numbers from the CLI, and in the candidate note
    res = run_sup(repo, "cost", "--json")
    assert json.loads(res.stdout)["total_usd"] == summary["total_usd"]
    shown = run_sup(repo, "cost").stdout
    assert f"of which ${summary['stand_in_usd']:.4f} priced for a model API on this" in shown, shown
    note = json.loads(git(repo, "notes", "--ref=sup", "show", r.record.candidate or ""))
    assert note["cost"]["total_usd"] == pytest.approx(expected, abs=1e-6)
    assert note["cost"]["rounds"] == task["rounds"]
    # the page of the repaired task
    out = tmp_path / "repaired.html"
    res = run_sup(repo, "report", r.record.id, "--output", str(out))
    assert res.returncode == 0, res.stderr
    loaded = load(out.as_uri(), tmp_path, screenshot="repaired.png")
    assert loaded.console == []
    dom = DomIndex(loaded.dom)
    body = dom.all_text
    assert "repair round 1" in body and "permission_decided" in body and "rule" in body
    assert "verdict pass" in body and "model_call" in body and "reviewer" in body
    assert "+    return a + b" in body
    assert all(h[1:] in dom.ids for h in dom.links)
