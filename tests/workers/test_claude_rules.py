"""What a Claude Code worker may not be started with, per transport, from the one table
(gitsup/workers/claude/rules.py): the headless worker's argument and settings checks and the
tmux worker's refuse exactly what the table says, however the flag is spelled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitsup.workers.base import WorkerError
from gitsup.workers.claude import tmux_setup as tmux
from gitsup.workers.claude import worker as claude
from gitsup.workers.claude.rules import (
    FLAGS,
    MODES,
    read_settings_value,
    refused_flags,
    refused_modes,
)


def headless(args: list[str]) -> None:
    claude.check_arguments(args)


def tui(args: list[str]) -> None:
    tmux.split_arguments(args)


CHECKS = {"headless": headless, "tmux": tui}


def test_every_row_refuses_somewhere_and_the_workers_read_the_table() -> None:
    for flag, (h, t) in FLAGS.items():
        assert h or t, f"{flag} is refused nowhere"
    assert all(MODES.values())
    assert refused_modes("headless") == claude._BAD_MODES
    assert refused_modes("tmux") == tmux._BAD_MODES
    # Skipping permission checks is refused by both, always.
    for transport in ("headless", "tmux"):
        assert "--dangerously-skip-permissions" in refused_flags(transport)  # type: ignore[arg-type]
        assert "bypassPermissions" in refused_modes(transport)  # type: ignore[arg-type]


@pytest.mark.parametrize("transport", ["headless", "tmux"])
@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_a_flag_is_refused_exactly_where_the_table_says(transport: str, flag: str) -> None:
    why = refused_flags(transport)  # type: ignore[arg-type]
    for spelling in ([flag], [f"{flag}=x"], ["--model", "m", flag, "x"]):
        if flag in why:
            with pytest.raises(WorkerError) as err:
                CHECKS[transport](spelling)
            assert why[flag] in str(err.value)
        elif flag != "--setting-sources":  # the tmux worker checks its value (below)
            CHECKS[transport](spelling)


@pytest.mark.parametrize("transport", ["headless", "tmux"])
@pytest.mark.parametrize("mode", [*sorted(MODES), "default"])
def test_permission_modes_by_argument_and_by_settings(
    transport: str, mode: str, tmp_path: Path
) -> None:
    refused = mode in refused_modes(transport)  # type: ignore[arg-type]
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"permissions": {"defaultMode": mode}}))
    attempts = [
        ["--permission-mode", mode],
        [f"--permission-mode={mode}"],
        ["--settings", json.dumps({"permissions": {"defaultMode": mode}})],
        [f"--settings={settings}"],
    ]
    for args in attempts:
        if refused:
            with pytest.raises(WorkerError):
                CHECKS[transport](args)
        else:
            CHECKS[transport](args)


def test_tmux_lets_only_user_settings_load_and_never_switches_hooks_off() -> None:
    tui(["--setting-sources", "user"])
    for value in ("project", "user,local", "user, project"):
        with pytest.raises(WorkerError, match="only 'user' may load"):
            tui(["--setting-sources", value])
    with pytest.raises(WorkerError, match="disableAllHooks"):
        tui(["--settings", '{"disableAllHooks": true}'])


def test_headless_refuses_bash_pre_authorised_in_any_spelling() -> None:
    for args in (
        ["--allowedTools", "Bash"],
        ["--allowed-tools", "Read,Bash(git push:*)"],
        ["--allowedTools=Edit Bash(rm:*)"],
        ["--settings", '{"permissions": {"allow": ["Bash(curl:*)"]}}'],
    ):
        with pytest.raises(WorkerError, match="Bash"):
            headless(args)
    headless(["--allowedTools", "Read", "Edit"])


def test_settings_values_unreadable_or_not_json(tmp_path: Path) -> None:
    with pytest.raises(WorkerError, match="cannot be read"):
        read_settings_value(str(tmp_path / "missing.json"), "--settings", strict=False)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    # The headless CLI ignores settings it cannot parse; the TUI path refuses them.
    assert read_settings_value(str(bad), "--settings", strict=False) is None
    headless(["--settings", str(bad)])
    with pytest.raises(WorkerError, match="not valid JSON"):
        tui(["--settings", str(bad)])
    assert read_settings_value('{"a": 1}', "--settings", strict=True) == {"a": 1}
