"""The agent's executable is checked before it runs, through the real CLI: one anybody else
can replace is refused before the task exists, a pin refuses any other file, its identity
is in `show --json`, `worker_started` and the candidate note, and `recover` refuses to go
on with a binary that changed since the task started (unless --allow-new-binary)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
from pathlib import Path
from typing import Any

from tests.conftest import PYTHON, git, run_sup
from tests.helpers.sup import (
    check_cmd,
    common_dir,
    kill_tree,
    popen_sup,
    start_json,
    task_ids,
    wait_for,
    write_spec,
)

QUICK_CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")

# A stand-in for Claude Code speaking stream-json: fixes add and commits in its one turn.
# With `HANG` in its worktree's parent marker file absent on its first run, it hangs there
# instead (for a supervisor to die under it).
FAKE_CLAUDE = f"""#!{PYTHON}
import json, os, pathlib, subprocess, sys, time
if "--version" in sys.argv:
    print("2.1.328 (stand-in)")
    sys.exit(0)
for line in sys.stdin:
    if HANG and not pathlib.Path("first-run").exists():
        pathlib.Path("first-run").write_text("")
        time.sleep(300)
    pathlib.Path("first-run").unlink(missing_ok=True)
    open("calc.py", "w").write("def add(a, b):\\n    return a + b\\n")
    subprocess.run(["git", "commit", "-qam", "fix add"], check=True)
    sys.stdout.write(json.dumps({{"type": "result", "subtype": "success", "is_error": False,
        "result": "fixed", "num_turns": 1, "session_id": "s1", "total_cost_usd": 0.0}}) + "\\n")
    sys.stdout.flush()
"""


def _fake(tmp: Path, *, hang: bool = False) -> Path:
    d = tmp / "agent"
    d.mkdir(mode=0o755, exist_ok=True)
    path = d / "claude"
    path.write_text(FAKE_CLAUDE.replace("HANG and", f"{hang} and"))
    path.chmod(0o755)
    return path


def _spec(tmp: Path, fake: Path) -> Path:
    return write_spec(
        tmp,
        f"""
        goal = "fix add"
        [[checks]]
        name = "quick"
        argv = {json.dumps(shlex.split(QUICK_CHECK))}
        [worker]
        kind = "claude"
        argv = [{json.dumps(str(fake))}]
        env = {{ ANTHROPIC_API_KEY = "sk-not-a-key" }}
        stop_grace = "1s"
        [review]
        kind = "none"
        [budget]
        no_output_timeout = "60s"
        """,
    )


def _no_task(repo: Path) -> bool:
    tasks = common_dir(repo) / "sup" / "tasks"
    return not tasks.exists() or not any(tasks.iterdir())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_binary_others_can_replace_is_refused_before_the_task_exists(
    repo: Path, tmp: Path
) -> None:
    fake = _fake(tmp)
    fake.chmod(0o777)
    res = run_sup(repo, "start", "--spec", str(_spec(tmp, fake)))
    assert res.returncode == 2, res.stderr
    assert "writable by group and others" in res.stderr and str(fake) in res.stderr
    assert "Traceback" not in res.stderr
    assert _no_task(repo)
    # the file is fine, its directory is not
    fake.chmod(0o755)
    fake.parent.chmod(0o775)
    res = run_sup(repo, "start", "--spec", str(_spec(tmp, fake)))
    assert res.returncode == 2, res.stderr
    assert f"its directory {fake.parent} is writable by group" in res.stderr
    assert _no_task(repo)
    # the name it is found under, a link in a directory others can write
    fake.parent.chmod(0o755)
    links = tmp / "links"
    links.mkdir()
    links.chmod(0o777)
    (links / "claude").symlink_to(fake)
    res = run_sup(repo, "start", "--spec", str(_spec(tmp, links / "claude")))
    assert res.returncode == 2, res.stderr
    assert f"its directory {links} is writable by group and others" in res.stderr
    assert _no_task(repo)


def test_a_pin_refuses_any_other_binary(repo: Path, tmp: Path) -> None:
    fake = _fake(tmp)
    git(repo, "config", "sup.claude.sha256", "0" * 64)
    res = run_sup(repo, "start", "--spec", str(_spec(tmp, fake)))
    assert res.returncode == 2, res.stderr
    assert f"has sha256 {_sha(fake)}, not {'0' * 64}" in res.stderr
    assert _no_task(repo)
    git(repo, "config", "sup.claude.sha256", _sha(fake).upper())
    rc, rec, err = start_json(repo, "--spec", str(_spec(tmp, fake)))
    assert rc == 0, (rec.get("reasons"), err)


def _events(repo: Path, task: str) -> list[dict[str, Any]]:
    log = run_sup(repo, "log", task, "--json").stdout
    return [json.loads(line) for line in log.splitlines()]


def test_the_identity_is_recorded(repo: Path, tmp: Path) -> None:
    fake = _fake(tmp)
    rc, rec, err = start_json(repo, "--spec", str(_spec(tmp, fake)))
    assert rc == 0, (rec.get("reasons"), err)
    shown = json.loads(run_sup(repo, "show", rec["id"], "--json").stdout)
    ident = shown["agent_binary"]
    st = os.stat(fake)
    assert ident["path"] == str(fake.resolve()) and ident["agent"] == "claude"
    assert (ident["inode"], ident["sha256"]) == (st.st_ino, _sha(fake))
    assert ident["version"] == "2.1.328"
    assert ident["interpreter"] == os.path.realpath(PYTHON)
    started = [e for e in _events(repo, rec["id"]) if e["type"] == "worker_started"]
    assert started and started[0]["data"]["binary"] == ident
    note = json.loads(git(repo, "notes", "--ref=sup", "show", shown["candidate"]).strip())
    assert note["agent_binary"] == ident


def test_recover_refuses_a_swapped_binary(repo: Path, tmp: Path) -> None:
    fake = _fake(tmp, hang=True)
    before = _sha(fake)
    proc = popen_sup(repo, "start", "--spec", str(_spec(tmp, fake)))
    try:
        wait_for(lambda: len(task_ids(repo)) == 1, timeout=60, what="the task")
        (tid,) = task_ids(repo)
        wt = Path(json.loads(run_sup(repo, "show", tid, "--json").stdout)["worktree"])
        wait_for(lambda: (wt / "first-run").exists(), timeout=60, what="the first worker")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    with open(fake, "a") as fh:
        fh.write("# swapped\n")
    res = run_sup(repo, "recover", tid, "--takeover")
    assert res.returncode == 2, res.stderr
    assert "changed since the task started" in res.stderr and "--allow-new-binary" in res.stderr
    rec = json.loads(run_sup(repo, "show", tid, "--json").stdout)
    assert rec["agent_binary"]["sha256"] == before and rec["state"] != "ready"
    res = run_sup(repo, "recover", tid, "--takeover", "--allow-new-binary", "--json", "-q")
    assert res.returncode == 0, res.stderr
    rec = json.loads(res.stdout)
    assert rec["status"] == "ready", rec["reasons"]
    assert rec["agent_binary"]["sha256"] == _sha(fake) != before
    assert any("new agent executable" in r for r in rec["reasons"])
