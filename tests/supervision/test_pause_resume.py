"""`git sup pause` / `resume` through the real CLI against a process worker that counts.

While paused nothing of the task runs (its counter stops, and so does the counter of a second
process it started before the pause, which keeps trying to thaw it); the deadline does not
end a paused task (it moves later by the time paused); resume lets it finish, ready."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.conftest import run_sup
from tests.helpers.sup import read_record, wait_for, write_worker

# A second process the worker starts before the pause: it counts too and, every step, tries
# to thaw its own cgroup and to SIGCONT the worker's process group.
SIBLING = r"""
import os, pathlib, signal, sys, time
pgid = int(sys.argv[1])
out = pathlib.Path("sibling.txt")
tried = []
n = 0
while True:
    n += 1
    out.write_text(str(n))
    own = [l[3:] for l in open("/proc/self/cgroup").read().splitlines() if l.startswith("0::")]
    for base in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        p = base + (own[0] if own else "/") + "/cgroup.freeze"
        try:
            with open(p, "w") as f:
                f.write("0")
            tried.append(p + ": written")
        except OSError as e:
            tried.append(f"{p}: errno {e.errno}")
    try:
        os.killpg(pgid, signal.SIGCONT)
    except OSError:
        pass
    if n == 1:
        pathlib.Path("thaw-attempts.txt").write_text("\n".join(tried))
    tried.clear()
    time.sleep(0.1)
"""

COUNTER = r"""
import os, pathlib, signal, subprocess, sys, time
pathlib.Path("sibling.py").write_text(SIBLING)
sib = subprocess.Popen([sys.executable, "sibling.py", str(os.getpgrp())], start_new_session=True)
for i in range(1, 26):
    pathlib.Path("counter.txt").write_text(str(i))
    time.sleep(0.2)
os.kill(sib.pid, signal.SIGKILL)
sib.wait()
pathlib.Path("done.txt").write_text("counted to 25\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "count"], check=True)
print("done")
"""


def _read_int(p: Path) -> int:
    try:
        return int(p.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _types(repo: Path, tid: str) -> list[dict[str, object]]:
    log = run_sup(repo, "log", tid, "--json").stdout
    return [json.loads(line) for line in log.splitlines()]


def test_pause_freezes_the_task_and_stops_its_deadline(repo: Path, tmp_path: Path) -> None:
    body = COUNTER.replace("SIBLING)", repr(SIBLING) + ")")
    worker = write_worker(tmp_path, body)
    res = run_sup(
        repo,
        *("start", "--detach", "--worker", worker, "--review", "none", "-q"),
        *("--deadline", "12s", "--no-output-timeout", "6s", "count"),
    )
    assert res.returncode == 0, res.stderr
    tid = res.stdout.strip().split()[-1]
    wt = Path(read_record(repo, tid)["worktree"])
    counter, sibling = wt / "counter.txt", wt / "sibling.txt"
    wait_for(lambda: _read_int(counter) >= 3 and _read_int(sibling) >= 3, timeout=60, what="count")

    r = run_sup(repo, "pause", tid, "--json")
    assert r.returncode == 0, r.stderr
    taken = json.loads(r.stdout)
    assert taken["event"] == "task_paused" and taken["data"]["how"] == "cgroup frozen"
    assert taken["data"]["processes"] >= 2  # the worker and its sibling
    # paused twice: refused, exit 2
    again = run_sup(repo, "pause", tid)
    assert again.returncode == 2 and "already paused" in again.stderr, again.stderr

    shown = json.loads(run_sup(repo, "show", tid, "--json").stdout)
    assert shown["paused_by_user"]["by"] and shown["paused_by_user"]["since"]
    ls = json.loads(run_sup(repo, "ls", "--json").stdout)
    row = next(x for x in ls if x["id"] == tid)
    assert row["state"] == "paused"
    assert any("git sup resume" in a for a in row["attention"]), row

    # nothing of the task runs: both counters stand still, for longer than the deadline and
    # the no-output watchdog would allow
    c0, s0 = _read_int(counter), _read_int(sibling)
    time.sleep(14)
    assert (_read_int(counter), _read_int(sibling)) == (c0, s0)
    assert c0 < 25
    rec = read_record(repo, tid)
    assert rec["state"] == "running" and rec["finished_at"] is None
    types = [e["type"] for e in _types(repo, tid)]
    assert "deadline_reached" not in types and "watchdog_timeout" not in types

    r = run_sup(repo, "resume", tid, "--json")
    assert r.returncode == 0, r.stderr
    resumed = json.loads(r.stdout)["data"]
    assert resumed["how"] == "cgroup thawed" and resumed["paused"] >= 14
    again = run_sup(repo, "resume", tid)
    assert again.returncode == 2 and "not paused" in again.stderr, again.stderr

    wait_for(lambda: read_record(repo, tid)["finished_at"] is not None, timeout=90, what="end")
    rec = read_record(repo, tid)
    assert rec["status"] == "ready", rec["reasons"]
    assert rec["paused_by_user"] is None
    assert (wt / "done.txt").exists() or rec["candidate"]
    # the sibling never wrote its cgroup's cgroup.freeze (from inside the sandbox)
    attempts = (wt / "thaw-attempts.txt").read_text()
    assert "written" not in attempts, attempts
    evs = _types(repo, tid)
    paused = next(e for e in evs if e["type"] == "task_paused")
    resumed_ev = next(e for e in evs if e["type"] == "task_resumed")
    assert paused["data"]["by"] == resumed_ev["data"]["by"]
    assert "deadline_reached" not in [e["type"] for e in evs]
    # ended: pause and resume are refused
    for cmd in ("pause", "resume"):
        r = run_sup(repo, cmd, tid)
        assert r.returncode == 2 and "already ended" in r.stderr, r.stderr
    r = run_sup(repo, "pause", "20991231-ffffff")
    assert r.returncode == 2 and "Traceback" not in r.stderr
