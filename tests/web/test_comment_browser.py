"""Review comments from the page, in real headless Chromium: a click on a line of the diff
starts a comment on it, Revise sends the comments to a revision task whose worker is given
them, and the revision's page shows the comment addressed. The API refuses a comment that
names no line of the candidate, and stores nothing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import PYTEST_CHECK, task_ids, write_worker
from tests.web.browser import chromium
from tests.web.server import bearer, request, serving

# The first run touches add's line without fixing it (its check fails: parked); a revision
# (its goal names the candidate to fast-forward to) saves the goal it was given, then fixes
# that line.
WORKER = """
import os, pathlib, re, subprocess
goal = os.environ["GITSUP_GOAL"]
m = re.search(r"git merge --ff-only ([0-9a-f]{{40}})", goal)
p = pathlib.Path("calc.py")
if m:
    subprocess.run(["git", "merge", "-q", "--ff-only", m.group(1)], check=True)
    pathlib.Path({seen!r}).write_text(goal)
    p.write_text("def add(a, b):\\n    return a + b\\n")
    subprocess.run(["git", "commit", "-qam", "add adds"], check=True)
else:
    p.write_text("def add(a, b):\\n    return a - b  # looked at it\\n")
    subprocess.run(["git", "commit", "-qam", "looked at add"], check=True)
"""

HOSTILE = "add must add <img src=x onerror=console.error('xss-comment')>"


def test_a_comment_on_a_diff_line_reaches_the_revision_and_shows_addressed(
    repo: Path, tmp: Path
) -> None:
    seen = tmp / "revision-goal.txt"
    worker = write_worker(tmp, WORKER.format(seen=str(seen)))
    res = run_sup(
        repo, "start", "fix add", "--worker", worker, "--check", PYTEST_CHECK, "--review", "none"
    )
    assert res.returncode == 3, res.stderr  # parked
    (task,) = task_ids(repo)
    cand = git(repo, "rev-parse", f"refs/sup/{task}/candidate")
    with serving(repo) as s, chromium(tmp) as tab:
        # The API: a line the candidate does not have is refused, nothing stored.
        bad = request(
            f"{s.base}/api/tasks/{task}/comments",
            method="POST",
            headers=bearer(s),
            body=json.dumps({"path": "calc.py", "line": 99, "message": "x"}).encode(),
        )
        assert bad.status == 400 and bad.json()["error"], bad
        got = request(f"{s.base}/api/tasks/{task}/comments", headers=bearer(s))
        assert got.status == 405  # an action answers POST only

        page = tab.page
        page.goto(s.url)
        page.goto(f"{s.base}/task/{task}")
        page.click("details.file[data-path='calc.py'] .diff span[data-line='2']")
        assert page.input_value("#comment-form input[name=path]") == "calc.py"
        assert page.input_value("#comment-form input[name=line]") == "2"
        page.fill("#comment-form input[name=message]", HOSTILE)
        page.click("#comment-form button")
        page.wait_for_selector("#comment-c1")  # the page reloads with the comment
        assert HOSTILE in page.inner_text("#comment-c1")  # shown as text
        assert page.get_attribute("#comment-c1", "data-status") == "open"
        tab.shot("commented")
        page.click("#revise button")
        page.wait_for_selector("#comment-c1[data-status='sent']")
        shown = json.loads(run_sup(repo, "show", task, "--json").stdout)
        (c1,) = shown["comments"]
        assert c1["via"] == "web" and c1["commit"] == cand
        rev = c1["revision"]["task"]
        done = run_sup(repo, "wait", rev, timeout=180)
        assert done.returncode == 0, (done.stdout, done.stderr)
        goal = seen.read_text()
        assert "calc.py:2 (comment c1)" in goal and f"> {HOSTILE}" in goal, goal
        page.goto(f"{s.base}/task/{rev}")
        page.wait_for_selector("#comment-c1[data-status='addressed']")
        tab.shot("addressed")
        tab.clean()  # the comment's markup never ran
