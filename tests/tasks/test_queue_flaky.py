"""Flaky composition checks: a check that fails and then passes on the same tree when run
again (in a fresh confined run) is recorded as flaky and blamed on nobody; a failure that
reproduces on every attempt sends the candidate back. Real repositories, real `git sup queue
run`, real confined checks. The check's verdicts come from outside the sandbox: it reads one
answer from a FIFO that the test feeds ("fail", then "ok"), so each fresh run gets the next
answer without the check keeping any state of its own."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.conftest import Setup, make_task
from tests.conftest import PYTHON, git, run_sup
from tests.tasks.test_queue import CALC, _events, _note


@pytest.fixture
def qs(repo: Path) -> Setup:
    """A green main, gitsup initialised."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    (repo / "calc.py").write_text(CALC)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "green main")
    init_repo(SupRepo.discover(repo), explicit=True)
    return Setup(repo, repo.parent, repo.parent, repo.parent)


READ_ANSWER = (
    "import sys; answer = open(sys.argv[1]).read().strip(); print('answer:', answer); "
    "sys.exit(0 if answer == 'ok' else 1)"
)


class Answers:
    """A FIFO on the host that gives each run of the check (one opening for reading) the
    next answer ("fail", then "ok", ...); counts how many were given."""

    def __init__(self, path: Path, answers: list[str]) -> None:
        os.mkfifo(path)
        self.path, self.answers, self.taken = path, answers, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._feed, daemon=True)
        self.thread.start()

    def _open(self) -> int | None:
        """A write end when a reader has the FIFO open, else None."""
        try:
            return os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader
                raise
            return None

    def _feed(self) -> None:
        for answer in self.answers:
            fd = None
            while fd is None and not self.stop.is_set():
                fd = self._open()
                if fd is None:
                    time.sleep(0.01)
            if fd is None:
                return
            os.set_blocking(fd, True)
            os.write(fd, f"{answer}\n".encode())
            os.close(fd)
            self.taken += 1
            # the next answer only for the next reader: wait until this one has let go
            while not self.stop.is_set():
                probe = self._open()
                if probe is None:
                    break
                os.close(probe)
                time.sleep(0.01)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def _task(qs: Setup, fifo: Path, name: str = "flaky") -> dict[str, Any]:
    check = {"name": name, "argv": [PYTHON, "-c", READ_ANSWER, str(fifo)], "timeout": 60}
    return make_task(qs, files=((f"{name}.txt", "x\n"),), checks=[check])


def _run(repo: Path, *args: str) -> tuple[int, dict[str, Any]]:
    res = run_sup(repo, "queue", "run", "--json", *args, timeout=300)
    assert res.returncode in (0, 3), res.stderr
    out: dict[str, Any] = json.loads(res.stdout)[0]
    return res.returncode, out


def test_a_check_that_fails_then_passes_is_flaky_and_integrates(qs: Setup) -> None:
    repo, tmp = qs.repo, qs.tmp
    answers = Answers(tmp / "answers", ["fail", "ok"])
    try:
        t = _task(qs, answers.path)
        main = git(repo, "rev-parse", "main")
        assert run_sup(repo, "queue", "add", t["id"]).returncode == 0
        code, out = _run(repo)
    finally:
        answers.close()
    assert answers.taken == 2  # the check really ran twice
    assert out["check_runs"] == 1 and out["check_retries"] == 1, out
    assert out["check_rounds"] == 2  # one after the other
    assert code == 0 and out["integrated"] == [t["id"]] and not out["sent_back"], json.dumps(out)
    tree = git(repo, "rev-parse", "main^{tree}")
    assert git(repo, "rev-parse", "main^1") == main
    assert out["flaky"] == [{"tree": tree, "tasks": [t["id"]], "checks": ["flaky"]}], out
    tested = [e["data"] for e in _events(repo) if e["type"] == "queue_tested"]
    assert tested[-1]["passed"] is True and tested[-1]["flaky"] == ["flaky"], tested
    # the evidence: the queue's entry, the candidate's note, `git sup queue` and `show`
    res = run_sup(repo, "queue", "--json")
    entry = json.loads(res.stdout)[0]["entries"][0]
    assert entry["status"] == "integrated" and entry["evidence"]["flaky"] == ["flaky"], entry
    assert _note(repo, t["candidate"])["queue_evidence"] == {"flaky": ["flaky"]}
    shown = run_sup(repo, "queue").stdout
    assert "FLAKY   flaky" in shown, shown
    shown = run_sup(repo, "show", t["id"]).stdout
    assert "FLAKY   flaky" in shown and "flaky, not blamed" in shown, shown
    assert _note(repo, t["candidate"])["status"] == "integrated"


def test_a_failure_that_reproduces_sends_the_culprit_back(qs: Setup) -> None:
    repo, tmp = qs.repo, qs.tmp
    answers = Answers(tmp / "answers", ["fail", "fail", "fail"])
    try:
        t = _task(qs, answers.path)
        main = git(repo, "rev-parse", "main")
        git(repo, "config", "sup.queue.retries", "2")
        assert run_sup(repo, "queue", "add", t["id"]).returncode == 0
        code, out = _run(repo)
    finally:
        answers.close()
    assert answers.taken == 3 and out["check_retries"] == 2  # one run, two fresh retries
    assert code == 3 and out["integrated"] == [] and not out["flaky"], out
    assert [s["task"] for s in out["sent_back"]] == [t["id"]], out
    assert out["sent_back"][0]["evidence"]["failed"][0]["name"] == "flaky"
    assert git(repo, "rev-parse", "main") == main
    assert _note(repo, t["candidate"])["status"] == "parked"


def test_no_retries_sends_back_at_the_first_failure(qs: Setup) -> None:
    repo, tmp = qs.repo, qs.tmp
    answers = Answers(tmp / "answers", ["fail", "ok"])
    try:
        t = _task(qs, answers.path)
        main = git(repo, "rev-parse", "main")
        assert run_sup(repo, "queue", "add", t["id"]).returncode == 0
        code, out = _run(repo, "--retries", "0")
    finally:
        answers.close()
    assert answers.taken == 1 and out["check_retries"] == 0
    assert code == 3 and [s["task"] for s in out["sent_back"]] == [t["id"]], out
    assert git(repo, "rev-parse", "main") == main


def test_bad_retries_setting_is_refused(qs: Setup) -> None:
    git(qs.repo, "config", "sup.queue.retries", "many")
    t = make_task(qs, files=(("a.txt", "a\n"),), checks=[])
    assert run_sup(qs.repo, "queue", "add", t["id"]).returncode == 0
    res = run_sup(qs.repo, "queue", "run")
    assert res.returncode == 2 and "sup.queue.retries" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
