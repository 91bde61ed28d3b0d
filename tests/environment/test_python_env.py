"""A Python project's virtual environment as a task's environment: the main checkout's
`.venv` (ignored, never committed) through `[environment] include`, and a `.venv` made by the
recipe's setup with pip's cache warmed by `git sup env warm`.

No network: the package is a wheel written by the test (tests/helpers/pyindex.py), installed
with `pip install --no-index --find-links`, or fetched from the stand-in index on 127.0.0.1
by the setup. The venv is made from the system's Python (`/usr/bin/python3`), as a user's
would be. Every attack is judged from outside: a digest of the main checkout's `.venv`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, run_sup
from tests.environment.test_include import _needs_overlay, digest
from tests.helpers.pyindex import Index
from tests.helpers.require import requires
from tests.helpers.sup import FIX_AND_COMMIT, write_worker

BASE_PYTHON = "/usr/bin/python3"
LIB = "gitsuptinylib"
LIB_V1 = "VERSION = '1.0'\n\n\ndef double(x):\n    return 2 * x\n"
TROJAN = "VERSION = 'trojan'\n\n\ndef double(x):\n    return 0\n"
CHECK = ".venv/bin/python -m unittest -q"
ENV_FILE = '[environment]\ninclude = [".venv"]\n'
TEST_LIB = f"""import unittest

import {LIB}
from calc import add


class T(unittest.TestCase):
    def test_double_sum(self):
        self.assertEqual({LIB}.double(add(1, 2)), 6)
"""

pytestmark = requires("python-venv")


def _pip_env() -> dict[str, str]:
    """The test's own pip settings (a find-links dir, a cache) are not the project's."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}


def _venv(root: Path, *pip_args: str) -> None:
    subprocess.run([BASE_PYTHON, "-m", "venv", str(root / ".venv")], check=True)
    subprocess.run(
        [str(root / ".venv" / "bin" / "python"), "-m", "pip", "install", "-q", *pip_args],
        check=True, env=_pip_env(), capture_output=True,
    )  # fmt: skip


@pytest.fixture
def wheels(tmp: Path) -> Path:
    """gitsuptinylib 1.0 in one find-links directory, its trojan 2.0 in another (where the
    sandbox can read it, as a hostile check would have it in its own tree)."""
    good, bad = Index(), Index()
    good.add(LIB, "1.0", LIB_V1)
    bad.add(LIB, "2.0", TROJAN)
    good.save(LIB, tmp / "wheels")
    bad.save(LIB, tmp / "reports" / "trojan")
    return tmp / "wheels"


