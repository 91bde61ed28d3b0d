"""The worker's environment carries no repository location from the caller, and the marker."""

from __future__ import annotations

import json

import pytest

from tests.boundary.conftest import Setup, start_task


def test_worker_env_is_stripped_and_marked(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = setup.tmp / "worker-env.json"
    body = f"""
import json, os, pathlib
pathlib.Path({str(dump)!r}).write_text(json.dumps(dict(os.environ)))
"""
    # What a caller running inside a Git hook or alias would leak into gitsup.
    monkeypatch.setenv("GIT_DIR", str(setup.repo / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(setup.repo))
    monkeypatch.setenv("GIT_INDEX_FILE", str(setup.tmp / "not-the-index"))
    rec = start_task(setup, body, "--no-commit-required")
    env = json.loads(dump.read_text())
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        assert name not in env, name
    assert env["GITSUP_TASK"] == rec["id"]
    assert env["GIT_TERMINAL_PROMPT"] == "0"
