"""Command reviewers and deciders with a process worker: evidence in, verdicts out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import git, run_sup

FIX = "printf 'def add(a, b):\\n    return a + b\\n' > calc.py\ngit commit -qam 'Fix add'\n"


def _script(path: Path, body: str, shell: str = "#!/bin/sh\n") -> str:
    path.write_text(shell + body)
    path.chmod(0o755)
    return str(path)


def _py(path: Path, body: str) -> str:
    return _script(path, body, f"#!{sys.executable}\n")


def _run(repo: Path, tmp: Path, worker: str, extra: str) -> dict[str, Any]:
    spec = tmp / "task.toml"
    spec.write_text(
        f'goal = "Fix add"\n[worker]\nkind = "process"\nargv = ["{worker}"]\n'
        f'[[checks]]\nname = "tests"\nargv = ["{sys.executable}", "-m", "pytest", "-q", "-p", "no:cacheprovider"]\n'
        + extra
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q")
    rec: dict[str, Any] = json.loads(res.stdout)
    # each caller pins the status; the exit code is the one that status has
    assert res.returncode == {"ready": 0, "parked": 3, "failed": 4}[rec["status"]], res.stderr
    rec["_rc"] = res.returncode
    return rec


def _events(repo: Path, task: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in run_sup(repo, "log", task, "--json").stdout.splitlines()]


REVIEWER_SAVES_EVIDENCE = """
import json, sys, pathlib
ev = json.load(sys.stdin)
pathlib.Path(sys.argv[1]).write_text(json.dumps(ev))
print(json.dumps({"verdict": sys.argv[2], "findings": json.loads(sys.argv[3])}))
"""


def test_command_reviewer_gets_the_evidence_and_passes(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", FIX)
    r = _py(tmp_path / "review.py", REVIEWER_SAVES_EVIDENCE)
    saved = tmp_path / "evidence.json"
    rec = _run(
        repo, tmp_path, w, f'[review]\nkind = "command"\nargv = ["{r}", "{saved}", "pass", "[]"]\n'
    )
    assert rec["status"] == "ready", rec["reasons"]
    assert rec["review"]["kind"] == "command" and rec["review"]["verdict"] == "pass"
    ev = json.loads(saved.read_text())
    assert ev["complete"] is True
    assert ev["spec"]["goal"] == "Fix add"
    assert "+    return a + b" in ev["diff"]
    assert [c["summary"] for c in ev["commits"]] == ["Fix add"]
    assert ev["checks"][0]["passed"] is True
    note = json.loads(git(repo, "notes", "--ref=sup", "show", rec["candidate"]))
    assert note["review"]["verdict"] == "pass"
    types = [e["type"] for e in _events(repo, rec["id"])]
    assert (
        types.index("review_started")
        < types.index("review_result")
        < types.index("candidate_ready")
    )


def test_revise_with_a_worker_that_cannot_repair_parks(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", FIX)
    finding = json.dumps(
        [
            {
                "severity": "P2",
                "title": "name the function better",
                "path": "calc.py",
                "line": 1,
                "detail": "",
            }
        ]
    )
    r = _py(tmp_path / "review.py", REVIEWER_SAVES_EVIDENCE)
    rec = _run(
        repo,
        tmp_path,
        w,
        f'[review]\nkind = "command"\nargv = ["{r}", "{tmp_path / "e.json"}", "revise", {json.dumps(finding)}]\n',
    )
    assert rec["status"] == "parked"
    assert any("cannot take a repair turn" in x for x in rec["reasons"]), rec["reasons"]
    assert rec["review"]["findings"][0]["title"] == "name the function better"


def test_garbage_reviewer_is_retried_then_parks(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", FIX)
    count = tmp_path / "count"
    r = _script(tmp_path / "review.sh", f"echo x >> {count}\necho 'LGTM!'\n")
    rec = _run(repo, tmp_path, w, f'[review]\nkind = "command"\nargv = ["{r}"]\nretries = 2\n')
    assert rec["status"] == "parked"
    assert len(count.read_text().splitlines()) == 3
    assert rec["review"]["attempts"] == 3 and rec["review"]["verdict"] is None
    assert any("review failed after 3 attempt" in x for x in rec["reasons"])


def test_reviewer_timeout_parks(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", FIX)
    r = _script(tmp_path / "review.sh", "sleep 30\n")
    rec = _run(
        repo,
        tmp_path,
        w,
        f'[review]\nkind = "command"\nargv = ["{r}"]\ntimeout = "1s"\nretries = 0\n',
    )
    assert rec["status"] == "parked"
    assert "timed out" in (rec["review"]["error"] or "")


def test_truncated_evidence_can_never_pass(repo: Path, tmp_path: Path) -> None:
    # a diff far over the evidence bound
    make_big = "python3 -c \"open('big.py', 'w').write('x = 1\\n' * 120000)\"\n"
    w = _script(tmp_path / "w.sh", FIX + make_big + "git add big.py\ngit commit -qm big\n")
    r = _py(tmp_path / "review.py", REVIEWER_SAVES_EVIDENCE)
    saved = tmp_path / "evidence.json"
    rec = _run(
        repo, tmp_path, w, f'[review]\nkind = "command"\nargv = ["{r}", "{saved}", "pass", "[]"]\n'
    )
    ev = json.loads(saved.read_text())
    assert ev["complete"] is False and ev["truncated"]
    assert rec["status"] == "parked"
    assert rec["review"]["verdict"] == "human"


def test_review_none_is_recorded(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", FIX)
    rec = _run(repo, tmp_path, w, '[review]\nkind = "none"\n')
    assert rec["status"] == "ready"
    assert rec["review"]["kind"] == "none"
    note = json.loads(git(repo, "notes", "--ref=sup", "show", rec["candidate"]))
    assert note["review"]["kind"] == "none"


DECIDER = """
import json, sys, pathlib
req = json.load(sys.stdin)
pathlib.Path(sys.argv[1]).open("a").write(json.dumps(req) + "\\n")
print(sys.argv[2])
"""


def test_command_decider_park(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", FIX)
    d = _py(tmp_path / "decider.py", DECIDER)
    seen = tmp_path / "seen.jsonl"
    answer = json.dumps({"action": "park", "reason": "not today"})
    rec = _run(
        repo,
        tmp_path,
        w,
        f'[review]\nkind = "none"\n[decider]\nkind = "command"\nargv = ["{d}", "{seen}", {json.dumps(answer)}]\n',
    )
    assert rec["status"] == "parked"
    assert "not today" in rec["reasons"]
    req = json.loads(seen.read_text().splitlines()[0])
    assert req["event"] == "turn_completed" and req["goal"] == "Fix add"
    assert rec["decisions"][0]["action"] == "park"


def test_command_decider_noop_after_clean_exit_verifies(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", FIX)
    d = _py(tmp_path / "decider.py", DECIDER)
    rec = _run(
        repo,
        tmp_path,
        w,
        f'[review]\nkind = "none"\n[decider]\nkind = "command"\nargv = ["{d}", "{tmp_path / "s"}", "{{}}"]\n',
    )
    assert rec["status"] == "ready", rec["reasons"]


def test_failing_decider_is_retried_then_parks(repo: Path, tmp_path: Path) -> None:
    w = _script(tmp_path / "w.sh", FIX)
    count = tmp_path / "count"
    d = _script(tmp_path / "d.sh", f"echo x >> {count}\nexit 3\n")
    rec = _run(
        repo,
        tmp_path,
        w,
        f'[review]\nkind = "none"\n[decider]\nkind = "command"\nargv = ["{d}"]\n[autonomy]\nmax_decision_retries = 1\n',
    )
    assert rec["status"] == "parked"
    assert len(count.read_text().splitlines()) == 2
    assert any("decider failed" in x for x in rec["reasons"]), rec["reasons"]


def test_command_decider_sees_the_deadline_and_close_out(repo: Path, tmp_path: Path) -> None:
    # The same task twice: first far from its deadline, then with the deadline's warning
    # already given (a 599 s warning of a 600 s deadline) when the turn ends.
    d = _py(tmp_path / "decider.py", DECIDER)
    verify = json.dumps({"action": "verify"})
    seen = []
    for n, (warning, pause) in enumerate((("0", ""), ('"599s"', "sleep 2\n"))):
        w = _script(tmp_path / f"w{n}.sh", pause + FIX)
        log = tmp_path / f"seen{n}.jsonl"
        rec = _run(
            repo,
            tmp_path,
            w,
            f'[review]\nkind = "none"\n[decider]\nkind = "command"\n'
            f'argv = ["{d}", "{log}", {json.dumps(verify)}]\n'
            f'[budget]\ndeadline = "10m"\ndeadline_warning = {warning}\n',
        )
        assert rec["status"] == "ready", rec["reasons"]
        seen.append(json.loads(log.read_text().splitlines()[0]))
    import datetime

    for req in seen:
        assert req["event"] == "turn_completed"
        assert 0 < req["remaining_seconds"] <= 600
        left = datetime.datetime.fromisoformat(req["deadline"]) - datetime.datetime.now(
            datetime.UTC
        )
        assert 0 < left.total_seconds() <= 600
    assert seen[0]["close_out"] is False
    assert seen[1]["close_out"] is True


# A hostile check (the worker's code runs in the checks) leaves hard links in the worktree:
# two names of one file it wrote, a tracked file replaced by one, and a try at a host file.
HARD_LINKS = """
import os, pathlib, sys
pathlib.Path("hidden.txt").write_text(sys.argv[1][::-1])  # not as in its argv
os.link("hidden.txt", "leak.txt")
os.unlink("calc.py")
os.link("hidden.txt", "calc.py")
try:
    os.link(sys.argv[2], "host-leak.txt")
    result = "linked"
