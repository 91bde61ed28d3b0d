"""The candidate page of an integrated, unreviewed task: the integrated badge is styled, the
integration commit and its signer are shown, `--review none` reads as such, costs are labelled."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, start_json, write_worker


def test_page_of_an_integrated_task(repo: Path, tmp: Path) -> None:
    git(repo, "config", "user.email", "integrator@example.invalid")
    assert run_sup(repo, "init").returncode == 0
    worker = write_worker(tmp, FIX_AND_COMMIT)
    rc, rec, err = start_json(repo, "fix", "--worker", worker, "--review", "none")
    assert rc == 0, err
    res = run_sup(repo, "integrate", str(rec["id"]), "--into", "main")
    assert res.returncode == 0, res.stderr
    merge = git(repo, "rev-parse", "main")
    page = tmp / "page.html"
    assert run_sup(repo, "report", str(rec["id"]), "-o", str(page)).returncode == 0
    html = page.read_text()
    assert "class='badge integrated'" in html and ".integrated{" in html
    assert f"main as {merge}" in html
    assert "integrator@example.invalid: good signature" in html
    assert "not reviewed" in html and "verdict <b>None" not in html
    for raw in ("total_usd", "worker_usd", "reviewer_usd"):
        assert raw not in html, raw
