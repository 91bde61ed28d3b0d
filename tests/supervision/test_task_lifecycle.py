"""Whole tasks through the real `git sup` console script with real process workers:
the CLI contract (exit codes, --json record), what lands in Git (candidate ref and note,
sealed log, baseline, wip), watchdog, deadline and stop, and the user's checkout untouched."""

from __future__ import annotations

import json
import shlex
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from gitsup.store.events import EVENT_TYPES
from tests.conftest import git, run_sup
from tests.helpers.sup import (
    COMMIT_WITHOUT_FIX,
    FIX_AND_COMMIT,
    PYTEST_CHECK,
    check_cmd,
    common_dir,
    kill_marked,
    kill_tree,
    popen_sup,
    read_record,
    run_cli_inproc,
    start_json,
    task_ids,
    wait_dead,
    wait_for,
    wait_unmarked,
    write_spec,
    write_worker,
)

NO_REVIEW = ("--review", "none")
QUICK_CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")

# The record keys of docs/cli.md ("JSON: the task record").
RECORD_KEYS = {
    "id",
    "state",
    "status",
    "goal",
    "baseline",
    "base_rev",
    "source_branch",
    "branch",
    "worktree",
    "candidate",
    "head",
    "wip",
    "checks",
    "review",
    "turns",
    "cost_usd",
    "repair_rounds",
    "reasons",
    "decisions",
    "worker_kind",
    "supervisor",
    "worker",
    "spawn_pending",
    "created_at",
    "updated_at",
    "finished_at",
    "exit_code",
    "events",
    "refs",
    "owner_alive",
}
CHECK_KEYS = {
    "name",
    "argv",
    "required",
    "exit_code",
    "passed",
    "timed_out",
    "duration",
    "output_tail",
    "round",
}


def _checkout_state(repo: Path) -> dict[str, Any]:
    """Everything of the user's checkout a task must not touch (read without refreshing the index)."""
    files = {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts and "__pycache__" not in p.parts
    }
    return {
        "index": (repo / ".git" / "index").read_bytes(),
        "HEAD": (repo / ".git" / "HEAD").read_bytes(),
        "head_commit": git(repo, "rev-parse", "HEAD"),
        "status": git(
            repo,
            "--no-optional-locks",
            "status",
            "--porcelain=v2",
            "--branch",
            "--untracked-files=all",
        ),
        "files": files,
        "main": git(repo, "rev-parse", "refs/heads/main"),
    }


def _log_chain(repo: Path, task: str) -> list[tuple[str, str]]:
    out = git(repo, "log", "--reverse", "--format=%H %s", f"refs/sup/{task}/log")
    return [tuple(line.split(" ", 1)) for line in out.splitlines()]  # type: ignore[misc]


def _sealed_bytes(repo: Path, task: str) -> bytes:
    names = git(repo, "ls-tree", "--name-only", f"refs/sup/{task}/log").split()
    assert names == sorted(names)
    return b"".join(
        subprocess.run(
            ["git", "cat-file", "blob", f"refs/sup/{task}/log:{n}"],
            cwd=repo,
            capture_output=True,
            check=True,
        ).stdout
        for n in names
    )


def _events(repo: Path, task: str) -> list[dict[str, Any]]:
    rc, out, err = run_cli_inproc(repo, "log", task, "--json")
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


# --- the happy path ------------------------------------------------------------------------


