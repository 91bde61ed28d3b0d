"""Installing the hooks: chaining a user's pre-push hook, core.hooksPath, idempotence,
the launcher's fallback, the pre-commit framework entry, and the server gate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitsup.git.hooks import MARKER
from tests.boundary.conftest import Setup, accepted, push, rejected
from tests.conftest import REPO_ROOT, git, run_sup

USER_HOOK = """#!/bin/sh
# the user's own pre-push hook
cat > "{log}"
echo "$1 $2" >> "{log}"
exit {rc}
"""


def _user_hook(directory: Path, log: Path, rc: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    hook = directory / "pre-push"
    hook.write_text(USER_HOOK.format(log=log, rc=rc))
    hook.chmod(0o755)
    return hook


def _init(repo: Path) -> str:
    res = run_sup(repo, "init")
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_chains_an_existing_hook_and_keeps_its_stdin(repo: Path, tmp: Path) -> None:
    log = tmp / "user-hook.log"
    original = _user_hook(repo / ".git" / "hooks", log).read_text()
    bare = tmp / "r.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    out = _init(repo)
    assert "pre-push.local" in out
    hooks = repo / ".git" / "hooks"
    assert (hooks / "pre-push.local").read_text() == original
    assert MARKER in (hooks / "pre-push").read_text()
    # Idempotent: nothing changes the second time, nothing is chained twice.
    assert "nothing changed" in _init(repo)
    assert (hooks / "pre-push.local").read_text() == original
    assert sorted(
        p.name
        for p in hooks.iterdir()
        if p.name.startswith("pre-push") and not p.name.endswith(".sample")
    ) == [
        "pre-push",
        "pre-push.local",
    ]
    # Both run: the user's hook saw the ref lines and arguments; the gate still gates.
    git(repo, "switch", "-q", "-c", "feature")
    accepted(push(repo, str(bare), "feature"))
    lines = log.read_text().splitlines()
    assert lines[0].startswith("refs/heads/feature ") and lines[0].endswith(" " + "0" * 40)
    assert lines[1] == f"{bare} {bare}"
    git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    rejected(push(repo, str(bare), "HEAD:main"), "protected branch")


def test_a_failing_user_hook_still_blocks(repo: Path, tmp: Path) -> None:
    _user_hook(repo / ".git" / "hooks", tmp / "log", rc=7)
    _init(repo)
    bare = tmp / "r.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    git(repo, "switch", "-q", "-c", "feature")
    res = push(repo, str(bare), "feature")
    assert res.returncode != 0
    assert git(bare, "for-each-ref") == ""


@pytest.mark.parametrize("relative", [True, False])
def test_respects_core_hooks_path(repo: Path, tmp: Path, relative: bool) -> None:
    hooks = repo / ".githooks" if relative else tmp / "shared-hooks"
    git(repo, "config", "core.hooksPath", ".githooks" if relative else str(hooks))
    log = tmp / "log"
    _user_hook(hooks, log)
    _init(repo)
    assert MARKER in (hooks / "pre-push").read_text()
    assert (hooks / "pre-push.local").exists()
    assert not (repo / ".git" / "hooks" / "pre-push").exists()
    bare = tmp / "r.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    rejected(push(repo, str(bare), "main"), "protected branch")
    assert log.exists()


def test_refuses_to_clobber_when_both_hooks_exist(repo: Path, tmp: Path) -> None:
    hooks = repo / ".git" / "hooks"
    _user_hook(hooks, tmp / "log")
    (hooks / "pre-push.local").write_text("#!/bin/sh\nexit 0\n")
    res = run_sup(repo, "init")
    assert res.returncode == 2 and "pre-push.local" in res.stderr
    assert MARKER not in (hooks / "pre-push").read_text()


def test_launcher_falls_back_to_git_sup_on_path(setup: Setup) -> None:
    hook = setup.repo / ".git" / "hooks" / "pre-push"
    text = hook.read_text()
    hook.write_text(
        text.replace(
            f"GITSUP_PYTHON={text.split('GITSUP_PYTHON=')[1].split()[0]}",
            "GITSUP_PYTHON=/nonexistent/python",
        )
    )
    git(setup.repo, "commit", "-q", "--allow-empty", "-m", "x")
    rejected(push(setup.repo, "origin", "main"), "protected branch")
    # Neither the interpreter nor git-sup: fail closed, with a message.
    env = {"PATH": "/usr/bin:/bin"}
    res = push(setup.repo, "origin", "HEAD:refs/heads/feature", env=env)
    rejected(res, "gate cannot run")


def test_gate_install_is_idempotent_and_chains(tmp: Path) -> None:
    bare = tmp / "srv.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    own = bare / "hooks" / "pre-receive"
    own.write_text("#!/bin/sh\ncat >/dev/null\nexit 0\n")
    own.chmod(0o755)
    res = run_sup(tmp, "gate", "install", str(bare), "--review-remote", "--json")
    assert res.returncode == 0, res.stderr
    assert (bare / "hooks" / "pre-receive.local").exists()
    res = run_sup(tmp, "gate", "install", str(bare), "--review-remote")
    assert res.returncode == 0 and "already installed" in res.stdout
    assert git(bare, "config", "sup.gateReview") == "true"


def test_pre_commit_framework_manifest() -> None:
    yaml = pytest.importorskip("yaml")  # installed with pre-commit (the dev extra)
    hooks = yaml.safe_load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["stages"] == ["pre-push"]
    assert hook["entry"] == "git-sup hook pre-push"
    assert hook["pass_filenames"] is False


def test_pre_commit_style_invocation(setup: Setup) -> None:
    """Under pre-commit the hook gets no stdin and no arguments, only PRE_COMMIT_* vars."""
    git(setup.repo, "commit", "-q", "--allow-empty", "-m", "x")
    head = git(setup.repo, "rev-parse", "HEAD")
    env = {
        **os.environ,
        "PRE_COMMIT_FROM_REF": git(setup.repo, "rev-parse", "HEAD~1"),
        "PRE_COMMIT_TO_REF": head,
        "PRE_COMMIT_REMOTE_BRANCH": "refs/heads/main",
        "PRE_COMMIT_LOCAL_BRANCH": "refs/heads/main",
        "PRE_COMMIT_REMOTE_NAME": "origin",
        "PRE_COMMIT_REMOTE_URL": str(setup.origin),
    }
    res = subprocess.run(
        ["git-sup", "hook", "pre-push"],
        cwd=setup.repo,
        env=env,
        input="",
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "gitsup: rejected refs/heads/main" in res.stderr, res.stderr
    env["PRE_COMMIT_REMOTE_BRANCH"] = "refs/heads/feature"
    res = subprocess.run(
        ["git-sup", "hook", "pre-push"],
        cwd=setup.repo,
        env=env,
        input="",
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr


def test_the_hook_path_imports_only_the_standard_library() -> None:
    """What the launcher runs (`python -I -S`, no site-packages): the gate, the trust check
    and the signature verifier load without pygit2, typer or pydantic."""
    from gitsup.host.proc import package_root

    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import gitsup.boundary.hook; "
        "print(' '.join(sorted(sys.modules)))"
    )
    res = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, package_root()],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(res.stdout.split())
    assert {"gitsup.boundary.trust", "gitsup.boundary.signing", "gitsup.protected"} <= loaded
    assert not loaded & {"pygit2", "typer", "pydantic", "psutil", "gitsup.git"}, loaded
