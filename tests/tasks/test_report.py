"""The candidate page in real headless Chromium, `git sup serve`, and `git sup cost`."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PYTHON, git, run_sup
from tests.helpers.browser import DomIndex, load
from tests.helpers.sup import (
    COMMIT_WITHOUT_FIX,
    PYTEST_CHECK,
    task_ids,
    write_worker,
)

EVIL_GOAL = (
    "fix add <script>document.title='pwned';console.error('xss-goal')</script>"
    "<img src=x onerror=\"console.error('xss-img')\">"
)
EVIL_WORKER = """
import pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
pathlib.Path("evil.html").write_text(
    "</pre></div><script>console.error('xss-diff')</script><b onmouseover=alert(1)>x</b>\\n"
)
subprocess.run(["git", "add", "evil.html"], check=True)
subprocess.run(["git", "commit", "-q", "-am", "fix add <script>console.error('xss-msg')</script>"], check=True)
print("<script>console.error('xss-output')</script>")
"""
EVIL_CHECK = shlex.join([PYTHON, "-c", "print(\"<script>console.error('xss-check')</script>\")"])


def _report(repo: Path, task: str, out: Path) -> str:
    res = run_sup(repo, "report", task, "--output", str(out))
    assert res.returncode == 0, res.stderr
    page = out.read_text()
    res = run_sup(repo, "report", task)
    assert res.returncode == 0 and res.stdout == page  # stdout without --output
    return page


def _assert_page(loaded: Any, task: str) -> DomIndex:
    assert loaded.console == [], loaded.console  # no console errors, no CSP violations
    dom = DomIndex(loaded.dom)
    assert "script" not in dom.tags and "img" not in dom.tags, set(dom.tags)
    # no script ran: the title is the page's own (a script would have set it to "pwned")
    assert f"<title>gitsup task {task}</title>" in loaded.dom
    for section in ("summary", "timeline", "checks", "review", "diff", "cost"):
        assert section in dom.ids
    for href in dom.links:
        assert href.startswith("#"), href  # self-contained: no link leaves the page
        assert href[1:] in dom.ids, f"broken link {href}"
    return dom


def test_ready_task_page_escapes_everything_in_chromium(repo: Path, tmp: Path) -> None:
    worker = write_worker(tmp, EVIL_WORKER)
    res = run_sup(
        repo, "start", EVIL_GOAL, "--worker", worker, "--check", EVIL_CHECK, "--review", "none"
    )
    assert res.returncode == 0, res.stderr
    (task,) = task_ids(repo)
    page = _report(repo, task, tmp / "ready.html")
    assert "http://" not in page and "https://" not in page  # no network, no CDN
    loaded = load((tmp / "ready.html").as_uri(), tmp, screenshot="ready.png")
    dom = _assert_page(loaded, task)
    text = dom.all_text
    # the hostile strings are shown as text, verbatim
    assert "<script>document.title='pwned'" in text
    assert "<script>console.error('xss-diff')</script>" in text
    assert "<script>console.error('xss-check')</script>" in text
    assert "file-1" in dom.ids and "evil.html" in text and "calc.py" in text
    assert "+    return a + b" in text and "-    return a - b" in text
    assert 'class="a"' in loaded.dom and 'class="d"' in loaded.dom  # highlighted lines
    baseline = git(repo, "rev-parse", f"refs/sup/{task}/baseline")
    candidate = git(repo, "rev-parse", f"refs/sup/{task}/candidate")
    assert f"git diff {baseline} {candidate}" in text  # how to reproduce the view
    assert f"git notes --ref=sup show {candidate}" in text
    # the reproduce command gives the same diff the page shows
    assert "+    return a + b" in git(repo, "diff", baseline, candidate)


def test_parked_task_page_shows_failed_check_and_reasons(repo: Path, tmp: Path) -> None:
    worker = write_worker(tmp, COMMIT_WITHOUT_FIX)
    res = run_sup(
        repo, "start", "fix add", "--worker", worker, "--check", PYTEST_CHECK, "--review", "none"
    )
    assert res.returncode == 3, res.stderr
    (task,) = task_ids(repo)
    _report(repo, task, tmp / "parked.html")
    loaded = load((tmp / "parked.html").as_uri(), tmp, screenshot="parked.png")
    dom = _assert_page(loaded, task)
    text = dom.all_text
    assert "parked" in text and "FAILED" in text and "assert" in text  # the check's tail
    assert "NOTES.md" in text and "reason" in text


def test_console_detection_works(tmp: Path) -> None:
    """The control: a page that does log to the console is seen doing so."""
    page = tmp / "control.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>console.error('control-marker')</script>")
    loaded = load(page.as_uri(), tmp)
    assert any("control-marker" in c for c in loaded.console), loaded.console


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_serve_refuses_a_port_out_of_range(repo: Path, port: str) -> None:
    res = run_sup(repo, "serve", "--port", port, timeout=30)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.strip().splitlines() == [
        f"git sup: error: --port {port}: a port is 0 to 65535 (0: any free one)"
    ]
    assert "Traceback" not in res.stderr and res.stdout == ""


# The page's Content-Security-Policy, directive by directive: nothing loads or runs but
# the page's own inline style and data: images; no script at all (no inline, no hash, no
# source), no remote source, no base URL, no form target.
CSP = {
    "default-src": ["'none'"],
    "style-src": ["'unsafe-inline'"],
    "img-src": ["data:"],
    "base-uri": ["'none'"],
    "form-action": ["'none'"],
}
META_CSP = re.compile(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">')


def _directives(policy: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in policy.split(";"):
        name, *sources = part.split()
        assert name not in out, f"{name} given twice in {policy!r}"
        out[name] = sources
    return out


def _page_csp(page: str) -> dict[str, list[str]]:
    (policy,) = META_CSP.findall(page)  # exactly one, in the head, before any content
    assert page.index("<meta http-equiv") < page.index("</head>") < page.index("<body>")
    return _directives(policy)


def test_the_page_forbids_scripts_and_remote_sources(repo: Path, tmp: Path) -> None:
    worker = write_worker(tmp, COMMIT_WITHOUT_FIX)
    run_sup(repo, "start", "fix add", "--worker", worker, "--review", "none")
    (task,) = task_ids(repo)
    page = _report(repo, task, tmp / "page.html")
    assert _page_csp(page) == CSP


REVIEWER = """
import json, sys
json.load(sys.stdin)
print(json.dumps({"verdict": "pass", "findings": [], "cost_usd": 0.125,
                  "usage": {"input_tokens": 100, "output_tokens": 7}}))
