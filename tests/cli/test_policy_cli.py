"""`git sup policy check` and `explain` through the console script: a command is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_sup


@pytest.mark.parametrize(
    ("command", "hint"),
    [
        ("check", "git sup policy check -- git push origin main"),
        ("explain", "git sup policy explain -- npm publish"),
    ],
)
def test_policy_without_a_command_is_bad_input(repo: Path, command: str, hint: str) -> None:
    res = run_sup(repo, "policy", command)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "no command given" in res.stderr and hint in res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    res = run_sup(repo, "policy", command, "--", "git", "push", "origin", "main")
    assert res.returncode == 0, res.stderr
    assert "deny" in res.stdout
