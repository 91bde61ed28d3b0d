"""A task's cgroup bounds what its worker may take (pids.max, the memory limit), and what is
verified is what the worker left: nothing of it runs while its work is imported and checked.

Real `git sup` runs with process workers; every attack is a script the worker runs inside
its sandbox, and each effect is checked from outside (the record, the event log, files the
checks wrote, processes alive)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import psutil

from gitsup.ids import TaskId
from gitsup.layout import Layout
from gitsup.store.events import EventLog
from tests.conftest import PYTHON, git, run_sup
from tests.helpers.require import requires
from tests.helpers.sup import common_dir, write_spec

pytestmark = requires("cgroup")


def _worker(tmp: Path, body: str, name: str = "worker.py") -> str:
    path = tmp / name
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)


def _run(
    repo: Path, tmp: Path, worker: str, extra: str = "", env: dict[str, str] | None = None
) -> dict[str, Any]:
    spec = write_spec(
        tmp,
        f"""
        goal = "test"
        [worker]
        kind = "process"
        argv = ["{PYTHON}", "{worker}"]
        [review]
        kind = "none"
        """
        + textwrap.dedent(extra),
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q", timeout=240, env=env)
    assert res.stdout.strip(), res.stderr
    rec: dict[str, Any] = json.loads(res.stdout)
    return rec


def _events(repo: Path, task: str) -> list[dict[str, Any]]:
    log = EventLog(Layout(common_dir(repo)).events(TaskId(task)), TaskId(task))
    return [e.as_dict() for e in log.read()]


def _marked(task: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("GITSUP_TASK") == task:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def _gone(rec: dict[str, Any]) -> None:
    """Nothing of the task is left: no process, no cgroup (v2 or v1)."""
    assert not _marked(rec["id"]), "a process of the task survived it"
    cg = rec["worker"]["cgroup"]
    assert cg and not Path(cg).exists(), cg
    for where in (rec.get("sandbox") or {}).get("limits", {}).values():
        if where["where"].startswith("cgroup v1 "):
            assert not Path(where["where"][len("cgroup v1 ") :]).exists(), where


# A fork bomb with its own safety cap: it forks sleeping children until the kernel refuses,
# and keeps trying; only without a pids limit does it reach the cap (300) and exit.
FORK_BOMB = """
import os, time
kids = 0
while kids < 300:
    try:
        pid = os.fork()
    except OSError:
        time.sleep(0.005)
        continue
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    kids += 1
print("forked", kids)
"""


def test_a_fork_bomb_ends_its_own_task_at_pids_max(repo: Path, tmp_path: Path) -> None:
    w = _worker(tmp_path, FORK_BOMB)
    # (a bound for when the limit were not seen: the worker says nothing after it)
    rec = _run(repo, tmp_path, w, '[limits]\npids = 64\n[budget]\nno_output_timeout = "90s"\n')
    assert rec["status"] == "parked", rec
    named = [r for r in rec["reasons"] if "pids.max 64" in r]
    assert named, rec["reasons"]
    types = [e["type"] for e in _events(repo, rec["id"])]
    assert "limit_reached" in types
    assert rec["sandbox"]["limits"]["pids"]["max"] == 64
    _gone(rec)


FORKING_CHECK = """
import os, sys, time
for i in range(300):
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError as exc:
        print("fork failed:", exc)
        sys.exit(1)