@pytest.fixture
def venv_project(repo: Path, tmp: Path, wheels: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The project's tests import a library its `.venv` has; `.venv` is ignored."""
    (repo / ".gitignore").write_text(".venv/\n")
    (repo / "test_lib.py").write_text(TEST_LIB)
    git(repo, "add", ".gitignore", "test_lib.py")
    git(repo, "commit", "-q", "-m", "tests that need gitsuptinylib")
    _venv(repo, "--no-index", "--find-links", str(wheels), LIB)
    reports = tmp / "reports"
    reports.mkdir(exist_ok=True)
    monkeypatch.setenv("GITSUP_SANDBOX_EXTRA_WRITE", str(reports))
    assert run_sup(repo, "init").returncode == 0
    return reports


def _start(repo: Path, tmp: Path, *args: str, body: str = FIX_AND_COMMIT) -> dict[str, Any]:
    worker = write_worker(tmp, body, f"w{len(list(tmp.glob('w*.py')))}.py")
    res = run_sup(
        repo, "start", "fix add", "--worker", worker, "--review", "none", *args, "--json",
        "--quiet", timeout=300,
    )  # fmt: skip
    rec: dict[str, Any] = json.loads(res.stdout)
    rec["_stderr"] = res.stderr
    return rec


def _recipe(repo: Path, text: str) -> None:
    (repo / ".gitsup").mkdir(exist_ok=True)
    (repo / ".gitsup" / "environment.toml").write_text(text)


def test_the_venv_reaches_the_checks_with_the_include_and_fails_clearly_without(
    venv_project: Path, repo: Path, tmp: Path
) -> None:
    _needs_overlay()
    bare = _start(repo, tmp, "--check-sh", CHECK)
    assert bare["status"] != "ready", bare
    assert ".venv/bin/python: not found" in bare["checks"][0]["output_tail"], bare["checks"]

    _recipe(repo, ENV_FILE)
    # the venv's console scripts name their interpreter by the main checkout's path, which
    # the sandbox hides: the task's layer has them rewritten to the task's own venv
    where = venv_project / "where.txt"
    probe = (
        f".venv/bin/python -c 'import sys; print(sys.prefix)' > {where}"
        f" && .venv/bin/pip --version >> {where}"
    )
    rec = _start(repo, tmp, "--check-sh", CHECK, "--check-sh", probe)
    assert rec["status"] == "ready", json.dumps(rec["checks"], indent=1)
    [entry] = rec["environment"]["include"]
    assert entry["path"] == ".venv" and entry["method"] == "overlay", entry
    prefix, pip = where.read_text().splitlines()
    task_venv = str(Path(rec["worktree"]) / ".venv")
    assert prefix == task_venv, prefix
    assert f"from {task_venv}/lib/" in pip, pip
    assert entry["relocated"] >= 3, entry  # pip, pip3, pip3.11, activate, ...


def test_a_check_that_installs_a_trojan_changes_neither_the_main_venv_nor_the_next_task(
    venv_project: Path, repo: Path, tmp: Path
) -> None:
    _needs_overlay()
    _recipe(repo, ENV_FILE)
    main_venv = repo / ".venv"
    before = digest(main_venv)
    report = venv_project / "hostile.txt"
    install = f"--no-index --find-links {venv_project / 'trojan'} --upgrade {LIB}"
    attack = (
        # into the task's copy (copy-on-write: allowed, and seen by the task)
        f".venv/bin/python -m pip install -q {install} > {report} 2>&1;"
        f" .venv/bin/python -c 'import {LIB}; print({LIB}.VERSION)' >> {report};"
        # through the main checkout's paths: its pip, its interpreter
        f" {shlex.quote(str(main_venv / 'bin' / 'pip'))} install -q {install} >> {report} 2>&1"
        f" || echo main-pip-refused >> {report};"
        f" {shlex.quote(str(main_venv / 'bin' / 'python'))} -m pip install -q {install}"
        f" >> {report} 2>&1 || echo main-python-refused >> {report}; true"
    )
    rec = _start(repo, tmp, "--check-sh", attack)
    assert rec["status"] == "ready", (rec["reasons"], rec["checks"], rec["_stderr"])
    seen = report.read_text()
    assert "trojan" in seen.splitlines(), seen  # the task's own copy took it
    assert "main-pip-refused" in seen and "main-python-refused" in seen, seen
    assert digest(main_venv) == before
    res = subprocess.run(
        [str(main_venv / "bin" / "python"), "-c", f"import {LIB}; print({LIB}.VERSION)"],
        capture_output=True, text=True, env=_pip_env(),
    )  # fmt: skip
    assert res.stdout.strip() == "1.0", res
    # the next task's checks see the main checkout's venv, not the trojan
    second = _start(repo, tmp, "--check-sh", CHECK)
    assert second["status"] == "ready", (second["reasons"], second["checks"])
    assert digest(main_venv) == before


@pytest.fixture
def index() -> Iterator[Index]:
    ix = Index()
    ix.add(LIB, "1.0", LIB_V1)
    ix.start()
    yield ix
    ix.stop()


def test_setup_makes_the_venv_and_the_warm_pip_cache_serves_the_next_task(
    repo: Path, tmp: Path, index: Index
) -> None:
    """No `.venv` in the main checkout: the recipe's setup makes one in each task and
    installs from the index through pip's cache; after `git sup env warm` a task's setup
    fetches no wheel."""
    (repo / ".gitignore").write_text(".venv/\n")
    (repo / "test_lib.py").write_text(TEST_LIB)
    pip = (
        ".venv/bin/python -m pip install --index-url "
        f"{index.url} --trusted-host 127.0.0.1:{index.port} {LIB}"
    )
    # the setup also proves where pip's cache is: the variable must reach it
    _recipe(
        repo,
        "[environment]\n"
        f"setup = [{json.dumps(BASE_PYTHON + ' -m venv .venv')}, {json.dumps(pip)},"
        ' "sh -c \'test -n \\"$PIP_CACHE_DIR\\" && .venv/bin/python -m pip cache dir\'"]\n'
        f'setup_egress = ["127.0.0.1:{index.port}"]\n'
        'cache = ["pip"]\n'
        'setup_timeout = "3m"\n',
    )
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "a recipe that makes the venv")
    assert run_sup(repo, "init").returncode == 0
    first = _start(repo, tmp, "--check-sh", CHECK)
    assert first["status"] == "ready", (first["reasons"], first["checks"], first["setup"])
    assert "gitsup-env/pip" in first["setup"]["output_tail"], first["setup"]
    assert index.file_requests() == 1

    res = run_sup(repo, "env", "warm", "--json", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    warm = json.loads(res.stdout)
    assert warm["caches"]["pip"]["bytes"] > 0, warm
    fetched = index.file_requests()
    assert fetched == 2  # the warm's own setup fetched it once more, into the new layer

    second = _start(repo, tmp, "--check-sh", CHECK)
    assert second["status"] == "ready", (second["reasons"], second["checks"], second["setup"])
    assert second["setup"]["cache_bytes"] > 0
    assert index.file_requests() == fetched, dict(index.requests)  # from the cache
    assert index.requests[f"/simple/{LIB}/"] >= 3  # the index itself was asked each time


def test_with_the_sandbox_off_the_copied_venv_runs_its_own_scripts(
    venv_project: Path, repo: Path, tmp: Path
) -> None:
    """Without the mount namespace the venv is copied; its scripts, rewritten in the copy,
    run the task's venv, not the main checkout's (which the task could otherwise reach)."""
    git(repo, "config", "sup.sandbox", "off")
    _recipe(repo, ENV_FILE)
    before = digest(repo / ".venv")
    where = venv_project / "where.txt"
    rec = _start(repo, tmp, "--check-sh", f"{CHECK} && .venv/bin/pip --version > {where}")
    assert rec["status"] == "ready", json.dumps(rec["checks"], indent=1)
    [entry] = rec["environment"]["include"]
    assert entry["method"] in ("copy", "reflink") and entry["relocated"] >= 3, entry
    task_venv = str(Path(rec["worktree"]) / ".venv")
    assert f"from {task_venv}/lib/" in where.read_text(), where.read_text()
    assert digest(repo / ".venv") == before