"""


def test_cost_from_git_with_a_command_reviewer(repo: Path, tmp: Path) -> None:
    from tests.helpers.sup import FIX_AND_COMMIT

    worker = write_worker(tmp, FIX_AND_COMMIT)
    reviewer = write_worker(tmp, REVIEWER, "reviewer.py")
    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "fix add"\n'
        f'[worker]\nkind = "process"\nargv = {json.dumps(worker.split())}\n'
        f'[review]\nkind = "command"\nargv = {json.dumps(reviewer.split())}\n'
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--check", PYTEST_CHECK)
    assert res.returncode == 0, res.stderr
    (task,) = task_ids(repo)
    res = run_sup(repo, "cost", "--json")
    assert res.returncode == 0, res.stderr
    c = json.loads(res.stdout)
    assert c["total_usd"] == 0.125 and c["tasks"][0]["reviewer_usd"] == 0.125
    assert c["tokens"]["input_tokens"] == 100 and c["by_outcome"]["ready"]["tasks"] == 1
    assert c["cost_per_integrated_change_usd"] is None  # nothing integrated yet
    note = json.loads(git(repo, "notes", "--ref=sup", "show", f"refs/sup/{task}/candidate"))
    assert note["cost"]["reviewer_usd"] == 0.125 and note["cost"]["calls"][0]["role"] == "reviewer"
    # --since after the task: nothing; the text form names the task
    res = run_sup(repo, "cost", "--since", "2999-01-01", "--json")
    assert json.loads(res.stdout)["tasks"] == []
    res = run_sup(repo, "cost")
    assert task in res.stdout and "$0.1250" in res.stdout
    res = run_sup(repo, "cost", "--since", "yesterday-ish")
    assert res.returncode == 2 and "--since" in res.stderr
    # integrated: the cost per integrated change follows
    res = run_sup(repo, "integrate", task, "--into", "main")
    assert res.returncode == 0, res.stderr
    c = json.loads(run_sup(repo, "cost", "--json").stdout)
    assert c["by_outcome"] == {"integrated": {"tasks": 1, "total_usd": 0.125}}
    assert c["cost_per_integrated_change_usd"] == 0.125
    # The sealed log in Git alone is enough: remove the local state, the sum stays.
    import shutil

    from tests.helpers.sup import common_dir

    shutil.rmtree(common_dir(repo) / "sup" / "tasks" / task)
    res = run_sup(repo, "cost", "--json")
    c = json.loads(res.stdout)
    assert c["total_usd"] == 0.125 and c["cost_per_integrated_change_usd"] == 0.125


@pytest.mark.parametrize("bad", ["nope", "../x"])
def test_report_of_unknown_task_is_a_clear_error(repo: Path, bad: str) -> None:
    res = run_sup(repo, "report", bad)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
