"""Review comments back to the agent, through the real CLI on real repositories with process
workers: `git sup comment` stores a comment with the candidate (its note and the task's
log), `git sup revise` on an ended task starts a revision task whose worker is given the
comments, and the revision's candidate says which comments it addressed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import git, run_sup
from tests.helpers.sup import PYTEST_CHECK, task_ids, wait_for, write_worker

# The first run commits notes only (its check fails: add still subtracts); a revision run
# (its goal names the candidate to fast-forward to) saves the goal it was given where the
# test reads it, then fixes add and adds a test at the end of test_calc.py.
WORKER = """
import os, pathlib, re, subprocess
goal = os.environ["GITSUP_GOAL"]
m = re.search(r"git merge --ff-only ([0-9a-f]{{40}})", goal)
if m:
    subprocess.run(["git", "merge", "-q", "--ff-only", m.group(1)], check=True)
    pathlib.Path({seen!r}).write_text(goal)
    p = pathlib.Path("calc.py")
    p.write_text(p.read_text().replace("a - b", "a + b"))
    t = pathlib.Path("test_calc.py")
    t.write_text(t.read_text() + "\\n\\ndef test_zero():\\n    assert add(0, 0) == 0\\n")
    subprocess.run(["git", "commit", "-qam", "add adds"], check=True)
else:
    pathlib.Path("NOTES.md").write_text("looked at it\\n")
    subprocess.run(["git", "add", "NOTES.md"], check=True)
    subprocess.run(["git", "commit", "-qm", "notes only"], check=True)
