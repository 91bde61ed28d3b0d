"""`git sup integrate ID --into BRANCH`: the person/CI side of the boundary."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.conftest import Setup, make_task, start_task
from tests.conftest import GIT_SUP, PYTHON, git, run_sup
from tests.helpers.sup import common_dir, read_record, run_cli_inproc, wait_for


def _note(repo: Path, commit: str) -> dict[str, Any]:
    note: dict[str, Any] = json.loads(git(repo, "notes", "--ref=sup", "show", commit))
    return note


def _integration_worktrees(repo: Path) -> list[str]:
    return [
        line
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if "gitsup-integrate" in line
    ]


def test_integration_is_a_signed_merge(setup: Setup, ready: dict[str, Any]) -> None:
    repo, tid, cand = setup.repo, ready["id"], ready["candidate"]
    before = git(repo, "rev-parse", "main")
    res = run_sup(repo, "integrate", tid, "--into", "main", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    # A merge even though a fast-forward would do: --first-parent lists the integrations.
    assert out["integrated"] is True and out["strategy"] == "merge" and out["result"] != cand
    assert [c["name"] for c in out["checks"]] == ["pytest"] and out["checks"][0]["passed"]
    merge = git(repo, "rev-parse", "main")
    assert merge == out["result"]
    assert git(repo, "rev-parse", "main^1", "main^2").split() == [before, cand]
    assert git(repo, "log", "--first-parent", "--format=%H", "main").split() == [merge, before]
    # Signed with the integrator's key; Git itself verifies it in this repository.
    verify = subprocess.run(
        ["git", "verify-commit", merge], cwd=repo, capture_output=True, text=True
    )
    assert verify.returncode == 0 and 'Good "git" signature' in verify.stderr, verify.stderr
    body = git(repo, "log", "-1", "--format=%B", merge)
    for trailer in (
        f"Sup-Task: {tid}",
        f"Sup-Candidate: {cand}",
        f"Sup-Baseline: {ready['baseline']}",
        "Sup-Checks: pytest=passed",
        "Sup-Review: none",
    ):
        assert trailer in body, body
    note = _note(repo, cand)
    assert note["status"] == "integrated" and note["integrated_into"] == "main"
    assert note["integration_commit"] == merge and note["integration_strategy"] == "merge"
    assert isinstance(note["integrated_at"], float)
    assert _note(repo, merge)["status"] == "integrated"
    assert read_record(repo, tid)["status"] == "integrated"
    events = [json.loads(x) for x in (common_dir(repo) / "sup/tasks" / tid / "events.jsonl").open()]
    assert events[-1]["type"] == "integrated" and events[-1]["data"]["result"] == merge
    assert "integrated into main" in git(repo, "log", "-1", "--format=%s", f"refs/sup/{tid}/log")
    # The user's checkout of main was clean and follows the branch; the temp worktree is gone.
    assert "a + b" in (repo / "calc.py").read_text()
    assert git(repo, "status", "--porcelain") == ""
    assert _integration_worktrees(repo) == []
    # Integrating twice is refused.
    again = run_sup(repo, "integrate", tid, "--into", "main")
    assert again.returncode == 2 and "already integrated" in again.stderr


def test_merge_when_target_moved_on(setup: Setup, ready: dict[str, Any]) -> None:
    repo, tid, cand = setup.repo, ready["id"], ready["candidate"]
    readme = make_task(setup, files=(("README", "readme\n"),), checks=[])
    rc, _, err = run_cli_inproc(repo, "integrate", readme["id"], "--into", "main")
    assert rc == 0, err
    moved = git(repo, "rev-parse", "main")
    rc, _, err = run_cli_inproc(repo, "integrate", tid, "--into", "main", "--strategy", "ff")
    assert rc == 2 and "always a signed merge" in err
    assert git(repo, "rev-parse", "main") == moved
    rc, _, err = run_cli_inproc(repo, "integrate", tid, "--into", "main")
    assert rc == 0, err
    merge = git(repo, "rev-parse", "main")
    assert git(repo, "rev-parse", "main^1", "main^2").split() == [moved, cand]
    assert _note(repo, merge)["status"] == "integrated"
    assert _note(repo, merge)["integration_commit"] == merge
    assert _note(repo, cand)["status"] == "integrated"
    assert (repo / "README").exists() and "a + b" in (repo / "calc.py").read_text()
    assert git(repo, "status", "--porcelain") == ""
    assert len(git(repo, "log", "--first-parent", "--format=%H", "main").split()) == 3


def test_merge_strategy_even_when_ff_is_possible(setup: Setup, ready: dict[str, Any]) -> None:
    rc, out, err = run_cli_inproc(
        setup.repo, "integrate", ready["id"], "--into", "main", "--strategy", "merge", "--json"
    )
    assert rc == 0, err
    res = json.loads(out)
    assert res["strategy"] == "merge" and res["result"] != ready["candidate"]
    assert git(setup.repo, "rev-parse", "main^2") == ready["candidate"]


def test_target_not_checked_out_is_updated_without_touching_the_checkout(
    setup: Setup, ready: dict[str, Any]
) -> None:
    git(setup.repo, "switch", "-q", "-c", "elsewhere")
    (setup.repo / "scratch.txt").write_text("my own untracked work\n")
    rc, _, err = run_cli_inproc(setup.repo, "integrate", ready["id"], "--into", "main")
    assert rc == 0, err
    assert git(setup.repo, "rev-parse", "main^2") == ready["candidate"]
    assert git(setup.repo, "rev-parse", "--abbrev-ref", "HEAD") == "elsewhere"
    assert "a - b" in (setup.repo / "calc.py").read_text()
    assert git(setup.repo, "status", "--porcelain") == "?? scratch.txt"


@pytest.mark.parametrize("status", ["parked", "failed", "stopped"])
def test_refuses_candidates_that_are_not_ready(setup: Setup, status: str) -> None:
    rec = make_task(setup, status=status)
    before = git(setup.repo, "rev-parse", "main")
    rc, _, err = run_cli_inproc(setup.repo, "integrate", rec["id"], "--into", "main")
    assert rc == 2 and f"is {status}, not ready" in err, err
    assert git(setup.repo, "rev-parse", "main") == before
    assert _note(setup.repo, rec["candidate"])["status"] == status


def test_refuses_a_real_parked_task(setup: Setup) -> None:
    from tests.helpers.sup import COMMIT_WITHOUT_FIX, PYTEST_CHECK

    rec = start_task(setup, COMMIT_WITHOUT_FIX, "--check", PYTEST_CHECK)
    assert rec["_rc"] == 3 and rec["status"] == "parked", rec
    res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main")
    assert res.returncode == 2 and "not ready" in res.stderr, res.stderr


def test_refuses_a_dirty_target_checkout(setup: Setup, ready: dict[str, Any]) -> None:
    before = git(setup.repo, "rev-parse", "main")
    (setup.repo / "test_calc.py").write_text("# local edit\n")
    rc, _, err = run_cli_inproc(setup.repo, "integrate", ready["id"], "--into", "main")
    assert rc == 2 and "uncommitted changes" in err, err
    assert git(setup.repo, "rev-parse", "main") == before
    assert (setup.repo / "test_calc.py").read_text() == "# local edit\n"
    assert _note(setup.repo, ready["candidate"])["status"] == "ready"


def test_refuses_when_the_target_moves_during_integration(setup: Setup) -> None:
    repo, tmp = setup.repo, setup.tmp
    git(repo, "switch", "-q", "-c", "elsewhere")
    git(repo, "commit", "-q", "--allow-empty", "-m", "someone else's commit")
    other = git(repo, "rev-parse", "HEAD")
    git(repo, "switch", "-q", "main")
    # The check holds the integration until main has moved (as a concurrent push/merge
    # would move it); the confined check itself cannot move it.
    started, go = tmp / "check-started", tmp / "check-go"
    hold = (
        f"import pathlib, time; pathlib.Path({str(started)!r}).write_text('x')\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)"
    )
    rec = make_task(setup, checks=[{"name": "hold", "argv": [PYTHON, "-c", hold]}])
    git(repo, "switch", "-q", "elsewhere")  # main is not checked out: only the CAS guards it
    runner = subprocess.Popen(
        [GIT_SUP, "integrate", rec["id"], "--into", "main"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(started.exists, timeout=120)
        git(repo, "update-ref", "refs/heads/main", other)
        go.write_text("x")
        _, err = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 2 and "moved during integration" in err, err
    assert git(repo, "rev-parse", "main") == other
    assert _note(repo, rec["candidate"])["status"] == "ready"
    assert read_record(repo, rec["id"])["status"] == "ready"


def test_failing_integration_checks_leave_the_target_untouched(setup: Setup) -> None:
    code = "import os, sys; sys.exit(3 if 'GITSUP_INTEGRATION' in os.environ else 0)"
    rec = make_task(setup, checks=[{"name": "strict", "argv": [PYTHON, "-c", code]}])
    before = git(setup.repo, "rev-parse", "main")
    res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main", "--json")
    assert res.returncode == 3, res.stderr
    out = json.loads(res.stdout)
    assert out["integrated"] is False and "strict" in out["reason"]
    assert out["checks"][0]["exit_code"] == 3
    assert git(setup.repo, "rev-parse", "main") == before
    assert _note(setup.repo, rec["candidate"])["status"] == "ready"
    assert read_record(setup.repo, rec["id"])["status"] == "ready"
    assert _integration_worktrees(setup.repo) == []


def test_checks_run_on_the_exact_commit_in_a_fresh_worktree(setup: Setup, tmp: Path) -> None:
    seen = tmp / "seen.txt"
    code = (
        "import os, subprocess, pathlib; "
        f"pathlib.Path({str(seen)!r}).write_text(os.getcwd() + ' ' + "
        "subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout)"
    )
    rec = make_task(setup, checks=[{"name": "where", "argv": [PYTHON, "-c", code]}])
    rc, _, err = run_cli_inproc(setup.repo, "integrate", rec["id"], "--into", "main")
    assert rc == 0, err
    where, head = seen.read_text().split()
    # The checks saw the integration's exact tree and parents (signed only after they passed).
    assert git(setup.repo, "rev-parse", f"{head}^{{tree}}") == git(
        setup.repo, "rev-parse", "main^{tree}"
    )
    assert git(setup.repo, "rev-parse", f"{head}^1", f"{head}^2") == git(
        setup.repo, "rev-parse", "main^1", "main^2"
    )
    assert "Sup-Candidate" not in git(setup.repo, "log", "-1", "--format=%B", head)
    assert "gitsup-integrate" in where and where != rec["worktree"]
    assert not Path(where).exists()


def test_refuses_a_conflicting_merge(setup: Setup, ready: dict[str, Any]) -> None:
    other = make_task(setup, files=(("calc.py", "def add(a, b):\n    return b + a\n"),))
    assert run_cli_inproc(setup.repo, "integrate", other["id"], "--into", "main")[0] == 0
    before = git(setup.repo, "rev-parse", "main")
    rc, _, err = run_cli_inproc(setup.repo, "integrate", ready["id"], "--into", "main")
    assert rc == 2 and "conflicts in calc.py" in err, err
    assert git(setup.repo, "rev-parse", "main") == before


def test_refuses_inside_a_worker_by_marker(
    setup: Setup, ready: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITSUP_TASK", ready["id"])
    rc, _, err = run_cli_inproc(setup.repo, "integrate", ready["id"], "--into", "main")
    assert rc == 2 and "GITSUP_TASK" in err and "inside a task" in err


@pytest.mark.parametrize("sub", ["", "deeper"])
def test_refuses_inside_a_task_worktree(setup: Setup, ready: dict[str, Any], sub: str) -> None:
    cwd = Path(ready["worktree"]) / sub
    cwd.mkdir(exist_ok=True)
    before = git(setup.repo, "rev-parse", "main")
    res = run_sup(cwd, "integrate", ready["id"], "--into", "main")
    assert res.returncode == 2 and "worktree" in res.stderr, res.stderr
    assert git(setup.repo, "rev-parse", "main") == before


def test_refuses_under_a_workers_process_tree(setup: Setup, ready: dict[str, Any]) -> None:
    """A worker that drops its marker and leaves its worktree is still found: it is an
    ancestor process recorded as a task's worker."""
    # The process-tree check on its own: inside the sandbox the worker cannot read the task
    # records (hidden) nor write the repository (tests/host/test_sandbox.py).
    git(setup.repo, "config", "sup.sandbox", "off")
    out = setup.tmp / "integrate-from-worker.txt"
    git_sup = repr(str(Path(PYTHON).parent / "git-sup"))
    body = f"""
import json, os, pathlib, subprocess, time
record = pathlib.Path({str(common_dir(setup.repo))!r}) / "sup" / "tasks" / os.environ["GITSUP_TASK"] / "task.json"
for _ in range(500):
    if json.loads(record.read_text()).get("worker"):
        break
    time.sleep(0.02)
env = dict(os.environ); env.pop("GITSUP_TASK")
res = subprocess.run([{git_sup}, "integrate", {ready["id"]!r}, "--into", "main"],
                     cwd={str(setup.repo)!r}, env=env, capture_output=True, text=True)
pathlib.Path({str(out)!r}).write_text(f"{{res.returncode}}\\n{{res.stderr}}")
"""
    before = git(setup.repo, "rev-parse", "main")
    rec = start_task(setup, body, "--no-commit-required")
    assert rec["_rc"] == 0 and rec["status"] == "ready", rec
    rc, err = out.read_text().split("\n", 1)
    assert rc == "2" and f"is task {rec['id']}'s worker" in err, err
    assert git(setup.repo, "rev-parse", "main") == before
