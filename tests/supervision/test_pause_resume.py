"""`git sup pause` / `resume` through the real CLI against a process worker that counts.

While paused nothing of the task runs (its counter stops, and so does the counter of a second
process it started before the pause, which keeps trying to thaw it); the deadline does not
end a paused task (it moves later by the time paused); resume lets it finish, ready."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from tests.conftest import PYTHON, run_sup
from tests.helpers.sup import check_cmd, read_record, wait_for, write_spec, write_worker

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
    assert "paused    by " in run_sup(repo, "show", tid).stdout
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
    assert f"/{tid}-w1/cgroup.freeze: errno" in attempts, attempts  # its own cgroup, refused
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


# Claude Code's stand-in: its first two turns commit notes only (the check fails: a repair
# round), its third fixes add.
FAKE_CLAUDE = f"""#!{PYTHON}
import json, subprocess, sys
if "--version" in sys.argv:
    print("2.1.328 (stand-in)")
    sys.exit(0)
turn = 0
for line in sys.stdin:
    turn += 1
    if turn < 3:
        open("NOTES.md", "w").write(f"looked {{turn}}\\n")
        subprocess.run(["git", "add", "NOTES.md"], check=True)
        subprocess.run(["git", "commit", "-qm", "notes"], check=True)
    else:
        open("calc.py", "w").write("def add(a, b):\\n    return a + b\\n")
        subprocess.run(["git", "commit", "-qam", "fix add"], check=True)
    sys.stdout.write(json.dumps({{"type": "result", "subtype": "success", "is_error": False,
        "result": "turn", "num_turns": 1, "session_id": "s1", "total_cost_usd": 0.0}}) + "\\n")
    sys.stdout.flush()
"""
CHECK = check_cmd("from calc import add; assert add(1, 2) == 3")


def _frozen(repo: Path, tid: str) -> bool:
    cg = read_record(repo, tid)["worker"]["cgroup"]
    return "frozen 1" in (Path(cg) / "cgroup.events").read_text()


def _count(repo: Path, tid: str, type_: str) -> int:
    return [e["type"] for e in _types(repo, tid)].count(type_)


def test_a_pause_and_the_hold_between_turns_do_not_undo_each_other(
    repo: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "claude"
    fake.write_text(FAKE_CLAUDE)
    fake.chmod(0o755)
    spec = write_spec(
        tmp_path,
        f"""
        goal = "fix add"
        [[checks]]
        name = "add"
        argv = {json.dumps(shlex.split(CHECK))}
        [worker]
        kind = "claude"
        argv = [{json.dumps(str(fake))}]
        env = {{ ANTHROPIC_API_KEY = "sk-not-a-key" }}
        stop_grace = "1s"
        [review]
        kind = "none"
        [budget]
        max_turns = 1
        on_exhausted = "pause"
        """,
    )
    res = run_sup(repo, "start", "--detach", "-q", "--spec", str(spec))
    assert res.returncode == 0, res.stderr
    tid = res.stdout.strip().split()[-1]
    wait_for(lambda: _count(repo, tid, "budget_paused") == 1, timeout=60, what="budget pause")
    assert _frozen(repo, tid)  # held between turns
    r = run_sup(repo, "pause", tid, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["data"]["how"] == "cgroup frozen"
    r = run_sup(repo, "resume", tid, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["data"]["how"] == "still held between turns"
    assert _frozen(repo, tid)
    # paused again: the repair turn that the failed check brings does not thaw it
    assert run_sup(repo, "pause", tid).returncode == 0
    assert run_sup(repo, "continue", tid, "--add-turns", "3").returncode == 0
    wait_for(lambda: _count(repo, tid, "repair_requested") == 2, timeout=60, what="repair")
    wait_for(lambda: read_record(repo, tid)["state"] == "running", timeout=60, what="running")
    time.sleep(2)  # a thawed worker would have finished its turn by now
    assert _frozen(repo, tid)
    assert _count(repo, tid, "turn_completed") == 2
    r = run_sup(repo, "resume", tid, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["data"]["how"] == "cgroup thawed"
    wait_for(lambda: read_record(repo, tid)["finished_at"] is not None, timeout=90, what="end")
    rec = read_record(repo, tid)
    assert rec["status"] == "ready", rec["reasons"]
    assert _count(repo, tid, "turn_completed") == 3
