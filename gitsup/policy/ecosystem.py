"""The project's ecosystem, as the denial hints speak it: a worker told "run it through the tests
(e.g. pytest)" in a JavaScript project tries a command that does not exist. Detected from the
files at the top of the worktree (`package.json`, `pyproject.toml`/`setup.py`, `Cargo.toml`,
`go.mod`); the words the `instead` texts of policies/rules.toml fill in come from here."""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Ecosystem:
    """What a worker should run in this project, for each placeholder of an `instead` text."""

    names: tuple[str, ...]  # "node", "python", "rust", "go"; empty when nothing was recognised
    test: str  # how to run the tests ({test})
    runs: str  # tests, linters and builds ({runs})
    bare: str  # calling a tool by its name ({bare})
    tools: str  # running the project's installed tools ({tools})
    tools_sandboxed: str  # the same inside an enforced sandbox

    def words(self, *, sandboxed: bool = False) -> dict[str, str]:
        return {
            "test": self.test,
            "runs": self.runs,
            "bare": self.bare,
            "tools": self.tools_sandboxed if sandboxed else self.tools,
        }


_PYTHON = Ecosystem(
    ("python",),
    test="pytest",
    runs="pytest, python -m pytest, ruff check, mypy, make test",
    bare='pytest, not .venv/bin/pytest or "pytest"',
    tools="pytest, ruff check or mypy by name, or python -m <tool>",
    tools_sandboxed="pytest or python -m <tool>, .venv/bin/<tool>, python <script in the worktree>",
)
_NODE = Ecosystem(
    ("node",),
    test="npm test -- <args>",
    runs="npm test, npm test -- <args>, npm run lint|build|typecheck",
    bare="npm test -- <args> or npm run <script>, not ./node_modules/.bin/<tool>",
    tools="npm test -- <args> or npm run <script>",
    tools_sandboxed="npx <tool>, ./node_modules/.bin/<tool>, npm test -- <args> or npm run <script>",
)
_RUST = Ecosystem(
    ("rust",),
    test="cargo test",
    runs="cargo test, cargo build, cargo check, cargo clippy, cargo fmt --check",
    bare="cargo test, not ./target/debug/<binary>",
    tools="cargo test|build|check|clippy",
    tools_sandboxed="cargo test|build|run|clippy",
)
_GO = Ecosystem(
    ("go",),
    test="go test ./...",
    runs="go test ./..., go build ./..., go vet ./...",
    bare="go test ./..., not a path to a built binary",
    tools="go test|build|vet",
    tools_sandboxed="go test|build|vet|run",
)
# Nothing recognised: the forms of every ecosystem the allow list knows.
GENERIC = Ecosystem(
    (),
    test="pytest, npm test, cargo test or go test",
    runs="pytest, make test, npm test, cargo test, go test",
    bare='pytest, not .venv/bin/pytest or "pytest"',
    tools="their bare names (pytest, npm test -- <args>, cargo test)",
    tools_sandboxed="their bare names, npx <tool> or ./node_modules/.bin/<tool>",
)

# (marker files at the top of the worktree, ecosystem), in the order hints name them
_MARKERS: tuple[tuple[tuple[str, ...], Ecosystem], ...] = (
    (("package.json",), _NODE),
    (("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt"), _PYTHON),
    (("Cargo.toml",), _RUST),
    (("go.mod",), _GO),
)


def from_names(names: Collection[str]) -> Ecosystem:
    """The ecosystem of a worktree whose top holds the files `names` (several combine)."""
    found = [eco for markers, eco in _MARKERS if any(m in names for m in markers)]
    if not found:
        return GENERIC
    if len(found) == 1:
        return found[0]
    return Ecosystem(
        tuple(n for eco in found for n in eco.names),
        test=" or ".join(eco.test for eco in found),
        runs="; ".join(eco.runs for eco in found),
        bare="; ".join(eco.bare for eco in found),
        tools="; ".join(eco.tools for eco in found),
        tools_sandboxed="; ".join(eco.tools_sandboxed for eco in found),
    )


def detect(worktree: str | os.PathLike[str]) -> Ecosystem:
    """Read the names at the top of `worktree` (an unreadable one is GENERIC)."""
    try:
        with os.scandir(worktree) as it:
            names = {e.name for e in it}
    except OSError:
        return GENERIC
    return from_names(names)
