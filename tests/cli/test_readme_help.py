"""The README's first command leaves a working `git sup --help` (the manual page)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


def test_the_first_command_installs_the_manual(tmp_path: Path) -> None:
    first = (REPO_ROOT / "README.md").read_text().split("```sh\n", 1)[1].splitlines()[0]
    steps = [s.strip() for s in first.split("&&")]
    assert "python -m gitsup.manpage --install" in steps, first
    assert steps.index("python -m gitsup.manpage --install") < steps.index("git sup demo")
    if shutil.which("man") is None:
        pytest.skip("no man(1) on this machine")
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    import site

    # the new environment's own prefix, with this one's packages importable
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *site.getsitepackages()])}
    res = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "gitsup.manpage", "--install"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    page = venv / "share" / "man" / "man1" / "git-sup.1"
    assert page.is_file()
    (venv / "bin" / "git-sup").symlink_to(shutil.which("git-sup") or "git-sup")
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
    env.pop("MANPATH", None)
    found = subprocess.run(
        ["man", "-w", "git-sup"], capture_output=True, text=True, env=env, timeout=60
    )
    assert found.stdout.strip() == str(page), (found.stdout, found.stderr)
    helped = subprocess.run(
        ["git", "sup", "--help"],
        capture_output=True,
        text=True,
        env={**env, "MANPAGER": "cat", "PAGER": "cat"},
        timeout=60,
    )
    assert helped.returncode == 0 and "git sup" in helped.stdout.lower(), helped.stderr
