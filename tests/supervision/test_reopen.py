"""A parked task goes on as the same task, through the real CLI with process workers:
`git sup recover ID --extend D` (more time after the deadline; 0 closes out now) and
`git sup repair ID [-m MESSAGE] [--rounds N]` (a new repair round). Same id, same event log
(seq goes on), same worktree; a process worker runs its argv again with the round's text in
GITSUP_MESSAGE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import git, run_sup
from tests.helpers.sup import check_cmd, common_dir, read_record, start_json, write_worker

QUICK_CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")

# First run (no GITSUP_MESSAGE): busy past the deadline. A later run fixes add and commits.
SLOW_THEN_FIX = """
import os, pathlib, subprocess, time
msg = os.environ.get("GITSUP_MESSAGE")
if msg is None:
    print("thinking", flush=True)
    time.sleep(60)
time.sleep(6)  # longer than the first deadline and its grace: only the extension covers it
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
print("fixed after: " + msg.splitlines()[-1])
"""

# Fixes and commits at once, then stays busy past the deadline: parked by the watchdog
# although its work passes the checks.
FIX_THEN_HANG = """
import pathlib, subprocess, time
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
print("fixed; now lingering", flush=True)
time.sleep(60)
"""

# First run: commits notes only (the check fails). A repair round (GITSUP_MESSAGE) writes
# the message it got into MESSAGE.txt and fixes add.
NOTES_THEN_REPAIR = """
import os, pathlib, subprocess
msg = os.environ.get("GITSUP_MESSAGE")
if msg is None:
    pathlib.Path("NOTES.md").write_text("looked at it\\n")
    subprocess.run(["git", "add", "NOTES.md"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "notes only"], check=True)