except OSError as exc:
    result = exc.strerror
pathlib.Path("host-link-result.txt").write_text(result)
"""


def test_review_evidence_holds_the_worker_and_never_a_hard_link(repo: Path, tmp_path: Path) -> None:
    marker, host_marker = "HIDDEN-" + "7f3a" * 4, "HOST-SECRET-" + "c0de" * 4
    secret = tmp_path / "host-secret"
    secret.write_text(host_marker)
    secret.chmod(0o600)
    w = _script(tmp_path / "w.sh", "echo WORKER-SAYS-fixed-add\n" + FIX)
    check = _py(tmp_path / "links.py", HARD_LINKS)
    r = _py(tmp_path / "review.py", REVIEWER_SAVES_EVIDENCE)
    saved = tmp_path / "evidence.json"
    spec = tmp_path / "task.toml"
    spec.write_text(
        f'goal = "Fix add"\n[worker]\nkind = "process"\nargv = ["{w}"]\n'
        f'[[checks]]\nname = "links"\nargv = ["{check}", "{marker[::-1]}", "{secret}"]\n'
        f'[review]\nkind = "command"\nargv = ["{r}", "{saved}", "pass", "[]"]\n'
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q")
    rec = json.loads(res.stdout)
    ev = json.loads(saved.read_text())
    # the worker's own words are there, as its claim
    assert "WORKER-SAYS-fixed-add" in ev["worker"]["output_tail"]
    assert ev["worker"]["last_result"] is not None
    # each multiply-linked file is marked, never read; the evidence is incomplete, so the
    # reviewer's pass does not stand
    untracked = {u["path"]: u for u in ev["untracked"]}
    for name in ("hidden.txt", "leak.txt"):
        assert untracked[name]["content"] is None
        assert untracked[name]["skipped"] == "hard link (3 links): not read"
    assert any(t.startswith("calc.py: hard link") for t in ev["truncated"]), ev["truncated"]
    assert ev["complete"] is False and rec["review"]["verdict"] == "human"
    wt = Path(rec["worktree"])
    host = (wt / "host-link-result.txt").read_text()
    if host == "linked":
        assert untracked["host-leak.txt"]["content"] is None
    assert marker not in json.dumps(ev) and host_marker not in json.dumps(ev)
    # nor anywhere else gitsup wrote: no Git object, no event, no record
    objects = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    assert marker.encode() not in objects and host_marker.encode() not in objects
    sup = Path(git(repo, "rev-parse", "--git-common-dir").strip())
    sup = (repo / sup if not sup.is_absolute() else sup) / "sup"
    for f in sup.rglob("*"):
        if f.is_file() and not f.is_symlink():
            data = f.read_bytes()
            assert marker.encode() not in data and host_marker.encode() not in data, f
