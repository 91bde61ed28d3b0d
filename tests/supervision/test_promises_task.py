"""Promises of one task run, each pinned by a test that fails when the code keeping it goes:
what the worker is told and given, which checks keep a candidate from `ready`, per-check
timeouts, `require_local_commit`, and that `ready` means exactly the verified commit."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PYTHON, git, run_sup
from tests.helpers.sup import (
    FIX_AND_COMMIT,
    kill_tree,
    marked,
    popen_sup,
    read_record,
    task_ids,
    wait_for,
    write_spec,
    write_worker,
)

QUICK = [PYTHON, "-c", "from calc import add; assert add(1, 2) == 3, 'add is wrong'"]


def _toml_list(items: list[str]) -> str:
    return json.dumps(items)


def _start_spec(repo: Path, spec: Path, *extra: str, timeout: float = 120) -> tuple[int, Any, str]:
    res = run_sup(repo, "start", "--spec", str(spec), "--json", *extra, timeout=timeout)
    rec = json.loads(res.stdout) if res.stdout.strip() else {}
    return res.returncode, rec, res.stderr


@pytest.mark.parametrize("required", [False, True])
def test_what_the_worker_is_told_and_which_failing_check_parks(
    repo: Path, tmp: Path, required: bool
) -> None:
    seen = tmp / "seen.json"
    worker = write_worker(
        tmp,
        textwrap.dedent(f"""
        import json, os, sys
        json.dump({{"stdin": sys.stdin.read(), "env": dict(os.environ), "cwd": os.getcwd()}},
                  open({str(seen)!r}, "w"))
        """)
        + FIX_AND_COMMIT,
    )
    spec = write_spec(
        tmp,
        f"""
        goal = "make add() add"
        scope = ["calc.py only, scope-marker-1"]
        constraints = ["no new dependencies, constraint-marker-2"]
        forbidden = ["editing test_calc.py, forbidden-marker-3"]
        [worker]
        kind = "process"
        argv = {_toml_list([PYTHON, str(tmp / "worker.py")])}
        [review]
        kind = "none"
        [[checks]]
        name = "adds"
        argv = {_toml_list(QUICK)}
        [[checks]]
        name = "lint-ish"
        argv = {_toml_list([PYTHON, "-c", "import sys; sys.exit(7)"])}
        required = {"true" if required else "false"}
        """,
    )
    assert worker  # written as tmp/worker.py
    rc, rec, err = _start_spec(repo, spec)
    tid = rec["id"]

    # the worker's prompt carries the goal, scope, constraints, forbidden items and checks
    got = json.loads(seen.read_text())
    prompt = got["stdin"]
    for needle in (
        "make add() add",
        "scope-marker-1",
        "constraint-marker-2",
        "forbidden-marker-3",
        "adds",
        "lint-ish",
    ):
        assert needle in prompt, (needle, prompt)
    # its documented environment
    env = got["env"]
    assert env["GITSUP_TASK"] == tid
    assert Path(env["GITSUP_WORKTREE"]).resolve() == Path(rec["worktree"]).resolve()
    assert Path(got["cwd"]).resolve() == Path(rec["worktree"]).resolve()
    assert env["GITSUP_BASELINE"] == rec["baseline"] == git(repo, "rev-parse", "HEAD")
    assert "make add() add" in env["GITSUP_GOAL"]
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        assert name not in env

    checks = {c["name"]: c for c in rec["checks"]}
    assert checks["adds"]["passed"] is True and checks["adds"]["required"] is True
    opt = checks["lint-ish"]
    assert opt["passed"] is False and opt["exit_code"] == 7 and opt["required"] is required
    if required:
        assert rc == 3 and rec["status"] == "parked", err
        assert "required checks failed: lint-ish" in rec["reasons"]
    else:
        # an optional check's failure is recorded, and the candidate is ready all the same
        assert rc == 0 and rec["status"] == "ready", (rec["reasons"], err)
        note = json.loads(git(repo, "notes", "--ref=sup", "show", rec["candidate"]))
        assert note["status"] == "ready"
        assert {c["name"]: c["passed"] for c in note["checks"]} == {
            "adds": True,
            "lint-ish": False,
        }


def test_a_check_over_its_timeout_is_stopped_with_its_process_group(repo: Path, tmp: Path) -> None:
    pids = tmp / "check-pids"
    hang = tmp / "hang.py"
    hang.write_text(
        textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", __file__])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(600)
        """)
    )
    write_worker(tmp, FIX_AND_COMMIT)
    spec = write_spec(
        tmp,
        f"""
        goal = "g"
        [worker]
        kind = "process"
        argv = {_toml_list([PYTHON, str(tmp / "worker.py")])}
        [review]
        kind = "none"
        [[checks]]
        name = "adds"
        argv = {_toml_list(QUICK)}
        [[checks]]
        name = "hangs"
        argv = {_toml_list([PYTHON, str(hang)])}
        timeout = "2s"
        """,
    )
    # without the per-check timeout the check would hang past this process timeout
    rc, rec, err = _start_spec(repo, spec, timeout=90)
    assert rc == 3, err
    hung = next(c for c in rec["checks"] if c["name"] == "hangs")
    assert hung["timed_out"] is True and hung["passed"] is False
    assert next(c for c in rec["checks"] if c["name"] == "adds")["timed_out"] is False
    assert "required checks failed: hangs" in rec["reasons"]
    assert len(pids.read_text().split()) == 2  # it ran and started its child
    # both carry the script's path on their command line
    assert not marked(str(hang)), f"check processes {marked(str(hang))} outlived its timeout"


