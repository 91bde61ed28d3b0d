"""The pool promise for a spare that is not at the exact baseline: it is used (moved into
place, not a fresh checkout) and the worktree the worker gets is exactly the baseline."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, write_worker


def _spares(repo: Path) -> list[dict[str, str]]:
    spares: list[dict[str, str]] = json.loads(run_sup(repo, "pool", "ls", "--json").stdout)[
        "spares"
    ]
    return spares


def test_a_spare_behind_the_baseline_is_used_and_brought_exactly_to_it(
    repo: Path, tmp: Path
) -> None:
    (repo / "gone.txt").write_text("removed by the next commit\n")
    (repo / "changed.txt").write_text("old\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "files the spare will have")
    git(repo, "config", "sup.poolSize", "1")
    assert run_sup(repo, "pool", "fill").returncode == 0
    (spare,) = _spares(repo)
    assert spare["commit"] == git(repo, "rev-parse", "HEAD")

    git(repo, "rm", "-q", "gone.txt")
    (repo / "changed.txt").write_text("new\n")
    (repo / "added.txt").write_text("added\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "the baseline")
    baseline = git(repo, "rev-parse", "HEAD")
    assert spare["commit"] != baseline

    seen = tmp / "seen.txt"
    worker = write_worker(
        tmp,
        "import subprocess\n"
        f"open({str(seen)!r}, 'w').write(subprocess.run(['git', 'status', '--porcelain',"
        " '--untracked-files=all'], capture_output=True, text=True, check=True).stdout)\n"
        + FIX_AND_COMMIT,
    )
    res = run_sup(repo, "start", "fix", "--worker", worker, "--review", "none", "--json", "-q")
    rec = json.loads(res.stdout)
    assert res.returncode == 0 and rec["status"] == "ready", (rec["reasons"], res.stderr)
    assert rec["baseline"] == baseline
    wt = Path(rec["worktree"])
    # the spare itself was used: moved into place, its admin entry keeps the pool name
    assert not Path(spare["path"]).exists()
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    admin = [
        d.name
        for d in (common / "worktrees").iterdir()
        if (d / "gitdir").read_text().strip() == str(wt / ".git")
    ]
    assert len(admin) == 1 and admin[0].startswith("pool-"), admin
    # and the worker started from exactly the baseline: nothing old, nothing missing
    assert seen.read_text() == ""
    assert not (wt / "gone.txt").exists()
    assert (wt / "changed.txt").read_text() == "new\n"
    assert (wt / "added.txt").read_text() == "added\n"
    assert git(repo, "rev-parse", f"{rec['candidate']}^") == baseline
    assert git(repo, "diff", "--name-only", baseline, rec["candidate"]) == "calc.py"
