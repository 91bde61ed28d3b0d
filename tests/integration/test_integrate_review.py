"""An independent review at integration time (`git sup integrate --review`, git config
`sup.integrate.review`): the task's reviewer judges the merge read-only before it is signed;
its verdict is the `Sup-Review` trailer, and anything but `pass` leaves the target as it was."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from tests.boundary.conftest import Setup
from tests.conftest import git, run_sup
from tests.helpers.sup import PYTEST_CHECK

# Passes in the task; at integration it says what the file `verdict` says. Either way it
# keeps the evidence and tries to write into the tree it reviews.
REVIEWER = """
import json, os, pathlib, sys
ev = json.load(sys.stdin)
at = "integration" if "integration" in ev else "task"
try:
    pathlib.Path("reviewer-was-here").write_text("x")
    wrote = "wrote"
except OSError as exc:
    wrote = exc.strerror
out = pathlib.Path(sys.argv[1])
pathlib.Path(out / f"{at}.json").write_text(json.dumps({"evidence": ev, "wrote": wrote}))
verdict = (out / "verdict").read_text().strip() if at == "integration" else "pass"
print(json.dumps({"verdict": verdict, "findings": []}))
"""

FIX = """
import pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-qam", "Fix add"], check=True)
"""


def _task(setup: Setup, review: str, extra: str = "") -> dict[str, Any]:
    out = setup.tmp / "review-out"
    out.mkdir(exist_ok=True)
    worker = setup.tmp / "worker.py"
    worker.write_text(FIX)
    reviewer = setup.tmp / "reviewer.py"
    reviewer.write_text(REVIEWER)
    spec = setup.tmp / "task.toml"
    spec.write_text(
        f'goal = "Fix add"\n[worker]\nkind = "process"\nargv = ["{sys.executable}", "{worker}"]\n'
        f'[[checks]]\nname = "pytest"\nargv = {json.dumps(PYTEST_CHECK)}\n'
        + (
            f'[review]\nkind = "command"\nargv = ["{sys.executable}", "{reviewer}", "{out}"]\n'
            if review == "command"
            else '[review]\nkind = "none"\n'
        )
        + extra
    )
    res = run_sup(setup.repo, "start", "--spec", str(spec), "--json", "-q")
    rec: dict[str, Any] = json.loads(res.stdout)
    assert rec["status"] == "ready", (rec["reasons"], res.stderr)
    return rec


def test_integration_review_passes_into_the_trailer(setup: Setup) -> None:
    rec = _task(setup, "command")
    out = setup.tmp / "review-out"
    (out / "verdict").write_text("pass")
    before = git(setup.repo, "rev-parse", "main").strip()
    res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main", "--review", "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["integrated"] and got["review"]["verdict"] == "pass"
    assert got["review"]["kind"] == "command"
    body = git(setup.repo, "log", "-1", "--format=%B", "main")
    assert "Sup-Review: pass (integration review, command)" in body, body
    seen = json.loads((out / "integration.json").read_text())
    ev = seen["evidence"]
    # it judged the merge onto the target, with the checks that ran on it
    assert ev["integration"]["target"] == before and ev["integration"]["into"] == "main"
    assert ev["integration"]["candidate"] == rec["candidate"]
    assert ev["baseline"] == before and "+    return a + b" in ev["diff"]
    assert [c["name"] for c in ev["checks"]] == ["pytest"] and ev["checks"][0]["passed"]
    # read-only: its write into the tree it reviewed failed
    assert seen["wrote"] != "wrote", seen["wrote"]
    assert "reviewer-was-here" not in git(setup.repo, "ls-tree", "-r", "--name-only", "main")


def test_integration_review_that_does_not_pass_refuses(setup: Setup) -> None:
    rec = _task(setup, "command")
    out = setup.tmp / "review-out"
    (out / "verdict").write_text("revise")
    git(setup.repo, "config", "sup.integrate.review", "true")  # without --review
    before = git(setup.repo, "rev-parse", "main").strip()
    res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main", "--json")
    assert res.returncode == 3, res.stderr
    got = json.loads(res.stdout)
    assert not got["integrated"] and got["review"]["verdict"] == "revise"
    assert got["reason"] == "integration review: revise; main untouched"
    assert git(setup.repo, "rev-parse", "main").strip() == before
    shown = json.loads(run_sup(setup.repo, "show", rec["id"], "--json").stdout)
    assert shown["status"] == "ready"
    # a bad config value and a task without a reviewer are refused before anything runs
    git(setup.repo, "config", "sup.integrate.review", "maybe")
    res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main")
    assert res.returncode == 2 and "sup.integrate.review" in res.stderr, res.stderr
    git(setup.repo, "config", "--unset", "sup.integrate.review")
    plain = _task(setup, "none")
    res = run_sup(setup.repo, "integrate", plain["id"], "--into", "main", "--review")
    assert res.returncode == 2 and "no reviewer" in res.stderr, res.stderr
    assert git(setup.repo, "rev-parse", "main").strip() == before


# At integration: leaves a setsid()'d, double-forked sleeper behind that appends to a marker
# every 0.2 s (its stdio closed, so the review itself ends), then passes.
LEAVER = """
import json, os, pathlib, sys, time
out = pathlib.Path(sys.argv[1])
token = (out / "token").read_text()
ev = json.load(sys.stdin)
if "integration" in ev:
    marker = out / "marker"
    loop = "import sys, time\\nwhile True:\\n    open(sys.argv[1], 'a').write('x')\\n    time.sleep(0.2)"
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv(sys.executable, [sys.executable, "-c", loop, str(marker), token])
        os._exit(0)
    os.wait()
    while not marker.exists():
        time.sleep(0.05)
print(json.dumps({"verdict": "pass", "findings": []}))
"""


def _running(token: str) -> list[int]:
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if token in (p.info["cmdline"] or []):
            found.append(p.pid)
    return found


@pytest.mark.parametrize(("sandbox", "cgroup"), [("auto", "auto"), ("off", "auto"), ("off", "off")])
def test_integration_review_leaves_nothing_running(setup: Setup, sandbox: str, cgroup: str) -> None:
    """Its cgroup is killed when it ends, also without the sandbox's PID namespace; without
    a cgroup (`[isolation] cgroup = "off"`) the processes carrying its marker are."""
    import os
    import time

    rec = _task(setup, "command", f'[isolation]\ncgroup = "{cgroup}"\n')
    git(setup.repo, "config", "sup.sandbox", sandbox)
    out = setup.tmp / "review-out"
    token = f"gitsup-leaver-{os.urandom(4).hex()}"
    leaver = setup.tmp / "reviewer.py"  # the task's reviewer, rewritten before integration
    leaver.write_text(LEAVER)
    (out / "token").write_text(token)  # names the sleeper's process
    res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main", "--review", "--json")
    try:
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)
        assert got["integrated"] and got["review"]["verdict"] == "pass"
        review = got["confinement"]["review"]
        assert review["cgroup"] is (cgroup == "auto") and not review.get("left_behind"), review
        marker = out / "marker"
        assert marker.exists()  # the sleeper ran
        # from outside: no such process, and the marker stops growing
        assert _running(token) == []
        size = marker.stat().st_size
        time.sleep(1.0)
        assert marker.stat().st_size == size
    finally:
        for pid in _running(token):
            os.kill(pid, 9)
