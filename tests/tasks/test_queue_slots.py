"""The queue with slots (`queue run --slots N`): several compositions under test at once,
each a prefix of the predicted order. Real repositories, real signed integrations, real
confined checks in concurrent slots, real `git sup queue` processes killed with SIGKILL.

The checks are short Python one-liners (they look at the composed tree's files), so the
runs stay quick; what they decide is the same as with the serial queue."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.conftest import Setup, make_task
from tests.conftest import PYTHON, git, run_sup
from tests.helpers.sup import read_record, wait_for
from tests.tasks.test_queue import _assert_all_once, _events, _first_parents, _note
from tests.tasks.test_queue_flaky import Answers

# fails on a tree that holds both A and B: B's candidate is a culprit only in composition
PAIR_CHECK = [
    PYTHON,
    "-c",
    "import os, sys; sys.exit(1 if os.path.exists('A') and os.path.exists('B') else 0)",
]


def _init(repo: Path) -> None:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    (repo / "shared.txt").write_text("one\ntwo\nthree\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "green main")
    init_repo(SupRepo.discover(repo), explicit=True)


@pytest.fixture
def qs(repo: Path) -> Setup:
    _init(repo)
    return Setup(repo, repo.parent, repo.parent, repo.parent)


def _second_repo(tmp: Path) -> Setup:
    """Another repository with the same first commit's tree as `repo` (same trees follow)."""
    r = tmp / "repo2"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (r / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "initial")
    _init(r)
    return Setup(r, tmp, tmp, tmp)


def _twelve(s: Setup) -> list[tuple[str, dict[str, Any]]]:
    """12 candidates: c02 adds A, c06 adds B (the culprit: the check fails once both are
    in), c04 and c09 change the same line of shared.txt (c09 conflicts)."""
    out = []
    for i in range(12):
        files: list[tuple[str, str]] = [(f"f{i:02d}.txt", f"{i}\n")]
        if i == 2:
            files.append(("A", "a\n"))
        if i == 6:
            files.append(("B", "b\n"))
        if i in (4, 9):
            files.append(("shared.txt", f"one\nTWO by c{i:02d}\nthree\n"))
        check = {"name": "pair", "argv": PAIR_CHECK}
        out.append((f"c{i:02d}", make_task(s, files=tuple(files), checks=[check])))
    return out


