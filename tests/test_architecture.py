"""The import contracts (pyproject.toml, [tool.importlinter]) hold for gitsup/, and each one
breaks when a module does what it forbids: a copy of the package is edited the way a careless
change would, and `lint-imports` must refuse it."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
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
    # Temporal's SDK outside the cluster package (it is an optional extra).
    ("cluster-only-temporal", "cli/start_cmd.py", "def _x() -> None:\n    import temporalio\n"),
    ("layers", "tasks/lifecycle.py", "def _x() -> None:\n    from gitsup.cluster import submit\n"),
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
    # The shell policy's stages import only the earlier ones: the deny scan does not call the
    # classifier, and the policy's data does not run the examples (the load stage does).
    (
        "policy-pipeline",
        "policy/deny/scan.py",
        "def _x() -> None:\n    from gitsup.policy import classify\n",
    ),
    (
        "policy-pipeline",
        "policy/config.py",
        "def _x() -> None:\n    from gitsup.policy import examples\n",
    ),
    # ... and the allow list reaches the sandboxed mode only through `AllowState.sandbox`.
    (
        "acyclic",
        "policy/allow/judge.py",
        "def _x() -> None:\n    from gitsup.policy.allow import sandboxed\n",
    ),
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
    call = " ".join(text.split("return bootstrap_argv(", 1)[1].split(")\n", 1)[0].split())
    assert call == (
        "argv, cgroup=cg, netns=None if own_netns else netns, new_netns=own_netns, "
        "sandbox=plan.argv(files=argv),"
    ), call


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


# --- no silent fallback when one of gitsup's own modules fails to import ---------------------

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})


def _names(node: ast.expr | None) -> set[str]:
    if node is None:
        return set()
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def _imports_gitsup(body: list[ast.stmt]) -> list[str]:
    found: list[str] = []
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Import):
                found += [a.name for a in node.names if a.name.split(".")[0] == "gitsup"]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] == "gitsup":
                    found.append(node.module)
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                found.append("." * node.level + (node.module or ""))
    return found


def guarded_own_imports(source: str, name: str) -> list[str]:
    """`name:line: module` for each import of a gitsup module inside a `try` whose handler
    names ImportError or ModuleNotFoundError, or inside `with contextlib.suppress(ImportError)`:
    a broken module of gitsup's own would then be skipped silently."""
    catches = _IMPORT_ERRORS
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        guarded = False
        if isinstance(node, ast.Try):
            guarded = any(_names(h.type) & catches for h in node.handlers)
        elif isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if (
                    isinstance(call, ast.Call)
                    and "suppress" in _names(call.func)
                    and any(_names(a) & catches for a in call.args)
                ):
                    guarded = True
        if guarded:
            for module in _imports_gitsup(node.body):  # type: ignore[attr-defined]
                found.append(f"{name}:{node.lineno}: {module}")
    return found


def test_no_import_of_gitsup_is_guarded_by_an_import_error_handler() -> None:
    """Only optional third-party packages (apprise, orjson, pyroute2, pyseccomp, typer's
    internals) may be missing; a module of gitsup that fails to import is an error, never a
    feature quietly left out (such as the push gate of a task not installed)."""
    found: list[str] = []
    for path in sorted((REPO_ROOT / "gitsup").rglob("*.py")):
        rel = str(path.relative_to(REPO_ROOT))
        found += guarded_own_imports(path.read_text(encoding="utf-8"), rel)
    assert not found, "imports of gitsup modules that fail silently:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "try:\n    from gitsup.git.hooks import install_hook\nexcept ImportError:\n    pass\n",
        "try:\n    import gitsup.x\nexcept (OSError, ModuleNotFoundError):\n    pass\n",
        "import contextlib\nwith contextlib.suppress(ImportError):\n    from gitsup import y\n",
        "def f():\n    try:\n        from .hooks import h\n    except ImportError as e:\n        return\n",
    ],
)
def test_a_guarded_import_of_gitsup_is_found(source: str) -> None:
    assert guarded_own_imports(source, "x.py")


