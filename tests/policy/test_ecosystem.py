"""The denial hints speak the project's ecosystem, detected from the files at the top of a real
worktree: a package.json project is told about npm (and, inside the sandbox, npx and
./node_modules/.bin), a pyproject one about pytest, Cargo and Go projects about their tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsup.errors import GitsupError
from gitsup.policy import classify_command, detect_ecosystem, load_policy, unattended_denial
from gitsup.policy.ecosystem import GENERIC
from gitsup.policy.rules import PLACEHOLDERS, build_registry, instead, registry

POLICY = load_policy()


def _denial(cmd: str, worktree: Path, *, sandboxed: bool = False) -> str:
    d = classify_command(cmd, worktree=str(worktree), policy=POLICY, sandboxed=sandboxed)
    assert d.verdict != "allow", (cmd, d)
    return unattended_denial(d, detect_ecosystem(worktree))


def _project(tmp_path: Path, *files: str) -> Path:
    w = tmp_path / "w"
    w.mkdir(parents=True)
    for f in files:
        (w / f).write_text("{}\n" if f.endswith(".json") else "\n")
    return w


def test_a_package_json_project_is_told_about_npm(tmp_path: Path) -> None:
    w = _project(tmp_path, "package.json")
    assert detect_ecosystem(w).names == ("node",)
    msg = _denial("node -e 'console.log(1)'", w)
    assert "e.g. npm test -- <args>" in msg and "pytest" not in msg, msg
    msg = _denial("./node_modules/.bin/ava", w)
    assert "npm test -- <args> or npm run <script>" in msg and "pytest" not in msg, msg
    msg = _denial("make deploy", w)
    assert "npm run lint|build|typecheck" in msg and "pytest" not in msg, msg
    # a wrapper asked inside the sandbox: the sandboxed forms (npx, node_modules/.bin)
    msg = _denial("timeout 5 ls", w, sandboxed=True)
    assert "npx <tool>, ./node_modules/.bin/<tool>" in msg, msg
    msg = _denial("timeout 5 ls", w)
    assert "npx" not in msg and "npm test -- <args>" in msg, msg


def test_a_python_project_keeps_pytest(tmp_path: Path) -> None:
    for marker in ("pyproject.toml", "setup.py"):
        w = _project(tmp_path / marker, marker)
        assert detect_ecosystem(w).names == ("python",)
        msg = _denial("python -c 'print(1)'", w)
        assert "(e.g. pytest)" in msg and "npm" not in msg, msg
        msg = _denial(".venv/bin/pytest", w)
        assert 'pytest, not .venv/bin/pytest or "pytest"' in msg, msg


@pytest.mark.parametrize(
    ("marker", "name", "said"),
    [("Cargo.toml", "rust", "cargo test"), ("go.mod", "go", "go test ./...")],
)
def test_cargo_and_go_projects(tmp_path: Path, marker: str, name: str, said: str) -> None:
    w = _project(tmp_path, marker)
    assert detect_ecosystem(w).names == (name,)
    msg = _denial("node -e 1", w)
    assert f"e.g. {said}" in msg and "pytest" not in msg, msg


def test_several_markers_name_each_and_none_names_every_form(tmp_path: Path) -> None:
    both = _project(tmp_path / "both", "package.json", "pyproject.toml")
    assert detect_ecosystem(both).names == ("node", "python")
    msg = _denial("node -e 1", both)
    assert "npm test -- <args> or pytest" in msg, msg
    bare = _project(tmp_path / "bare")
    assert detect_ecosystem(bare) is GENERIC
    assert detect_ecosystem(tmp_path / "missing") is GENERIC
    msg = _denial("node -e 1", bare)
    assert "pytest, npm test, cargo test or go test" in msg, msg


def test_every_instead_text_is_filled(tmp_path: Path) -> None:
    """No rule's hint shows a placeholder, in any ecosystem or mode."""
    worktrees = [
        _project(tmp_path / m, m) for m in ("package.json", "pyproject.toml", "Cargo.toml")
    ]
    for rid in registry():
        for w in worktrees:
            for sandboxed in (False, True):
                text = instead(rid, detect_ecosystem(w).words(sandboxed=sandboxed))
                assert not any("{" + p + "}" in text for p in PLACEHOLDERS), (rid, text)


def test_an_unknown_placeholder_is_a_load_error() -> None:
    from importlib.resources import files

    text = (files("gitsup.policies") / "rules.toml").read_text("utf-8")
    bad = text.replace("(e.g. {test})", "(e.g. {tset})", 1)
    assert bad != text
    with pytest.raises(GitsupError, match=r"unknown placeholder \{tset\}"):
        build_registry(bad, "rules.toml")
