"""The gate verifies the integrations a push brings in process: a real `git push` into a real
gated bare repository runs no `ssh-keygen` for ed25519 integrations it has never seen, refuses
altered ones the same way, and still hands what it cannot decide to `ssh-keygen`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.boundary.conftest import Setup, accepted, push, rejected
from tests.boundary.test_trust import _integrate
from tests.conftest import git


def _logging_ssh_keygen(tmp: Path) -> tuple[dict[str, str], Path]:
    """A PATH whose `ssh-keygen` logs each call, then runs the real one."""
    real = shutil.which("ssh-keygen")
    assert real
    bin_dir, log = tmp / "logbin", tmp / "ssh-keygen.log"
    bin_dir.mkdir()
    script = bin_dir / "ssh-keygen"
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, log


def _forget_verified() -> None:
    from gitsup.boundary.signing import config_dir

    shutil.rmtree(Path(config_dir()) / "verified", ignore_errors=True)


def _calls(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if "-Y verify" in ln] if log.exists() else []


def test_unseen_integrations_verify_without_a_process(
    setup: Setup, ready: dict[str, Any], tmp: Path
) -> None:
    env, log = _logging_ssh_keygen(tmp)
    _integrate(setup.repo, ready["id"])
    main = git(setup.repo, "rev-parse", "main")
    # An altered copy of the integration: same signature, different content.
    raw = subprocess.run(
        ["git", "cat-file", "commit", main], cwd=setup.repo, capture_output=True, check=True
    ).stdout
    altered = (
        subprocess.run(
            ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
            cwd=setup.repo,
            input=raw.replace(b"Sup-Review: ", b"Sup-Review: x"),
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    _forget_verified()
    res = push(setup.repo, "--no-verify", "origin", f"{altered}:refs/heads/main", env=env)
    rejected(res, "remote: gitsup: rejected refs/heads/main", "not by an allowed signer")
    _forget_verified()
    accepted(push(setup.repo, "--no-verify", "origin", "main", env=env))
    assert git(setup.origin, "rev-parse", "main") == main
    assert _calls(log) == []


def test_what_the_gate_cannot_decide_goes_to_ssh_keygen(
    setup: Setup, ready: dict[str, Any], tmp: Path
) -> None:
    """A `cert-authority` line in the gate's allowed signers: ssh-keygen decides, as before."""
    env, log = _logging_ssh_keygen(tmp)
    ca = tmp / "ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ca)], check=True)
    pub = (tmp / "ca.pub").read_text().split()
    git(
        setup.origin, "config", "--add", "sup.allowedSigner", f"ca cert-authority {pub[0]} {pub[1]}"
    )
    _integrate(setup.repo, ready["id"])
    _forget_verified()
    accepted(push(setup.repo, "--no-verify", "origin", "main", env=env))
    assert len(_calls(log)) == 1
