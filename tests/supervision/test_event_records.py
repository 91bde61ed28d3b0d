"""What every event record of a task says, and how big its log file gets, through the real
CLI: each record carries the worker it belongs to (the spawn number, counted over the
task's life), and the log is sealed and rotated before an append would pass its cap."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import check_cmd, common_dir, write_worker

# About 3.5 MiB of output in lines of 1 KiB, then the fix.
LOUD = """
import pathlib, subprocess, sys
for i in range(3500):
    sys.stdout.write(f"{i:05d} " + "x" * 1017 + "\\n")
sys.stdout.flush()
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
"""
CAP = 1024 * 1024


def test_the_log_rotates_before_an_append_would_pass_its_cap(repo: Path, tmp: Path) -> None:
    spec = tmp / "task.toml"
    spec.write_text(f"[events]\nrotate_bytes = {CAP}\nkeep_files = 20\n")
    worker = write_worker(tmp, LOUD)
    check = check_cmd("from calc import add; assert add(1, 2) == 3")
    args = ["start", "fix add", "--spec", str(spec), "--worker", worker, "--check", check]
    res = run_sup(repo, *args, "--review", "none", "--json", "--quiet", timeout=300)
    assert res.returncode == 0, res.stderr
    task = json.loads(res.stdout)["id"]
    tdir = common_dir(repo) / "sup" / "tasks" / task
    files = sorted(tdir.glob("events*.jsonl"))
    rotated = [f for f in files if f.name != "events.jsonl"]
    assert len(rotated) >= 3, [f.name for f in files]
    for f in files:  # never past the cap, not even for one record
        assert f.stat().st_size <= CAP, (f.name, f.stat().st_size)
    # seq goes on across the files, every record is sealed once, in order
    out = run_sup(repo, "log", task, "--json").stdout.splitlines()
    seqs = [json.loads(x)["seq"] for x in out]
    assert seqs == list(range(1, len(seqs) + 1))
    tip = git(repo, "rev-parse", f"refs/sup/{task}/log")
    sealed: list[int] = []
    for name in git(repo, "ls-tree", "--name-only", tip).splitlines():
        sealed += [json.loads(x)["seq"] for x in git(repo, "show", f"{tip}:{name}").splitlines()]
    assert sealed == seqs
    for f in rotated:  # a rotated file holds only sealed records
        last = json.loads(f.read_bytes().splitlines()[-2])["seq"]
        assert last in sealed