def _run(repo: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    res = run_sup(repo, "queue", "run", "--json", *args, timeout=600)
    assert res.returncode in (0, 3), res.stderr
    out: dict[str, Any] = json.loads(res.stdout)[0]
    return res.returncode, out, res.stderr


def _main_line(s: Setup, start: str, names: dict[str, str]) -> list[tuple[str, str]]:
    """(scenario name, tree) of every first-parent integration since `start`; each is a
    signed integration whose tree passes the check when checked out on its own."""
    out = []
    for i, tip in enumerate(_first_parents(s.repo, start)):
        body = git(s.repo, "log", "-1", "--format=%B", tip)
        task = next(x.split(": ")[1] for x in body.splitlines() if x.startswith("Sup-Task: "))
        assert subprocess.run(["git", "verify-commit", tip], cwd=s.repo).returncode == 0
        wt = s.tmp / f"replay-{s.repo.name}-{i}"
        git(s.repo, "worktree", "add", "-q", "--detach", str(wt), tip)
        assert subprocess.run(PAIR_CHECK, cwd=wt).returncode == 0, f"{tip} is not green"
        git(s.repo, "worktree", "remove", "--force", str(wt))
        out.append((names[task], git(s.repo, "rev-parse", f"{tip}^{{tree}}")))
    return out


def test_four_slots_make_the_same_main_as_the_serial_queue(qs: Setup) -> None:
    serial = qs
    slotted = _second_repo(qs.tmp)
    outcomes = {}
    for s, args in ((serial, ()), (slotted, ("--slots", "4"))):
        tasks = _twelve(s)
        names = {t["id"]: n for n, t in tasks}
        start = git(s.repo, "rev-parse", "main")
        assert run_sup(s.repo, "queue", "add", *[t["id"] for _n, t in tasks]).returncode == 0
        code, out, _err = _run(s.repo, *args)
        assert code == 3, out
        back = {names[b["task"]]: b for b in out["sent_back"]}
        assert set(back) == {"c06", "c09"}, out["sent_back"]
        assert back["c09"]["kind"] == "conflict"
        assert back["c09"]["evidence"]["conflicts"] == ["shared.txt"]
        assert back["c06"]["kind"] == "failed"
        assert back["c06"]["evidence"]["failed"][0]["name"] == "pair"
        for n in ("c06", "c09"):
            t = dict(tasks)[n]
            note = _note(s.repo, t["candidate"])
            assert note["status"] == "parked" and note["queue_evidence"], note
            assert read_record(s.repo, t["id"])["status"] == "parked"
        outcomes[args] = (_main_line(s, start, names), out)
    (line1, out1), (line4, out4) = outcomes[()], outcomes[("--slots", "4")]
    assert [n for n, _t in line1] == [f"c{i:02d}" for i in range(12) if i not in (6, 9)]
    assert line4 == line1  # the same candidates, in the same order, with the same trees
    assert out4["slots"] == 4 and out1["slots"] == 1
    # serially every check attempt is on the critical path; with slots, fewer are
    assert out1["check_rounds"] == out1["check_runs"] + out1["check_retries"], out1
    assert out4["check_rounds"] < out1["check_rounds"], (out4, out1)
    # a tree is tested again only to confirm a failure (a fresh run), never after a pass
    tested = [e["data"] for e in _events(slotted.repo) if e["type"] == "queue_tested"]
    for i, t in enumerate(tested):
        again = [x for x in tested[i + 1 :] if x["tree"] == t["tree"]]
        assert not again or (not t["passed"] and len(again) == 1), tested


def test_a_check_that_fails_once_in_a_slot_is_flaky_and_blames_no_one(qs: Setup) -> None:
    """b's check fails once in the composition of a and b (run once, as the longer prefixes
    are), then passes when b comes to the head and its failure is confirmed: flaky."""
    repo = qs.repo
    answers = Answers(qs.tmp / "answers", ["fail", "ok"])
    try:
        a = make_task(qs, files=(("a.txt", "a\n"),), checks=[{"name": "ok", "argv": ["true"]}])
        check = {"name": "flaky", "argv": [PYTHON, "-c", READ, str(answers.path)], "timeout": 60}
        b = make_task(qs, files=(("b.txt", "b\n"),), checks=[check])
        assert run_sup(repo, "queue", "add", a["id"], b["id"]).returncode == 0
        code, out, _err = _run(repo, "--slots", "4")
    finally:
        answers.close()
    assert answers.taken == 2
    assert code == 0 and out["integrated"] == [a["id"], b["id"]] and not out["sent_back"], out
    assert [f["checks"] for f in out["flaky"]] == [["flaky"]], out
    assert _note(repo, b["candidate"])["queue_evidence"] == {"flaky": ["flaky"]}
    assert "FLAKY   flaky" in run_sup(repo, "queue").stdout


READ = (
    "import sys; answer = open(sys.argv[1]).read().strip(); print('answer:', answer); "
    "sys.exit(0 if answer == 'ok' else 1)"
)


def test_a_check_that_always_fails_sends_its_candidate_back(qs: Setup) -> None:
    repo = qs.repo
    answers = Answers(qs.tmp / "answers", ["fail", "fail", "fail", "ok"])
    try:
        a = make_task(qs, files=(("a.txt", "a\n"),), checks=[{"name": "ok", "argv": ["true"]}])
        check = {"name": "bad", "argv": [PYTHON, "-c", READ, str(answers.path)], "timeout": 60}
        b = make_task(qs, files=(("b.txt", "b\n"),), checks=[check])
        git(repo, "config", "sup.queue.retries", "2")
        git(repo, "config", "sup.queue.slots", "3")
        assert run_sup(repo, "queue", "add", a["id"], b["id"]).returncode == 0
        code, out, _err = _run(repo)
    finally:
        answers.close()
    assert answers.taken == 3  # failed in a slot, then twice more when it was first
    assert out["slots"] == 3
    assert code == 3 and out["integrated"] == [a["id"]] and not out["flaky"], out
    [back] = out["sent_back"]
    assert back["task"] == b["id"] and back["evidence"]["failed"][0]["name"] == "bad", back
    assert _note(repo, b["candidate"])["status"] == "parked"


# fails on the first run of every tree that holds h.txt (a mark per tree, kept outside the
# sandbox's worktree, says it ran); a run after that waits until a tree without h.txt was
# tested (what is behind the first candidate, composed without it), then passes
FIRST_RUN_FAILS = (
    "import hashlib, os, sys, time\n"
    "state = sys.argv[1]\n"
    "if not os.path.exists('h.txt'):\n"
    "    open(os.path.join(state, 'without'), 'a').write('x')\n"
    "    sys.exit(0)\n"
    "h = hashlib.sha256()\n"
    "for d, dirs, files in sorted(os.walk('.')):\n"
    "    dirs[:] = sorted(x for x in dirs if x != '.git')\n"
    "    for f in sorted(x for x in files if x != '.git'):\n"
    "        h.update(os.path.join(d, f).encode() + open(os.path.join(d, f), 'rb').read())\n"
    "mark = os.path.join(state, h.hexdigest())\n"
    "if not os.path.exists(mark):\n"
    "    open(mark, 'w').close()\n"
    "    sys.exit(1)\n"
    "for _ in range(600):\n"
    "    if os.path.exists(os.path.join(state, 'without')):\n"
    "        sys.exit(0)\n"
    "    time.sleep(0.1)\n"
    "open(os.path.join(state, 'waited-out'), 'w').close()\n"
)


def test_what_is_behind_a_failed_first_candidate_is_tested_before_it_is_confirmed(
    qs: Setup,
) -> None:
    """The first candidate's composition fails once: while that failure is confirmed, a slot
    tests what is behind it composed without it. The confirmation passes (flaky): the first
    candidate is integrated first and blamed for nothing; the tree without it is never the
    branch's."""
    repo, tmp = qs.repo, qs.tmp
    state = tmp / "first-runs"
    state.mkdir()
    check = {"name": "first", "argv": [PYTHON, "-c", FIRST_RUN_FAILS, str(state)], "timeout": 120}
    start = git(repo, "rev-parse", "main")
    a = make_task(qs, files=(("h.txt", "h\n"),), checks=[check])
    b = make_task(qs, files=(("b.txt", "b\n"),), checks=[check])
    assert run_sup(repo, "queue", "add", a["id"], b["id"]).returncode == 0
    code, out, _err = _run(repo, "--slots", "4")
    assert not (state / "waited-out").exists()  # the confirmation saw the tree without a
    assert code == 0 and not out["sent_back"], out
    assert out["integrated"] == [a["id"], b["id"]], out
    _assert_all_once(repo, start, [a, b])
    tested = [e["data"] for e in _events(repo) if e["type"] == "queue_tested"]
    assert any(t["tasks"] == [b["id"]] and t["passed"] for t in tested), tested
    flaky = {task for f in out["flaky"] for task in f["tasks"]}
    assert a["id"] in flaky and out["flaky"][0]["checks"] == ["first"], out
    assert _note(repo, a["candidate"])["queue_evidence"] == {"flaky": ["first"]}
    tips = _first_parents(repo, start)
    b_alone = next(t["tree"] for t in tested if t["tasks"] == [b["id"]])
    assert b_alone not in {git(repo, "rev-parse", f"{t}^{{tree}}") for t in tips}


def test_the_same_argv_under_other_names_runs_once_per_tree_across_slots(qs: Setup) -> None:
    """Three candidates whose checks are one command under three names; a and a2 make the
    same change, so the first two compositions are one tree, tested in two slots at once:
    the check runs once on it. Each run writes the tree it saw (a hash of its files) to a
    log outside the sandbox's worktree."""
    repo, tmp = qs.repo, qs.tmp
    log = tmp / "runs.log"
    argv = [
        PYTHON,
        "-c",
        "import hashlib, os, sys\n"
        "h = hashlib.sha256()\n"
        "for d, dirs, files in sorted(os.walk('.')):\n"
        "    dirs[:] = sorted(x for x in dirs if x != '.git')\n"
        "    for f in sorted(files):\n"
        "        if f != '.git':\n"
        "            h.update(os.path.join(d, f).encode() + open(os.path.join(d, f), 'rb').read())\n"
        f"open({str(log)!r}, 'a').write(h.hexdigest() + '\\n')",
    ]
    a = make_task(qs, files=(("a.txt", "a\n"),), checks=[{"name": "tests", "argv": argv}])
    a2 = make_task(qs, files=(("a.txt", "a\n"),), checks=[{"name": "unit", "argv": argv}])
    b = make_task(qs, files=(("b.txt", "b\n"),), checks=[{"name": "suite", "argv": argv}])
    assert run_sup(repo, "queue", "add", a["id"], a2["id"], b["id"]).returncode == 0
    code, out, _err = _run(repo, "--slots", "4")
    assert code == 0 and out["integrated"] == [a["id"], a2["id"], b["id"]], out
    runs = log.read_text().split()
    assert len(runs) == len(set(runs)) == out["check_commands"], (runs, out)
    tested = [e["data"]["tree"] for e in _events(repo) if e["type"] == "queue_tested"]
    assert len(tested) == len(set(tested)) == len(runs), tested


def test_sigkill_with_busy_slots_then_resume_integrates_each_once(qs: Setup) -> None:
    """Three slots held busy (the compositions that hold a candidate of the second window
    wait while a file exists), the runner shows them, then it is SIGKILLed; the next run
    integrates each candidate once and `doctor --fix` removes what the killed checks left."""
    repo, tmp = qs.repo, qs.tmp
    start = git(repo, "rev-parse", "main")
    hold = tmp / "hold"
    hold.write_text("the compositions with a late*.txt wait while this exists\n")
    slow = [
        PYTHON,
        "-c",
        "import glob, os, time\n"
        f"while glob.glob('late*.txt') and os.path.exists({str(hold)!r}): time.sleep(0.1)",
    ]
    tasks = [
        make_task(
            qs,
            files=((f"late{i}.txt" if i >= 3 else f"f{i}.txt", f"{i}\n"),),
            checks=[{"name": "slow", "argv": slow}],
        )
        for i in range(6)
    ]
    assert run_sup(repo, "queue", "add", *[t["id"] for t in tasks]).returncode == 0
    status = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    status = status / "sup/queue/main/runner.json"
    runner = subprocess.Popen(
        [str(Path(PYTHON).parent / "git-sup"), "queue", "run", "--slots", "3", "--batch", "3"],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    from gitsup.host.contain import list_gitsup_cgroups, list_gitsup_netns

    def cgroups() -> list[Any]:
        return [c for c in list_gitsup_cgroups() if c.name.startswith(f"queue-{runner.pid}-")]

    def netns() -> list[Any]:
        return [n for n in list_gitsup_netns() if n.label == "queue" and n.pid == runner.pid]

    def nets() -> set[str]:
        """The network namespaces of the processes in the runner's check cgroups (each
        check's own, unnamed: the bootstrap unshares it)."""
        out = set()
        for c in cgroups():
            with contextlib.suppress(OSError):
                pids = (c.path / "cgroup.procs").read_text().split()
                out.update({os.readlink(f"/proc/{p}/ns/net") for p in pids[:1]})
        return out

    def held() -> bool:
        try:
            busy = json.loads(status.read_text())["under_test"]
        except (OSError, ValueError):
            return False
        return len(busy) == 3 and len(cgroups()) == 3 and len(nets()) == 3

    try:
        # the second window is under test (main moved for the first), its three checks held
        assert wait_for(held, timeout=120)
        # side by side, each in its own worktree, cgroup and network namespace
        trees = [
            w
            for w in git(repo, "worktree", "list", "--porcelain").splitlines()
            if w.startswith("worktree ") and f"gitsup-queue-{runner.pid}-s" in w
        ]
        assert len(set(trees)) == 3, trees
        assert os.readlink("/proc/self/ns/net") not in nets() and netns() == []
        shown = json.loads(run_sup(repo, "queue", "--json").stdout)[0]["runner"]
        plain = run_sup(repo, "queue").stdout
        runner.send_signal(signal.SIGKILL)
    finally:
        runner.wait(timeout=30)
    assert shown["pid"] == runner.pid and shown["slots"] == 3, shown
    assert shown["under_test"] and shown["predicted"], shown
    busy = shown["under_test"][0]
    assert busy["checks"] == ["slow"] and set(busy["tasks"]) <= {t["id"] for t in tasks}
    assert f"slot {busy['slot']}: " in plain and "predicted order: " in plain, plain
    before = len(_first_parents(repo, start))
    assert before == 3  # the first window; nothing of the held one
    # a dead runner's status says nothing
    assert json.loads(run_sup(repo, "queue", "--json").stdout)[0]["runner"] is None
    hold.unlink()
    code, out, _err = _run(repo, "--slots", "3", "--batch", "3")
    assert code == 0, out
    _assert_all_once(repo, start, tasks)
    assert run_sup(repo, "doctor", "--fix").returncode in (0, 3)
    assert not cgroups() and not netns()


def test_killed_after_moving_the_target_with_slots_busy_resumes_once(qs: Setup) -> None:
    """The runner integrates a passing prefix while a longer one is still under test, and
    is SIGKILLed right after the branch moved, before the queue recorded it: the next run
    reconciles, and each candidate is integrated once."""
    repo, tmp = qs.repo, qs.tmp
    start = git(repo, "rev-parse", "main")
    marker, hold = tmp / "checks-started", tmp / "hold"
    hold.write_text("the composition holding slow.txt waits while this exists\n")
    check = [
        PYTHON,
        "-c",
        f"import os, time; open({str(marker)!r}, 'a').write('x')\n"
        f"while os.path.exists('slow.txt') and os.path.exists({str(hold)!r}): time.sleep(0.1)",
    ]
    tasks = [
        make_task(
            qs,
            files=((f"f{i}.txt", f"{i}\n"), *((("slow.txt", "x\n"),) if i == 5 else ())),
            checks=[{"name": "check", "argv": check}],
        )
        for i in range(6)
    ]
    assert run_sup(repo, "queue", "add", *[t["id"] for t in tasks]).returncode == 0
    died = run_sup(
        repo,
        "queue",
        "run",
        "--slots",
        "3",
        env={"GITSUP_FAULT": "queue_after_move"},
        timeout=300,
    )
    assert died.returncode == -signal.SIGKILL
    moved = len(_first_parents(repo, start))
    assert moved in (2, 4)  # the prefixes of 2 and 4 passed; the one of 6 was still held
    assert marker.read_text() == "xxx"  # three slots were busy at once
    state = json.loads(git(repo, "show", "refs/sup/queue/main/state:queue.json"))
    assert [x["status"] for x in state["entries"]] == ["queued"] * 6
    hold.unlink()
    code, out, _err = _run(repo, "--slots", "3")
    assert code == 0, out
    assert out["resumed"] == [t["id"] for t in tasks[:moved]]
    _assert_all_once(repo, start, tasks)
    # the killed runner's held slot left its cgroup and network namespace: doctor removes
    # them (else any later `doctor` on this machine reports them)
    assert run_sup(repo, "doctor", "--fix").returncode in (0, 3)
    left = json.loads(run_sup(repo, "doctor", "--json").stdout)
    assert not [f for f in left if "queue-" in f["detail"]], left


def test_bad_slots_are_refused(qs: Setup) -> None:
    t = make_task(qs, files=(("a.txt", "a\n"),), checks=[])
    assert run_sup(qs.repo, "queue", "add", t["id"]).returncode == 0
    res = run_sup(qs.repo, "queue", "run", "--slots", "0")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    git(qs.repo, "config", "sup.queue.slots", "many")
    res = run_sup(qs.repo, "queue", "run")
    assert res.returncode == 2 and "sup.queue.slots" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_the_prefixes_a_run_tests_next() -> None:
    """With one slot the search is the serial queue's binary search; with more, the window
    and a spread bisection first, then a search in N+1 parts, waiting for what runs inside."""
    from gitsup.tasks.queue_slots import nearest, points

    assert points(16, {}, set(), 1, spread=True) == [16]
    assert points(16, {16: False}, set(), 1, spread=False) == [8]
    assert points(16, {16: False, 8: True}, set(), 1, spread=False) == [12]
    assert points(16, {}, set(), 4, spread=True) == [16, 4, 8, 12]
    assert points(16, {}, set(), 4, spread=False) == [16]
    assert points(12, {4: False}, set(), 4, spread=False) == [1, 2, 3]
    assert points(16, {8: False}, {4}, 4, spread=False) == []  # 4 narrows it first
    assert points(3, {}, set(), 4, spread=True) == [3, 1, 2]  # every prefix: each on its own
    assert points(9, {9: False}, set(), 4, spread=False) == [1, 3, 5, 7]
    # speculating that the last candidate of the shortest failing prefix is the culprit:
    # two slots of four go to its confirmation and to what is behind it without it, the
    # other two search, the prefix just shorter than the failing one among them (last)
    assert points(12, {4: False}, set(), 2, spread=False, top=True) == [1, 3]
    assert points(12, {6: False}, set(), 1, spread=False, top=True) == [5]
    assert points(12, {6: False}, {2}, 2, spread=False, top=True) == []
    assert [k for k in range(1, 9) if nearest(4, k)] == [2, 3, 4]
    assert not any(nearest(2, k) for k in range(1, 9))  # the search needs the slots
