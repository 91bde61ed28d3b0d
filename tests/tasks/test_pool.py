"""The worktree pool: spares are claimed by `start`, installed at the baseline, refilled."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.conftest import git, run_sup


def _worker(tmp: Path) -> str:
    w = tmp / "w.sh"
    w.write_text(
        "#!/bin/sh\nprintf 'def add(a, b):\\n    return a + b\\n' > calc.py\ngit commit -qam fix\n"
    )
    w.chmod(0o755)
    return str(w)


def _spares(repo: Path) -> list[dict[str, str]]:
    return json.loads(run_sup(repo, "pool", "ls", "--json").stdout)["spares"]


def _wait_spares(repo: Path, n: int, timeout: float = 30) -> list[dict[str, str]]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = _spares(repo)
        if len(s) >= n:
            return s
        time.sleep(0.1)
    raise AssertionError("the pool was not refilled")


def test_start_takes_a_spare_and_the_pool_refills(repo: Path, tmp_path: Path) -> None:
    git(repo, "config", "sup.poolSize", "1")
    assert run_sup(repo, "pool", "fill").returncode == 0
    spare = _spares(repo)[0]
    head = git(repo, "rev-parse", "HEAD")
    assert spare["commit"] == head
    status_before = git(repo, "status", "--porcelain")
    res = run_sup(
        repo, "start", "fix", "--worker", _worker(tmp_path), "--review", "none", "--json", "-q"
    )
    rec = json.loads(res.stdout)
    assert res.returncode == 0 and rec["status"] == "ready", rec["reasons"]
    wt = Path(rec["worktree"])
    # the spare was moved into place: its admin entry keeps the pool name; the claimed
    # spare got the task's private Git dir
    listing = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {wt}" in listing
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    admin = [
        d.name
        for d in (common / "worktrees").iterdir()
        if (d / "gitdir").read_text().strip() == str(wt / ".git")
    ]
    assert len(admin) == 1 and admin[0].startswith("pool-")
    private = common / "sup" / "tasks" / rec["id"] / "git"
    assert (wt / ".git").read_text().strip() == f"gitdir: {private}"
    assert git(repo, "rev-parse", f"refs/heads/{rec['branch']}") == rec["candidate"]
    assert not Path(spare["path"]).exists()
    assert git(wt, "rev-parse", "--abbrev-ref", "HEAD") == rec["branch"]
    assert git(repo, "status", "--porcelain") == status_before
    refilled = _wait_spares(repo, 1)
    assert refilled[0]["path"] != spare["path"]
    # discard removes the moved worktree and its pool-named admin entry
    res = run_sup(repo, "discard", rec["id"])
    assert res.returncode == 0, res.stderr
    assert str(wt) not in git(repo, "worktree", "list")


def test_a_spare_at_an_older_commit_is_brought_to_the_baseline(repo: Path, tmp_path: Path) -> None:
    git(repo, "config", "sup.poolSize", "1")
    run_sup(repo, "pool", "fill")
    old = _spares(repo)[0]["commit"]
    (repo / "README.md").write_text("newer\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-qm", "newer")
    res = run_sup(
        repo, "start", "fix", "--worker", _worker(tmp_path), "--review", "none", "--json", "-q"
    )
    rec = json.loads(res.stdout)
    assert rec["status"] == "ready", rec["reasons"]
    assert rec["baseline"] != old
    wt = Path(rec["worktree"])
    assert (wt / "README.md").read_text() == "newer\n"
    assert git(repo, "rev-parse", f"{rec['candidate']}^") == rec["baseline"]


def test_unfinished_spares_are_never_used_and_clear_removes_all(repo: Path, tmp_path: Path) -> None:
    git(repo, "config", "sup.poolSize", "1")
    run_sup(repo, "pool", "fill")
    spare = Path(_spares(repo)[0]["path"])
    (spare.parent / f"{spare.name}.ready").unlink()  # as if the fill had died half-way
    assert _spares(repo) == []
    res = run_sup(
        repo, "start", "fix", "--worker", _worker(tmp_path), "--review", "none", "--json", "-q"
    )
    rec = json.loads(res.stdout)
    assert rec["status"] == "ready"
    assert "pool-" not in (Path(rec["worktree"]) / ".git").read_text()
    assert spare.exists()
    _wait_spares(repo, 1)
    out = run_sup(repo, "pool", "clear")
    assert out.returncode == 0 and "removed" in out.stdout
    assert _spares(repo) == [] and not spare.exists()
    assert "pool-" not in git(repo, "worktree", "list")


def test_bad_pool_size_is_a_clear_error(repo: Path, tmp_path: Path) -> None:
    git(repo, "config", "sup.poolSize", "many")
    res = run_sup(repo, "start", "fix", "--worker", _worker(tmp_path), "--review", "none")
    assert res.returncode == 2
    assert "sup.poolSize" in res.stderr and "Traceback" not in res.stderr
