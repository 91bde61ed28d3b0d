"""The real Claude Code worker leaves a `setsid` daemon running past its turn: the daemon is
frozen with the worker while the work is imported and checked, runs again only during the
repair round, and is gone when the task ends."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from gitsup.demo.scripted_model import ScriptedModel
from tests.helpers.require import requires
from tests.helpers.sup import common_dir
from tests.helpers.supervised import COMMIT, FIX_CALC, Run, bash, run_supervised, step, text, write
from tests.workers.claude.conftest import claude_env

pytestmark = [
    pytest.mark.claude,
    requires("cgroup"),
]

# Leaves its turn at once (fork, setsid, its output detached), then counts its rounds in the
# task's TMPDIR as fast as it can.
DAEMON = """import os, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
beat = os.path.join(os.environ["TMPDIR"], "heartbeat")
n = 0
while True:
    n += 1
    with open(beat + ".new", "w") as f:
        f.write(str(n))
    os.replace(beat + ".new", beat)
    time.sleep(0.002)
"""

# What the daemon did while the check ran; fails the first time (a repair round follows).
CHECK = """
import json, os, sys, time
tmp = os.environ["TMPDIR"]
def beat():
    try:
        return int(open(os.path.join(tmp, "heartbeat")).read())
    except (OSError, ValueError):
        return -1
before = beat()
time.sleep(0.5)
after = beat()
n = len([f for f in os.listdir(tmp) if f.startswith("check-")])
with open(os.path.join(tmp, f"check-{n}.json"), "w") as f:
    json.dump({"before": before, "after": after}, f)
sys.exit(1 if n == 0 else 0)
"""


def test_a_daemon_is_frozen_while_verifying_and_thawed_for_the_repair_round(
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = scripted_model(
        {
            "default": [
                step(write("${CWD}/daemon.py", DAEMON)),
                step(FIX_CALC),
                step(COMMIT),
                step(bash("python3 daemon.py", "Start")),
                step(text("Done; a helper keeps running.")),
                step(bash("git status --short", "Look")),
                step(text("Checked again.")),
            ]
        }
    )
    env = claude_env(model.url, tmp_path / "claude-config", {"GITSUP_CLAUDE_BIN": claude_bin})
    check: dict[str, Any] = {"name": "beat", "argv": [sys.executable, "-c", CHECK], "timeout": 60}
    r: Run = run_supervised(repo, model, env, monkeypatch, {"kind": "claude"}, check)
    rec = r.record
    tmpdir = common_dir(repo) / "sup" / "tasks" / rec.id / "sandbox" / "tmp"
    seen = [json.loads((tmpdir / f"check-{i}.json").read_text()) for i in range(2)]
    bash_calls = [(d["input"], d["verdict"]) for d in r.of("permission_decided")]
    assert seen[0]["before"] > 0, f"the daemon never ran: {seen} {bash_calls}"
    for s in seen:
        assert s["before"] == s["after"], f"the daemon ran while a check ran: {seen}"
    assert seen[1]["before"] > seen[0]["after"], f"the repair round did not thaw it: {seen}"
    held = [d["how"] for d in r.of("worker_held")]
    assert held[:3] == ["frozen", "thawed", "frozen"], held
    assert rec.status.value == "ready", rec.reasons
    assert rec.repair_rounds == 1
    for p in psutil.process_iter(["pid"]):
        try:
            assert p.environ().get("GITSUP_TASK") != rec.id, f"pid {p.pid} survived the task"
        except psutil.Error:
            continue
