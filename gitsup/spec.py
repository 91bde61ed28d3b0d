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

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gitsup.durations import parse_duration
from gitsup.errors import GitsupError

SPEC_VERSION = 1

# Limits on what a spec may hold (docs/spec.md). The prompt goes to the worker as one
# argument, and Linux refuses a single argument over 128 KiB (MAX_ARG_STRLEN).
MAX_GOAL_BYTES = 64 * 1024
MAX_PROMPT_BYTES = 100 * 1024
MAX_STRING_BYTES = 64 * 1024
MAX_LIST_ITEMS = 1000


def check_text(value: str, what: str, limit: int = MAX_STRING_BYTES) -> str:
    """Refuse text no child process can take: NUL bytes, lone surrogates, very large values."""
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL byte")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid UTF-8 (a lone surrogate)") from None
    if size > limit:
        raise ValueError(f"{what} is {size} bytes; the limit is {limit}")
    return value


def _check_tree(value: Any, where: str, depth: int = 0) -> None:
    if depth > 20:
        raise ValueError(f"{where or 'spec'} is nested too deeply")
    if isinstance(value, str):
        check_text(value, where or "value", MAX_GOAL_BYTES if where == "goal" else MAX_STRING_BYTES)
    elif isinstance(value, Mapping):
        if len(value) > MAX_LIST_ITEMS:
            raise ValueError(f"{where or 'spec'} has more than {MAX_LIST_ITEMS} keys")
        for k, v in value.items():
            check_text(str(k), "a key")
            _check_tree(v, f"{where}.{k}" if where else str(k), depth + 1)
    elif isinstance(value, list | tuple):
        if len(value) > MAX_LIST_ITEMS:
            raise ValueError(f"{where} has more than {MAX_LIST_ITEMS} items")
        for i, v in enumerate(value):
            _check_tree(v, f"{where}.{i}", depth + 1)


def _duration(value: object) -> float:
    return parse_duration(value)


Duration = Annotated[float, BeforeValidator(_duration)]


def _positive_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(
            "must be more than 0 (a limit of 0 would fire at once; this timer cannot be turned off)"
        )
    return seconds


# A timer that cannot be turned off: 0 is refused (docs/spec.md says which timers are which).
PositiveDuration = Annotated[float, BeforeValidator(_positive_duration)]


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

_OPERATORS = set("|&;<>()\n")
_GLOBS = set("*?")


def shell_syntax(command: str) -> str | None:
    """What in a command string only a shell would understand, or None.

    Outside quotes: the operators | & ; < > ( ) and newlines, the globs * and ?, a
    leading ~ or #, a leading NAME=value assignment. Outside single quotes: $NAME, ${…},
    $(…) and backticks. Single quotes, double quotes and backslashes quote as in sh.
    """
    quote: str | None = None
    word_start = True
    first_word = True
    word = ""
    i = 0
    while i < len(command):
        ch = command[i]
        nxt = command[i + 1] if i + 1 < len(command) else ""
        if quote == "'":
            if ch == "'":
                quote = None
            word += ch
            i += 1
            continue
        if ch == "\\":
            word += ch + nxt
            i += 2
            word_start = False
            continue
        if ch == "`":
            return "a backtick command substitution"
        if ch == "$" and (nxt in "({" or nxt.isalnum() or nxt in "_?@*#!$-"):
            return f"the expansion {'$' + nxt!r}"
        if quote == '"':
            if ch == '"':
                quote = None
            word += ch
            i += 1
            continue
        if ch in "'\"":
            quote = ch
            word_start = False
            word += ch
            i += 1
            continue
        if ch in " \t":
            if word and first_word and "=" in word and word.split("=", 1)[0].isidentifier():
                return f"the variable assignment {word!r}"
            if word:
                first_word = False
            word = ""
            word_start = True
            i += 1
            continue
        if ch in _OPERATORS:
            op = ch + nxt if nxt in _OPERATORS and nxt != "\n" else ch
            return "a newline" if ch == "\n" else f"the operator {op!r}"
        if ch in _GLOBS:
            return f"the glob {ch!r}"
        if word_start and ch in "~#":
            return f"a leading {ch!r}"
        word += ch
        word_start = False
        i += 1
    if word and first_word and "=" in word and word.split("=", 1)[0].isidentifier():
        return f"the variable assignment {word!r}"
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Check(_Strict):
    name: str = Field(min_length=1)
    argv: Argv
    required: bool = True
    timeout: PositiveDuration = 120.0
    # `sh`: argv is ["sh", "-c", script], written by `--check-sh` or `sh = "..."` in a spec.
    shell: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_shell_in_strings(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("argv"), str):
            found = shell_syntax(data["argv"])
            if found:
                raise ValueError(
                    f"check {data.get('name', '')!r}: {data['argv']!r} uses shell syntax "
                    f"({found}) but checks run without a shell; use --check-sh "
                    f'(`sh = "..."` in a spec) to run it with sh -c, or give an argv list'
                )
        return data

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


