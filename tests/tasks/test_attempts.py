"""Best-of-N: real `git sup start` with three process workers from one baseline, a real
command reviewer, real checks; ranked by evidence, recorded in Git, the choice queued."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import PYTEST_CHECK, read_record, write_worker

FAILS = """
import pathlib, subprocess
pathlib.Path("NOTES.md").write_text("looked at it\\n")
subprocess.run(["git", "add", "NOTES.md"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "notes only"], check=True)
"""
REVISE = """
import pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
pathlib.Path("REVISE").write_text("the reviewer will not like this\\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "fix add, with a leftover"], check=True)
"""
PASSES = """
import pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
"""
REVIEWER = """
import json, pathlib, sys
json.load(sys.stdin)
if pathlib.Path("REVISE").exists():
    f = [{"severity": "P2", "title": "leftover file", "path": "REVISE"}]
    print(json.dumps({"verdict": "revise", "findings": f}))
else:
    print(json.dumps({"verdict": "pass", "findings": []}))
"""


def _argv(tmp: Path, body: str, name: str) -> str:
    return json.dumps([sys.executable, str(Path(write_worker(tmp, body, name).split()[-1]))])


def test_best_of_three_chooses_the_pass_and_keeps_all(repo: Path, tmp: Path) -> None:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    init_repo(SupRepo.discover(repo), explicit=True)
    start = git(repo, "rev-parse", "main")
    reviewer = tmp / "review.py"
    reviewer.write_text(REVIEWER)
    workers = "\n".join(
        f'[[attempts.workers]]\nkind = "process"\nargv = {_argv(tmp, body, name)}\n'
        for body, name in ((FAILS, "fails.py"), (REVISE, "revise.py"), (PASSES, "passes.py"))
    )
    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "fix add"\n'
        f'[[checks]]\nname = "pytest"\nargv = {json.dumps(PYTEST_CHECK.split())}\n'
        f'[review]\nkind = "command"\nargv = ["{sys.executable}", "{reviewer}"]\n'
        '[worker]\nkind = "process"\nargv = ["true"]\n'
        f"[attempts]\nn = 3\n{workers}"
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--queue", "--json", "-q", timeout=600)
    assert res.returncode == 0, res.stderr
    g = json.loads(res.stdout)
    assert len(g["members"]) == 3 and g["finished"] is True
    fails, revise, passes = g["members"]  # attempt i runs workers[i]
    assert g["chosen"] == passes
    assert [r["task"] for r in g["ranking"]] == [passes, revise, fails]
    by = {r["task"]: r for r in g["ranking"]}
    assert by[passes]["status"] == "ready" and by[passes]["verdict"] == "pass"
    assert by[revise]["verdict"] == "revise" and by[revise]["findings"] == 1
    assert by[fails]["checks_passed"] == 0 and by[revise]["checks_passed"] == 1
    # one baseline for all; every attempt kept as refs
    for t in g["members"]:
        assert read_record(repo, t)["baseline"] == start
        assert git(repo, "rev-parse", f"refs/sup/{t}/candidate")
    # the group and its recorded choice are in Git
    ref = f"refs/sup/{g['group']}/group"
    assert json.loads(git(repo, "show", f"{ref}:group.json"))["members"] == g["members"]
    note = json.loads(git(repo, "notes", "--ref=sup", "show", ref))
    assert note["chosen"] == passes and len(note["ranking"]) == 3
    shown = json.loads(run_sup(repo, "show", g["group"], "--json").stdout)
    assert shown["chosen"] == passes and shown["recorded"]["chosen"] == passes
    text = run_sup(repo, "show", g["group"]).stdout
    assert f"* {passes}" in text and f"chosen: {passes}" in text
    # --queue: the choice is queued; the queue integrates it
    assert g["queued_into"] == "main"
    ran = run_sup(repo, "queue", "run", "--json", timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert git(repo, "rev-parse", "main^2") == by[passes]["candidate"]


def test_queue_flag_needs_attempts_in_the_foreground(repo: Path) -> None:
    for args in (["--queue"], ["--attempts", "2", "--queue", "--detach"]):
        res = run_sup(repo, "start", "x", "--worker", "true", *args)
        assert res.returncode == 2 and "--queue goes with --attempts" in res.stderr, res.stderr
    tasks = repo / ".git" / "sup" / "tasks"
    assert not tasks.exists() or list(tasks.iterdir()) == []  # nothing was started


def test_best_of_two_shows_progress_suggests_the_next_step_and_knows_its_branch(
    repo: Path, tmp: Path
) -> None:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    init_repo(SupRepo.discover(repo), explicit=True)
    workers = "\n".join(
        f'[[attempts.workers]]\nkind = "process"\nargv = {_argv(tmp, body, name)}\n'
        for body, name in ((FAILS, "fails.py"), (PASSES, "passes.py"))
    )
    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "fix add"\n'
        f'[[checks]]\nname = "pytest"\nargv = {json.dumps(PYTEST_CHECK.split())}\n'
        '[review]\nkind = "none"\n[worker]\nkind = "process"\nargv = ["true"]\n'
        f"[attempts]\nn = 2\n{workers}"
    )
    res = run_sup(repo, "start", "--spec", str(spec), timeout=600)
    assert res.returncode == 0, res.stderr
    group = res.stdout.splitlines()[0]
    members = json.loads(run_sup(repo, "show", group, "--json").stdout)["members"]
    for i, t in enumerate(members, start=1):
        assert f"attempt {i}/2: task {t} started (process)" in res.stderr, res.stderr
        assert f"attempt {i}/2: task {t} ended" in res.stderr, res.stderr
    assert "of 2 done" in res.stderr
    chosen = members[1]
    assert f"next: `git sup integrate {chosen} --into main`" in res.stdout, res.stdout
    rows = json.loads(run_sup(repo, "ls", "--json").stdout)
    assert {r["id"]: r["behind"] for r in rows} == dict.fromkeys(members, 0), rows
    assert {r["source_branch"] for r in rows} == {"main"}
