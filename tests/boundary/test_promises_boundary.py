"""The boundary with real tasks: a push from a task's process tree (outside its worktree,
without its marker) is refused by the pre-push hook; a real ready task integrates end to end
(checks re-run, the target holds the candidate's tree, the note says integrated, the gate then
accepts the push); and a target checkout dirtied while the integration checks ran is refused."""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.conftest import Setup, accepted, make_task, push, refs_of, start_task
from tests.conftest import PYTHON, git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, common_dir, read_record


@pytest.mark.parametrize("how", ["worker-left-its-worktree", "child-outside-the-worktree"])
def test_a_push_from_inside_a_tasks_process_tree_is_refused(setup: Setup, how: str) -> None:
    """The worker strips GITSUP_TASK and pushes from the main checkout: the hook still finds
    the task through the process tree (the recorded worker pid, or an ancestor's cwd)."""
    # The hook's process-tree rule on its own: inside the sandbox the push cannot even write
    # the repository or reach the remote (tests/host/test_sandbox.py).
    git(setup.repo, "config", "sup.sandbox", "off")
    out = setup.tmp / "push.json"
    repo = str(setup.repo)
    push_code = textwrap.dedent(f"""
        import json, os, subprocess
        env = {{k: v for k, v in os.environ.items() if k != "GITSUP_TASK"}}
        env["PWD"] = {repo!r}
        r = subprocess.run(
            ["git", "push", "origin", "main:refs/heads/escape"],
            cwd={repo!r}, env=env, capture_output=True, text=True,
        )
        json.dump({{"rc": r.returncode, "stderr": r.stderr}}, open({str(out)!r} + ".tmp", "w"))
        os.rename({str(out)!r} + ".tmp", {str(out)!r})
    """)
    if how == "worker-left-its-worktree":
        # the worker itself leaves its worktree, then pushes (once its pid is on record: the
        # rule can only know the worker the supervisor has recorded)
        record = common_dir(setup.repo) / "sup" / "tasks"
        body = (
            textwrap.dedent(f"""
            import json, os, pathlib, time
            rec = pathlib.Path({str(record)!r}) / os.environ["GITSUP_TASK"] / "task.json"
            while not json.loads(rec.read_text()).get("worker"):
                time.sleep(0.02)
            os.chdir({repo!r})
        """)
            + push_code
        )
    else:
        # a helper daemonized from the worktree (no longer the worker's descendant) pushes
        script = setup.tmp / "push.py"
        script.write_text(push_code)
        body = textwrap.dedent(f"""
            import os, pathlib, runpy, time
            pid = os.fork()
            if pid == 0:
                os.setsid()
                if os.fork() == 0:
                    runpy.run_path({str(script)!r})
                os._exit(0)
            os.waitpid(pid, 0)
            while not pathlib.Path({str(out)!r}).exists():
                time.sleep(0.02)
        """)
    before = refs_of(setup.origin)
    rec = start_task(setup, body, "--no-commit-required")
    got = json.loads(out.read_text())
    assert got["rc"] != 0, got
    assert "gitsup: rejected" in got["stderr"], got["stderr"]
    assert f"inside task {rec['id']}" in got["stderr"]
    want = "is the task's worker" if how == "worker-left-its-worktree" else "works in"
    assert want in got["stderr"], got["stderr"]
    assert refs_of(setup.origin) == before
    # the same push from outside any task goes through: the refusal was the task rule
    accepted(push(setup.repo, "origin", "main:refs/heads/escape"))


def _counting_check(tmp: Path) -> tuple[str, Path]:
    runs = tmp / "check-runs"
    script = tmp / "check.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, os.getcwd())
        with open({str(runs)!r}, "a") as fh:
            fh.write(os.getcwd() + "\\n")
        from calc import add
        assert add(1, 2) == 3, "add is wrong"
        """)
    )
    return shlex.join([PYTHON, str(script)]), runs


def _note(repo: Path, commit: str) -> dict[str, Any]:
    note: dict[str, Any] = json.loads(git(repo, "notes", "--ref=sup", "show", commit))
    return note


def test_a_real_ready_task_integrates_and_its_push_is_accepted(setup: Setup) -> None:
    repo = setup.repo
    check, runs = _counting_check(setup.tmp)
    rec = start_task(setup, FIX_AND_COMMIT, "--check", check)
    assert rec["_rc"] == 0 and rec["status"] == "ready", rec["reasons"]
    tid, cand = rec["id"], rec["candidate"]
    assert len(runs.read_text().splitlines()) == 1
    base = git(repo, "rev-parse", "main")

    res = run_sup(repo, "integrate", tid, "--into", "main", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["integrated"] is True
    # the required check ran again, on the result, somewhere other than the task's worktree
    ran = runs.read_text().splitlines()
    assert len(ran) == 2 and Path(ran[1]).resolve() != Path(rec["worktree"]).resolve()
    assert [c["name"] for c in out["checks"]] == [rec["checks"][0]["name"]]
    assert all(c["passed"] for c in out["checks"])
    # main moved forward to a commit holding exactly the candidate's tree
    main = git(repo, "rev-parse", "main")
    assert main == out["result"] != base
    assert git(repo, "rev-parse", f"{main}^{{tree}}") == git(repo, "rev-parse", f"{cand}^{{tree}}")
    git(repo, "merge-base", "--is-ancestor", cand, main)
    git(repo, "merge-base", "--is-ancestor", base, main)
    assert _note(repo, cand)["status"] == "integrated"
    assert read_record(repo, tid)["status"] == "integrated"
    assert git(repo, "status", "--porcelain") == ""

    # the gate accepts the integrated result on the protected branch
    accepted(push(repo, "origin", "main", "refs/notes/sup"))
    assert git(setup.origin, "rev-parse", "main") == main


def test_integrate_rechecks_a_clean_target_after_its_checks(setup: Setup) -> None:
    repo = setup.repo
    # the check itself leaves an uncommitted edit in the user's checkout of main
    dirty = (
        f"import pathlib; p = pathlib.Path({str(repo / 'test_calc.py')!r}); "
        "p.write_text(p.read_text() + '# edited during integration\\n')"
    )
    rec = make_task(setup, checks=[{"name": "dirtier", "argv": [PYTHON, "-c", dirty]}])
    before = git(repo, "rev-parse", "main")
    assert git(repo, "status", "--porcelain") == ""
    res = run_sup(repo, "integrate", rec["id"], "--into", "main")
    assert res.returncode == 2, res.stderr
    assert "uncommitted changes" in res.stderr
    assert git(repo, "rev-parse", "main") == before
    assert (repo / "test_calc.py").read_text().endswith("# edited during integration\n")
    assert _note(repo, rec["candidate"])["status"] == "ready"
    assert read_record(repo, rec["id"])["status"] == "ready"
