"""gitsup runs only its own code in the processes it starts, whatever the directory they start
in holds. `python -m gitsup…` puts its working directory first on sys.path: started in a task's
worktree, the sandbox bootstrap (root, before the sandbox) would import a `gitsup/` package
that the repository, or the agent, put there. These attacks plant one and check it never
runs: the planted code writes a file outside the worktree, where only code outside the
sandbox can write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gitsup.host.proc import gitsup_python, package_root
from tests.conftest import git, run_sup
from tests.helpers.sup import start_json, write_worker

NO_REVIEW = ("--review", "none")


# Plants a `gitsup` package under ROOT whose every module (as gitsup names them) records that
# it ran in MARKER. Standalone: the hostile worker below runs it too.
PLANT = """
import os, pathlib
code = (
    "import os\\n"
    f"fd = os.open({MARKER!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)\\n"
    "os.write(fd, (__name__ + ' uid=' + str(os.getuid()) + chr(10)).encode())\\n"
    "os.close(fd)\\n"
)
for rel in ("gitsup/__init__.py", "gitsup/__main__.py", "gitsup/host/__init__.py",
            "gitsup/host/bootstrap.py", "gitsup/tasks/__init__.py", "gitsup/tasks/detach.py",
            "gitsup/tasks/pool.py"):
    path = pathlib.Path(ROOT) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(code)
"""


def _plant(root: Path, marker: Path) -> None:
    exec(PLANT, {"ROOT": str(root), "MARKER": str(marker)})


def test_the_processes_gitsup_starts_import_gitsup_itself(tmp_path: Path) -> None:
    """Started in a directory with a planted package: the CLI (as the detached supervisor,
    the queue runner and the pool refill start), and the bootstrap, also with PYTHONPATH
    pointing at the plant (the task's environment is the spec's, not gitsup's)."""
    marker = tmp_path / "ran"
    _plant(tmp_path, marker)
    res = subprocess.run(
        gitsup_python("gitsup", "--version"), cwd=tmp_path, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("git-sup ")
    res = subprocess.run(
        [*gitsup_python("gitsup.host.bootstrap", stdlib_only=True), "--", "true"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert not marker.exists(), marker.read_text()


def test_a_repository_with_a_gitsup_package_never_runs_it(repo: Path, tmp_path: Path) -> None:
    """The package is in the baseline: the worker, the check and a detached supervisor all
    start in directories that hold it."""
    marker = tmp_path / "ran"
    _plant(repo, marker)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a gitsup package of the project's own")
    worker = write_worker(
        tmp_path,
        """
        import pathlib, subprocess
        pathlib.Path("calc.py").write_text("def add(a, b):\\n    return a + b\\n")
        subprocess.run(["git", "commit", "-qam", "fix"], check=True)
        """,
    )
    rc, rec, err = start_json(repo, "fix add", "--worker", worker, *NO_REVIEW)
    assert rc == 0 and rec["status"] == "ready", (rec.get("reasons"), err)
    res = run_sup(repo, "start", "fix add", "--worker", worker, *NO_REVIEW, "--detach", "--json")
    assert res.returncode == 0, res.stderr
    tid = json.loads(res.stdout)["id"]
    res = run_sup(repo, "wait", tid)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not marker.exists(), marker.read_text()


def test_an_agent_that_plants_gitsup_code_in_its_worktree_gets_it_run_by_no_one(
    repo: Path, tmp_path: Path
) -> None:
    """The worker writes the package into its worktree and commits it; the checks, spawned
    after its turn through the bootstrap, start in that worktree."""
    marker = tmp_path / "ran"
    worker = write_worker(
        tmp_path,
        f"""
        import pathlib, subprocess
        ROOT, MARKER = ".", {str(marker)!r}
        exec({PLANT!r})
        pathlib.Path("calc.py").write_text("def add(a, b):\\n    return a + b\\n")
        subprocess.run(["git", "add", "-A"], check=True)
        subprocess.run(["git", "commit", "-qm", "fix"], check=True)
        """,
    )
    rc, rec, err = start_json(
        repo,
        "fix add",
        "--worker",
        worker,
        *NO_REVIEW,
        "--check",
        f"{sys.executable} -c pass",
        "--check",
        "git status",
    )
    assert rc == 0 and rec["status"] == "ready", (rec.get("reasons"), err)
    assert [c["passed"] for c in rec["checks"]] == [True, True]
    wt = Path(rec["worktree"])
    if wt.exists():
        assert (wt / "gitsup" / "host" / "bootstrap.py").exists()  # the plant was there
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("stdlib_only", [False, True])
def test_the_argv_runs_the_module_as_python_m_does(tmp_path: Path, stdlib_only: bool) -> None:
    script = textwrap.dedent(
        """
        import sys
        print(__name__, sys.argv[1:])
        """
    )
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod_here.py").write_text(script)
    argv = gitsup_python("mod_here", "a", "b c", stdlib_only=stdlib_only)
    if stdlib_only:
        argv[argv.index(package_root())] = str(pkg)  # the root is the argv's own
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    else:
        res = subprocess.run(
            argv, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(pkg)}
        )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "__main__ ['a', 'b c']"