def test_ready_candidate_end_to_end(repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the pytest check writes __pycache__ into the worktree (no .gitignore here): what the
    # checks write is not the worker's change and must not park the candidate
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    # the user has work of their own in the checkout: it must stay exactly as it is
    (repo / "scratch.txt").write_text("user's untracked notes\n")
    (repo / "test_calc.py").write_text((repo / "test_calc.py").read_text() + "# user edit\n")
    git(repo, "add", "test_calc.py")
    (repo / "test_calc.py").write_text((repo / "test_calc.py").read_text() + "# unstaged too\n")
    init = run_sup(repo, "init")
    assert init.returncode == 0, init.stderr
    before = _checkout_state(repo)

    seen = tmp / "seen.json"
    worker = write_worker(
        tmp,
        textwrap.dedent(f"""
        import json, os, sys
        goal = sys.stdin.read()
        json.dump({{"stdin": goal, "env_goal": os.environ.get("GITSUP_GOAL"),
                   "task": os.environ.get("GITSUP_TASK"), "cwd": os.getcwd()}}, open({str(seen)!r}, "w"))
        """)
        + FIX_AND_COMMIT,
    )
    rc, rec, err = start_json(
        repo, "make add() add", "--check", PYTEST_CHECK, "--worker", worker, *NO_REVIEW
    )
    assert rc == 0, (rec.get("reasons"), err)
    assert "Traceback" not in err
    tid = rec["id"]
    assert rec["state"] == "completed" and rec["status"] == "ready" and rec["exit_code"] == 0
    assert set(rec) >= RECORD_KEYS, RECORD_KEYS - set(rec)
    assert err.count("->") >= 4  # progress went to stderr

    # the worker got the goal on stdin and in GITSUP_GOAL, its task id, and ran in the worktree
    got = json.loads(seen.read_text())
    assert "make add() add" in got["stdin"] and got["env_goal"] == got["stdin"].rstrip("\n")
    assert got["task"] == tid
    assert Path(got["cwd"]).resolve() == Path(rec["worktree"]).resolve()

    # refs: baseline is where main was, candidate is the branch head, one commit on top
    baseline = before["head_commit"]
    assert rec["baseline"] == baseline == git(repo, "rev-parse", f"refs/sup/{tid}/baseline")
    head = git(repo, "rev-parse", f"refs/heads/sup/{tid}")
    assert git(repo, "rev-parse", f"refs/sup/{tid}/candidate") == head == rec["candidate"]
    assert git(repo, "rev-parse", f"{head}^") == baseline
    assert rec["branch"] == f"sup/{tid}"
    assert git(repo, "show", f"{head}:calc.py") == "def add(a, b):\n    return a + b"
    assert git(repo, "for-each-ref", "--format=%(refname)", f"refs/sup/{tid}/wip") == ""

    # the candidate note, readable with plain git
    note = json.loads(git(repo, "notes", "--ref=sup", "show", head))
    assert note["schema"] == "gitsup.candidate/1"
    assert note["status"] == "ready" and note["task"] == tid
    assert note["baseline"] == baseline and note["candidate"] == head
    assert [c["name"] for c in note["checks"]] == [rec["checks"][0]["name"]]
    chk = note["checks"][0]
    assert (
        chk["passed"] is True and chk["exit_code"] == 0 and chk["argv"] == shlex.split(PYTEST_CHECK)
    )
    assert "1 passed" in chk["output_tail"]
    assert set(rec["checks"][0]) >= CHECK_KEYS
    # `git sup init` set notes.displayRef: plain `git log` shows the note
    plain = git(repo, "log", "-1", head)
    assert "Notes (sup):" in plain and '"status": "ready"' in plain
    assert "Notes (sup):" in git(repo, "log", "--notes=sup", "-1", f"refs/sup/{tid}/candidate")

    # the sealed log reads as the lifecycle and holds every event of the WAL
    chain = _log_chain(repo, tid)
    subjects = [s for _, s in chain]
    assert len(chain) >= 5
    for step in (
        "idle -> starting",
        "starting -> running",
        "running -> waiting",
        "waiting -> verifying",
        "verifying -> completed",
    ):
        assert any(s.startswith(step) for s in subjects), (step, subjects)
    assert subjects[-1] == "task finished: ready"
    wal = (common_dir(repo) / "sup" / "tasks" / tid / "events.jsonl").read_bytes()
    assert _sealed_bytes(repo, tid) == wal
    assert f"Sup-Task: {tid}" in git(repo, "log", "-1", "--format=%B", f"refs/sup/{tid}/log")

    # the user's checkout, index and HEAD are exactly as they were
    after = _checkout_state(repo)
    for key in before:
        assert after[key] == before[key], key

    # the task worktree is clean, on its branch; the lease is released
    wt = Path(rec["worktree"])
    assert git(wt, "status", "--porcelain", "--untracked-files=no") == ""
    assert git(wt, "symbolic-ref", "HEAD") == f"refs/heads/sup/{tid}"
    assert not list((common_dir(repo) / "sup" / "leases").glob("*.json"))

    # show --json has the same shape as start --json, and what the contract lists
    shown = json.loads(run_sup(repo, "show", tid, "--json").stdout)
    assert set(shown) == set(rec)
    for k in (
        "id",
        "state",
        "status",
        "baseline",
        "branch",
        "worktree",
        "candidate",
        "checks",
        "review",
        "turns",
        "cost_usd",
        "events",
    ):
        assert shown[k] == rec[k], k
    assert shown["turns"] == 1 and shown["cost_usd"] == 0.0
    assert shown["events"] == len(wal.splitlines())
    rc, human, _ = run_cli_inproc(repo, "show", tid)
    assert rc == 0
    for needle in (tid, "completed", "ready", head, "pass", baseline):
        assert needle in human, needle

    # the event log, through the CLI
    evs = _events(repo, tid)
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    keys = {"seq", "ts", "task", "worker", "type", "data"}
    assert all(set(e) == keys and e["task"] == tid for e in evs)
    assert [e["worker"] for e in evs][:1] == [0] and evs[-1]["worker"] == 1
    assert {e["type"] for e in evs} <= EVENT_TYPES
    assert evs[0]["type"] == "task_started" and evs[-1]["type"] == "task_finished"
    assert sum(e["type"] == "task_finished" for e in evs) == 1
    finals = [e for e in evs if e["type"] == "state_changed" and e["data"]["to"] == "completed"]
    assert len(finals) == 1


def test_start_json_equals_show_json(repo: Path, tmp: Path) -> None:
    rc, rec, _ = start_json(repo, "g", "--worker", write_worker(tmp, FIX_AND_COMMIT), *NO_REVIEW)
    assert rc == 0
    shown = json.loads(run_sup(repo, "show", rec["id"], "--json").stdout)
    for k in set(rec) - {"owner_alive"}:
        assert shown[k] == rec[k], k
    assert shown["owner_alive"] is False  # the supervisor of a finished task is gone


# --- parked and failed ---------------------------------------------------------------------


def test_failing_required_check_parks_the_candidate(repo: Path, tmp: Path) -> None:
    rc, rec, err = start_json(
        repo,
        "g",
        "--check",
        QUICK_CHECK,
        "--worker",
        write_worker(tmp, COMMIT_WITHOUT_FIX),
        *NO_REVIEW,
    )
    assert rc == 3, err
    tid = rec["id"]
    assert rec["state"] == "blocked" and rec["status"] == "parked" and rec["exit_code"] == 3
    assert any("required checks failed" in r for r in rec["reasons"])
    c = rec["checks"][0]
    assert c["passed"] is False and c["exit_code"] == 1 and "add is wrong" in c["output_tail"]
    head = git(repo, "rev-parse", f"refs/heads/sup/{tid}")
    assert git(repo, "rev-parse", f"refs/sup/{tid}/candidate") == head
    note = json.loads(git(repo, "notes", "--ref=sup", "show", head))
    assert note["status"] == "parked"
    assert note["checks"][0]["passed"] is False
    assert any("required checks failed" in r for r in note["reasons"])
    assert _log_chain(repo, tid)[-1][1] == "task finished: parked"


WORKER_EDITS_STAGES_DELETES = """
import os, pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "add", "calc.py"], check=True)       # staged ...
p.write_text(p.read_text() + "# and changed again\\n")     # ... and modified again
os.remove("test_calc.py")                                   # a tracked file deleted
pathlib.Path("new_dir").mkdir()
pathlib.Path("new_dir/untracked.bin").write_bytes(bytes(range(256)) * 4)
pathlib.Path("notes.txt").write_text("hello\\n")
os.symlink("calc.py", "link_to_calc")
print("edited, not committed")
"""


def test_worker_without_commit_parks_and_wip_holds_the_work(repo: Path, tmp: Path) -> None:
    rc, rec, err = start_json(
        repo, "g", "--worker", write_worker(tmp, WORKER_EDITS_STAGES_DELETES), *NO_REVIEW
    )
    assert rc == 3, err
    tid = rec["id"]
    assert rec["status"] == "parked"
    reasons = " | ".join(rec["reasons"])
    assert "no local commit" in reasons and "uncommitted" in reasons
    wt = Path(rec["worktree"])
    baseline = rec["baseline"]
    # nothing was committed on the branch, no candidate
    assert git(repo, "rev-parse", f"refs/heads/sup/{tid}") == baseline
    assert git(repo, "for-each-ref", "--format=%(refname)", f"refs/sup/{tid}/candidate") == ""
    assert rec["candidate"] is None
    # the wip ref holds the worktree as it is on disk, byte for byte
    wip = git(repo, "rev-parse", f"refs/sup/{tid}/wip")
    assert rec["wip"] == wip
    assert git(repo, "rev-parse", f"{wip}^") == baseline
    listed = set(git(repo, "ls-tree", "-r", "--name-only", wip).split())
    assert listed == {"calc.py", "new_dir/untracked.bin", "notes.txt", "link_to_calc"}
    for name in ("calc.py", "new_dir/untracked.bin", "notes.txt"):
        blob = subprocess.run(
            ["git", "cat-file", "blob", f"{wip}:{name}"], cwd=repo, capture_output=True, check=True
        ).stdout
        assert blob == (wt / name).read_bytes(), name
    assert "120000 blob" in git(repo, "ls-tree", wip, "link_to_calc")
    # the worktree itself is left as the worker left it
    assert (wt / "calc.py").read_text().endswith("# and changed again\n")
    assert not (wt / "test_calc.py").exists()
    assert (wt / "new_dir" / "untracked.bin").read_bytes() == bytes(range(256)) * 4
    status = git(wt, "status", "--porcelain")
    assert "calc.py" in status and "notes.txt" in status
    assert any(e["type"] == "wip_saved" for e in _events(repo, tid))


def test_worker_that_cannot_start_fails_with_exit_4(repo: Path, tmp: Path) -> None:
    # It resolves (so the start is accepted) but the supervisor refuses to run it: anyone
    # could have rewritten it.
    bad = tmp / "worker"
    bad.write_text("#!/bin/sh\nexit 0\n")
    bad.chmod(0o777)
    rc, rec, err = start_json(repo, "g", "--worker", str(bad), *NO_REVIEW)
    assert rc == 4, err
    assert rec["state"] == "failed" and rec["status"] == "failed"
    assert any("world-writable" in r for r in rec["reasons"]), rec["reasons"]
    assert err.count("candidate failed") == 1, err
    assert "Traceback" not in err
    assert not list((common_dir(repo) / "sup" / "leases").glob("*.json"))
    # nothing is left behind but the record, its event log and its baseline ref
    assert not Path(rec["worktree"]).exists()
    assert git(repo, "branch", "--list", rec["branch"]) == ""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert any("never started" in r for r in rec["reasons"]), rec["reasons"]


def test_worker_program_that_does_not_resolve_is_refused_at_start(repo: Path, tmp: Path) -> None:
    rc, _rec, err = start_json(repo, "g", "--worker", str(tmp / "no-such-program"), *NO_REVIEW)
    assert rc == 2, err
    assert "no-such-program" in err and "Traceback" not in err
    assert not (common_dir(repo) / "sup").exists()
    assert git(repo, "branch", "--list", "sup/*") == ""


def test_exit_codes_without_json(repo: Path, tmp: Path) -> None:
    res = run_sup(repo, "start", "g", "--worker", "true", "--quiet", *NO_REVIEW)
    assert res.returncode == 3
    assert res.stderr == ""  # --quiet: no progress
    assert "parked" in res.stdout and "no local commit" in res.stdout


# --- watchdog, deadline, stop ------------------------------------------------------------------

HANG = """
import json, os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]])
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump({"worker": os.getpid(), "child": child.pid}, fh)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""

CHATTY_HANG = """
import json, os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]])
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump({"worker": os.getpid(), "child": child.pid}, fh)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    print("still working", flush=True)
    time.sleep(0.1)
