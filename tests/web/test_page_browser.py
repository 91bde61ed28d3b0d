"""The page of `git sup serve` in a real headless Chromium: the index follows the tasks live
(server-sent events, no reload), a hostile goal, diff, file name or review finding is shown
as text (no script runs), and the actions are plain clicks."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import PYTHON, git, run_sup
from tests.helpers.sup import task_ids, write_worker
from tests.web.browser import chromium
from tests.web.server import serving

EVIL_GOAL = (
    "fix add <script>document.title='pwned';console.error('xss-goal')</script>"
    "<img src=x onerror=\"console.error('xss-img')\">"
)
EVIL_NAME = "<img src=x onerror=console.error('xss-name')>.txt"
EVIL_WORKER = f"""
import pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
pathlib.Path("evil.html").write_text(
    "</pre></div><script>console.error('xss-diff')</script><b onmouseover=alert(1)>x</b>\\n"
)
pathlib.Path({EVIL_NAME!r}).write_text("named\\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-q", "-am", "fix add <script>console.error('xss-msg')</script>"], check=True)
print("<script>console.error('xss-output')</script>" + "x" * 2000)
"""
EVIL_REVIEWER = """
import json, sys
json.load(sys.stdin)
print(json.dumps({"verdict": "pass", "cost_usd": 0.0, "findings": [
    {"severity": "P3", "title": "<script>console.error('xss-finding')</script>",
     "path": "calc.py", "line": 2, "detail": "<img src=x onerror=console.error('xss-detail')>"}
]}))
"""
# Waits for a file to appear in its worktree's parent dir, then commits and ends.
GATED = """
import pathlib, subprocess, sys, time
gate = pathlib.Path(sys.argv[1])
while not gate.exists():
    time.sleep(0.05)
pathlib.Path("done.txt").write_text("done\\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "done"], check=True)
"""


def test_hostile_content_is_shown_as_text_and_no_script_runs(repo: Path, tmp: Path) -> None:
    worker = write_worker(tmp, EVIL_WORKER)
    reviewer = write_worker(tmp, EVIL_REVIEWER, "reviewer.py")
    spec = tmp / "task.toml"
    spec.write_text(
        f"goal = {json.dumps(EVIL_GOAL)}\n"
        f'[worker]\nkind = "process"\nargv = {json.dumps(worker.split())}\n'
        f'[review]\nkind = "command"\nargv = {json.dumps(reviewer.split())}\n'
    )
    res = run_sup(repo, "start", "--spec", str(spec))
    assert res.returncode == 0, res.stderr
    (task,) = task_ids(repo)
    with serving(repo) as s, chromium(tmp) as tab:
        page = tab.page
        page.goto(s.url)
        assert page.url == s.base + "/"  # the token left the address bar
        row = page.locator(f"#row-{task}")
        assert "<script>document.title='pwned'" in row.locator(".goal").inner_text()
        tab.shot("index")
        page.click(f"#row-{task} a")
        page.wait_for_selector("#verdict")
        assert page.title() == f"gitsup task {task}"  # no script of the goal ran
        text = page.inner_text("body")
        assert "ready to integrate" in page.inner_text("#verdict")
        for hostile in (
            "<script>document.title='pwned'",
            "<script>console.error('xss-diff')</script>",
            EVIL_NAME,
            "<script>console.error('xss-finding')</script>",
        ):
            assert hostile in text, hostile
        # The finding sits under the line it names, in the file's fold.
        finding = page.locator("details.file .diff .finding")
        assert finding.count() == 1
        assert "xss-detail" in finding.inner_text()
        line = finding.locator("xpath=preceding-sibling::span[1]")
        assert line.get_attribute("data-line") == "2" and "return a + b" in line.inner_text()
        # The review's list links to it.
        href = page.locator("#review a").get_attribute("href")
        assert href == "#" + str(finding.get_attribute("id")), href
        # Every link within the page lands somewhere.
        anchors = page.eval_on_selector_all("a[href^='#']", "els => els.map(e => e.hash)")
        assert anchors and all(page.locator(f"[id='{a[1:]}']").count() == 1 for a in anchors)
        # Folded: the timeline, and tool output in it; a long payload links to the whole event.
        assert not page.is_visible("#timeline-body table")
        page.click("#timeline-body > summary")
        assert page.is_visible("#timeline-body table")
        output = page.locator("tr.worker_output").filter(has_text="xss-output")
        assert output.locator("details").count() == 1  # a tool's output is folded
        full = output.locator("a.full")
        href = full.get_attribute("href")
        assert href is not None and href.startswith(f"/task/{task}/event/")
        tab.shot("task")
        got = page.goto(s.base + href)
        assert got is not None and got.status == 200
        assert "xss-output" in page.inner_text("body")
        assert page.locator("img").count() == 0 and page.locator("b").count() == 0
        page.goto(s.base + f"/task/{task}")
        assert page.locator("img").count() == 0
        assert page.locator("script").count() == 1  # the page's own, /static/page.js
        tab.clean()  # nothing logged: no script of the task ran, no CSP violation


def test_the_index_follows_a_task_live_without_a_reload(repo: Path, tmp: Path) -> None:
    gate = tmp / "gate"
    worker = write_worker(tmp, GATED)
    with serving(repo) as s, chromium(tmp) as tab:
        page = tab.page
        page.goto(s.url)
        page.wait_for_selector("#tasks")
        page.evaluate("window.sameDocument = 'yes'")
        res = run_sup(
            repo,
            "start",
            "--detach",
            "-q",
            "wait <img src=x onerror=console.error('xss-live')>",
            "--worker",
            f"{worker} {gate}",
            "--review",
            "none",
        )
        assert res.returncode == 0, res.stderr
        tid = res.stdout.strip().split()[-1]
        # A new task appears, running...
        page.wait_for_selector(f"#row-{tid}[data-state='running']")
        # Drawn from the stream as text: the goal's markup neither shows nor runs.
        assert (
            page.inner_text(f"#row-{tid} .goal")
            == "wait <img src=x onerror=console.error('xss-live')>"
        )
        assert page.locator("#tasks img").count() == 0
        tab.shot("running")
        # ...and when it ends the row follows.
        gate.write_text("go")
        page.wait_for_selector(f"#row-{tid}[data-state='completed']")
        assert page.inner_text(f"#row-{tid} .badge") == "ready"
        assert page.evaluate("window.sameDocument") == "yes"  # no reload: the event stream
        tab.shot("ended")
        tab.clean()
    assert git(repo, "show", f"sup/{tid}:done.txt") == "done"
    assert PYTHON