DEFAULT_CLOSEOUT_GRACE = 30 * 60.0


class Budget(_Strict):
    # 0 turns off deadline, deadline_warning, closeout_grace and no_output_timeout.
    deadline: Duration = 4 * 3600.0
    deadline_warning: Duration = 15 * 60.0
    # None: 30m, at most a quarter of the deadline. A value given is capped by the deadline.
    closeout_grace: Duration | None = None
    no_output_timeout: Duration = 20 * 60.0
    max_turns: int = Field(default=100, ge=1)
    max_cost_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # What a spent max_turns / max_cost_usd does: park the task (verified, parked), or pause
    # it until `git sup continue` raises the budget.
    on_exhausted: Literal["park", "pause"] = "park"

    def closeout(self) -> float:
        """The close-out grace in force: how long a worker busy at the deadline may finish
        its turn. Never longer than the deadline itself; by default 30m and at most a
        quarter of the deadline."""
        if self.deadline <= 0:
            return 0.0
        if self.closeout_grace is None:
            return min(DEFAULT_CLOSEOUT_GRACE, self.deadline / 4)
        return min(self.closeout_grace, self.deadline)


class Worker(_Strict):
    kind: Literal["process", "claude", "tmux", "codex", "acp"] = "claude"
    argv: Argv = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    stop_grace: PositiveDuration = 5.0
    # claude/tmux: extra CLI arguments appended after gitsup's own
    extra_args: Argv = Field(default_factory=list)
    model: str | None = None
    # codex: USD per million tokens (input, cached_input, output) when the agent reports
    # tokens only; unset keys use gitsup.workers.codex.app_server.DEFAULT_PRICE
    price: dict[Literal["input", "cached_input", "output"], Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict
    )


class Review(_Strict):
    kind: Literal["claude", "command", "none", "codex", "acp"] = "claude"
    argv: Argv = Field(default_factory=list)
    timeout: PositiveDuration = 600.0
    retries: int = Field(default=2, ge=0, le=10)


DeciderKind = Literal["rules", "command", "claude", "codex", "acp"]


class Decider(_Strict):
    kind: Literal["rules", "command", "claude", "codex", "acp", "human"] = "rules"
    argv: Argv = Field(default_factory=list)
    timeout: PositiveDuration = 120.0
    # kind "human": how long an `ask` waits for `git sup answer`, then who answers it
    # ("deny": the policy's denial; another kind: that decider). Turn verdicts and questions
    # go to the fallback's kind ("deny": the rules).
    human_timeout: PositiveDuration = 30 * 60.0
    fallback: Literal["deny", "rules", "command", "claude", "codex", "acp"] = "deny"

    def machine_kind(self) -> DeciderKind:
        """The decider that answers what a person does not: the kind itself, or for a human
        decider its fallback ("deny" is the rules)."""
        if self.kind != "human":
            return self.kind
        return "rules" if self.fallback == "deny" else self.fallback


def review_argv(spec: TaskSpec) -> list[str]:
    """An agent reviewer's argv: `[review] argv`, else the worker's when the worker is the
    same kind, else none (the kind's default binary)."""
    if spec.review.argv:
        return list(spec.review.argv)
    return list(spec.worker.argv) if spec.worker.kind == spec.review.kind else []


def decider_argv(spec: TaskSpec) -> list[str]:
    """An agent decider's argv: `[decider] argv`, else the worker's when the worker is the
    same kind, else none (the kind's default binary)."""
    if spec.decider.argv:
        return list(spec.decider.argv)
    kind = spec.decider.machine_kind()
    return list(spec.worker.argv) if spec.worker.kind == kind else []


