"""`git sup ls` flags tasks whose changed paths overlap: from candidates, and from the
uncommitted files of a task that is still running."""

from __future__ import annotations

import json
from pathlib import Path

from tests.boundary.conftest import Setup, make_task
from tests.conftest import git, run_sup
from tests.helpers.sup import read_record, wait_for, write_worker


def test_ls_flags_overlapping_tasks(repo: Path, tmp: Path) -> None:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    init_repo(SupRepo.discover(repo), explicit=True)
    s = Setup(repo, tmp, tmp, tmp)
    a = make_task(s, files=(("calc.py", "def add(a, b):\n    return a + b\n"),), checks=[])
    b = make_task(s, files=(("calc.py", "def add(a, b):\n    return b + a\n"),), checks=[])
    c = make_task(s, files=(("other.txt", "x\n"),), checks=[])
    gate = tmp / "go"
    worker = write_worker(
        tmp,
        f"""
        import pathlib, time
        pathlib.Path("other.txt").write_text("mine\\n")  # uncommitted, like work in progress
        pathlib.Path({str(tmp / "edited")!r}).write_text("x")
        while not pathlib.Path({str(gate)!r}).exists():
            time.sleep(0.05)
        """,
    )
    res = run_sup(repo, "start", "edit", "--worker", worker, "--review", "none", "--detach",
                  "--json", "--quiet")  # fmt: skip
    assert res.returncode == 0, res.stderr
    live = json.loads(res.stdout)["id"]
    try:
        assert wait_for(lambda: (tmp / "edited").exists(), timeout=60)
        ls = run_sup(repo, "ls", "--json")
        assert ls.returncode == 0, ls.stderr
        rows = {r["id"]: r for r in json.loads(ls.stdout)}
        assert rows[a["id"]]["overlaps"] == [b["id"]]
        assert rows[b["id"]]["overlaps"] == [a["id"]]
        assert rows[c["id"]]["overlaps"] == [live]
        assert rows[live]["overlaps"] == [c["id"]]
        text = run_sup(repo, "ls").stdout
        assert f"[overlaps {b['id']}]" in text
    finally:
        gate.write_text("go")
        wait_for(lambda: read_record(repo, live)["state"] not in ("running", "starting"),
                 timeout=60)  # fmt: skip
    # an integrated candidate no longer counts
    assert run_sup(repo, "integrate", a["id"], "--into", "main").returncode == 0
    rows = {r["id"]: r for r in json.loads(run_sup(repo, "ls", "--json").stdout)}
    assert rows[b["id"]]["overlaps"] == []
    assert git(repo, "rev-parse", "main^2") == a["candidate"]
