"""The integration key's principal is the user's identity: the demo leaves nothing of itself in
the user's configuration, and a changed `user.email` is followed."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, start_json, write_worker


def test_the_demo_leaves_no_key_or_identity_behind(tmp: Path, hermetic_env: Path) -> None:
    home = hermetic_env
    res = run_sup(tmp, "demo", "--worker", "process", "--dir", str(tmp / "demo"), timeout=300)
    assert res.returncode == 0, res.stderr
    assert not (home / ".config" / "gitsup").exists(), list((home / ".config").rglob("*"))
    own = tmp / "demo" / "config" / "gitsup" / "allowed_signers"
    assert "demo@gitsup.invalid" in own.read_text()
    assert "demo@gitsup.invalid" not in (home / ".gitconfig").read_text()


def test_the_principal_follows_user_email(repo: Path, tmp: Path, hermetic_env: Path) -> None:
    allowed = hermetic_env / ".config" / "gitsup" / "allowed_signers"
    run_sup(tmp, "demo", "--worker", "process", "--dir", str(tmp / "demo"), timeout=300)
    git(repo, "config", "user.email", "alice@example.invalid")
    assert run_sup(repo, "init").returncode == 0
    (line,) = allowed.read_text().splitlines()
    assert line.startswith('alice@example.invalid namespaces="git" ssh-ed25519 '), line
    git(repo, "config", "user.email", "bob@example.invalid")
    again = run_sup(repo, "init")
    assert again.returncode == 0, again.stderr
    assert "alice@example.invalid is now bob@example.invalid" in again.stdout, again.stdout
    (line,) = allowed.read_text().splitlines()
    assert line.startswith('bob@example.invalid namespaces="git" '), line
    git(repo, "config", "user.email", "carol@example.invalid")
    worker = write_worker(tmp, FIX_AND_COMMIT)
    rc, rec, err = start_json(repo, "fix", "--worker", worker, "--review", "none")
    assert rc == 0, err
    res = run_sup(repo, "integrate", str(rec["id"]), "--into", "main")
    assert res.returncode == 0, res.stderr
    shown = git(repo, "log", "-1", "--show-signature", "main")
    assert 'Good "git" signature for carol@example.invalid' in shown, shown
    assert "demo@gitsup.invalid" not in allowed.read_text()