else:
    pathlib.Path("MESSAGE.txt").write_text(msg)
    p = pathlib.Path("calc.py")
    p.write_text(p.read_text().replace("a - b", "a + b"))
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "repair"], check=True)
print("done")
"""


def _log(repo: Path, task: str) -> list[dict[str, Any]]:
    res = run_sup(repo, "log", task, "--json")
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def _json(res: Any) -> dict[str, Any]:
    assert res.stdout.strip(), res.stderr
    return dict(json.loads(res.stdout))


def _parked_by_deadline(repo: Path, tmp: Path, body: str) -> str:
    worker = write_worker(tmp, body)
    args = ["fix add", "--worker", worker, "--check", QUICK_CHECK, "--review", "none"]
    rc, rec, err = start_json(repo, *args, "--deadline", "3s", "--closeout-grace", "1s")
    assert rc == 3, (rc, rec.get("reasons"), err)
    assert any("watchdog: deadline" in r for r in rec["reasons"]), rec["reasons"]
    return str(rec["id"])


def test_recover_extend_gives_a_deadline_parked_task_more_time(repo: Path, tmp: Path) -> None:
    task = _parked_by_deadline(repo, tmp, SLOW_THEN_FIX)
    before = _log(repo, task)
    res = run_sup(repo, "recover", task, "--extend", "2m", "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    rec = _json(res)
    assert rec["id"] == task and rec["status"] == "ready", rec["reasons"]
    after = _log(repo, task)
    # the same log, going on: seq strictly increasing, the earlier events kept as they were
    assert after[: len(before)] == before
    seqs = [e["seq"] for e in after]
    assert seqs == sorted(set(seqs))
    new = _types(after[len(before) :])
    assert new[0] == "task_reopened"
    reopened = after[len(before)]["data"]
    assert reopened["how"] == "extend" and reopened["extend"] == 120.0
    assert reopened["status_before"] == "parked"
    changes = [(e["data"]["from"], e["data"]["to"]) for e in after if e["type"] == "state_changed"]
    assert ("blocked", "starting") in changes
    assert _types(after).count("worker_started") == 2
    # each record says which worker it belongs to, counted over the task's life
    assert [e["worker"] for e in after if e["type"] == "worker_started"] == [1, 2]
    assert after[0]["type"] == "task_started" and after[0]["worker"] == 0
    second = next(
        i for i, e in enumerate(after) if e["type"] == "worker_started" and e["worker"] == 2
    )
    assert {e["worker"] for e in after[second:]} == {2}
    assert {e["worker"] for e in after[: len(before)]} <= {0, 1}
    assert rec["spawns"] == 2
    assert _types(after).count("task_finished") == 2
    # the new worker ran its argv again in the same worktree, told why in GITSUP_MESSAGE
    out = " ".join(e["data"].get("text", "") for e in after if e["type"] == "worker_output")
    assert "fixed after: " in out and "more seconds" in out
    cand = git(repo, "rev-parse", f"refs/sup/{task}/candidate")
    assert cand == git(repo, "rev-parse", f"sup/{task}") == rec["candidate"]
    # the log was sealed into Git as one history, every event once
    tip = git(repo, "rev-parse", f"refs/sup/{task}/log")
    sealed: list[int] = []
    for name in git(repo, "ls-tree", "--name-only", tip).splitlines():
        sealed += [json.loads(x)["seq"] for x in git(repo, "show", f"{tip}:{name}").splitlines()]
    assert sealed == seqs


def test_recover_extend_zero_closes_out_what_the_worker_left(repo: Path, tmp: Path) -> None:
    task = _parked_by_deadline(repo, tmp, FIX_THEN_HANG)
    assert read_record(repo, task)["status"] == "parked"
    res = run_sup(repo, "recover", task, "--extend", "0", "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    rec = _json(res)
    assert rec["status"] == "ready", rec["reasons"]
    events = _log(repo, task)
    assert _types(events).count("worker_started") == 1  # no new turn: verified as it was
    reopened = [e["data"] for e in events if e["type"] == "task_reopened"]
    assert [r["how"] for r in reopened] == ["close_out"]
    changes = [(e["data"]["from"], e["data"]["to"]) for e in events if e["type"] == "state_changed"]
    assert changes[-2:] == [("blocked", "verifying"), ("verifying", "completed")]


def test_recover_extend_refuses_what_it_cannot_extend(repo: Path, tmp: Path) -> None:
    worker = write_worker(tmp, NOTES_THEN_REPAIR)
    rc, rec, err = start_json(
        repo, "fix add", "--worker", worker, "--check", QUICK_CHECK, "--review", "none"
    )
    assert rc == 3, err
    task = rec["id"]
    res = run_sup(repo, "recover", task, "--extend", "1m")
    assert res.returncode == 2 and "not ended by its deadline" in res.stderr, res.stderr
    assert "git sup repair" in res.stderr
    res = run_sup(repo, "recover", task, "--extend", "5")
    assert res.returncode == 2 and "unit" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert read_record(repo, task)["status"] == "parked"


def test_repair_starts_a_new_round_on_a_parked_candidate(repo: Path, tmp: Path) -> None:
    spec = tmp / "task.toml"
    spec.write_text("[autonomy]\nmax_repair_rounds = 1\n")
    worker = write_worker(tmp, NOTES_THEN_REPAIR)
    args = [
        "fix add",
        "--spec",
        str(spec),
        "--worker",
        worker,
        "--check",
        QUICK_CHECK,
        "--review",
        "none",
    ]
    rc, rec, err = start_json(repo, *args)
    assert rc == 3, err
    task = rec["id"]
    parked_wip = git(repo, "rev-parse", f"sup/{task}")
    before = _log(repo, task)
    res = run_sup(repo, "repair", task, "-m", "add must add, not subtract", "--json")
    assert res.returncode == 0, res.stderr
    rec = _json(res)
    assert rec["id"] == task and rec["status"] == "ready", rec["reasons"]
    assert rec["repair_rounds"] == 1
    after = _log(repo, task)
    assert after[: len(before)] == before
    reopened = [e["data"] for e in after if e["type"] == "task_reopened"]
    assert [r["how"] for r in reopened] == ["repair"]
    requested = [e["data"] for e in after if e["type"] == "repair_requested"]
    assert [r["round"] for r in requested] == [1]
    # the round's text reached the process worker: what failed, and the person's words
    wt = Path(rec["worktree"])
    told = (wt / "MESSAGE.txt").read_text()
    assert "add must add, not subtract" in told
    assert "add is wrong" in told  # the failing check's output tail
    # built on the parked work in the same worktree
    assert git(repo, "merge-base", "--is-ancestor", parked_wip, rec["candidate"]) == ""
    assert (wt / "NOTES.md").exists()
    # the budget is spent now: refused, unless a new one is given
    res = run_sup(repo, "repair", task)
    assert res.returncode == 2, res.stderr
    assert "parked task" in res.stderr  # it is ready now, nothing to repair


def test_repair_keeps_to_the_repair_budget_unless_given_a_new_one(repo: Path, tmp: Path) -> None:
    spec = tmp / "task.toml"
    spec.write_text("[autonomy]\nmax_repair_rounds = 0\n")
    worker = write_worker(tmp, NOTES_THEN_REPAIR)
    args = [
        "fix add",
        "--spec",
        str(spec),
        "--worker",
        worker,
        "--check",
        QUICK_CHECK,
        "--review",
        "none",
    ]
    rc, rec, err = start_json(repo, *args)
    assert rc == 3, err
    task = rec["id"]
    res = run_sup(repo, "repair", task, "-m", "try again")
    assert res.returncode == 2, res.stderr
    assert "used its repair rounds (0 of 0)" in res.stderr and "--rounds" in res.stderr
    assert not any(e["type"] == "task_reopened" for e in _log(repo, task))
    for bad in ("0", "-1"):
        res = run_sup(repo, "repair", task, "--rounds", bad)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    res = run_sup(repo, "repair", task, "--rounds", "1", "-m", "add must add", "--json")
    assert res.returncode == 0, res.stderr
    assert _json(res)["status"] == "ready"
    assert (common_dir(repo) / "sup" / "tasks" / task / "events.jsonl").exists()