class Isolation(_Strict):
    # auto: isolated when this host can create network namespaces, else the host network
    # (said in worker_started); none: isolated or the task fails; host: no isolation.
    network: Literal["auto", "host", "none"] = "auto"
    # host:port endpoints an isolated task may reach besides the model API (git config
    # sup.egress adds more); never any by default.
    egress: list[str] = Field(default_factory=list)

    @field_validator("egress")
    @classmethod
    def _host_port(cls, v: list[str]) -> list[str]:
        for e in v:
            host, _, port = e.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"egress entry {e!r} is not host:port")
        return v

    cgroup: Literal["auto", "required", "off"] = "auto"


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: object) -> int:
    """Bytes from a number or a string like `512M`, `8G`, `128MiB` (binary units);
    0 or "max" is no limit (returned as 0). Raises ValueError with a readable message."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text == "max":
            return 0
        for suffix in ("ib", "b"):
            if text.endswith(suffix) and text[: -len(suffix)][-1:] in "kmgt" and len(text) > 2:
                text = text[: -len(suffix)]
                break
        num, unit = text.rstrip("kmgtb"), text[len(text.rstrip("kmgtb")) :]
        if unit in _SIZE_UNITS and num.replace(".", "", 1).isdigit():
            return int(float(num) * _SIZE_UNITS[unit])
    raise ValueError(f"not a size: {value!r} (use bytes or a string like '512M', '8G')")


def _size(value: object) -> int:
    return parse_size(value)


Size = Annotated[int, BeforeValidator(_size)]

# The bounds of a task's cgroup unless the spec or git config sets them (docs/spec.md).
DEFAULT_PIDS = 4096
DEFAULT_MEMORY_CAP = 8 << 30
MIN_PIDS = 8
MIN_MEMORY = 16 << 20


def default_memory() -> int:
    """8 GiB, or half of this host's memory when that is less."""
    import os

    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return DEFAULT_MEMORY_CAP
    return min(DEFAULT_MEMORY_CAP, max(MIN_MEMORY, total // 2))


def check_limit(what: str, value: int) -> int:
    """A limit of 0 is off; anything else must leave room to run at all."""
    if what == "pids" and 0 < value < MIN_PIDS:
        raise ValueError(f"pids must be 0 (no limit) or at least {MIN_PIDS}")
    if what == "memory" and 0 < value < MIN_MEMORY:
        raise ValueError("memory must be 0 (no limit) or at least 16M")
    return value


class Limits(_Strict):
    """What a task may take. `pids`, `memory`: the task's cgroup bounds (worker and checks);
    None: git config `sup.limits.pids` / `sup.limits.memory`, else the default (DEFAULT_PIDS,
    default_memory()); 0: no limit. The `max_*` keys: what importing the worker's work may
    bring into the user's repository (gitsup/store/taskgit.py `ImportLimits`); unset keys fall
    back to `sup.limits.*`, then to the defaults there."""

    pids: int | None = Field(default=None, ge=0)
    memory: Size | None = None
    max_object_bytes: int | None = Field(default=None, ge=1)
    max_objects: int | None = Field(default=None, ge=1)
    max_bytes: int | None = Field(default=None, ge=1)
    max_commits: int | None = Field(default=None, ge=1)
    max_parents: int | None = Field(default=None, ge=1)
    max_tree_depth: int | None = Field(default=None, ge=1)

    @field_validator("pids")
    @classmethod
    def _pids(cls, v: int | None) -> int | None:
        return None if v is None else check_limit("pids", v)

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: int | None) -> int | None:
        return None if v is None else check_limit("memory", v)


class Sandbox(_Strict):
    # None: git config sup.sandbox, else "auto" (gitsup/host/sandbox.py)
    mode: Literal["auto", "required", "off"] | None = None


class Environment(_Strict):
    """What a task's worktree gets besides its checkout (docs/environments.md): the same
    table in `.gitsup/environment.toml` of the main checkout; each key the spec sets (not
    None) replaces the file's (gitsup/environment/recipe.py, which holds the defaults)."""

    # ignored paths of the main checkout the task sees, copy-on-write (relative, no `..`)
    include: list[str] | None = None
    # commands run once per task before its first turn (a string is split like a shell would)
    setup: list[Argv] | None = None
    # what the setup commands may reach: presets (npm, pypi, ...) or host:port
    setup_egress: list[str] | None = None
    # shared package caches (npm, pip, ...)
    cache: list[str] | None = None
    setup_timeout: PositiveDuration | None = None

    @field_validator("include")
    @classmethod
    def _relative_paths(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else [include_path(p) for p in v]


def include_path(raw: str) -> str:
    """An `include` entry in its normal form (`node_modules/` is `node_modules`); a path
    that is not one plain relative path inside the checkout is refused (ValueError)."""
    path = raw.strip().rstrip("/")
    while path.startswith("./"):
        path = path[2:]
    if not path or path == ".":
        raise ValueError(f"include entry {raw!r} names the whole checkout")
    if path.startswith("/") or path.startswith("~"):
        raise ValueError(f"include entry {raw!r} must be relative to the checkout's top")
    parts = path.split("/")
    if ".." in parts:
        raise ValueError(f"include entry {raw!r} must not contain '..'")
    if any(p in ("", ".") for p in parts) or "\\" in path:
        raise ValueError(f"include entry {raw!r} is not a plain path (a/b/c)")
    if any(c in path for c in "*?["):
        raise ValueError(f"include entry {raw!r}: globs are not supported; name each path")
    return path


class Events(_Strict):
    max_record_bytes: int = Field(default=64 * 1024, ge=1024)
    rotate_bytes: int = Field(default=64 * 1024 * 1024, ge=1024 * 1024)
    keep_files: int = Field(default=5, ge=1)
    # gitsup/store/flood.py: worker output written per task, distinct refusals written
    max_output_bytes: int = Field(default=64 * 1024 * 1024, ge=64 * 1024)
    max_refused: int = Field(default=1000, ge=1)


class Notify(_Strict):
    """Outbound notifications (gitsup/attention/notify.py); unset keys fall back to `sup.notify.*`."""

    webhook: str | None = None
    command: Argv | None = None
    apprise: list[str] | None = None
    events: list[Literal["ready", "parked", "failed", "stopped", "needs-human"]] | None = None
    secret_env: str | None = None
    timeout: Duration | None = None
    retries: int | None = Field(default=None, ge=0, le=10)


class Attempts(_Strict):
    """Best-of-N (gitsup/tasks/attempts.py): `n` tasks from the same baseline and spec; attempt i
    uses `workers[i % len(workers)]` when workers are given (other kinds or models)."""

    n: int = Field(default=1, ge=1, le=16)
    workers: list[Worker] = Field(default_factory=list)


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
    environment: Environment = Field(default_factory=Environment)
    limits: Limits = Field(default_factory=Limits)
    notify: Notify = Field(default_factory=Notify)
    attempts: Attempts = Field(default_factory=Attempts)
    # With no checks given, `git diff --check <baseline> HEAD` runs (whitespace errors,
    # conflict markers); false turns it off.
    default_check: bool = True

    def effective_checks(self, baseline: str) -> list[Check]:
        """The checks that run: the given ones, else the default diff check."""
        if self.checks or not self.default_check:
            return list(self.checks)
        return [default_check(baseline)]

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
                "Acceptance checks the supervisor will run (in this worktree, with the "
                "environment your shell has; run them yourself the same way):\n"
                + "\n".join(f"- {c.name}: {shlex.join(c.argv)}" for c in self.checks)
            )
        elif self.default_check:
            parts.append(
                "Acceptance check the supervisor will run: `git diff --check` between the "
                "baseline and your commit (no whitespace errors, no conflict markers)."
            )
        if self.autonomy.require_local_commit:
            parts.append(
                "Commit your work locally on the current branch when done. "
                "Do not push; publishing happens outside this task."
            )
        return "\n\n".join(parts)


DEFAULT_CHECK_NAME = "diff-check"


def default_check(baseline: str) -> Check:
    return Check(name=DEFAULT_CHECK_NAME, argv=["git", "diff", "--check", baseline, "HEAD"])


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
        _check_tree(data, "")
    except ValueError as exc:
        raise GitsupError(
            f"invalid task spec ({source}): {exc}", hint="see docs/spec.md for the limits"
        ) from None
    data = _shell_checks(data)
    try:
        spec = TaskSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise _format_errors(exc, source) from None
    size = len(spec.prompt().encode("utf-8"))
    if size > MAX_PROMPT_BYTES:
        raise GitsupError(
            f"invalid task spec ({source}): the prompt (goal, scope, constraints, checks) is "
            f"{size} bytes; the limit is {MAX_PROMPT_BYTES}",
            hint="put long instructions in a file in the repository and name it in the goal",
        )
    return spec


def _shell_checks(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """`[[checks]] sh = "script"` is `argv = ["sh", "-c", "script"]`, recorded as a shell check."""
    checks = data.get("checks")
    if not isinstance(checks, list) or not any(
        isinstance(c, Mapping) and "sh" in c for c in checks
    ):
        return data
    out = []
    for c in checks:
        if isinstance(c, Mapping) and "sh" in c:
            c = dict(c)
            script = c.pop("sh")
            if "argv" in c:
                raise GitsupError("a check has both `sh` and `argv`; give one")
            if not isinstance(script, str) or not script.strip():
                raise GitsupError("a check's `sh` must be a non-empty string")
            c["argv"] = ["sh", "-c", script]
            c["shell"] = True
        out.append(c)
    return {**data, "checks": out}


def read_toml(raw: bytes, what: str, limit: int) -> dict[str, Any]:
    """A TOML file's bytes (`what` names it in the errors), at most `limit` bytes (a whole
    number of KiB): GitsupError when larger, not UTF-8 TOML, or nested too deeply."""
    if len(raw) > limit:
        size = f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit // 2**10} KiB"
        raise GitsupError(f"{what} is {len(raw)} bytes; the limit is {size}")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GitsupError(f"{what} is not valid TOML: {exc}") from None
    except RecursionError:
        raise GitsupError(f"{what} is nested too deeply to read") from None


def load_spec(path: Path, overrides: Mapping[str, Any] | None = None) -> TaskSpec:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GitsupError(f"cannot read spec {path}: {exc.strerror}") from None
    data = read_toml(raw, f"spec {path}", 1024 * 1024)
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
