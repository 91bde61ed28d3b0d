"""Process groups: a stop reaches the whole group and does not wait for exited members."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from gitsup.host import proc
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


def test_spawn_detached_leaves_our_session_and_keeps_no_descriptor_of_ours(tmp_path: Path) -> None:

    log = tmp_path / "bg.log"
    log.write_bytes(b"earlier\n")
    # A descriptor of ours the child must not inherit (close_fds), whatever its flags.
    r, w = os.pipe()
    os.set_inheritable(w, True)
    marker = tmp_path / "fds"
    code = (
        "import os, sys, time\n"
        "fds = ' '.join(sorted(os.listdir('/proc/self/fd')))\n"
        f"open({str(marker)!r}, 'w').write(fds)\n"
        "print('sid', os.getsid(0), 'pgid', os.getpgid(0), 'pid', os.getpid(), flush=True)\n"
        "sys.stderr.write('to the log too\\n')\n"
    )
    try:
        pid = proc.spawn_detached([sys.executable, "-c", code], cwd=tmp_path, log=log)
    finally:
        os.close(w)
    wait_for(lambda: "to the log too" in log.read_text(), 30)
    os.close(r)
    text = log.read_text()
    assert text.startswith("earlier\n")  # appended, not truncated
    fields = text.split("sid ", 1)[1].split()
    sid, pgid, child = int(fields[0]), int(fields[2]), int(fields[4])
    assert child == pid and sid == pid and pgid == pid  # its own session and group
    assert sid != os.getsid(0)
    assert set(marker.read_text().split()) <= {"0", "1", "2", "3"}  # 3: listdir's own


def test_spawn_piped_starts_its_own_group_and_a_missing_program_is_oserror(tmp_path: Path) -> None:

    import pytest

    p = proc.spawn_piped(
        [sys.executable, "-c", "import os, sys; print(os.getpgid(0)); sys.stdout.flush()"],
        cwd=tmp_path,
        env=dict(os.environ),
    )
    out, _ = p.communicate(timeout=30)
    assert int(out) == p.pid != os.getpgid(0)
    with pytest.raises(OSError):
        proc.spawn_piped([str(tmp_path / "no-such-program")], cwd=tmp_path, env={})


def test_descendants_collected_before_a_stop_are_killed_even_after_they_left_the_group() -> None:
    # The leader starts a child that moves to a session of its own: a group kill misses it.
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(60)'])\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    p = proc.spawn_piped([sys.executable, "-c", code], cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert p.stdout is not None
    escaped = int(p.stdout.readline())

    def left_the_group() -> bool:
        try:
            return os.getsid(escaped) == escaped
        except OSError:
            return False

    wait_for(left_the_group, 30)
    kids = proc.descendants(p.pid)
    assert escaped in {k.pid for k in kids}
    proc.signal_group(p.pid, 9)
    assert proc.wait_exit(p, 30)
    assert psutil.pid_exists(escaped) and psutil.Process(escaped).status() != psutil.STATUS_ZOMBIE
    proc.kill_each(kids)
    wait_for(
        lambda: (
            not psutil.pid_exists(escaped)
            or psutil.Process(escaped).status() == psutil.STATUS_ZOMBIE
        ),
        30,
    )
    # Signalling a group that is gone is no error.
    proc.signal_group(p.pid, 9)


def test_kill_tree_kills_a_process_and_all_below_it_and_reaps_our_child() -> None:
    # a shell whose subshell runs two sleeps, one of them in a session of its own
    p = proc.spawn_piped(
        ["sh", "-c", "(sleep 60 & setsid sleep 60 & wait) & wait"],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )
    wait_for(lambda: len(proc.descendants(p.pid)) == 3, 30)
    tree = {p.pid, *(k.pid for k in proc.descendants(p.pid))}
    killed = proc.kill_tree(p.pid, wait=30)
    assert sorted(killed) == sorted(tree)
    # our child is reaped (no zombie left of it); the others are gone or a zombie for a
    # moment (their parent, killed, was not ours)
    assert not psutil.pid_exists(p.pid)
    for pid in tree - {p.pid}:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # a process that is gone: nothing killed, no error
    assert proc.kill_tree(p.pid, wait=1) == []


def test_wait_exit_says_whether_the_child_ended() -> None:
    p = proc.spawn_piped(
        [sys.executable, "-c", "import time; time.sleep(60)"], cwd="/", env={"PATH": "/usr/bin"}
    )
    try:
        assert not proc.wait_exit(p, 0.2)
    finally:
        proc.signal_group(p.pid, 9)
    assert proc.wait_exit(p, 30)
    assert p.returncode == -9


def test_failure_says_why_a_command_did_not_succeed() -> None:
    stop = threading.Event()
    ok = proc.run([sys.executable, "-c", "pass"], timeout=30)
    assert ok.failure("reviewer", timeout=30) is None
    bad = proc.run([sys.executable, "-c", "raise SystemExit(3)"], timeout=30)
    assert bad.failure("reviewer", timeout=30) == "reviewer exited 3"
    slow = proc.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.3)
    assert slow.failure("decider", timeout=0.3) == "decider timed out after 0.3s"
    stop.set()
    stopped = proc.run([sys.executable, "-c", "import time; time.sleep(60)"], abort=stop)
    assert stopped.failure("decider", timeout=60, abort=stop) == "decider stopped: stop requested"