def test_a_guarded_third_party_import_is_allowed() -> None:
    source = "try:\n    import apprise\nexcept ImportError:\n    apprise = None\n"
    assert guarded_own_imports(source, "x.py") == []


# --- the shell policy's modules share only public names ---------------------------------------


def private_imports(root: Path) -> list[str]:
    """`from gitsup.policy... import _name` anywhere in gitsup/policy/: a helper two modules
    share is public in its home module (facts.py for what several stages know)."""
    out = []
    for path in sorted((root / "gitsup" / "policy").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gitsup.policy"):
                out += [
                    f"{path.relative_to(root)}:{node.lineno}: {a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    return out


def test_no_private_name_is_imported_between_the_policy_modules() -> None:
    assert private_imports(REPO_ROOT) == []


def test_a_private_import_between_policy_modules_is_found(tmp_path: Path) -> None:
    rel = Path("gitsup", "policy", "deny", "new_scanner.py")
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text("def f() -> None:\n    from gitsup.policy.facts import _printf\n")
    assert private_imports(tmp_path) == [f"{rel}:2: _printf"]


# --- one address per name: no module re-exports what another defines --------------------------


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's own statements, into `if` (TYPE_CHECKING) and `try` blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            for block in (node.body, node.orelse, *(h.body for h in getattr(node, "handlers", []))):
                yield from _top_level(block)


def _bindings(tree: ast.Module) -> tuple[set[str], set[str], list[str], list[tuple[str, int]]]:
    """A module's defined names, its imported names, its `__all__`, and its `X as X`
    imports (the explicit re-export idiom)."""
    defined: set[str] = set()
    imported: set[str] = set()
    exported: list[str] = []
    as_same: list[tuple[str, int]] = []
    for node in _top_level(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                defined |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                if isinstance(target, ast.Name) and target.id == "__all__":
                    value = node.value
                    if isinstance(value, ast.List | ast.Tuple):
                        exported = [e.value for e in value.elts if isinstance(e, ast.Constant)]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for a in node.names:
                imported.add((a.asname or a.name).split(".")[0])
                if isinstance(node, ast.ImportFrom) and a.asname == a.name:
                    as_same.append((a.name, node.lineno))
    return defined, imported, exported, as_same


def reexports(root: Path) -> list[str]:
    """Every second address of a name: a module of gitsup that imports a name `as` itself,
    or (unless it is a package's `__init__`, the package's face) lists an imported name in
    `__all__`; and every `from gitsup.M import N` (in gitsup, tests or bench) where M only
    imports N (a package offers what its `__init__` lists in `__all__`)."""
    modules: dict[str, tuple[Path, set[str], set[str]]] = {}
    found: list[str] = []
    for path in sorted((root / "gitsup").rglob("*.py")):
        rel = path.relative_to(root)
        name = ".".join(rel.with_suffix("").parts)
        defined, imported, exported, as_same = _bindings(ast.parse(path.read_text("utf-8")))
        found += [f"{rel}:{line}: imports {n} as {n}" for n, line in as_same]
        if path.name == "__init__.py":
            # a package's face: what it offers of its modules is its `__all__`
            modules[name.removesuffix(".__init__")] = (rel, defined | set(exported), imported)
            continue
        modules[name] = (rel, defined, imported)
        found += [f"{rel}: __all__ lists {n}, imported" for n in exported if n not in defined]
    sources = [
        p
        for d in ("gitsup", "tests", "bench")
        if (root / d).is_dir()
        for p in (root / d).rglob("*.py")
    ]
    for path in sorted(sources):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.module not in modules:
                continue
            _, defined, imported = modules[node.module]
            for a in node.names:
                if a.name in imported and a.name not in defined:
                    found.append(
                        f"{path.relative_to(root)}:{node.lineno}: {a.name} from {node.module}, "
                        "which only imports it"
                    )
    return found


def test_every_name_is_imported_from_its_home_module() -> None:
    assert reexports(REPO_ROOT) == []


# the two files of each case (written under tmp_path)
HOME, USER = "gitsup" + "/a.py", "tests" + "/test_x.py"


@pytest.mark.parametrize(
    ("home", "user", "expected"),
    [
        # a module that only imports a name is not where others import it from
        (
            "from gitsup.b import Thing\n\ndef f() -> Thing: ...\n",
            "from gitsup.a import Thing\n",
            f"{USER}:1: Thing from gitsup.a, which only imports it",
        ),
        ("from gitsup.b import Thing as Thing\n", "", f"{HOME}:1: imports Thing as Thing"),
        # a package's face offers only what its __all__ lists
        (
            "",
            "from gitsup import Thing\n",
            f"{USER}:1: Thing from gitsup, which only imports it",
        ),
        (
            'from gitsup.b import Thing\n\n__all__ = ["Thing"]\n',
            "",
            f"{HOME}: __all__ lists Thing, imported",
        ),
    ],
)
def test_a_second_address_is_found(tmp_path: Path, home: str, user: str, expected: str) -> None:
    (tmp_path / "gitsup").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "gitsup" / "__init__.py").write_text("from gitsup.b import Thing\n")
    (tmp_path / "gitsup" / "b.py").write_text("class Thing: ...\n")
    (tmp_path / "gitsup" / "a.py").write_text(home)
    (tmp_path / "tests" / "test_x.py").write_text(user)
    assert expected in reexports(tmp_path)
    # the same names imported from their home, or from a face that lists them, are fine
    (tmp_path / "gitsup" / "__init__.py").write_text(
        'from gitsup.b import Thing\n\n__all__ = ["Thing"]\n'
    )
    (tmp_path / "gitsup" / "a.py").write_text("from gitsup.b import Thing\n")
    (tmp_path / "tests" / "test_x.py").write_text("from gitsup.b import Thing\n")
    assert reexports(tmp_path) == []


# --- one registry of worker kinds -------------------------------------------------------------


def kind_lists(source: str, name: str, kinds: frozenset[str]) -> list[str]:
    """Literal collections (tuple, list, set, dict keys, `Literal[...]`) naming three or more
    worker kinds: a second list of kinds, which drifts from gitsup/workers/kinds.py."""
    found = []
    for node in ast.walk(ast.parse(source)):
        items: list[ast.expr | None] = []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in kinds}
        if len(named) >= 3:
            found.append(f"{name}:{node.lineno}: {sorted(named)}")
        elif isinstance(node, ast.Compare) and _asks_worker_kind(node, kinds):
            found.append(f"{name}:{node.lineno}: a worker's kind tested against a list of kinds")
    return found


def _asks_worker_kind(node: ast.Compare, kinds: frozenset[str]) -> bool:
    """`<...>.worker.kind in ("process", "codex")`: a property of the kinds, decided outside
    the registry (which says it with a field of each entry). A test naming only agents
    (`in ("acp", "codex")`) is about the agent, which a reviewer or decider names too."""
    from gitsup.workers.kinds import agent_names

    left = node.left
    if not (
        isinstance(left, ast.Attribute)
        and left.attr == "kind"
        and isinstance(left.value, ast.Attribute)
        and left.value.attr == "worker"
    ):
        return False
    for op, right in zip(node.ops, node.comparators, strict=True):
        if isinstance(op, ast.In | ast.NotIn) and isinstance(right, ast.Tuple | ast.List | ast.Set):
            names = {e.value for e in right.elts if isinstance(e, ast.Constant)}
            if len(names & kinds) >= 2 and names - set(agent_names()):
                return True
    return False


def test_the_worker_kinds_are_listed_once() -> None:
    from gitsup.workers.kinds import KINDS

    kinds = frozenset(KINDS)
    found: list[str] = []
    for path in sorted((REPO_ROOT / "gitsup").rglob("*.py")):
        rel = str(path.relative_to(REPO_ROOT))
        if rel not in ("gitsup/workers/kinds.py", "gitsup/spec.py"):
            found += kind_lists(path.read_text(encoding="utf-8"), rel, kinds)
    assert not found, "worker kinds listed outside gitsup/workers/kinds.py:\n" + "\n".join(found)


def test_the_spec_accepts_exactly_the_registered_kinds() -> None:
    """The spec's `[worker] kind` (the TOML/JSON contract, below the workers layer) names
    the same kinds as the registry, and each entry agrees with its adapter class."""
    import typing

    from gitsup.spec import Worker
    from gitsup.workers.kinds import KINDS

    annotation = Worker.model_fields["kind"].annotation
    assert set(typing.get_args(annotation)) == set(KINDS)
    for kind in KINDS.values():
        cls = kind.adapter_class()
        assert cls.kind == kind.name
        assert (cls.capabilities.repairable, cls.capabilities.persistent) == (
            kind.repairable,
            kind.persistent,
        )


@pytest.mark.parametrize(
    "source",
    [
        'KINDS = ("claude", "codex", "acp")\n',
        'def f(k):\n    return k in ["process", "tmux", "claude"]\n',
        'M = {"claude": 1, "tmux": 2, "acp": 3}\n',
        'from typing import Literal\nK = Literal["process", "claude", "tmux"]\n',
        'claude = spec.worker.kind not in ("process", "codex")\n',
    ],
)
def test_a_second_list_of_kinds_is_found(source: str) -> None:
    assert kind_lists(source, "x.py", frozenset({"process", "claude", "codex", "acp", "tmux"}))


def test_two_kinds_together_are_not_a_list() -> None:
    assert kind_lists('X = ("acp", "codex")\n', "x.py", frozenset({"acp", "codex", "claude"})) == []


# --- composition across files ------------------------------------------------------------

# Classes made to be extended elsewhere: the event payloads, the error types, the worker
# adapters' base and the piped agent process under them, the scripted model servers' base.
EXTENSION_POINTS = frozenset(
    {
        "Payload",
        "GitsupError",
        "WorkerError",
        "WorkerAdapter",
        "PipedAgent",
        "ScriptServer",
        "ScriptHandler",
    }
)


def cross_file_bases(root: Path) -> list[tuple[str, str, str]]:
    """(file, class, base) for each class under `root` whose base is a gitsup class
    defined in another file."""
    home: dict[str, set[str]] = {}
    trees = {}
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        trees[rel] = ast.parse(path.read_text(encoding="utf-8"))
        for node in trees[rel].body:
            if isinstance(node, ast.ClassDef):
                home.setdefault(node.name, set()).add(rel)
    found = []
    for rel, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
                if name in home and rel not in home[name]:
                    found.append((rel, node.name, name))
    return found


def test_classes_compose_their_collaborators_instead_of_inheriting_across_files() -> None:
    """A class built from parts in other modules holds them (`GitRepo` its worktrees and
    working tree, the queue's `Runner` its composition tester); it extends only the
    extension points."""
    found = [
        f"{rel}: {cls}({base})"
        for rel, cls, base in cross_file_bases(REPO_ROOT / "gitsup")
        if base not in EXTENSION_POINTS
    ]
    assert not found, "inheritance across files:\n" + "\n".join(found)


def test_inheritance_across_files_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "gitsup"
    (pkg / "git").mkdir(parents=True)
    (pkg / "git" / "worktrees.py").write_text("class Worktrees:\n    pass\n")
    (pkg / "git" / "repo.py").write_text(
        "from gitsup.git.worktrees import Worktrees\n\nclass GitRepo(Worktrees):\n    pass\n"
    )
    assert cross_file_bases(pkg) == [("gitsup/git/repo.py", "GitRepo", "Worktrees")]


def test_a_task_s_files_and_marker_are_spelled_only_in_names_py() -> None:
    """`task.json`, `spec.json` and `GITSUP_TASK` as string constants in one module,
    gitsup/names.py: every other module imports them from there."""
    spelled = {"task.json", "spec.json", "GITSUP_TASK"}
    found = []
    for path in sorted((REPO_ROOT / "gitsup").rglob("*.py")):
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel == "gitsup/names.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in spelled:
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not found, "spelled outside gitsup/names.py:\n" + "\n".join(found)
