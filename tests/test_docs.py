"""The project's docs and comments are self-contained: every file they name is in the
repository. Markdown links (`[text](path)`), paths under the repository's top-level
directories (`docs/policy.md`, `gitsup/policy/rules.py`, `tests/policy/corpus.jsonl`) and
every `*.md` file name, in the docs, the README, the code, the tests, the benchmarks and the
packaged policy files, must name a file or directory that exists here, and a section named
with its file (`docs/policy.md, "Sandboxed mode"`) must be a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# The packaged policy files are installed as `gitsup/policies/` (pyproject.toml's package map).
_ALIASES = {"gitsup/policies/": "policies/"}
_TOP = ("docs", "gitsup", "tests", "bench", "policies", "man", "fixtures")

_LINK = re.compile(r"\]\(([^)\s]+)\)")
# a path under a top-level directory that names a file (an extension) or a glob of files
_PATH = re.compile(
    r"(?<![\w./-])((?:"
    + "|".join(_TOP)
    + r")/[A-Za-z0-9_./*-]*\.[A-Za-z*][A-Za-z0-9*]*)(?![\w{/-])"
)
# `docs/policy.md, "Sandboxed mode"` or `docs/policy.md ("Sandboxed mode")`: a section by name
_SECTION = re.compile(r"(docs/[\w-]+\.md),? \(?\"([^\"]+)\"")
_MD = re.compile(r"(?<![\w./-])([A-Za-z0-9_-][\w./-]*\.md)\b")

# Files of other programs (the agents' instruction files) and files the tests write into their
# own temporary repositories: names, not references to this repository.
_NOT_OURS = frozenset({"CLAUDE.md", "AGENTS.md", "NOTES.md", "gitsup-notes.md"})


def _sources() -> list[Path]:
    files = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    for top in ("gitsup", "tests", "bench"):
        files += sorted((REPO_ROOT / top).rglob("*.py"))
    files.remove(Path(__file__).resolve())  # its examples name missing files on purpose
    files += sorted((REPO_ROOT / "policies").glob("*.toml"))
    return files


def _exists(name: str, where: Path) -> bool:
    name = name.split("#", 1)[0].rstrip(".,:;")
    if not name:
        return True
    for alias, real in _ALIASES.items():
        if name.startswith(alias):
            name = real + name[len(alias) :]
    for base in (REPO_ROOT, where.parent):
        target = base / name
        if "*" in name:
            if any(base.glob(name)):
                return True
        elif target.exists():
            return True
    return False


def _md_known(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base in _NOT_OURS or any(REPO_ROOT.glob(f"**/{base}"))


def missing_references(files: list[Path]) -> list[str]:
    """`file:line: name` for every reference to a file that is not in the repository."""
    found: list[str] = []
    for f in files:
        rel = f.relative_to(REPO_ROOT)
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1):
            names: list[tuple[str, bool]] = []
            if f.suffix == ".md":
                names += [(m, True) for m in _LINK.findall(line) if "://" not in m]
            names += [(m, True) for m in _PATH.findall(line)]
            names += [(m, False) for m in _MD.findall(line) if "/" not in m]
            for name, is_path in names:
                if name.startswith(("#", "mailto:")):
                    continue
                ok = _exists(name, f) if is_path else _md_known(name)
                if not ok:
                    found.append(f"{rel}:{n}: {name}")
            for doc, title in _SECTION.findall(line):
                heads = _headings(REPO_ROOT / doc) if (REPO_ROOT / doc).is_file() else set()
                if heads and not any(h.startswith(title.replace("`", "")) for h in heads):
                    found.append(f"{rel}:{n}: {doc}, section {title!r}")
            if "\N{SECTION SIGN}" in line:
                found.append(f"{rel}:{n}: a section sign (name the file and its section)")
    return found


def _headings(doc: Path) -> set[str]:
    return {
        line.lstrip("#").strip().replace("`", "")
        for line in doc.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }


def test_every_named_file_exists() -> None:
    missing = missing_references(_sources())
    assert not missing, "references to files that are not in the repository:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    "text",
    [
        "See [the rules](docs/NOPE.md).",
        "The semantics are in `docs/OTHER.md`, section 2.",
        "# as SEMANTICS.md says",
        "read gitsup/policy/nowhere.py",
        'see docs/policy.md, "No such section"',
        "as section \N{SECTION SIGN}4 says",
    ],
)
def test_a_missing_file_is_found(tmp_path: Path, text: str) -> None:
    probe = REPO_ROOT / "docs" / f".probe-{tmp_path.name}.md"
    probe.write_text(text + "\n", encoding="utf-8")
    try:
        assert missing_references([probe])
    finally:
        probe.unlink()


def test_existing_files_pass(tmp_path: Path) -> None:
    probe = REPO_ROOT / "docs" / f".probe-{tmp_path.name}.md"
    probe.write_text(
        "[policy](policy.md), `docs/cli.md`, gitsup/policy/rules.py, "
        "gitsup/policies/rules.toml, tests/policy/test_*.py, README.md, "
        'docs/policy.md ("Sandboxed mode")\n',
        encoding="utf-8",
    )
    try:
        assert missing_references([probe]) == []
    finally:
        probe.unlink()
