"""Process groups: a stop reaches the whole group and does not wait for exited members."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psutil

from gitsup import proc
from tests.helpers.sup import wait_for


def test_group_of_only_zombies_is_not_alive() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    try:
        wait_for(lambda: psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE, 10)
        assert not proc.group_alive(p.pid)
        # a group of zombies is already gone: kill_group must not wait its (long) grace out
        done = threading.Event()
        threading.Thread(
            target=lambda: (proc.kill_group(p.pid, grace=3600.0), done.set()), daemon=True
        ).start()
        assert done.wait(60), "kill_group waited the grace out for a group of zombies"
    finally:
        p.wait()
    assert not proc.group_alive(p.pid)


def test_kill_group_reaches_every_member_and_waits_for_them() -> None:
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE
    )
    try:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        child = psutil.Process(p.pid).children()[0]
        assert proc.group_alive(p.pid)
        proc.kill_group(p.pid, grace=5.0)
        p.wait(5)
        wait_for(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, 5)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_kill_group_escalates_to_sigkill_after_the_grace() -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE
    )
    try:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        t0 = time.monotonic()
        proc.kill_group(p.pid, grace=0.3)
        assert p.wait(5) == -9
        assert time.monotonic() - t0 >= 0.25  # SIGKILL only after the grace
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_run_bounds_output_and_times_out_the_group() -> None:
    res = proc.run([sys.executable, "-c", "print('x' * 100000)"], max_output=1000)
    assert res.ok and res.truncated and len(res.output) < 1200
    res = proc.run(
        [sys.executable, "-c", "import time; time.sleep(3600)"], timeout=0.3, kill_grace=0.5
    )
    assert res.timed_out and res.returncode is None and not res.ok
