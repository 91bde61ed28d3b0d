"""Review comments sent back into a live session: a real Claude Code worker (scripted
model), held on an ask by the human decider so that it is still running, gets
`git sup revise` as its next turn; the model's request carries the comment with its place,
code and words, and the candidate that follows shows the comment addressed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.conftest import git
from tests.helpers.supervised import COMMIT, FIX_CALC, step, text
from tests.workers.claude.conftest import claude_env
from tests.workers.claude.test_human_claude import CURL, Task, _spec

pytestmark = pytest.mark.claude


def test_revise_on_a_running_task_is_the_workers_next_turn(
    scripted_model: Callable[..., ScriptedModel], claude_bin: str, repo: Path, tmp_path: Path
) -> None:
    model = scripted_model(
        {
            "default": [
                step(CURL),
                step(text("Done.")),
                step(FIX_CALC),
                step(COMMIT),
                step(text("Fixed.")),
            ]
        }
    )
    env = claude_env(model.url, tmp_path / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    t = Task(repo, env, _spec(tmp_path))
    [ask] = t.pending()  # the worker waits on its ask: the session is live
    base = git(repo, "rev-parse", f"refs/sup/{t.id}/baseline")
    res = t.sup("comment", t.id, "calc.py:2", "<b>add</b> must add\nnot subtract", "--json")
    assert res.returncode == 0, res.stderr
    added = json.loads(res.stdout)
    assert added["commit"] == base and added["id"] == "c1"  # no candidate yet: the tip
    res = t.sup("revise", t.id, "-m", "then commit", "--json")
    assert res.returncode == 0, res.stderr
    done = json.loads(res.stdout)
    assert done["how"] == "turn" and done["comments"] == ["c1"] and done["ref"]
    assert t.sup("answer", t.id, ask["request_id"], "deny").returncode == 0

    rc, rec = t.wait()
    assert rc == 0, rec["reasons"]
    sent = t.of("worker_message_sent")
    assert [s["status"] for s in sent] == ["queued", "delivered"], sent
    [revision] = t.of("revision_requested")
    assert revision["how"] == "turn" and revision["ref"] == done["ref"]
    # the model's request that began the revision turn carries the comment
    steps = [r for r in model.requests if r.kind == "step"]
    body = json.dumps(steps[2].body)
    for part in ("calc.py:2 (comment c1)", ">    2 |     return a - b", "> <b>add</b> must add"):
        assert json.dumps(part)[1:-1] in body, part
    assert "> not subtract" in body and "> then commit" in body
    assert "calc.py:2 (comment c1)" not in json.dumps(steps[1].body)  # not before it
    # the candidate's note: the comment, sent in a turn, addressed by the candidate
    note = json.loads(git(repo, "notes", "--ref=sup", "show", rec["candidate"]))
    [c] = note["comments"]
    assert c["id"] == "c1" and c["status"] == "addressed", c
    assert c["revision"]["how"] == "turn" and c["commit"] == base
    assert [x["status"] for x in t.show()["comments"]] == ["addressed"]
