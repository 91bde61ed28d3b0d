"""Every program name the deny code compares a program with is one the inert-part shortcut
keeps: the source of every module the deny scan runs is read, and each string compared with a
program (`==`, `!=`, `in` a literal or a module-level set, `.startswith`) must be in the judged
table (the program names of `facts.py`), in one of the policy's tables, or start with a judged prefix. A rule
added for a program that is in none of them would be skipped by the shortcut: this test fails
first. The guard is itself shown to fail on such a rule and on a name taken out of the table."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gitsup.policy as policy_pkg
from gitsup.policy import facts, load_policy
from gitsup.policy.deny import inert as deny_inert
from gitsup.policy.parse.parser import parse
from gitsup.policy.parse.script import Part

POLICY_DIR = Path(policy_pkg.__file__).parent
# Every module whose code runs inside `deny.scan_part` (or collects for it).
MODULES = (
    "deny/scan.py",
    "deny/state.py",
    "deny/writes.py",
    "deny/publish.py",
    "deny/execution.py",
    "normalise/unwrap.py",
    "facts.py",
)
# What an earlier pipeline stage prints is read whether or not that stage is scanned: these
# functions judge no part.
NOT_JUDGING = frozenset({"stdout_of", "subst_output"})
# normalise/unwrap.py names the wrapper it found (always a key of the policy's wrappers) `name`, and
# the first words of the policy's wrapper keys `firsts`.
PROGRAM_NAMES = frozenset({"prog"})
WRAPPER_MODULES = frozenset({"normalise/unwrap.py"})
POLICY_DERIVED = frozenset({"firsts"})


def _name_tables() -> dict[str, object]:
    """The names defined in the program-names section of facts.py (the judged table), with
    their values; `UNWRAPPED` (normalise/unwrap.py) is one of them."""
    source = (POLICY_DIR / "facts.py").read_text()
    section = source.split("# -- program names", 1)[1].split("\n", 1)[1]
    section = section.split("# -- git commands", 1)[0]
    names = {"UNWRAPPED"}
    for stmt in ast.parse(section).body:
        if isinstance(stmt, ast.Assign):
            names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return {n: getattr(facts, n) for n in names}


NAME_TABLES = _name_tables()
ALLOWED = deny_inert.relevant_names(load_policy())
assert ALLOWED is not None


def _is_program(node: ast.expr, module: str) -> bool:
    if isinstance(node, ast.Name):
        return node.id in PROGRAM_NAMES or (module in WRAPPER_MODULES and node.id == "name")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        # `basename(argv[0])`, `basename(w.src)`: not `basename(a)` of an operand
        return (
            node.func.id == "basename"
            and len(node.args) == 1
            and isinstance(node.args[0], (ast.Subscript, ast.Attribute))
        )
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "argv"
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == 0
    ):
        return True  # `argv[0]`
    # `part.words[0].src`
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "src"
        and isinstance(node.value, ast.Subscript)
        and isinstance(node.value.value, ast.Attribute)
        and node.value.value.attr == "words"
        and isinstance(node.value.slice, ast.Constant)
        and node.value.slice.value == 0
    )


def _strings(node: ast.expr, sets: dict[str, list[str]]) -> list[str] | None:
    """The strings a comparison operand stands for, [] when it is a table read at run time
    (the policy's, or the judged table), None when the guard cannot tell."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
        out: list[str] = []
        for e in node.elts:
            got = _strings(e, sets)
            if got is None:
                return None
            out += got
        return out
    if isinstance(node, ast.Name):
        if node.id in sets:
            return sets[node.id]
        if node.id in POLICY_DERIVED:
            return []
        return [] if node.id in NAME_TABLES else None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
        return [] if node.value.attr == "policy" else None  # st.policy.shells, ...
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return [] if node.value.id == "policy" else None
    return None


def _module_sets(tree: ast.Module) -> dict[str, list[str]]:
    sets: dict[str, list[str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
            if isinstance(value, ast.Call) and value.args and not value.keywords:
                value = value.args[0]  # frozenset({...})
            if isinstance(target, ast.Name) and isinstance(value, (ast.Set, ast.Tuple, ast.List)):
                got = _strings(value, {})
                if got is not None:
                    sets[target.id] = got
    return sets


def _compared(module: str, source: str) -> list[tuple[str, int, str | None]]:
    """(module, line, string) for each string compared with a program; string None when the
    compared-with operand is not something the guard can read."""
    tree = ast.parse(source)
    sets = _module_sets(tree)
    out: list[tuple[str, int, str | None]] = []
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in NOT_JUDGING:
            skipped |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, (ast.Eq, ast.NotEq)):
                    if _is_program(left, module):
                        operands.append(right)
                    elif _is_program(right, module):
                        operands.append(left)
                elif isinstance(op, (ast.In, ast.NotIn)) and _is_program(left, module):
                    operands.append(right)
                left = right
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
            and _is_program(node.func.value, module)
        ):
            operands += node.args
        for operand in operands:
            got = _strings(operand, sets)
            if got is None:
                out.append((module, node.lineno, None))
            else:
                out += [(module, node.lineno, s) for s in got]
    return out


def unregistered(
    sources: dict[str, str], allowed: frozenset[str] = ALLOWED
) -> list[tuple[str, int, str | None]]:
    """The program names compared in `sources` that the shortcut would skip."""
    missing = []
    for module, source in sources.items():
        for where in _compared(module, source):
            name = where[2]
            if name is None:
                missing.append(where)
                continue
            first = name.split(" ", 1)[0]  # wrapper keys: `npm exec`
            if first not in allowed and not first.startswith(facts.PREFIXES):
                missing.append(where)
    return missing


def _sources() -> dict[str, str]:
    return {m: (POLICY_DIR / m).read_text() for m in MODULES}


def test_every_program_the_deny_code_compares_is_one_the_shortcut_keeps() -> None:
    found = [c for m, s in _sources().items() for c in _compared(m, s)]
    assert len(found) > 60  # the guard reads the comparisons it is meant to read
    assert unregistered(_sources()) == []
    assert ALLOWED >= facts.JUDGED


RULES = {
    "equality": 'def _frob(prog, args):\n    if prog == "frobnicate":\n        return 1\n',
    "tuple": 'def _frob(argv):\n    if basename(argv[0]) in ("git", "frobnicate"):\n        return 1\n',
    "module set": (
        '_FROBS = frozenset({"rm", "frobnicate"})\ndef _frob(prog):\n    return prog in _FROBS\n'
    ),
    "head word": 'def _frob(part):\n    return part.words[0].src != "frobnicate"\n',
    "argv": 'def _frob(argv):\n    return argv[0] == "frobnicate"\n',
    "prefix": 'def _frob(prog):\n    return prog.startswith("frob")\n',
    "unreadable": "def _frob(prog, table):\n    return prog in table\n",
}


@pytest.mark.parametrize("shape", sorted(RULES))
def test_the_guard_fails_on_a_rule_for_a_program_outside_the_table(shape: str) -> None:
    sources = _sources()
    sources["deny/scan.py"] += "\n\n" + RULES[shape]
    missing = unregistered(sources)
    assert [m for m, _, _ in missing] == ["deny/scan.py"]
    assert missing[0][2] in ("frobnicate", "frob", None)


@pytest.mark.parametrize("name", ["rm", "read", "xargs", "tee", "hub", "curl", "env"])
def test_the_guard_fails_when_a_judged_name_leaves_the_table(name: str) -> None:
    missing = unregistered(_sources(), ALLOWED - {name})
    assert missing and {n for _, _, n in missing} == {name}


def _plain(text: str) -> Part:
    parts = parse(text).parts
    assert len(parts) == 1
    return parts[0]


@pytest.mark.parametrize("name", sorted(ALLOWED | {"git-push", "mkfs.ext4", "python3.12"}))
def test_no_judged_program_is_inert(name: str) -> None:
    assert ALLOWED is not None
    assert not deny_inert.inert(_plain(f"{name} x"), ALLOWED)
    assert deny_inert.inert(_plain("ls x"), ALLOWED)


def test_every_set_of_the_table_is_in_the_judged_union() -> None:
    tables = [v for k, v in NAME_TABLES.items() if isinstance(v, frozenset) and k != "JUDGED"]
    assert len(tables) >= 9
    for table in tables:
        assert table <= facts.JUDGED
