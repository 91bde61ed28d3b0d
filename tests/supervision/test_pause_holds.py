"""The two holds on a worker do not undo each other: the hold while its work is verified
(Launcher.hold/release) and a person's pause (Launcher.pause_by_user). A real cgroup with a
real counting process in it; the kernel's `cgroup.events` and the counter say what runs."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gitsup.host.contain import create_cgroup
from gitsup.spec import TaskSpec
from gitsup.supervision.launcher import Launcher
from tests.helpers.require import require

COUNT = """
import pathlib, sys, time
n = 0
while True:
    n += 1
    pathlib.Path(sys.argv[1]).write_text(str(n))
    time.sleep(0.05)
"""


class _Alive:
    """What the holds ask of the worker: whether it lives, whether it is persistent."""

    def __init__(self, p: subprocess.Popen[bytes]) -> None:
        self.p = p
        self.capabilities = SimpleNamespace(persistent=False)

    @property
    def alive(self) -> bool:
        return self.p.poll() is None


def _runs(counter: Path) -> bool:
    a = counter.read_text()
    time.sleep(0.4)
    return counter.read_text() != a


@pytest.fixture
def held(tmp_path: Path) -> Any:
    require("cgroup", "freezing the task")
    cg = create_cgroup(f"test-holds-{secrets.token_hex(4)}")
    counter = tmp_path / "n"
    p = subprocess.Popen([sys.executable, "-c", COUNT, str(counter)], start_new_session=True)
    (cg.path / "cgroup.procs").write_text(str(p.pid))
    while not counter.exists():
        time.sleep(0.02)
    events: list[Any] = []
    la = Launcher.__new__(Launcher)
    la.cgroup, la.spec = cg, TaskSpec(goal="g")
    la.worker = _Alive(p)  # type: ignore[misc]
    la.journal = SimpleNamespace(record=SimpleNamespace(worker={"pgid": p.pid}))  # type: ignore[assignment]
    la.emit = events.append
    la._held_for_verify = la._held_by_user = False
    la._stopped_group = None
    la._stopped_hits = []
    yield la, cg, counter
    cg.kill()
    p.wait()
    cg.remove()


def test_a_resume_does_not_thaw_a_verification_hold(held: Any) -> None:
    la, cg, counter = held
    la.hold()  # its turn ended: verifying
    assert cg.frozen()
    assert la.pause_by_user(True)[:2] == (True, "cgroup frozen")
    ok, how, _ = la.pause_by_user(False)
    assert (ok, how) == (True, "still held between turns")
    assert cg.frozen() and not _runs(counter)
    la.release()  # the next turn: nothing holds it any more
    assert not cg.frozen() and _runs(counter)


def test_the_next_turn_does_not_end_a_pause(held: Any) -> None:
    la, cg, counter = held
    assert la.pause_by_user(True)[:2] == (True, "cgroup frozen")
    la.hold()
    la.release()  # a repair turn starts while the person still holds the task
    assert cg.frozen() and not _runs(counter)
    assert la.pause_by_user(False)[:2] == (True, "cgroup thawed")
    assert not cg.frozen() and _runs(counter)


def test_without_a_cgroup_the_process_group_is_stopped(held: Any) -> None:
    la, _cg, counter = held
    la.cgroup = None
    la.journal.record.worker = {"pgid": la.worker.p.pid}
    assert la.pause_by_user(True)[:2] == (True, "SIGSTOP")
    assert not _runs(counter)
    assert la.pause_by_user(False)[:2] == (True, "SIGCONT")
    assert _runs(counter)
