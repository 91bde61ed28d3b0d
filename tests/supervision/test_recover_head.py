"""What a takeover proves before it goes on. At recovery the worktree's HEAD is captured and compared with what the record knows,
whatever the turn count: a commit the worker made in a turn that never ended (its
supervisor killed mid-turn, 0 turns counted) is named in `recovered` and in the reasons,
and the work it holds is kept. A proof that the old worker is gone which fails parks the
task with the lease kept. Through the real CLI with a process worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import git, run_sup
from tests.helpers.require import requires
from tests.helpers.sup import common_dir

COMMITS_THEN_SLEEPS = (
    "#!/bin/sh\n"
    "echo 'def add(a, b):\n    return a + b' > calc.py\n"
    "git commit -qam 'fix add'\n"
    "echo committed\n"
    "sleep 300\n"
)


def _record(repo: Path, task: str) -> dict[str, Any]:
    return dict(json.loads(run_sup(repo, "show", task, "--json").stdout))


def _wait(pred: Any, timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def test_recovery_compares_the_worktree_head_whatever_the_turn_count(repo: Path, tmp: Path) -> None:
    worker = tmp / "w.sh"
    worker.write_text(COMMITS_THEN_SLEEPS)
    worker.chmod(0o755)
    spec = tmp / "t.toml"
    spec.write_text(
        f'goal = "g"\n[worker]\nkind = "process"\nargv = ["{worker}"]\n[review]\nkind = "none"\n'
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "gitsup", "start", "--spec", str(spec), "--json", "-q"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ls = lambda: json.loads(run_sup(repo, "ls", "--json").stdout or "[]")  # noqa: E731
        task = _wait(lambda: (ls() or [{}])[0].get("id"))
        rec = _wait(lambda: (r := _record(repo, task))["state"] == "running" and r)
        wt = Path(rec["worktree"])
        baseline = rec["baseline"]
        made = _wait(lambda: (h := git(wt, "rev-parse", "HEAD")) != baseline and h)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.wait(timeout=30)
    assert _record(repo, task)["turns"] == 0
    res = run_sup(repo, "recover", task, "--takeover", "--park", "--json", "-q")
    assert res.returncode == 3, res.stderr
    events = [json.loads(x) for x in run_sup(repo, "log", task, "--json").stdout.splitlines()]
    recovered = [e["data"] for e in events if e["type"] == "recovered"]
    assert len(recovered) == 1
    prev = recovered[0]["previous"]
    assert prev["worktree_head"] == made and prev["recorded_head"] == baseline
    assert prev["head_moved"] is True and prev["turns"] == 0
    rec = _record(repo, task)
    assert any("worktree's HEAD" in r and made[:12] in r for r in rec["reasons"]), rec["reasons"]
    assert rec["candidate"] == made  # the work is kept: imported, then parked


@requires("root", "cgroup")
def test_a_failed_proof_at_recovery_parks_with_the_lease_kept(repo: Path, tmp: Path) -> None:
    """The old worker's cgroup was replaced (same path, another inode): that is no proof
    the worker is gone, so `recover --takeover` parks the task (no new worker), keeps its
    work and the lease, and `doctor --fix` releases the lease once the proof holds."""
    worker = tmp / "w.sh"
    worker.write_text(COMMITS_THEN_SLEEPS)
    worker.chmod(0o755)
    spec = tmp / "t.toml"
    spec.write_text(
        f'goal = "g"\n[worker]\nkind = "process"\nargv = ["{worker}"]\n[review]\nkind = "none"\n'
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "gitsup", "start", "--spec", str(spec), "--json", "-q"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ls = lambda: json.loads(run_sup(repo, "ls", "--json").stdout or "[]")  # noqa: E731
        task = _wait(lambda: (ls() or [{}])[0].get("id"))
        rec = _wait(lambda: (r := _record(repo, task))["state"] == "running" and r)
        wt = Path(rec["worktree"])
        _wait(lambda: git(wt, "rev-parse", "HEAD") != rec["baseline"])
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.wait(timeout=30)
    cg = Path(rec["worker"]["cgroup"])
    (cg / "cgroup.kill").write_text("1")
    _wait(lambda: not (cg / "cgroup.procs").read_text().strip())
    cg.rmdir()
    cg.mkdir()  # the same path, another cgroup
    leases = common_dir(repo) / "sup" / "leases"
    try:
        res = run_sup(repo, "recover", task, "--takeover", "--json", "-q")
        assert res.returncode == 3, res.stderr
        rec = json.loads(res.stdout)
        assert rec["status"] == "parked"
        assert any("replaced" in x for x in rec["left_behind"]), rec["left_behind"]
        assert any("not provably gone" in x for x in rec["reasons"]), rec["reasons"]
        events = [json.loads(x) for x in run_sup(repo, "log", task, "--json").stdout.splitlines()]
        assert [e["type"] for e in events].count("worker_started") == 1  # no new worker
        assert rec["candidate"]  # the work is kept
        assert [f.name for f in leases.glob("*.json")], "the lease was released"
        res = run_sup(repo, "doctor", "--fix", "--json")
        left = [f for f in json.loads(res.stdout) if f["kind"] == "worker-left-behind"]
        assert left and left[0]["fixed"].startswith("not fixed"), left
        assert [f.name for f in leases.glob("*.json")]
    finally:
        if cg.exists():  # doctor --fix removes it too, as an orphan cgroup
            cg.rmdir()
    res = run_sup(repo, "doctor", "--fix", "--json")
    left = [f for f in json.loads(res.stdout) if f["kind"] == "worker-left-behind"]
    assert left and "lease released" in left[0]["fixed"], left
    assert not list(leases.glob("*.json"))


@requires("root", "cgroup")
def test_a_cgroup_that_cannot_be_removed_fails_the_proof(repo: Path, tmp: Path) -> None:
    """The old worker's cgroup is emptied but cannot be removed (a directory inside it is
    a mount point, which the kernel refuses to rmdir): the proof fails, so `recover
    --takeover` parks the task with no new worker and the lease kept."""
    worker = tmp / "w.sh"
    worker.write_text(COMMITS_THEN_SLEEPS)
    worker.chmod(0o755)
    spec = tmp / "t.toml"
    spec.write_text(
        f'goal = "g"\n[worker]\nkind = "process"\nargv = ["{worker}"]\n[review]\nkind = "none"\n'
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "gitsup", "start", "--spec", str(spec), "--json", "-q"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ls = lambda: json.loads(run_sup(repo, "ls", "--json").stdout or "[]")  # noqa: E731
        task = _wait(lambda: (ls() or [{}])[0].get("id"))
        rec = _wait(lambda: (r := _record(repo, task))["state"] == "running" and r)
        wt = Path(rec["worktree"])
        _wait(lambda: git(wt, "rev-parse", "HEAD") != rec["baseline"])
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.wait(timeout=30)
    cg = Path(rec["worker"]["cgroup"])
    pin = tmp / "pin"
    pin.mkdir()
    child = cg / "pinned"
    child.mkdir()
    subprocess.run(["mount", "--bind", str(pin), str(child)], check=True)
    leases = common_dir(repo) / "sup" / "leases"
    try:
        res = run_sup(repo, "recover", task, "--takeover", "--json", "-q")
        assert res.returncode == 3, res.stderr
        rec = json.loads(res.stdout)
        assert rec["status"] == "parked"
        assert any("could not be removed" in x for x in rec["left_behind"]), rec["left_behind"]
        events = [json.loads(x) for x in run_sup(repo, "log", task, "--json").stdout.splitlines()]
        assert [e["type"] for e in events].count("worker_started") == 1  # no new worker
        assert [f.name for f in leases.glob("*.json")], "the lease was released"
        assert cg.exists() and not (cg / "cgroup.procs").read_text().strip()
    finally:
        subprocess.run(["umount", str(child)], check=False)
    res = run_sup(repo, "doctor", "--fix", "--json")
    left = [f for f in json.loads(res.stdout) if f["kind"] == "worker-left-behind"]
    assert left and "lease released" in left[0]["fixed"], left
    assert not cg.exists() and not list(leases.glob("*.json"))
