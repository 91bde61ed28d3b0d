"""The environment recipe of a repository: `[environment]` in `.gitsup/environment.toml` of the
main checkout, and the task spec's `[environment]` table, whose keys win one by one.

The table's keys are the task spec's `Environment` (gitsup/spec.py): `include` (ignored paths
of the main checkout the task sees, copy-on-write: gitsup/environment/include.py), `setup`,
`setup_egress`, `cache` and `setup_timeout`. The file is read from the main checkout, never
from a task's worktree, like `.gitsup/policy.toml`: a candidate that changes it is a change
to `.gitsup/` and needs a person's consent to be integrated (docs/sandbox.md).

A file that is not valid TOML, or has an unknown key or a value of the wrong type, is an
error (exit 2, naming the file and the key). An include entry that is valid but may not be
given to a task (Git's own dirs, `.gitsup/`) is dropped and listed in `refused`, as the
sandbox rules record theirs; what the main checkout says of each entry (tracked, not
ignored, missing, a link out of the checkout) is decided by `include.resolve`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gitsup.errors import GitsupError
from gitsup.spec import Environment, read_toml

ENVIRONMENT_FILE = ".gitsup/environment.toml"
KEYS: tuple[str, ...] = tuple(Environment.model_fields)
# What a key is when neither the spec nor the file gives it.
DEFAULTS: dict[str, Any] = {
    "include": [],
    "setup": [],
    "setup_egress": [],
    "cache": [],
    "setup_timeout": 600.0,
}
MAX_FILE_BYTES = 256 * 1024


@dataclass(frozen=True)
class Recipe:
    """The resolved recipe of one task (or of `env show`): each key's value and where it came
    from (`spec`, the file, or `default`); `refused`: include entries not applied, and why."""

    include: tuple[str, ...] = ()
    setup: tuple[tuple[str, ...], ...] = ()
    setup_egress: tuple[str, ...] = ()
    cache: tuple[str, ...] = ()
    setup_timeout: float = DEFAULTS["setup_timeout"]
    sources: Mapping[str, str] = field(default_factory=dict)
    refused: tuple[str, ...] = ()

    def to_data(self) -> dict[str, Any]:
        return {
            "include": list(self.include),
            "setup": [list(a) for a in self.setup],
            "setup_egress": list(self.setup_egress),
            "cache": list(self.cache),
            "setup_timeout": self.setup_timeout,
            "sources": dict(self.sources),
            "refused": list(self.refused),
        }


def read_file(main_root: Path | None) -> Environment | None:
    """`[environment]` of `<main_root>/.gitsup/environment.toml`; None without the file."""
    if main_root is None:
        return None
    path = main_root / ENVIRONMENT_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise GitsupError(f"cannot read environment file {path}: {exc.strerror}") from None
    return parse_file(raw, str(path))


def parse_file(raw: bytes, source: str) -> Environment:
    """The `[environment]` table of an environment file's bytes (GitsupError when invalid)."""
    data = read_toml(raw, f"environment file {source}", MAX_FILE_BYTES)
    hint = "the file holds one [environment] table (docs/environments.md)"
    for key in data:
        if key != "environment":
            raise GitsupError(
                f"invalid environment file {source}: key {key!r}: unknown key", hint=hint
            )
    table = data.get("environment", {})
    if not isinstance(table, Mapping):
        raise GitsupError(f"invalid environment file {source}: [environment] must be a table")
    return validate(table, source)


def validate(table: Mapping[str, Any], source: str) -> Environment:
    """An `[environment]` table checked as the task spec checks its own."""
    try:
        return Environment.model_validate(dict(table))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")
        raise GitsupError(
            f"invalid environment file {source}: key 'environment.{loc}': {msg}",
            hint=f"[environment] takes {', '.join(KEYS)} (docs/environments.md)",
        ) from None


def merge(from_file: Environment | None, from_spec: Environment | None) -> Recipe:
    """The file's table with every key the spec sets (not None) replaced by the spec's
    (`include = []` in a spec means no include, whatever the file says)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in KEYS:
        spec_value = getattr(from_spec, key) if from_spec is not None else None
        file_value = getattr(from_file, key) if from_file is not None else None
        if spec_value is not None:
            values[key], sources[key] = spec_value, "spec"
        elif file_value is not None:
            values[key], sources[key] = file_value, ENVIRONMENT_FILE
        else:
            values[key], sources[key] = DEFAULTS[key], "default"
    include: list[str] = []
    refused: list[str] = []
    for path in dict.fromkeys(values["include"]):
        why = _never(path)
        if why:
            refused.append(f"include {path}: {why}; not applied")
        else:
            include.append(path)
    # a path inside another included one is already there
    include = [p for p in include if not any(p.startswith(q + "/") for q in include)]
    return Recipe(
        include=tuple(include),
        setup=tuple(tuple(a) for a in values["setup"]),
        setup_egress=tuple(values["setup_egress"]),
        cache=tuple(values["cache"]),
        setup_timeout=float(values["setup_timeout"]),
        sources=sources,
        refused=tuple(refused),
    )


def load_recipe(main_root: Path | None, spec: Environment | None = None) -> Recipe:
    """The recipe a task gets: `.gitsup/environment.toml` of the main checkout (if any), the
    spec's `[environment]` keys over it."""
    return merge(read_file(main_root), spec)


def _never(path: str) -> str:
    """Why an entry is never given to a task, whatever the recipe says: Git's own directories
    (a nested repository's config and hooks would be the task's to write), gitsup's policy."""
    parts = path.split("/")
    if parts[0] == ".gitsup":
        return "gitsup's policy directory is never included"
    if ".git" in parts:
        return "a Git directory is never included"
    return ""
