"""The page's actions on a real Claude Code worker (scripted model) in a real headless
Chromium: Approve on a call that waits for a person (`[decider] kind = "human"`) lets it run
and the task ends ready; Continue on a task paused on its budget resumes it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.conftest import git, run_sup
from tests.helpers.sup import wait_for
from tests.helpers.supervised import bash, step, text
from tests.web.browser import chromium
from tests.web.server import serving
from tests.workers.claude.conftest import claude_env

pytestmark = pytest.mark.claude

CURL = bash("curl --version > curl.txt", "Curl")  # an `ask` of the policy
COMMIT_ALL = bash("git add -A && git commit -qm work", "Commit")
NOTES = bash("echo notes > NOTES.md && git add NOTES.md && git commit -qm notes", "Commit")


def _start(repo: Path, env: dict[str, str], spec: Path) -> str:
    res = run_sup(repo, "start", "--detach", "--spec", str(spec), "-q", env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split()[-1]


def _show(repo: Path, tid: str) -> dict[str, Any]:
    res = run_sup(repo, "show", tid, "--json")
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def _events(repo: Path, tid: str, type: str) -> list[dict[str, Any]]:
    res = run_sup(repo, "log", tid, "--json")
    evs = [json.loads(line) for line in res.stdout.splitlines()]
    return [e["data"] for e in evs if e["type"] == type]


def _wait(repo: Path, tid: str) -> dict[str, Any]:
    res = run_sup(repo, "wait", tid, "--json", "--timeout", "180", timeout=200)
    assert res.returncode == 0, res.stdout
    return dict(json.loads(res.stdout))


def test_approve_on_the_page_lets_the_waiting_call_run(
    scripted_model: Callable[..., ScriptedModel], claude_bin: str, repo: Path, tmp: Path
) -> None:
    model = scripted_model({"default": [step(CURL), step(COMMIT_ALL), step(text("Done."))]})
    env = claude_env(model.url, tmp / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "Record the curl version and commit."\n'
        '[worker]\nkind = "claude"\n[review]\nkind = "none"\n'
        '[budget]\ndeadline = "5m"\nno_output_timeout = "2m"\n'
        '[decider]\nkind = "human"\nhuman_timeout = "2m"\n'
    )
    with serving(repo, env=env) as s, chromium(tmp) as tab:
        page = tab.page
        page.goto(s.url)
        tid = _start(repo, env, spec)
        # The index shows it needing a person, live; its page offers the ask.
        page.wait_for_selector(f"#row-{tid}.attention")
        assert "needs human: Bash curl --version" in page.inner_text(f"#row-{tid} .needs")
        tab.shot("index-needs-human")
        page.click(f"#row-{tid} a")
        [ask] = _show(repo, tid)["pending"]
        form = page.locator(f"#ask-{ask['request_id']}")
        assert "curl --version" in form.inner_text()
        tab.shot("ask")
        form.locator("button.approve").click()
        rec = _wait(repo, tid)
        assert rec["state"] == "completed", rec["reasons"]
        # The page follows the task to its end on its own (a state change reloads it).
        page.wait_for_selector("#status[data-status='ready']")
        tab.shot("ready")
        tab.clean()
    [answer] = _events(repo, tid, "human_answer")
    assert answer["decision"] == "allow" and answer["via"] == "web", answer
    assert answer["request_id"] == ask["request_id"]
    assert "curl" in git(repo, "show", f"{rec['branch']}:curl.txt").lower()


def test_continue_on_the_page_resumes_a_task_paused_on_its_budget(
    scripted_model: Callable[..., ScriptedModel], claude_bin: str, repo: Path, tmp: Path
) -> None:
    model = scripted_model({"default": [step(NOTES), step(text("Done."))]})
    env = claude_env(model.url, tmp / "cfg", {"GITSUP_CLAUDE_BIN": claude_bin})
    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "Write notes and commit."\n'
        '[worker]\nkind = "claude"\n[review]\nkind = "none"\n'
        '[budget]\ndeadline = "5m"\nno_output_timeout = "2m"\nmax_turns = 1\n'
        'on_exhausted = "pause"\n'
    )
    tid = _start(repo, env, spec)
    wait_for(lambda: _events(repo, tid, "budget_paused"), timeout=90, interval=0.2, what="pause")
    with serving(repo, env=env) as s, chromium(tmp) as tab:
        page = tab.page
        page.goto(s.url)
        page.click(f"#row-{tid} a")
        form = page.locator("#continue")
        form.locator("input[name='add_turns']").fill("1")
        tab.shot("paused")
        form.locator("button.continue").click()
        rec = _wait(repo, tid)
        assert rec["state"] == "completed", rec["reasons"]
        page.wait_for_selector("#status[data-status='ready']")
        tab.shot("ready")
        tab.clean()
    [cont] = _events(repo, tid, "budget_continued")
    assert cont["add_turns"] == 1 and cont["max_turns"] == 2 and cont["via"] == "web", cont
