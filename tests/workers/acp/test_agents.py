"""`git sup doctor` lists the ACP agent it finds, with the version the binary reports."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_sup
from tests.workers.acp.conftest import PINNED_VERSION


def test_doctor_lists_the_acp_agent_and_its_version(acp_bin: str, repo: Path) -> None:
    run_sup(repo, "init")
    res = run_sup(repo, "doctor", env={**os.environ, "GITSUP_ACP_BIN": acp_bin})
    assert f"agent acp: Claude Code ACP adapter {PINNED_VERSION} ({acp_bin})" in res.stdout, res


def test_doctor_says_when_no_acp_agent_is_found(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_sup(repo, "init")
    monkeypatch.delenv("GITSUP_ACP_BIN", raising=False)  # CI exports it
    res = run_sup(repo, "doctor", env={"PATH": "/usr/bin:/bin"})
    assert "agent acp: Claude Code ACP adapter not found (no ACP agent:" in res.stdout, res
    assert "set GITSUP_ACP_BIN" in res.stdout


def test_a_binary_that_fails_its_version_probe_is_reported(repo: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken-acp"
    broken.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    broken.chmod(0o755)
    run_sup(repo, "init")
    res = run_sup(repo, "doctor", env={**os.environ, "GITSUP_ACP_BIN": str(broken)})
    assert (
        f"agent acp: Claude Code ACP adapter at {broken}, version unknown (--version exited 3)"
        in res.stdout
    )


def test_start_refuses_an_acp_worker_whose_agent_is_missing(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITSUP_ACP_BIN", raising=False)
    env = {"PATH": "/usr/bin:/bin"}
    spec = tmp_path / "task.toml"
    spec.write_text(
        'goal = "g"\n[worker]\nkind = "acp"\nargv = ["no-such-acp-agent"]\n[review]\nkind = "none"\n'
    )
    res = run_sup(repo, "start", "--spec", str(spec), env=env)
    assert res.returncode == 2, res
    assert "worker: [worker] argv names 'no-such-acp-agent'" in res.stderr, res.stderr
    spec.write_text(
        'goal = "g"\n[worker]\nkind = "process"\nargv = ["true"]\n[review]\nkind = "acp"\n'
    )
    res = run_sup(repo, "start", "--spec", str(spec), env=env)
    assert res.returncode == 2, res
    assert "reviewer: no ACP agent" in res.stderr, res.stderr
    assert run_sup(repo, "ls", "--json").stdout.strip() in ("", "[]")


@pytest.mark.parametrize(
    ("kind", "var", "said"),
    [
        ("acp", "GITSUP_ACP_BIN", "decider: no ACP agent"),
        ("codex", "GITSUP_CODEX_BIN", "decider: the Codex CLI (`codex`) is not on PATH"),
    ],
)
def test_start_refuses_a_decider_whose_agent_is_missing(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, var: str, said: str
) -> None:
    monkeypatch.delenv(var, raising=False)
    env = {"PATH": "/usr/bin:/bin"}
    spec = tmp_path / "task.toml"
    head = 'goal = "g"\n[worker]\nkind = "process"\nargv = ["true"]\n[review]\nkind = "none"\n'
    spec.write_text(f'{head}[decider]\nkind = "{kind}"\n')
    res = run_sup(repo, "start", "--spec", str(spec), env=env)
    assert res.returncode == 2, res
    assert said in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    spec.write_text(f'{head}[decider]\nkind = "{kind}"\nargv = ["no-such-{kind}-agent"]\n')
    res = run_sup(repo, "start", "--spec", str(spec), env=env)
    assert res.returncode == 2, res
    assert f"decider: [decider] argv names 'no-such-{kind}-agent'" in res.stderr, res.stderr
    assert run_sup(repo, "ls", "--json").stdout.strip() in ("", "[]")


def test_start_refuses_a_codex_worker_or_reviewer_whose_cli_is_missing(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITSUP_CODEX_BIN", raising=False)
    env = {"PATH": "/usr/bin:/bin"}
    spec = tmp_path / "task.toml"
    spec.write_text(
        'goal = "g"\n[worker]\nkind = "codex"\nargv = ["no-such-codex"]\n[review]\nkind = "none"\n'
    )
    res = run_sup(repo, "start", "--spec", str(spec), env=env)
    assert res.returncode == 2, res
    assert "worker: [worker] argv names 'no-such-codex'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    spec.write_text(
        'goal = "g"\n[worker]\nkind = "process"\nargv = ["true"]\n[review]\nkind = "codex"\n'
    )
    res = run_sup(repo, "start", "--spec", str(spec), env=env)
    assert res.returncode == 2, res
    assert "reviewer: the Codex CLI (`codex`) is not on PATH" in res.stderr, res.stderr
    assert run_sup(repo, "ls", "--json").stdout.strip() in ("", "[]")
