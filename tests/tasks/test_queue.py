"""The integration queue: real repositories, real signed integrations, real checks
(pytest in a throw-away worktree), real `git sup queue` processes killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.conftest import Setup, make_task
from tests.conftest import PYTHON, git, run_sup
from tests.helpers.require import require
from tests.helpers.sup import read_record, wait_dead, wait_for

CALC = "VERSION = 1\n\n\ndef add(a, b):\n    return a + b\n"


@pytest.fixture
def qsetup(repo: Path, tmp: Path) -> Setup:
    """A green main (add adds), gitsup initialised, a shared file two candidates fight over."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    (repo / "calc.py").write_text(CALC)
    (repo / "shared.txt").write_text("one\ntwo\nthree\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "green main")
    init_repo(SupRepo.discover(repo), explicit=True)
    return Setup(repo, tmp, tmp, tmp)


def _test_file(name: str, body: str) -> tuple[str, str]:
    return (f"test_{name}.py", body)


def _good(setup: Setup, name: str) -> dict[str, Any]:
    return make_task(
        setup,
        files=(
            (f"mod_{name}.py", f"def f():\n    return {name!r}\n"),
            _test_file(
                name, f"from mod_{name} import f\n\n\ndef test_f():\n    assert f() == {name!r}\n"
            ),
        ),
    )


def _note(repo: Path, commit: str) -> dict[str, Any]:
    note: dict[str, Any] = json.loads(git(repo, "notes", "--ref=sup", "show", commit))
    return note


def _first_parents(repo: Path, since: str) -> list[str]:
    return git(repo, "rev-list", "--first-parent", f"{since}..main").split()[::-1]


def _replay_green(repo: Path, tmp: Path, commits: list[str]) -> None:
    """Every first-parent tip passes pytest when checked out on its own."""
    for i, c in enumerate(commits):
        wt = tmp / f"replay-{i}"
        git(repo, "worktree", "add", "-q", "--detach", str(wt), c)
        res = subprocess.run(
            [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=wt,
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, (c, res.stdout[-2000:])
        git(repo, "worktree", "remove", "--force", str(wt))


def _events(repo: Path, branch: str = "main") -> list[dict[str, Any]]:
    path = Path(git(repo, "rev-parse", "--git-common-dir"))
    if not path.is_absolute():
        path = repo / path
    return [json.loads(x) for x in (path / "sup/queue" / branch / "events.jsonl").open()]


def test_eight_candidates_conflicts_and_a_composition_failure(qsetup: Setup) -> None:
    repo = qsetup.repo
    start = git(repo, "rev-parse", "main")
    a = _good(qsetup, "a")
    b = _good(qsetup, "b")
    c = make_task(qsetup, files=(("shared.txt", "one\nTWO by c\nthree\n"),))
    # d: a test that holds VERSION to 1 (true on main, so d passes alone)
    d = make_task(
        qsetup,
        files=_test_files(
            "d", "import calc\n\n\ndef test_version():\n    assert calc.VERSION == 1\n"
        ),
    )
    e = make_task(qsetup, files=(("shared.txt", "one\nTWO by e\nthree\n"),))  # conflicts with c
    # f: bumps VERSION; its own tests pass alone, d's test fails once both are in
    f = make_task(qsetup, files=(("calc.py", CALC.replace("VERSION = 1", "VERSION = 2")),))
    g = make_task(qsetup, files=(("mod_a.py", "def f():\n    return 'g'\n"),))  # conflicts with a
    h = _good(qsetup, "h")
    tasks = [a, b, c, d, e, f, g, h]
    ids = [t["id"] for t in tasks]

    res = run_sup(repo, "queue", "add", *ids, "--into", "main")
    assert res.returncode == 0, res.stderr
    listed = json.loads(run_sup(repo, "queue", "--json").stdout)
    assert listed[0]["into"] == "main" and listed[0]["queued"] == ids

    res = run_sup(repo, "queue", "run", "--into", "main", "--json", timeout=600)
    assert res.returncode == 3, res.stderr  # some were sent back
    out = json.loads(res.stdout)[0]
    good = [a, b, c, d, h]
    assert out["integrated"] == [t["id"] for t in good]
    back = {s["task"]: s for s in out["sent_back"]}
    assert set(back) == {e["id"], f["id"], g["id"]}
    assert back[e["id"]]["kind"] == "conflict"
    assert back[e["id"]]["evidence"]["conflicts"] == ["shared.txt"]
    assert back[g["id"]]["evidence"]["conflicts"] == ["mod_a.py"]
    assert back[f["id"]]["kind"] == "failed"
    assert "test_version" in back[f["id"]]["evidence"]["failed"][0]["output_tail"]
    # batching and bisection: far fewer check runs than one per candidate
    assert out["check_runs"] <= 5, out

    # main: exactly the five good ones, in order, each a signed integration
    tips = _first_parents(repo, start)
    assert len(tips) == 5
    for tip, t in zip(tips, good, strict=True):
        assert git(repo, "rev-parse", f"{tip}^2") == t["candidate"]
        body = git(repo, "log", "-1", "--format=%B", tip)
        assert f"Sup-Task: {t['id']}" in body and "Sup-Checks: pytest=passed" in body
        verify = subprocess.run(["git", "verify-commit", tip], cwd=repo, capture_output=True)
        assert verify.returncode == 0
        assert _note(repo, t["candidate"])["status"] == "integrated"
        assert read_record(repo, t["id"])["status"] == "integrated"
    _replay_green(repo, qsetup.tmp, tips)

    # the ones sent back are parked with their evidence; integrate refuses them
    for t in (e, f, g):
        note = _note(repo, t["candidate"])
        assert note["status"] == "parked" and "queue_evidence" in note
        assert read_record(repo, t["id"])["status"] == "parked"
    assert run_sup(repo, "integrate", f["id"], "--into", "main").returncode == 2

    # every step is an event, sealed into refs/sup/queue/main/log
    types = [ev["type"] for ev in _events(repo)]
    assert types.count("queue_integrated") == 5 and types.count("queue_parked") == 3
    sealed = git(repo, "log", "-p", "refs/sup/queue/main/log")
    assert "queue_run_finished" in sealed and "queue_parked" in sealed
    # the state is in Git: a commit chain with queue.json
    state = json.loads(git(repo, "show", "refs/sup/queue/main/state:queue.json"))
    assert [x["status"] for x in state["entries"]] == [
        "integrated", "integrated", "integrated", "integrated",
        "parked", "parked", "parked", "integrated",
    ]  # fmt: skip
    assert git(repo, "status", "--porcelain") == ""
    assert "gitsup-queue" not in git(repo, "worktree", "list")


def _test_files(name: str, body: str) -> tuple[tuple[str, str], ...]:
    return (_test_file(name, body),)


def _five(qsetup: Setup) -> list[dict[str, Any]]:
    return [_good(qsetup, n) for n in "abcde"]


def _assert_all_once(repo: Path, start: str, tasks: list[dict[str, Any]]) -> None:
    tips = _first_parents(repo, start)
    seconds = [git(repo, "rev-parse", f"{t}^2") for t in tips]
    assert seconds == [t["candidate"] for t in tasks]  # each once, in order, none lost
    for t in tasks:
        assert _note(repo, t["candidate"])["status"] == "integrated"
        assert read_record(repo, t["id"])["status"] == "integrated"
    state = json.loads(git(repo, "show", "refs/sup/queue/main/state:queue.json"))
    assert [x["status"] for x in state["entries"]] == ["integrated"] * len(tasks)


def test_killed_after_moving_the_target_resumes_without_integrating_twice(
    qsetup: Setup,
) -> None:
    repo = qsetup.repo
    start = git(repo, "rev-parse", "main")
    tasks = _five(qsetup)
    assert run_sup(repo, "queue", "add", *[t["id"] for t in tasks]).returncode == 0
    # SIGKILL right after main moved for the first batch, before the queue recorded it
    died = run_sup(repo, "queue", "run", "--batch", "2", env={"GITSUP_FAULT": "queue_after_move"})
    assert died.returncode == -signal.SIGKILL
    assert len(_first_parents(repo, start)) == 2
    state = json.loads(git(repo, "show", "refs/sup/queue/main/state:queue.json"))
    assert [x["status"] for x in state["entries"]] == ["queued"] * 5
    res = run_sup(repo, "queue", "run", "--batch", "2", "--json", timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)[0]
    assert out["resumed"] == [tasks[0]["id"], tasks[1]["id"]]
    assert out["integrated"] == [t["id"] for t in tasks[2:]]
    _assert_all_once(repo, start, tasks)


def test_kill_9_during_a_check_then_resume(qsetup: Setup) -> None:
    repo, tmp = qsetup.repo, qsetup.tmp
    start = git(repo, "rev-parse", "main")
    marker = tmp / "checks-started"
    slow = [
        PYTHON,
        "-c",
        f"import pathlib, time; p = pathlib.Path({str(marker)!r}); "
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); time.sleep(1.5)",
    ]
    tasks = [
        make_task(
            qsetup,
            files=((f"f{i}.txt", f"{i}\n"),),
            checks=[{"name": "slow", "argv": slow}],
        )
        for i in range(4)
    ]
    assert run_sup(repo, "queue", "add", *[t["id"] for t in tasks]).returncode == 0
    runner = subprocess.Popen(
        [str(Path(PYTHON).parent / "git-sup"), "queue", "run", "--batch", "1"],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_for(lambda: marker.exists() and len(marker.read_text()) >= 2, timeout=120)
        runner.send_signal(signal.SIGKILL)
    finally:
        runner.wait(timeout=30)
    integrated_before = len(_first_parents(repo, start))
    assert 1 <= integrated_before < 4
    # a second runner is refused while... the first is dead: its lease is taken over
    res = run_sup(repo, "queue", "run", "--json", timeout=600)
    assert res.returncode == 0, res.stderr
    _assert_all_once(repo, start, tasks)
    # the killed runner's check left its cgroup and network namespace: doctor removes them
    from gitsup.host.contain import list_gitsup_cgroups, list_gitsup_netns

    assert run_sup(repo, "doctor", "--fix").returncode in (0, 3)
    assert not [c for c in list_gitsup_cgroups() if c.name.startswith(f"queue-{runner.pid}-")]
    assert not [n for n in list_gitsup_netns() if n.label == "queue" and n.pid == runner.pid]


def test_two_runners_never_integrate_at_once(qsetup: Setup) -> None:
    repo, tmp = qsetup.repo, qsetup.tmp
    marker = tmp / "started"
    hold = [
        PYTHON,
        "-c",
        f"import pathlib, time; pathlib.Path({str(marker)!r}).write_text('x'); time.sleep(3)",
    ]
    t = make_task(qsetup, files=(("x.txt", "x\n"),), checks=[{"name": "hold", "argv": hold}])
    assert run_sup(repo, "queue", "add", t["id"]).returncode == 0
    first = subprocess.Popen(
        [str(Path(PYTHON).parent / "git-sup"), "queue", "run"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(marker.exists, timeout=120)
        second = run_sup(repo, "queue", "run")
        assert second.returncode == 2 and "leased" in second.stderr, second.stderr
    finally:
        first.wait(timeout=120)
    assert first.returncode == 0
    assert _note(repo, t["candidate"])["status"] == "integrated"


def test_add_refuses_and_remove(qsetup: Setup) -> None:
    repo = qsetup.repo
    parked = make_task(qsetup, status="parked")
    res = run_sup(repo, "queue", "add", parked["id"])
    assert res.returncode == 2 and "not ready" in res.stderr
    assert run_sup(repo, "queue", "add", "nonsense").returncode == 2
    t = _good(qsetup, "a")
    assert run_sup(repo, "queue", "add", t["id"]).returncode == 0
    again = run_sup(repo, "queue", "add", t["id"])
    assert again.returncode == 2 and "already queued" in again.stderr
    assert run_sup(repo, "queue", "remove", t["id"]).returncode == 0
    listed = json.loads(run_sup(repo, "queue", "--json").stdout)
    assert listed[0]["queued"] == [] and listed[0]["entries"][0]["status"] == "removed"
    res = run_sup(repo, "queue", "run")
    assert res.returncode == 0, res.stderr
    assert _note(repo, t["candidate"])["status"] == "ready"
    # the queue's refs are not tasks: the cost ledger lists only tasks, packed refs too
    git(repo, "pack-refs", "--all")
    cost = run_sup(repo, "cost", "--json")
    assert cost.returncode == 0, cost.stderr
    assert "queue" not in json.dumps(json.loads(cost.stdout).get("tasks", []))


def test_detached_runner(qsetup: Setup) -> None:
    repo = qsetup.repo
    t = _good(qsetup, "a")
    assert run_sup(repo, "queue", "add", t["id"]).returncode == 0
    res = run_sup(repo, "queue", "run", "--detach", "--json")
    assert res.returncode == 0, res.stderr
    started = json.loads(res.stdout)
    pid, log = started["pid"], Path(started["log"])
    assert wait_for(lambda: _note(repo, t["candidate"])["status"] == "integrated", timeout=120)
    # the runner ends once the queue is drained, its work done and in Git
    assert wait_dead(pid, timeout=60), f"the detached runner {pid} is still running"
    assert git(repo, "rev-parse", "main^2") == t["candidate"]
    assert read_record(repo, t["id"])["status"] == "integrated"
    state = json.loads(git(repo, "show", "refs/sup/queue/main/state:queue.json"))
    assert [x["status"] for x in state["entries"]] == ["integrated"]
    assert "main: 1 integrated, 0 sent back" in log.read_text()
    assert "gitsup-queue" not in git(repo, "worktree", "list")


ATTACK = r"""
import os, pathlib, subprocess, sys
repo, common, key = REPO, COMMON, KEY  # written in: paths in argv become readable
tried = {}
def attempt(name, fn):
    try:
        fn()
        tried[name] = "DONE"
    except Exception as exc:
        tried[name] = f"refused: {type(exc).__name__}"
attempt("write checkout", lambda: pathlib.Path(repo, "pwned").write_text("x"))
attempt("write refs", lambda: pathlib.Path(common, "refs/heads/pwned").write_text("0" * 40 + "\n"))
attempt("read key", lambda: pathlib.Path(key).read_bytes())
r = subprocess.run(["git", "-C", repo, "update-ref", "refs/heads/main", "HEAD~1"],
                   capture_output=True)
tried["move main"] = "DONE" if r.returncode == 0 else "refused"
print(tried)
"""


def test_queue_checks_run_in_the_task_sandbox(
    qsetup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile check (it is the candidate's code that runs) cannot touch the user's
    checkout, refs or signing key: the checks run inside the kernel sandbox."""
    require("landlock", "the queue's checks in the task sandbox")
    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)
    repo, tmp = qsetup.repo, qsetup.tmp
    common = git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
    key = Path(os.environ["HOME"]) / ".config/gitsup/signing/id_ed25519"
    assert key.exists()
    script = tmp / "attack.py"
    script.write_text(
        ATTACK.replace("REPO, COMMON, KEY", f"{str(repo)!r}, {common!r}, {str(key)!r}")
    )
    main_before = git(repo, "rev-parse", "main")
    t = make_task(
        qsetup,
        files=(("x.txt", "x\n"),),
        checks=[{"name": "attack", "argv": [PYTHON, str(script)]}],
    )
    assert run_sup(repo, "queue", "add", t["id"]).returncode == 0
    res = run_sup(repo, "queue", "run", "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    state = json.loads(git(repo, "show", "refs/sup/queue/main/state:queue.json"))
    [result] = state["results"].values()
    assert "DONE" not in result["output_tail"], result["output_tail"]
    assert result["output_tail"].count("refused") == 4, result["output_tail"]
    assert not (repo / "pwned").exists()
    assert git(repo, "rev-parse", "main^1") == main_before  # moved only by the integration
    assert git(repo, "rev-parse", "main^2") == t["candidate"]


def test_checks_of_one_composition_leave_nothing_for_the_next(
    qsetup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A culprit's check that plants files in the checks' HOME or TMPDIR (where Python would
    pick up a usercustomize.py) cannot influence the checks of what is tested after it."""
    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)
    repo = qsetup.repo
    plant = [
        PYTHON,
        "-c",
        "import os, pathlib\n"
        "for d in (os.environ['HOME'], os.environ['TMPDIR']):\n"
        "    pathlib.Path(d, 'planted').write_text('x')",
    ]
    clean = [
        PYTHON,
        "-c",
        "import os, sys\n"
        "sys.exit(any(os.path.exists(os.path.join(os.environ[v], 'planted'))"
        " for v in ('HOME', 'TMPDIR')))",
    ]
    a = make_task(qsetup, files=(("a.txt", "a\n"),), checks=[{"name": "plant", "argv": plant}])
    b = make_task(qsetup, files=(("b.txt", "b\n"),), checks=[{"name": "clean", "argv": clean}])
    assert run_sup(repo, "queue", "add", a["id"], b["id"]).returncode == 0
    res = run_sup(repo, "queue", "run", "--batch", "1", "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["integrated"] == [a["id"], b["id"]]


def test_queue_integrations_pass_the_server_gate(qsetup: Setup) -> None:
    """What the queue signs is an integration the pre-receive gate of a shared repository
    accepts; a commit slipped under it is refused."""
    from tests.boundary.conftest import accepted, make_bare, push, rejected

    repo, tmp = qsetup.repo, qsetup.tmp
    bare = make_bare(tmp, "shared", repo, review=False)
    tasks = [_good(qsetup, n) for n in "ab"]
    assert run_sup(repo, "queue", "add", *[t["id"] for t in tasks]).returncode == 0
    assert run_sup(repo, "queue", "run", timeout=300).returncode == 0
    accepted(push(repo, "--no-verify", str(bare), "main"))
    assert git(bare, "rev-parse", "main") == git(repo, "rev-parse", "main")
    (repo / "sneaky.txt").write_text("not integrated\n")
    git(repo, "add", "sneaky.txt")
    git(repo, "commit", "-q", "-m", "sneaky")
    rejected(push(repo, "--no-verify", str(bare), "main"), "not integrated")


def test_the_same_argv_under_two_names_runs_once_per_tree(qsetup: Setup) -> None:
    """Two tasks whose checks are the same command under different names: one run per
    composed tree (the check counts its runs in a file outside the worktree)."""
    repo, tmp = qsetup.repo, qsetup.tmp
    counter = tmp / "runs.log"
    argv = [PYTHON, "-c", f"open({str(counter)!r}, 'a').write('run\\n')"]
    a = make_task(qsetup, files=(("a.txt", "a\n"),), checks=[{"name": "tests", "argv": argv}])
    b = make_task(qsetup, files=(("b.txt", "b\n"),), checks=[{"name": "unit", "argv": argv}])
    assert run_sup(repo, "queue", "add", a["id"], b["id"]).returncode == 0
    res = run_sup(repo, "queue", "run", "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)[0]
    assert out["integrated"] == [a["id"], b["id"]], out
    # one composition of both (a batch), one run of the one command
    assert counter.read_text().count("run") == out["check_commands"] == 1, (
        counter.read_text(),
        out,
    )


def test_why_the_queue_sent_a_candidate_back_shows_wherever_its_reason_does(
    qsetup: Setup,
) -> None:
    """`show`, `show --json`, `queue`, `queue run` and the page all carry the failing
    composition check's output, not only its name."""
    repo = qsetup.repo
    d = make_task(
        qsetup,
        files=_test_files(
            "d", "import calc\n\n\ndef test_version():\n    assert calc.VERSION == 1, 'pinned'\n"
        ),
    )
    f = make_task(qsetup, files=(("calc.py", CALC.replace("VERSION = 1", "VERSION = 2")),))
    assert run_sup(repo, "queue", "add", d["id"], f["id"]).returncode == 0
    ran = run_sup(repo, "queue", "run", timeout=300)
    assert ran.returncode == 3, ran.stderr
    assert f"{f['id']}: failed" in ran.stdout and "AssertionError: pinned" in ran.stdout, ran.stdout
    shown = run_sup(repo, "show", f["id"])
    assert (
        "checks on the composed tree" in shown.stdout and "AssertionError: pinned" in shown.stdout
    )
    data = json.loads(run_sup(repo, "show", f["id"], "--json").stdout)
    (failed,) = data["queue_evidence"]["failed"]
    assert "AssertionError: pinned" in failed["output_tail"]
    listed = run_sup(repo, "queue")
    assert "AssertionError: pinned" in listed.stdout, listed.stdout
    page = run_sup(repo, "report", f["id"], "--output", str(qsetup.tmp / "f.html"))
    assert page.returncode == 0, page.stderr
    html = (qsetup.tmp / "f.html").read_text()
    assert "id='queue-evidence'" in html and "AssertionError: pinned" in html
    assert html.index("queue-evidence") < html.index("own tree")
