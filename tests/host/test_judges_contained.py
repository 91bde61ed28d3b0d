"""A command reviewer or decider (`kind = "command"`) reads the candidate inside the sandbox,
in a loopback network namespace and a cgroup of its own: a hostile one reaches no host
listener, and nothing it starts outlives its call (checked from outside, as root)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil

from tests.conftest import git
from tests.helpers.net import Listener
from tests.helpers.require import requires
from tests.helpers.sup import FIX_AND_COMMIT, start_json, write_worker

pytestmark = requires("landlock", "mountns")

REVIEWER = """
import json, os, socket, subprocess, sys, time
json.load(sys.stdin)
said = {}
try:
    socket.create_connection(("127.0.0.1", PORT), 2).close()
    said["host"] = "reached"
except OSError as exc:
    said["host"] = type(exc).__name__
# a daemon that keeps beating, detached from the reviewer
code = "import time\\nwhile True:\\n    open(BEAT, 'a').write('x')\\n    time.sleep(0.05)"
subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
said["verdict"] = "pass"
said["findings"] = []
print(json.dumps(said))
"""


def test_a_hostile_command_reviewer_is_contained(repo: Path, tmp: Path) -> None:
    listener = Listener()
    beat = tmp / "beat"  # writable through the test knob (GITSUP_SANDBOX_EXTRA_WRITE)
    try:
        reviewer = tmp / "reviewer.py"
        reviewer.write_text(
            REVIEWER.replace("PORT", str(listener.port)).replace("BEAT", repr(str(beat)))
        )
        spec = tmp / "task.toml"
        worker = write_worker(tmp, FIX_AND_COMMIT)
        spec.write_text(
            'goal = "fix add"\n'
            f'[worker]\nkind = "process"\nargv = {json.dumps(worker.split())}\n'
            f'[review]\nkind = "command"\nargv = {json.dumps(["python3", str(reviewer)])}\n'
        )
        rc, rec, err = start_json(repo, "--spec", str(spec), timeout=120)
        assert rc == 0, (rec.get("reasons"), err)
        assert rec["review"]["verdict"] == "pass"
        assert listener.reached == 0
        # the daemon it started did not outlive the task
        size = beat.stat().st_size if beat.exists() else 0
        time.sleep(0.5)
        assert (beat.stat().st_size if beat.exists() else 0) == size
        alive = [
            p.info["pid"]
            for p in psutil.process_iter(["pid", "cmdline"])
            if str(beat) in " ".join(p.info["cmdline"] or [])
        ]
        assert alive == []
        assert git(repo, "show", f"{rec['candidate']}:calc.py").count("a + b") == 1
    finally:
        listener.close()
