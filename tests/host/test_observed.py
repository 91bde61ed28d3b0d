"""The sandbox report states what the sandboxed process saw of itself, never what was only
asked for: a privilege the process did not report holding (or reported missing) is false in
the report, and the sandbox is then not "enforced"."""

from __future__ import annotations

import json
from pathlib import Path

from gitsup.host.sandbox import HostSupport, SandboxPlan

SEEN = ("no_new_privs", "caps_dropped", "seccomp", "pid_ns", "mount_ns")


def _plan(box: Path) -> SandboxPlan:
    host = HostSupport(landlock_abi=7, mountns=True, missing=(), pidns=True, seccomp=True)
    config = {"box": str(box), "landlock": True, "mountns": True, "pidns": True, "seccomp": "f"}
    return SandboxPlan(mode="auto", host=host, config=config, git_state="private")


def test_what_was_not_observed_is_not_claimed(tmp: Path) -> None:
    plan = _plan(tmp)
    asked = plan.report()
    assert asked["enforced"] is True and all(asked[k] for k in SEEN if k in asked), asked
    # nothing observed (the process ended before it wrote what it saw): every one false
    got = plan.observe(asked, alive=lambda: False)
    assert {k: got[k] for k in SEEN} == dict.fromkeys(SEEN, False), got
    assert got["enforced"] is False and any("not observed" in w for w in got["weaker"]), got
    # each one the process saw missing is false, and the sandbox is not enforced
    for missing in SEEN:
        plan.observed_file.write_text(json.dumps({k: k != missing for k in SEEN}))
        got = plan.observe(asked, alive=lambda: False)
        assert got[missing] is False and got["enforced"] is False, (missing, got)
        assert all(got[k] is True for k in SEEN if k != missing), (missing, got)
    plan.observed_file.write_text(json.dumps(dict.fromkeys(SEEN, True)))
    got = plan.observe(asked, alive=lambda: False)
    assert got["enforced"] is True and all(got[k] is True for k in SEEN), got
