"""TaskSpec: what a task is asked to do and within which bounds.

Read from a TOML file (`--spec task.toml`) or built from CLI flags. Unknown
keys and bad values are a GitsupError naming the key, never a traceback.
Every default below is a spec field (see docs/spec.md).
"""

from __future__ import annotations

import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from gitsup.durations import parse_duration
from gitsup.errors import GitsupError

SPEC_VERSION = 1


def _duration(value: object) -> float:
    return parse_duration(value)


Duration = Annotated[float, BeforeValidator(_duration)]


def _argv(value: object) -> list[str]:
    """An argv is a list of strings; a string is split like a shell would (no shell runs)."""
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split command {value!r}: {exc}") from exc
        return parts
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError("must be a list of strings (argv) or a command string")


Argv = Annotated[list[str], BeforeValidator(_argv)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Check(_Strict):
    name: str = Field(min_length=1)
    argv: Argv
    required: bool = True
    timeout: Duration = 120.0

    @field_validator("argv")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("argv cannot be empty")
        return v


class Autonomy(_Strict):
    unattended: bool = True
    require_local_commit: bool = True
    max_repair_rounds: int = Field(default=3, ge=0, le=50)
    max_decision_retries: int = Field(default=2, ge=0, le=20)


class Budget(_Strict):
    deadline: Duration = 4 * 3600.0
    deadline_warning: Duration = 15 * 60.0
    closeout_grace: Duration = 30 * 60.0
    no_output_timeout: Duration = 20 * 60.0
    max_turns: int = Field(default=100, ge=1)
    max_cost_usd: float | None = Field(default=None, ge=0)


class Worker(_Strict):
    kind: Literal["process", "claude", "tmux"] = "claude"
    argv: Argv = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    stop_grace: Duration = 5.0
    # claude/tmux: extra CLI arguments appended after gitsup's own
    extra_args: Argv = Field(default_factory=list)
    model: str | None = None


class Review(_Strict):
    kind: Literal["claude", "command", "none"] = "claude"
    argv: Argv = Field(default_factory=list)
    timeout: Duration = 600.0
    retries: int = Field(default=2, ge=0, le=10)


class Decider(_Strict):
    kind: Literal["rules", "command", "claude"] = "rules"
    argv: Argv = Field(default_factory=list)
    timeout: Duration = 120.0


class Isolation(_Strict):
    network: Literal["host", "none"] = "host"
    cgroup: Literal["auto", "required", "off"] = "auto"


class Sandbox(_Strict):
    # None: git config sup.sandbox, else "auto" (gitsup/sandbox.py)
    mode: Literal["auto", "required", "off"] | None = None


class Events(_Strict):
    max_record_bytes: int = Field(default=64 * 1024, ge=1024)
    rotate_bytes: int = Field(default=64 * 1024 * 1024, ge=1024 * 1024)
    keep_files: int = Field(default=5, ge=1)


class TaskSpec(_Strict):
    version: int = SPEC_VERSION
    goal: str = Field(min_length=1)
    base: str = "HEAD"
    scope: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    forbidden: list[str] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    autonomy: Autonomy = Field(default_factory=Autonomy)
    budget: Budget = Field(default_factory=Budget)
    worker: Worker = Field(default_factory=Worker)
    review: Review = Field(default_factory=Review)
    decider: Decider = Field(default_factory=Decider)
    isolation: Isolation = Field(default_factory=Isolation)
    events: Events = Field(default_factory=Events)
    sandbox: Sandbox = Field(default_factory=Sandbox)

    @field_validator("version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v > SPEC_VERSION:
            raise ValueError(
                f"spec version {v} is newer than this gitsup understands ({SPEC_VERSION})"
            )
        return v

    @field_validator("checks")
    @classmethod
    def _unique_names(cls, v: list[Check]) -> list[Check]:
        names = [c.name for c in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"check names must be unique; repeated: {', '.join(dupes)}")
        return v

    def prompt(self) -> str:
        """The goal as the worker reads it, with scope, constraints and checks."""
        parts = [self.goal.strip()]
        if self.scope:
            parts.append("Scope:\n" + "\n".join(f"- {s}" for s in self.scope))
        if self.constraints:
            parts.append("Constraints:\n" + "\n".join(f"- {s}" for s in self.constraints))
        if self.forbidden:
            parts.append("Forbidden:\n" + "\n".join(f"- {s}" for s in self.forbidden))
        if self.checks:
            parts.append(
                "Acceptance checks the supervisor will run:\n"
                + "\n".join(f"- {c.name}: {shlex.join(c.argv)}" for c in self.checks)
            )
        if self.autonomy.require_local_commit:
            parts.append(
                "Commit your work locally on the current branch when done. "
                "Do not push; publishing happens outside this task."
            )
        return "\n\n".join(parts)


def _format_errors(exc: ValidationError, source: str) -> GitsupError:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        lines.append(f"  {loc}: {msg}")
    return GitsupError(
        f"invalid task spec ({source}):\n" + "\n".join(lines),
        hint="see docs/spec.md for every key and its default",
    )


def spec_from_mapping(data: Mapping[str, Any], source: str = "spec") -> TaskSpec:
    try:
        return TaskSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise _format_errors(exc, source) from None


def load_spec(path: Path, overrides: Mapping[str, Any] | None = None) -> TaskSpec:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GitsupError(f"cannot read spec {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GitsupError(f"spec {path} is not valid TOML: {exc}") from None
    if overrides:
        data = _deep_merge(data, overrides)
    return spec_from_mapping(data, str(path))


def _deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out