@pytest.mark.parametrize("commit_required", [True, False])
def test_require_local_commit(repo: Path, tmp: Path, commit_required: bool) -> None:
    # the worker changes nothing: the baseline already passes this check
    worker = write_worker(tmp, "print('nothing to do')\n")
    spec = write_spec(
        tmp,
        f"""
        goal = "look only"
        [autonomy]
        require_local_commit = {"true" if commit_required else "false"}
        [worker]
        kind = "process"
        argv = {_toml_list([PYTHON, str(tmp / "worker.py")])}
        [review]
        kind = "none"
        [[checks]]
        name = "ok"
        argv = {_toml_list([PYTHON, "-c", "pass"])}
        """,
    )
    assert worker
    rc, rec, err = _start_spec(repo, spec)
    if commit_required:
        assert rc == 3 and rec["status"] == "parked", err
        assert "no local commit after the baseline" in rec["reasons"]
    else:
        assert rc == 0 and rec["status"] == "ready", (rec["reasons"], err)
        assert "no local commit after the baseline" not in rec["reasons"]
    # the command-line flag says the same as the spec key
    if not commit_required:
        rc2, rec2, err2 = _start_spec(
            repo,
            write_spec(tmp, spec.read_text().replace("false", "true"), "t2.toml"),
            "--no-commit-required",
        )
        assert rc2 == 0 and rec2["status"] == "ready", (rec2["reasons"], err2)


def test_the_branch_moving_after_verification_parks_the_task(repo: Path, tmp: Path) -> None:
    """`ready` is only ever said of the verified commit: the branch moves while the reviewer
    runs (after the checks passed), so the task parks instead of calling the new head ready."""
    started, go = tmp / "review-started", tmp / "review-go"
    reviewer = tmp / "reviewer.py"
    reviewer.write_text(
        textwrap.dedent(f"""
        import json, pathlib, sys, time
        sys.stdin.read()
        pathlib.Path({str(started)!r}).write_text("x")
        while not pathlib.Path({str(go)!r}).exists():
            time.sleep(0.02)
        print(json.dumps({{"verdict": "pass", "findings": []}}))
        """)
    )
    write_worker(tmp, FIX_AND_COMMIT)
    spec = write_spec(
        tmp,
        f"""
        goal = "g"
        [worker]
        kind = "process"
        argv = {_toml_list([PYTHON, str(tmp / "worker.py")])}
        [review]
        kind = "command"
        argv = {_toml_list([PYTHON, str(reviewer)])}
        retries = 0
        [[checks]]
        name = "adds"
        argv = {_toml_list(QUICK)}
        """,
    )
    p = popen_sup(repo, "start", "--spec", str(spec), "--json")
    try:
        wait_for(started.exists, timeout=90, what="the reviewer to start")
        tid = task_ids(repo)[0]
        verified = git(repo, "rev-parse", f"sup/{tid}")
        # someone commits on the task branch after verification
        wt = Path(read_record(repo, tid)["worktree"])
        (wt / "extra.txt").write_text("not verified\n")
        git(wt, "add", "extra.txt")
        git(wt, "commit", "-q", "-m", "after verification")
        # (the commit lands in the task's own Git dir; the supervisor imports it when it ends)
        moved = git(wt, "rev-parse", "HEAD")
        assert moved != verified
        go.write_text("x")
        out, err = p.communicate(timeout=90)
    finally:
        go.write_text("x")
        kill_tree(p.pid)
    assert p.returncode == 3, err
    rec = json.loads(out)
    assert rec["status"] == "parked"
    assert "branch moved after verification" in rec["reasons"]
    # nothing calls the unverified commit ready
    note = json.loads(git(repo, "notes", "--ref=sup", "show", moved))
    assert note["status"] == "parked"
    assert os.path.exists(started)