"""


def _sup(repo: Path, *args: str) -> Any:
    return run_sup(repo, *args, timeout=120)


def _json(repo: Path, *args: str) -> Any:
    res = _sup(repo, *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _note(repo: Path, task: str) -> dict[str, Any]:
    note: dict[str, Any] = json.loads(
        git(repo, "notes", "--ref=sup", "show", f"refs/sup/{task}/candidate")
    )
    return note


def _parked(repo: Path, tmp: Path) -> tuple[str, Path]:
    seen = tmp / "revision-goal.txt"
    worker = write_worker(tmp, WORKER.format(seen=str(seen)))
    res = _sup(
        repo, "start", "fix add", "--worker", worker, "--check", PYTEST_CHECK, "--review", "none"
    )
    assert res.returncode == 3, res.stderr  # parked: the check fails
    (task,) = task_ids(repo)
    return task, seen


def test_a_comment_goes_to_a_revision_task_and_its_candidate_shows_it_addressed(
    repo: Path, tmp: Path
) -> None:
    task, seen = _parked(repo, tmp)
    added = _json(repo, "comment", task, "calc.py:2", "add must add, not subtract")
    cand = git(repo, "rev-parse", f"refs/sup/{task}/candidate")
    assert added["id"] == "c1" and added["commit"] == cand and added["status"] == "open"
    assert added["path"] == "calc.py" and added["line"] == 2 and added["by"] == "t@example.invalid"
    assert added["line_text"] == "    return a - b"
    # on a file the revision changes, but far from the change
    far = _json(repo, "comment", task, "test_calc.py:1", "keep this import")
    assert far["id"] == "c2"
    # stored with the candidate: its note, and the task's (sealed) log
    assert [c["id"] for c in _note(repo, task)["comments"]] == ["c1", "c2"]
    assert _note(repo, task)["status"] == "parked"  # the rest of the note is kept
    log = [json.loads(x) for x in _sup(repo, "log", task, "--json").stdout.splitlines()]
    assert [e["data"]["id"] for e in log if e["type"] == "review_comment_added"] == ["c1", "c2"]

    done = _json(repo, "revise", task, "-m", "also keep the tests green")
    assert done["how"] == "task" and done["comments"] == ["c1", "c2"]
    rev = done["revision_task"]
    res = _sup(repo, "wait", rev)
    assert res.returncode == 0, (res.stdout, res.stderr)  # the revision is ready

    # the revision's worker was given each comment with its place, code and words
    goal = seen.read_text()
    assert f"git merge --ff-only {cand}" in goal
    assert "calc.py:2 (comment c1)" in goal and ">    2 |     return a - b" in goal
    assert "> add must add, not subtract" in goal
    assert "test_calc.py:1 (comment c2)" in goal and "> also keep the tests green" in goal

    # the revision's candidate note: c1 addressed (its line changed), c2 not
    note = _note(repo, rev)
    assert note["status"] == "ready" and note["revision_of"] == task
    got = {c["id"]: c for c in note["comments"]}
    assert got["c1"]["status"] == "addressed" and got["c1"]["task"] == task
    assert got["c2"]["status"] == "not addressed", got["c2"]
    shown = _json(repo, "show", rev)
    assert [(c["id"], c["status"]) for c in shown["comments"]] == [
        ("c1", "addressed"),
        ("c2", "not addressed"),
    ]
    # the original task says where its comments went and how that ended
    orig = {c["id"]: c for c in _json(repo, "show", task)["comments"]}
    assert orig["c1"]["status"] == "sent" and orig["c1"]["revision"]["task"] == rev
    assert orig["c1"]["outcome"]["status"] == "addressed"
    assert orig["c2"]["outcome"]["status"] == "not addressed"
    assert all(c["revision"]["task"] == rev for c in _note(repo, task)["comments"])
    text = _sup(repo, "show", task).stdout
    assert f"c1 calc.py:2 [sent -> {rev}: addressed]" in text
    # both were sent: nothing is left to revise
    again = _sup(repo, "revise", task)
    assert again.returncode == 2 and "no open comments" in again.stderr
    page = _sup(repo, "report", rev).stdout
    assert "id='comments'" in page and "not addressed" in page


def test_bad_input_is_refused_in_one_line_and_nothing_is_stored(repo: Path, tmp: Path) -> None:
    task, _ = _parked(repo, tmp)
    cases = [
        (["comment", "20991231-ffffff", "calc.py:1", "x"], "no task"),
        (["comment", task, "nope.py:1", "x"], "is not a file in"),
        (["comment", task, "calc.py:3", "x"], "has 2 line(s)"),
        (["comment", task, "calc.py:0", "x"], "a number from 1"),
        (["comment", task, "calc.py:x", "x"], "a number from 1"),
        (["comment", task, "calc.py", "x"], "not PATH:LINE"),
        (["comment", task, "../calc.py:1", "x"], "not a path in the repository"),
        (["comment", task, "calc.py:1", "  "], "the comment is empty"),
        (["comment", task, "calc.py:1", "x" * 4001], "at most 4000"),
        (["comment", task, "calc.py:1"], "give PATH:LINE and MESSAGE"),
        (["comment", task, "--list", "calc.py:1"], "--list takes no"),
        (["revise", task], "no open comments"),
        (["revise", "20991231-ffffff"], "no task"),
    ]
    for args, said in cases:
        res = _sup(repo, *args)
        assert res.returncode == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert lines[0].startswith("git sup: error: ") and said in lines[0], (args, lines)
        assert "Traceback" not in res.stderr and res.stdout == "", args
    assert _json(repo, "comment", task, "--list")["comments"] == []
    assert "comments" not in _note(repo, task)


def test_a_hostile_comment_is_stored_verbatim_and_shown_escaped(repo: Path, tmp: Path) -> None:
    task, _ = _parked(repo, tmp)
    evil = (
        "<script>alert('x')</script><img src=x onerror=alert(1)>\x1b[2J\x1b]0;pwned\x07"
        "\u202eevil\r\nsecond line " + "A" * 3800
    )
    added = _json(repo, "comment", task, "calc.py:1", evil)
    assert added["message"] == evil  # stored as written
    assert _note(repo, task)["comments"][0]["message"] == evil
    for args in (["show", task], ["comment", task, "--list"]):
        out = _sup(repo, *args).stdout
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "\r" not in out
        assert "\\x1b[2J" in out and "\\u202eevil" in out
    page = _sup(repo, "report", task).stdout
    section = page[page.index("<section id='comments'>") :]
    section = section[: section.index("</section>")]
    assert "<script>" not in section and "<img" not in section and "\x1b" not in section
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in section
    assert "\\x1b[2J" in section


def test_comments_on_a_running_task_refer_to_its_branch_tip(repo: Path, tmp: Path) -> None:
    """While a task runs there is no candidate yet: the comment is on its branch tip, and a
    process worker (which takes no turns) cannot be sent a revision."""
    gate = tmp / "go"
    worker = write_worker(
        tmp,
        f"""
        import pathlib, time
        while not pathlib.Path({str(gate)!r}).exists():
            time.sleep(0.05)
        """,
    )
    res = _sup(repo, "start", "--detach", "-q", "wait", "--worker", worker, "--review", "none")
    assert res.returncode == 0, res.stderr
    (task,) = task_ids(repo)
    wait_for(lambda: _json(repo, "show", task)["state"] == "running", timeout=60, what="running")
    base = git(repo, "rev-parse", f"refs/sup/{task}/baseline")
    added = _json(repo, "comment", task, "calc.py:2", "this subtracts")
    assert added["commit"] == base and added["status"] == "open"
    res = _sup(repo, "revise", task)
    assert res.returncode == 2 and "cannot take messages" in res.stderr, res.stderr
    gate.write_text("")
    _sup(repo, "wait", task)
    # the worker committed nothing: the task parked without a candidate; the comment stays
    assert _json(repo, "comment", task, "--list")["comments"][0]["id"] == "c1"


def test_comments_made_at_once_each_get_their_own_id(repo: Path, tmp: Path) -> None:
    import subprocess

    from tests.conftest import GIT_SUP

    task, _ = _parked(repo, tmp)
    procs = [
        subprocess.Popen(
            [GIT_SUP, "comment", task, "calc.py:1", f"comment {i}", "--json"],
            cwd=repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    ids = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        ids.append(json.loads(out)["id"])
    assert sorted(ids) == [f"c{i}" for i in range(1, 7)], ids
    # the note holds every one of them, however the writes interleaved
    note = _note(repo, task)
    assert sorted(c["id"] for c in note["comments"]) == sorted(ids)
    assert sorted(c["message"] for c in note["comments"]) == [f"comment {i}" for i in range(6)]


def test_nothing_that_judges_or_integrates_work_reads_comments() -> None:
    """Comments are a person's words: the policy, the decider, the reviewer, the integration
    and the push gate never import them."""
    root = Path(__file__).resolve().parents[2] / "gitsup"
    for package in ("policy", "verification", "integration", "boundary"):
        for path in (root / package).rglob("*.py"):
            text = path.read_text()
            for name in ("gitsup.store.comments", "gitsup.tasks.comments", "review_comment"):
                assert name not in text, f"{path} reads comments ({name})"
