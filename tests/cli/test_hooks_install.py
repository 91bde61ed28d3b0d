"""`git sup hooks install|uninstall`: gitsup's relay entries in the user's Claude Code settings,
through the real CLI. Idempotent, the user's other settings and hooks kept whatever the file's
formatting, a corrupt file refused (exit 2) and left byte for byte as it was."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import GIT_SUP, run_sup

EVENTS = ("PreToolUse", "PermissionRequest", "UserPromptSubmit", "Stop")
THEIRS: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Read"]},
    "hooks": {
        "Stop": [{"matcher": "", "hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh", "timeout": 5}]}
        ],
        "SessionStart": [{"hooks": [{"type": "command", "command": "echo hi"}]}],
    },
}


# what the docs once told people to add by hand, in a group of their own hooks
HAND_MADE = {"type": "command", "command": "python3 -P -m gitsup.hookrelay"}


def _with_hand_made() -> dict[str, Any]:
    data = json.loads(json.dumps(THEIRS))
    data["hooks"]["PreToolUse"][0]["hooks"].append(dict(HAND_MADE))
    return data


def _sup(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / "cfg")}
    return run_sup(home, "hooks", *args, env=env)


def _mine(settings: dict[str, Any]) -> dict[str, list[str]]:
    return {
        event: [
            h["command"]
            for g in groups
            for h in g.get("hooks", [])
            if "gitsup.hookrelay" in h.get("command", "")
        ]
        for event, groups in settings.get("hooks", {}).items()
    }


def test_install_and_uninstall_keep_everything_else(tmp_path: Path) -> None:
    f = tmp_path / "cfg" / "settings.json"
    f.parent.mkdir()
    f.write_text(json.dumps(_with_hand_made(), separators=(",", ":")))  # compact
    f.chmod(0o640)
    res = _sup(tmp_path, "install", "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["changed"] and got["path"] == str(f) and sorted(got["events"]) == sorted(EVENTS)
    data = json.loads(f.read_text())
    mine = _mine(data)
    assert all(len(mine[e]) == 1 for e in EVENTS), mine
    assert mine["SessionStart"] == []
    # the hand-made entry was taken over (now with this interpreter), not doubled
    bash_group = data["hooks"]["PreToolUse"][0]
    assert bash_group["matcher"] == "Bash" and len(data["hooks"]["PreToolUse"]) == 1
    assert bash_group["hooks"][0]["command"] == "audit.sh"
    assert bash_group["hooks"][1]["command"] == mine["PreToolUse"][0] != HAND_MADE["command"]
    # the installed command runs the relay: outside any task it says nothing, at once
    cmd = shlex.split(mine["Stop"][0])
    relay = subprocess.run(
        cmd, input='{"cwd": "/"}', capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert relay.returncode == 0 and relay.stdout == "", relay.stderr
    assert stat.S_IMODE(f.stat().st_mode) == 0o640
    for key in ("model", "permissions"):
        assert data[key] == THEIRS[key]

    # idempotent, and blind to formatting: the same entries re-indented change nothing
    f.write_text(json.dumps(data, indent=7))
    before = f.read_bytes()
    again = _sup(tmp_path, "install", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False
    assert f.read_bytes() == before

    res = _sup(tmp_path, "uninstall")
    assert res.returncode == 0, res.stderr
    assert json.loads(f.read_text()) == THEIRS
    before = f.read_bytes()
    res = _sup(tmp_path, "uninstall", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["changed"] is False
    assert f.read_bytes() == before


def test_install_creates_the_user_settings_private(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CLAUDE_CONFIG_DIR"}
    env["HOME"] = str(tmp_path)
    res = subprocess.run(
        [GIT_SUP, "hooks", "install"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    f = tmp_path / ".claude" / "settings.json"
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert sorted(json.loads(f.read_text())["hooks"]) == sorted(EVENTS)
    res = _sup(tmp_path, "uninstall")  # another config dir: nothing there, nothing done
    assert res.returncode == 0 and not (tmp_path / "cfg").exists()


def test_a_corrupt_settings_file_is_refused_and_untouched(tmp_path: Path) -> None:
    f = tmp_path / "cfg" / "settings.json"
    f.parent.mkdir()
    for text in (
        '{"model": "opus", "hooks": {',  # cut short
        '["not", "an", "object"]',
        '{"hooks": [{"type": "command"}]}',  # hooks as a list
        '{"hooks": {"Stop": {"hooks": []}}}',  # an event's groups not a list
    ):
        f.write_text(text)
        for action in ("install", "uninstall"):
            res = _sup(tmp_path, action)
            assert res.returncode == 2, (text, res.stdout, res.stderr)
            assert "left as it is" in res.stderr and "Traceback" not in res.stderr
            assert len(res.stderr.strip().splitlines()) == 2  # the error and its hint
            assert f.read_text() == text