"""


def _hang_worker(tmp: Path, body: str = HANG) -> tuple[str, Path]:
    pids = tmp / "pids.json"
    cmd = write_worker(tmp, body, "hang.py") + " " + shlex.quote(str(pids))
    return cmd, pids


def test_no_output_watchdog_parks_and_kills_the_worker_group(repo: Path, tmp: Path) -> None:
    cmd, pids = _hang_worker(tmp)
    rc, rec, err = start_json(repo, "g", "--worker", cmd, "--no-output-timeout", "1.5s", *NO_REVIEW)
    procs = json.loads(pids.read_text())
    try:
        assert rc == 3, err
        assert rec["status"] == "parked"
        assert any("watchdog" in r and "no output" in r for r in rec["reasons"]), rec["reasons"]
        assert procs["worker"] and procs["child"]  # it ran and started its child
        assert wait_dead(rec["worker"]["pid"], 2), "worker still running"
        # the worker and its child (both carry the pids file's path on their command line)
        assert wait_unmarked(str(pids), 2), "the worker or its child is still running"
        evs = _events(repo, rec["id"])
        wd = [e for e in evs if e["type"] == "watchdog_timeout"]
        assert len(wd) == 1 and wd[0]["data"]["kind"] == "no_output"
    finally:
        kill_marked(str(pids))


def test_deadline_with_no_closeout_grace(repo: Path, tmp: Path) -> None:
    cmd, pids = _hang_worker(tmp, CHATTY_HANG)  # keeps printing: only the deadline can end it
    spec = write_spec(
        tmp,
        f"""
        goal = "never finishes"
        [worker]
        kind = "process"
        argv = {json.dumps(shlex.split(cmd))}
        [review]
        kind = "none"
        [budget]
        closeout_grace = 0
        no_output_timeout = "1m"
        """,
    )
    t0 = time.monotonic()
    rc, rec, err = start_json(repo, "--spec", str(spec), "--deadline", "2s")
    took = time.monotonic() - t0
    procs = json.loads(pids.read_text())
    try:
        assert rc == 3, err
        assert any("deadline of 2s reached" in r for r in rec["reasons"]), rec["reasons"]
        assert took >= 2  # not before the deadline (how soon after it: bench/)
        assert procs["worker"] and wait_unmarked(str(pids), 2)
        types = [e["type"] for e in _events(repo, rec["id"])]
        assert "deadline_reached" in types and "watchdog_timeout" in types
        assert "worker_output" in types
    finally:
        kill_marked(str(pids))


def test_stop_from_another_process(repo: Path, tmp: Path) -> None:
    cmd, pids = _hang_worker(tmp)
    proc = popen_sup(repo, "start", "g", "--worker", cmd, *NO_REVIEW)
    procs: dict[str, int] = {}
    try:
        wait_for(lambda: pids.exists(), 20, what="the worker to start")
        procs = json.loads(pids.read_text())
        tid = wait_for(lambda: task_ids(repo), 5)[0]
        wait_for(lambda: read_record(repo, tid)["state"] == "running", 10, what="state running")
        # discard refuses while the supervisor owns the task, even with --force
        for extra in ([], ["--force"]):
            rc, _, err = run_cli_inproc(repo, "discard", tid, *extra)
            assert rc == 2 and "running supervisor" in err, err
        res = run_sup(repo, "stop", tid, "--wait", "20")
        assert res.returncode == 0, res.stderr
        assert "stopped" in res.stdout
        rc = proc.wait(20)
        assert rc == 5, proc.stderr.read() if proc.stderr else ""
        rec = read_record(repo, tid)
        assert rec["state"] == "stopped" and rec["status"] == "stopped" and rec["exit_code"] == 5
        assert procs["worker"] and wait_unmarked(str(pids), 2)
        types = [e["type"] for e in _events(repo, tid)]
        assert "stop_requested" in types and types[-1] == "task_finished"
        assert _log_chain(repo, tid)[-1][1] == "task finished: stopped"
        rc, _, err = run_cli_inproc(repo, "stop", tid)
        assert rc == 2 and "already ended" in err
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
        kill_marked(str(pids))


# --- init ---------------------------------------------------------------------------------


def test_init_is_idempotent(repo: Path) -> None:
    git(repo, "config", "--add", "notes.displayRef", "refs/notes/review")
    # the same identity in and out of this process (libgit2 keeps the HOME it started with,
    # and the allowed signer's principal follows user.email)
    git(repo, "config", "user.email", "t@example.invalid")
    first = run_sup(repo, "init", "--json")
    assert first.returncode == 0, first.stderr
    res = json.loads(first.stdout)
    assert Path(res["sup_dir"]) == common_dir(repo) / "sup"
    assert (common_dir(repo) / "sup").is_dir()
    assert res["protected"] == ["main", "master", "trunk", "develop", "integration"]
    assert res["changed"]
    cfg_before = (repo / ".git" / "config").read_bytes()
    rc, out, _ = run_cli_inproc(repo, "init")
    assert rc == 0
    assert "nothing changed" in out
    assert (repo / ".git" / "config").read_bytes() == cfg_before
    refs = git(repo, "config", "--get-all", "notes.displayRef").splitlines()
    assert refs.count("refs/notes/[s]up") == 1 and "refs/notes/review" in refs
    assert git(repo, "config", "--get-all", "sup.protected").splitlines() == res["protected"]
    third = json.loads(
        run_cli_inproc(repo, "init", "--protected", "release", "--protected", "main", "--json")[1]
    )
    # sup.protected adds to the defaults
    everything = ["main", "master", "trunk", "develop", "integration", "release"]
    assert third["protected"] == everything
    assert git(repo, "config", "--get-all", "sup.protected").splitlines() == ["release", "main"]
    # a later plain init keeps what was configured
    assert json.loads(run_cli_inproc(repo, "init", "--json")[1])["protected"] == everything


def test_init_keeps_git_default_notes_visible(repo: Path) -> None:
    """With no displayRef set, git shows refs/notes/commits; init must not hide them."""
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "notes", "add", "-m", "a user note", head)
    assert run_cli_inproc(repo, "init")[0] == 0
    shown = git(repo, "log", "-1", head)
    assert "a user note" in shown


def test_init_from_a_linked_worktree_uses_the_common_dir(repo: Path, tmp: Path) -> None:
    git(repo, "worktree", "add", "-q", str(tmp / "linked"), "-b", "other")
    res = run_sup(tmp / "linked", "init", "--json")
    assert res.returncode == 0, res.stderr
    assert Path(json.loads(res.stdout)["sup_dir"]) == (repo / ".git" / "sup").resolve()
    assert not (repo / ".git" / "worktrees" / "linked" / "sup").exists()


@pytest.mark.parametrize("cmd", [["show"], ["log"], ["stop"], ["discard"]])
def test_commands_need_a_task_id(repo: Path, cmd: list[str]) -> None:
    rc, _, err = run_cli_inproc(repo, *cmd)
    assert rc == 2 and "Traceback" not in err


def test_worker_env_is_clean_of_outer_git_location(repo: Path, tmp: Path) -> None:
    """GIT_DIR / GIT_INDEX_FILE of the caller must not leak into the worker."""
    seen = tmp / "env.json"
    worker = write_worker(
        tmp,
        textwrap.dedent(f"""
        import json, os
        json.dump({{k: os.environ.get(k) for k in ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE", "GITSUP_TASK")}},
                  open({str(seen)!r}, "w"))
        """)
        + FIX_AND_COMMIT,
    )
    res = run_sup(
        repo,
        "start",
        "g",
        "--worker",
        worker,
        "--json",
        *NO_REVIEW,
        env={"GIT_INDEX_FILE": str(repo / ".git" / "index"), "GIT_DIR": str(repo / ".git")},
    )
    # With GIT_DIR set, `git sup` itself runs against that repo: it must still work.
    assert res.returncode == 0, res.stderr
    got = json.loads(seen.read_text())
    assert got["GIT_DIR"] is None and got["GIT_INDEX_FILE"] is None and got["GIT_WORK_TREE"] is None
    assert got["GITSUP_TASK"] == json.loads(res.stdout)["id"]


PER_TASK_COMMIT = """
import os, pathlib, subprocess
pathlib.Path("mine.txt").write_text(os.environ["GITSUP_TASK"] + "\\n")
subprocess.run(["git", "add", "mine.txt"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "task " + os.environ["GITSUP_TASK"]], check=True)
"""


def test_concurrent_starts_in_a_fresh_repository(repo: Path, tmp: Path) -> None:
    """Several `git sup start` at once, before anyone ran init: distinct tasks, one note each,
    config written once."""
    worker = write_worker(tmp, PER_TASK_COMMIT)
    procs = [
        popen_sup(repo, "start", f"task {i}", "--worker", worker, "--json", "--quiet", *NO_REVIEW)
        for i in range(4)
    ]
    recs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        recs.append(json.loads(out))
    ids = {r["id"] for r in recs}
    assert len(ids) == 4
    assert len({r["worktree"] for r in recs}) == 4
    for r in recs:
        note = json.loads(git(repo, "notes", "--ref=sup", "show", r["candidate"]))
        assert note["task"] == r["id"] and note["status"] == "ready"
        assert git(repo, "show", f"{r['candidate']}:mine.txt") == r["id"]
    assert (
        git(repo, "config", "--get-all", "notes.displayRef").splitlines().count("refs/notes/[s]up")
        == 1
    )
    assert len(git(repo, "config", "--get-all", "sup.protected").splitlines()) == 5
    assert len(git(repo, "notes", "--ref=sup", "list").splitlines()) == 4
