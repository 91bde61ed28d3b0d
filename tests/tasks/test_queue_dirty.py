"""`git sup queue run` refuses a dirty checkout of its target before any work, naming the
paths, and the command its hint gives makes the next run go through (real repository, real
queue run through the console script)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.boundary.conftest import Setup, make_task
from tests.conftest import git, run_sup
from tests.tasks.test_queue import _events, qsetup  # noqa: F401 - the fixture


def _worktrees(repo: Path) -> list[str]:
    return [
        line.split(" ", 1)[1]
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def _event_types(repo: Path) -> list[str]:
    try:
        return [e["type"] for e in _events(repo)]
    except FileNotFoundError:
        return []


def test_dirty_main_is_refused_before_any_work_and_the_hint_works(qsetup: Setup) -> None:  # noqa: F811
    repo = qsetup.repo
    task: dict[str, Any] = make_task(
        qsetup, files=(("mod_q.py", "X = 1\n"), ("test_q.py", "def test_q():\n    pass\n"))
    )
    assert run_sup(repo, "queue", "add", task["id"], "--into", "main").returncode == 0
    # an environment file written but not committed yet, and an edit to a tracked file
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text('[environment]\nsetup = ["true"]\n')
    (repo / "shared.txt").write_text("one\ntwo\nthree\nfour\n")
    before = _worktrees(repo)
    main = git(repo, "rev-parse", "main")

    res = run_sup(repo, "queue", "run", "--into", "main", "--json", timeout=300)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "uncommitted changes" in res.stderr
    assert ".gitsup/environment.toml (untracked)" in res.stderr, res.stderr
    assert "shared.txt" in res.stderr and "nothing was composed or tested" in res.stderr
    assert "stash --include-untracked" in res.stderr
    assert "Traceback" not in res.stderr
    # nothing ran: no composition worktree, no check, no queue run recorded, main unmoved
    assert _worktrees(repo) == before
    types = _event_types(repo)
    assert "queue_tested" not in types and "queue_run_started" not in types, types
    assert git(repo, "rev-parse", "main") == main
    listed = json.loads(run_sup(repo, "queue", "--json").stdout)
    assert listed[0]["queued"] == [task["id"]]

    # the hinted command, as given
    hint = res.stderr[res.stderr.index("`git -C") + 1 :]
    argv = hint[: hint.index("`")].split()
    assert argv[:4] == ["git", "-C", str(repo), "stash"], argv
    git(repo, *argv[3:])
    assert not (repo / ".gitsup").exists()

    res = run_sup(repo, "queue", "run", "--into", "main", "--json", timeout=600)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert json.loads(res.stdout)[0]["integrated"] == [task["id"]]
    assert git(repo, "status", "--porcelain") == ""  # the checkout was advanced
    assert (repo / "mod_q.py").read_text() == "X = 1\n"
