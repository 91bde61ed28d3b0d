"""The hostile script in the phases a candidate's code reaches besides one task's own turn and
checks (tests/host/test_sandbox.py): every attempt of a best-of-N group, as its worker and as
its check. Each attack's effect is checked from outside, as root."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PYTHON, git, run_sup
from tests.helpers.sup import start_json
from tests.host.test_sandbox import (
    ATTACK,
    CHECK_FIXED,
    GOAL,
    assert_all_blocked,
    hostile,
    pytestmark,
    results_of,
    snapshot,
)
from tests.workers.claude.conftest import claude_bin, scripted_model

# the fixtures and the skip condition, shared
__all__ = ["claude_bin", "hostile", "pytestmark", "scripted_model"]

# what gitsup itself keeps in the person's home: the integrations it verified, the agent's sha256
GITSUPS_OWN = (".config/gitsup/verified/", ".config/gitsup/cache/agent-sha256.json")


def test_every_best_of_n_attempt_is_contained(hostile: dict[str, Any], tmp: Path) -> None:
    repo: Path = hostile["repo"]
    attempts = []
    for n in range(2):
        label = f"attempt{n}"
        attempts.append(
            {
                "kind": "process",
                "argv": [PYTHON, ATTACK, label, str(hostile["targets"]), "--then-commit"],
            }
        )
    spec = tmp / "best.toml"
    check = shlex.split(shlex.join([PYTHON, ATTACK, "check", str(hostile["targets"])]))
    spec.write_text(
        'goal = "make add() add"\n'
        f'[[checks]]\nname = "attack"\nargv = {json.dumps(check)}\n'
        f'[[checks]]\nname = "fixed"\nargv = {json.dumps(shlex.split(CHECK_FIXED))}\n'
        '[review]\nkind = "none"\n[worker]\nkind = "process"\nargv = ["true"]\n'
        "[attempts]\nn = 2\n"
        + "".join(
            f'[[attempts.workers]]\nkind = "process"\nargv = {json.dumps(a["argv"])}\n'
            for a in attempts
        )
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q", timeout=400)
    assert res.returncode == 0, res.stderr
    group = json.loads(res.stdout)
    assert len(group["members"]) == 2 and group["chosen"], group
    for n, task in enumerate(group["members"]):
        rec = json.loads(run_sup(repo, "show", task, "--json").stdout)
        assert rec["status"] == "ready" and rec["sandbox"]["enforced"], rec
        git_state = rec["sandbox"]["git_state"]
        assert_all_blocked(
            results_of(repo, task, f"attempt{n}"), f"attempt{n}", git_state=git_state
        )
        assert_all_blocked(results_of(repo, task, "check"), "check", git_state=git_state)
    assert [li.reached for li in hostile["listeners"]] == [0] * len(hostile["listeners"])
    after = snapshot(repo, hostile["remote"], hostile["home"])
    before = hostile["before"]
    assert {k: after["objects"].get(k) for k in before["objects"]} == before["objects"]
    after["objects"] = before["objects"]
    assert after == before  # refs outside refs/sup/ included
    assert "forged" not in git(repo, "log", "-p", "refs/notes/sup", check=False)


def test_a_queue_repair_task_is_contained(
    hostile: dict[str, Any],
    tmp: Path,
    claude_bin: str,
    scripted_model: Any,
    monkeypatch: Any,
) -> None:
    """A conflict in the queue becomes a repair task (a repairable worker: the real Claude
    Code CLI against the scripted model); the hostile check runs there, in the repair
    task's sandbox: blocked. (The queue's own runner is attacked in
    tests/boundary/test_confined_checks.py.)"""
    from gitsup.spec import TaskSpec, Worker
    from tests.boundary.conftest import Setup, make_task
    from tests.workers.claude.conftest import claude_env

    repo: Path = hostile["repo"]
    before = snapshot(repo, hostile["remote"], hostile["home"])
    setup = Setup(repo, tmp, tmp, tmp)
    attack = [PYTHON, ATTACK, "check", str(hostile["targets"])]
    c = make_task(setup, files=(("shared.txt", "by c\n"),), checks=[])
    e = make_task(
        setup,
        files=(("shared.txt", "by e\n"),),
        checks=[{"name": "attack", "argv": attack}],
    )
    spec_path = repo / ".git" / "sup" / "tasks" / e["id"] / "spec.json"
    spec = TaskSpec.model_validate_json(spec_path.read_text())
    budget = spec.budget.model_copy(update={"no_output_timeout": 90.0, "deadline": 180.0})
    spec_path.write_text(
        spec.model_copy(
            update={"worker": Worker(kind="claude"), "budget": budget}
        ).model_dump_json()
    )
    resolved = "by c\nby e\n"
    model = scripted_model(
        {
            "default": {
                "steps": [
                    {
                        "content": [
                            {
                                "type": "tool_use",
                                "name": "Write",
                                "input": {"file_path": "${CWD}/shared.txt", "content": resolved},
                            }
                        ]
                    },
                    {"bash": "git add -A && git commit -q -m 'Resolve shared.txt'"},
                    {"text": "Resolved and committed."},
                ]
            }
        }
    )
    for k, v in claude_env(
        model.url, tmp / "claude-config", {"GITSUP_CLAUDE_BIN": claude_bin}
    ).items():
        monkeypatch.setenv(k, v)
    assert run_sup(repo, "queue", "add", c["id"], e["id"]).returncode == 0
    ran = run_sup(repo, "queue", "run", "--json", timeout=300)
    assert ran.returncode == 3, ran.stderr
    [back] = json.loads(ran.stdout)[0]["sent_back"]
    repair = back["repair_task"]
    assert repair, back
    assert run_sup(repo, "wait", repair, timeout=300).returncode == 0
    rec = json.loads(run_sup(repo, "show", repair, "--json").stdout)
    assert rec["sandbox"]["enforced"], rec["sandbox"]
    assert_all_blocked(
        results_of(repo, repair, "check"), "repair", git_state=rec["sandbox"]["git_state"]
    )
    assert [li.reached for li in hostile["listeners"]] == [0] * len(hostile["listeners"])
    after = snapshot(repo, hostile["remote"], hostile["home"])
    for key in ("config", "hooks", "packed-refs", "remote"):
        assert after[key] == before[key], key
    # the home: only gitsup's own caches (the integrations it signed: the queue integrated c;
    # the agent's sha256)
    grown = {k: v for k, v in after["home"].items() if k not in before["home"]}
    assert all(k.startswith(GITSUPS_OWN) for k in grown), grown
    assert {k: after["home"].get(k) for k in before["home"]} == before["home"]


@pytest.mark.parametrize("via", ["integrate", "queue"])
def test_integrate_and_queue_checks_are_contained(
    hostile: dict[str, Any], tmp: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    """The same hostile check, committed with a candidate, run again by `git sup integrate`
    and by `git sup queue run` (the confined runner: a throw-away worktree, the sandbox with
    the whole repository read-only): blocked, judged from the listeners, the user's
    repository, remote and home. Its report goes to an outbox the test made writable (the
    run's private temp dir does not outlive it)."""
    repo: Path = hostile["repo"]
    outbox = tmp / "outbox"
    outbox.mkdir()
    targets = json.loads(hostile["targets"].read_text())
    targets["outbox"] = str(outbox)
    targets_file = tmp / f"targets-{via}.json"
    targets_file.write_text(json.dumps(targets))
    attack = shlex.join([PYTHON, ATTACK, via, str(targets_file)])
    worker = shlex.join([PYTHON, ATTACK, "worker", str(hostile["targets"]), "--then-commit"])
    rc, rec, err = start_json(
        repo, GOAL, "--worker", worker, "--check", attack, "--check", CHECK_FIXED,
        "--review", "none", timeout=300,
    )  # fmt: skip
    assert rc == 0 and rec["status"] == "ready", (rec.get("reasons"), err)
    assert not (outbox / f"attack-{via}.json").exists()  # the task could not write there
    targets["task"] = rec["id"]  # the record a check outside the task aims at
    targets_file.write_text(json.dumps(targets))
    before = snapshot(repo, hostile["remote"], hostile["home"])
    main_before = git(repo, "rev-parse", "main")
    monkeypatch.setenv("GITSUP_SANDBOX_EXTRA_WRITE", str(outbox))
    if via == "integrate":
        res = run_sup(repo, "integrate", rec["id"], "--into", "main", "--json", timeout=300)
        assert res.returncode == 0, res.stderr
        applied = json.loads(res.stdout)["confinement"]
    else:
        assert run_sup(repo, "queue", "add", rec["id"]).returncode == 0
        res = run_sup(repo, "queue", "run", "--json", timeout=300)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)[0]
        assert out["integrated"] == [rec["id"]], out
        applied = out["confinement"]
    assert applied["sandbox"]["enforced"] is True, applied
    report = outbox / f"attack-{via}.json"
    assert report.is_file(), f"the {via} check left no report"
    assert_all_blocked(json.loads(report.read_text()), via, git_state="private")
    assert [li.reached for li in hostile["listeners"]] == [0] * len(hostile["listeners"])
    # what changed is the integration only: main moved to a merge of the candidate
    assert git(repo, "rev-parse", "main^1") == main_before
    assert git(repo, "rev-parse", "main^2") == rec["candidate"]
    after = snapshot(repo, hostile["remote"], hostile["home"])
    for key in ("config", "hooks", "packed-refs", "remote"):
        assert after[key] == before[key], key
    moved = {line for line in after["refs"] if not line.startswith("refs/heads/main ")}
    assert moved == {line for line in before["refs"] if not line.startswith("refs/heads/main ")}
    assert {k: after["objects"].get(k) for k in before["objects"]} == before["objects"]
    grown = {k: v for k, v in after["home"].items() if k not in before["home"]}
    assert all(k.startswith(GITSUPS_OWN) for k in grown), grown
    assert {k: after["home"].get(k) for k in before["home"]} == before["home"]
