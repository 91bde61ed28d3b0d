"""The import contracts (pyproject.toml, [tool.importlinter]) hold for gitsup/, and each one
breaks when a module does what it forbids: a copy of the package is edited the way a careless
change would, and `lint-imports` must refuse it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    args = [str(LINT), "--no-cache", "--no-logo", str(root / "pyproject.toml")]
    for c in contracts:
        args += ["--contract", c]
    # The package is found on sys.path: the copy under `root`, not the installed one.
    return subprocess.run(
        args,
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("arch")
    shutil.copytree(
        REPO_ROOT / "gitsup", root / "gitsup", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_every_contract_holds_for_the_package() -> None:
    res = lint(REPO_ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert " BROKEN" not in res.stdout
    assert "0 broken" in res.stdout


def _edit(root: Path, rel: str, addition: str) -> None:
    path = root / "gitsup" / rel
    text = path.read_text() if path.exists() else ""
    path.write_text(text + "\n\n" + addition + "\n")


CASES = [
    # A hook-path module reaching for pygit2, even lazily and two imports away from the hook.
    (
        "hook-path-stdlib",
        "boundary/trust.py",
        "def _sneaky() -> None:\n    import pygit2  # noqa\n",
    ),
    # The sandbox bootstrap importing a gitsup module that imports psutil.
    (
        "hook-path-stdlib",
        "host/bootstrap.py",
        "def _sneaky() -> None:\n    from gitsup.host import procid\n",
    ),
    # A core module starting a process on its own.
    ("one-spawner", "store/events.py", "import subprocess\n"),
    (
        "one-spawner",
        "workers/claude/worker.py",
        "def _fork() -> None:\n    import multiprocessing\n",
    ),
    # pygit2 outside the gateway; typer outside the CLI.
    ("one-git-gateway", "store/records.py", "def _x() -> None:\n    import pygit2\n"),
    ("cli-only-typer", "tasks/lifecycle.py", "def _x() -> None:\n    import typer\n"),
    # A lower layer importing a higher one (lazily, inside a function, still counts).
    ("layers", "git/repo.py", "def _x() -> None:\n    from gitsup.tasks import lifecycle\n"),
    (
        "layers",
        "store/records.py",
        "def _x() -> None:\n    from gitsup.supervision.supervisor import Supervisor\n",
    ),
    # Workers and policy know nothing of each other; the gate joins them.
    ("layers", "workers/base.py", "def _x() -> None:\n    from gitsup.policy import decision\n"),
    # A new module that no layer names.
    ("layers", "newthing.py", "X = 1\n"),
    # A cycle between two modules of one package.
    ("acyclic", "store/record.py", "def _x() -> None:\n    from gitsup.store import records\n"),
    ("policy-pure", "policy/tools.py", "def _x() -> None:\n    from gitsup import git\n"),
    # Integration running a candidate's check itself, not through the confined runner.
    (
        "confined-checks",
        "integration/integrate.py",
        "def _x() -> None:\n    from gitsup.verification.checks import run_check  # noqa\n",
    ),
    ("confined-checks", "tasks/queue_checks.py", "from gitsup.verification import checks\n"),
]


@pytest.mark.parametrize(("contract", "rel", "addition"), CASES)
def test_a_contract_breaks_when_a_module_does_what_it_forbids(
    pristine: Path, tmp_path: Path, contract: str, rel: str, addition: str
) -> None:
    root = tmp_path / "copy"
    shutil.copytree(pristine, root)
    before = lint(root, contract)
    assert before.returncode == 0, before.stdout + before.stderr
    _edit(root, rel, addition)
    after = lint(root, contract)
    assert after.returncode != 0, after.stdout
    assert "BROKEN" in after.stdout, after.stdout + after.stderr


# --- candidate code runs only confined -------------------------------------------------------

# Where a check (a candidate's code) is started, and what confines it there: a task's checks
# through the launcher's wrapper (sandbox, cgroup, network namespace); integrate's and the
# queue's through gitsup/verification/confined.py.
CHECK_RUNNERS = {
    "gitsup/supervision/verifier.py": "self.launcher.wrapper",
    "gitsup/verification/confined.py": "wrap",
}


def run_check_calls(root: Path) -> list[tuple[str, int, str | None]]:
    """Every call of `run_check` under `root/gitsup`: (file, line, the source of its `wrap=`
    argument or None)."""
    import ast

    found = []
    for path in sorted((root / "gitsup").rglob("*.py")):
        rel = str(path.relative_to(root))
        tree = ast.parse(path.read_text(), rel)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name != "run_check":
                continue
            wrap = next((k.value for k in node.keywords if k.arg == "wrap"), None)
            if wrap is None or (isinstance(wrap, ast.Constant) and wrap.value is None):
                found.append((rel, node.lineno, None))
                continue
            if isinstance(wrap, ast.Call):
                wrap = wrap.func
            found.append((rel, node.lineno, ast.unparse(wrap)))
    return found


def test_candidate_checks_run_only_through_a_confinement_wrapper() -> None:
    calls = run_check_calls(REPO_ROOT)
    assert {(f, w) for f, _, w in calls} == set(CHECK_RUNNERS.items()), calls
    # ...and the confined runner's wrapper is the bootstrap with the sandbox, a cgroup and
    # a network namespace, not a pass-through.
    text = (REPO_ROOT / "gitsup/verification/confined.py").read_text()
    assert "bootstrap_argv(argv, cgroup=cg, netns=netns, sandbox=plan.argv(files=argv))" in text


def test_the_guard_fails_when_integrate_runs_checks_itself(pristine: Path, tmp_path: Path) -> None:
    """Integrate going back to a plain `run_check` (as before the confined runner) is caught
    by the call guard and by the import contract."""
    root = tmp_path / "copy"
    shutil.copytree(pristine, root)
    _edit(
        root,
        "integration/integrate.py",
        "def _plain(check, wt, env):  # type: ignore[no-untyped-def]\n"
        "    from gitsup.verification.checks import run_check\n\n"
        "    return run_check(check, cwd=wt, env=env)\n",
    )
    calls = run_check_calls(root)
    assert ("gitsup/integration/integrate.py", None) in {(f, w) for f, _, w in calls}
    assert {(f, w) for f, _, w in calls} != set(CHECK_RUNNERS.items())
    after = lint(root, "confined-checks")
    assert after.returncode != 0 and "BROKEN" in after.stdout, after.stdout
