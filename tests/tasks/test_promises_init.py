"""`git sup init` is idempotent however the interpreter running it is spelled: the pre-push
launcher embeds resolved paths, so another path to the same python rewrites nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import common_dir


def test_init_through_another_path_to_the_same_interpreter_changes_nothing(
    repo: Path, tmp: Path
) -> None:
    first = run_sup(repo, "init", "--json")
    assert first.returncode == 0, first.stderr
    hook = common_dir(repo) / "hooks" / "pre-push"
    installed = hook.read_bytes()
    python = installed.decode().split("GITSUP_PYTHON=", 1)[1].split("\n", 1)[0]
    assert python == os.path.realpath(sys.executable)

    # the same environment's interpreter through a symlinked venv directory, and by the
    # other names a venv gives it (python, python3, python3.X)
    alias = tmp / "venv-alias"
    alias.symlink_to(sys.prefix, target_is_directory=True)
    bin_dir = Path(sys.executable).parent
    names = sorted({p.name for p in bin_dir.glob("python*") if p.name != "python-config"})
    for exe in [str(alias / "bin" / "python"), *(str(bin_dir / n) for n in names)]:
        res = subprocess.run(
            [exe, "-m", "gitsup", "init", "--json"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["changed"] == [], (exe, res.stdout)
        assert hook.read_bytes() == installed, exe

    # and the launcher works: a push of a protected branch to a gated remote is judged
    bare = tmp / "srv.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    git(repo, "commit", "-q", "--allow-empty", "-m", "not integrated")
    res = subprocess.run(
        ["git", "push", str(bare), "HEAD:refs/heads/main"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0 and "gitsup: rejected" in res.stderr, res.stderr