"""


def test_a_check_runs_under_the_same_limits_and_its_result_names_them(
    repo: Path, tmp_path: Path
) -> None:
    w = _worker(tmp_path, "print('nothing')\n")
    check = _worker(tmp_path, FORKING_CHECK, "check.py")
    rec = _run(
        repo,
        tmp_path,
        w,
        f"""
        [limits]
        pids = 64
        [[checks]]
        name = "forks"
        argv = ["{PYTHON}", "{check}"]
        """,
    )
    (result,) = rec["checks"]
    assert not result["passed"]
    assert "check limit: the task reached pids.max 64" in result["output_tail"], result
    assert not _marked(rec["id"])


MEMORY_HOG = """
import time
block = b"x" * (512 << 20)  # written: every page touched
print("allocated", len(block))
time.sleep(1)
"""


def test_a_memory_hog_ends_its_own_task_at_its_memory_limit(repo: Path, tmp_path: Path) -> None:
    w = _worker(tmp_path, MEMORY_HOG)
    rec = _run(repo, tmp_path, w, '[limits]\nmemory = "128M"\n')
    assert rec["status"] == "parked", rec
    named = [r for r in rec["reasons"] if "memory limit 128 MiB" in r]
    assert named, rec["reasons"]
    assert rec["sandbox"]["limits"]["memory"]["max"] == 128 << 20
    _gone(rec)


def test_defaults_bound_every_task(repo: Path, tmp_path: Path) -> None:
    """No [limits]: pids 4096 and memory at most 8 GiB; git config sets them per repository."""
    w = _worker(tmp_path, "print('nothing')\n")
    rec = _run(repo, tmp_path, w)
    limits = rec["sandbox"]["limits"]
    assert limits["pids"]["max"] == 4096
    assert 0 < limits["memory"]["max"] <= 8 << 30
    git(repo, "config", "sup.limits.pids", "100")
    git(repo, "config", "sup.limits.memory", "1G")
    rec = _run(repo, tmp_path, w)
    assert rec["sandbox"]["limits"]["pids"]["max"] == 100
    assert rec["sandbox"]["limits"]["memory"]["max"] == 1 << 30
    git(repo, "config", "sup.limits.memory", "lots")
    rec = _run(repo, tmp_path, w)
    assert rec["status"] == "failed"
    assert any("sup.limits.memory" in r for r in rec["reasons"]), rec["reasons"]


def test_without_a_cgroup_the_missing_limits_and_freezing_are_named_weaker(
    repo: Path, tmp_path: Path
) -> None:
    w = _worker(tmp_path, "print('nothing')\n")
    rec = _run(repo, tmp_path, w, env={"GITSUP_CGROUP_ROOT": "none"})
    weaker = rec["sandbox"]["weaker"]
    assert any(x.startswith("pids and memory limits not enforced") for x in weaker), weaker
    assert any(x.startswith("not frozen between turns") for x in weaker), weaker
    assert rec["sandbox"]["limits"] == {}


# The worker commits, then leaves a setsid daemon that moves its branch, resets HEAD and
# rewrites files every few milliseconds, counting its rounds in the task's TMPDIR.
DAEMON_WORKER = """
import os, subprocess, sys
subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "first"], check=True)
first = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
daemon = '''
import os, random, subprocess, sys, time
first = sys.argv[1]
beat = os.path.join(os.environ["TMPDIR"], "heartbeat")
n = 0
while True:
    n += 1
    with open(beat, "w") as f:
        f.write(str(n))
    with open("data.txt", "w") as f:
        f.write(str(random.random()))
    if n % 3 == 0:
        subprocess.run(["git", "add", "data.txt"])
        subprocess.run(["git", "commit", "-q", "-m", "daemon %d" % n])
    elif n % 3 == 1:
        subprocess.run(["git", "reset", "-q", "--hard", first])
    else:
        subprocess.run(["git", "branch", "-f", "elsewhere"])
        subprocess.run(["git", "update-ref", "HEAD", first])
    time.sleep(0.003)
'''
subprocess.Popen([sys.executable, "-c", daemon, first], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
import time
time.sleep(0.5)  # the daemon is running when the worker ends its turn
print("left a daemon")
"""

# The check: what it ran on (HEAD, the tree of the files), and whether the daemon moved.
HASH_CHECK = """
import hashlib, json, os, subprocess, sys, time
tmp = os.environ["TMPDIR"]
def beat():
    try:
        return open(os.path.join(tmp, "heartbeat")).read()
    except OSError:
        return ""
def git(*a):
    return subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()
before = beat()
head = git("rev-parse", "HEAD")
files = {}
for name in sorted(os.listdir(".")):
    if os.path.isfile(name) and name != ".git":
        files[name] = hashlib.sha256(open(name, "rb").read()).hexdigest()
time.sleep(0.5)
head_after = git("rev-parse", "HEAD")
out = {"head": head, "head_after": head_after, "files": files, "before": before,
       "after": beat(), "status": git("status", "--porcelain")}
n = len([f for f in os.listdir(tmp) if f.startswith("check-")])
with open(os.path.join(tmp, f"check-{n}.json"), "w") as f:
    json.dump(out, f)
"""


def test_a_daemon_left_running_never_runs_while_the_work_is_verified(
    repo: Path, tmp_path: Path
) -> None:
    w = _worker(tmp_path, DAEMON_WORKER)
    check = _worker(tmp_path, HASH_CHECK, "check.py")
    rec = _run(
        repo,
        tmp_path,
        w,
        f"""
        [[checks]]
        name = "hash"
        argv = ["{PYTHON}", "{check}"]
        """,
    )
    tmpdir = common_dir(repo) / "sup" / "tasks" / rec["id"] / "sandbox" / "tmp"
    seen = [json.loads(p.read_text()) for p in sorted(tmpdir.glob("check-*.json"))]
    assert seen, rec
    for s in seen:
        assert s["before"] == s["after"], f"the daemon ran during the check: {s}"
        assert s["head"] == s["head_after"], s
    assert rec["head"] == seen[-1]["head"], (rec["head"], seen)
    held = [e for e in _events(repo, rec["id"]) if e["type"] == "worker_held"]
    # In a PID namespace the daemon ends with the worker (its namespace's init exits); without
    # one, gitsup kills what the worker left before the import.
    if rec["sandbox"].get("pid_ns"):
        assert not held or held[0]["data"]["how"] == "leftovers killed", held
    else:
        assert held and held[0]["data"]["how"] == "leftovers killed", held
    _gone(rec)
    # the tree recorded is the tree the check hashed (a daemon killed mid-write leaves the
    # worktree dirty: the task parks for it, and the check saw the files as they are)
    if seen[-1]["status"]:
        assert rec["status"] == "parked" and "worktree has uncommitted changes" in rec["reasons"]
        return
    tree = {
        line.split()[3]: line.split()[2] for line in git(repo, "ls-tree", rec["head"]).splitlines()
    }
    assert set(tree) == set(seen[-1]["files"]), (tree, seen[-1]["files"])
    for name, digest in seen[-1]["files"].items():
        blob = subprocess.run(
            ["git", "cat-file", "blob", tree[name]], cwd=repo, capture_output=True, check=True
        ).stdout
        assert hashlib.sha256(blob).hexdigest() == digest, name
