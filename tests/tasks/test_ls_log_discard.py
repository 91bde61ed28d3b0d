"""`git sup ls`, `log` and `discard` on real tasks."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import EDIT_ONLY, FIX_AND_COMMIT, common_dir, run_cli_inproc, write_worker

NO_REVIEW = ("--review", "none")
LS_KEYS = {
    "id",
    "state",
    "status",
    "age",
    "branch",
    "source_branch",
    "behind",
    "goal",
    "candidate",
    "discarded",
    "attention",
    "overlaps",
    "queue_repair",
}


def _start(repo: Path, *args: str) -> dict:
    """A quick task through the CLI entry point in this process (the tasks are only material
    for ls/log/discard here; the console-script contract of start is tested elsewhere)."""
    rc, out, err = run_cli_inproc(repo, "start", *args, "--json", "--quiet", *NO_REVIEW)
    rec = json.loads(out)
    # a worker that commits the fix is ready (0); one that commits nothing is parked (3)
    assert rc == {"ready": 0, "parked": 3}[rec["status"]], (rc, err)
    return rec


def _commit(repo: Path, name: str) -> str:
    (repo / name).write_text(name + "\n")
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"add {name}")
    return git(repo, "rev-parse", "HEAD")


def _ls(repo: Path, *, script: bool = False) -> dict[str, dict]:
    if script:
        res = run_sup(repo, "ls", "--json")
        rc, out, err = res.returncode, res.stdout, res.stderr
    else:
        rc, out, err = run_cli_inproc(repo, "ls", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert all(set(r) == LS_KEYS for r in rows), rows
    return {r["id"]: r for r in rows}


def test_ls_with_several_tasks_and_behind(repo: Path, tmp: Path) -> None:
    rc, out, _ = run_cli_inproc(repo, "ls")
    assert rc == 0 and "no tasks" in out
    assert run_cli_inproc(repo, "ls", "--json")[1].strip() == "[]"

    fixer = write_worker(tmp, FIX_AND_COMMIT)
    t1 = _start(repo, "first: fix add\nmore lines of goal", "--worker", fixer)
    _commit(repo, "one.txt")
    t2 = _start(repo, "second", "--worker", "true")
    git(repo, "branch", "feature")
    t3 = _start(repo, "third", "--worker", "true", "--base", "feature")
    t4 = _start(repo, "fourth", "--worker", "true", "--base", git(repo, "rev-parse", "HEAD"))
    _commit(repo, "two.txt")

    rows = _ls(repo, script=True)
    assert list(rows) == [t["id"] for t in (t1, t2, t3, t4)]  # creation order
    r1, r2, r3, r4 = (rows[t["id"]] for t in (t1, t2, t3, t4))
    assert (r1["state"], r1["status"], r1["candidate"]) == ("completed", "ready", t1["candidate"])
    assert (r2["state"], r2["status"], r2["candidate"]) == ("blocked", "parked", None)
    assert r1["goal"] == "first: fix add"
    assert r1["branch"] == f"sup/{t1['id']}"
    assert (r1["source_branch"], r1["behind"]) == ("main", 2)
    assert (r2["source_branch"], r2["behind"]) == ("main", 1)
    assert (r3["source_branch"], r3["behind"]) == ("feature", 0)
    assert (r4["source_branch"], r4["behind"]) == (None, None)
    assert all(isinstance(r["age"], int | float) and 0 <= r["age"] < 600 for r in rows.values())

    # the branch a task came from moves on: its behind count follows
    git(repo, "checkout", "-q", "feature")
    _commit(repo, "three.txt")
    git(repo, "checkout", "-q", "main")
    assert _ls(repo)[t3["id"]]["behind"] == 1
    # a deleted source branch: unknown, not an error
    git(repo, "branch", "-D", "feature")
    assert _ls(repo)[t3["id"]]["behind"] is None

    text = run_sup(repo, "ls")
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert lines[0].split()[:5] == ["ID", "STATE", "STATUS", "AGE", "BEHIND"]
    assert len(lines) == 5
    line1 = next(ln for ln in lines if ln.startswith(t1["id"]))
    assert "completed" in line1 and "ready" in line1 and "2 main" in line1


def test_ls_skips_a_corrupt_record(repo: Path, tmp: Path) -> None:
    t1 = _start(repo, "ok", "--worker", "true")
    bad = common_dir(repo) / "sup" / "tasks" / "20260101-000000"
    bad.mkdir()
    (bad / "task.json").write_text("{ not json")
    rows = _ls(repo)
    assert list(rows) == [t1["id"]]


def test_log_one_event_per_line(repo: Path) -> None:
    t = _start(repo, "g", "--worker", "true")
    res = run_sup(repo, "log", t["id"], "--json")
    assert res.returncode == 0
    evs = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(evs) == t["events"]
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    for e in evs:
        assert set(e) == {"seq", "ts", "task", "worker", "type", "data"}  # every record: its worker
        assert e["task"] == t["id"] and isinstance(e["ts"], float) and isinstance(e["data"], dict)
    assert [e["ts"] for e in evs] == sorted(e["ts"] for e in evs)
    rc, text, _ = run_cli_inproc(repo, "log", t["id"])
    assert rc == 0
    lines = text.splitlines()
    assert len(lines) == len(evs)
    assert lines[0].split()[0] == "1" and "task_started" in lines[0]
    assert "task_finished" in lines[-1]


# --- discard ------------------------------------------------------------------------------


def _refs(repo: Path, tid: str) -> list[str]:
    return git(
        repo, "for-each-ref", "--format=%(refname)", f"refs/sup/{tid}/", f"refs/heads/sup/{tid}"
    ).split()


def test_discard_refuses_uncaptured_work_then_force(repo: Path, tmp: Path) -> None:
    t = _start(repo, "g", "--worker", write_worker(tmp, FIX_AND_COMMIT))
    tid, wt = t["id"], Path(t["worktree"])
    refs_before = _refs(repo, tid)
    assert {
        f"refs/heads/sup/{tid}",
        f"refs/sup/{tid}/baseline",
        f"refs/sup/{tid}/candidate",
        f"refs/sup/{tid}/log",
    } <= set(refs_before)
    (wt / "later.txt").write_text("written after the task ended\n")
    res = run_sup(repo, "discard", tid)  # the console script: exit code and message
    assert res.returncode == 2
    assert "uncommitted" in res.stderr and "--force" in res.stderr and "Traceback" not in res.stderr
    assert (wt / "later.txt").exists()

    res = run_sup(repo, "discard", tid, "--force", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["task"] == tid and any("worktree" in r for r in out["removed"])
    assert set(out["kept"]) == set(refs_before)
    assert not wt.exists()
    assert str(wt) not in git(repo, "worktree", "list", "--porcelain")
    assert _refs(repo, tid) == refs_before  # the refs are the record: they stay
    shown = json.loads(run_cli_inproc(repo, "show", tid, "--json")[1])
    assert shown["discarded_at"] is not None and shown["state"] == "completed"
    # again: nothing left to remove, still fine
    assert run_cli_inproc(repo, "discard", tid)[0] == 0


def test_discard_of_work_captured_in_wip_needs_no_force(repo: Path, tmp: Path) -> None:
    t = _start(repo, "g", "--worker", write_worker(tmp, EDIT_ONLY))
    assert t["status"] == "parked" and t["wip"]
    wt = Path(t["worktree"])
    rc, out, err = run_cli_inproc(repo, "discard", t["id"])
    assert rc == 0, err
    assert not wt.exists()
    assert git(repo, "rev-parse", f"refs/sup/{t['id']}/wip") == t["wip"]
    assert "removed worktree" in out and f"kept    refs/sup/{t['id']}/wip" in out


def test_discard_refuses_when_the_wip_is_out_of_date(repo: Path, tmp: Path) -> None:
    t = _start(repo, "g", "--worker", write_worker(tmp, EDIT_ONLY))
    wt = Path(t["worktree"])
    (wt / "notes.txt").write_text("changed after the wip snapshot\n")
    rc, _, err = run_cli_inproc(repo, "discard", t["id"])
    assert rc == 2 and "not captured" in err
    assert wt.exists()
