"""The rule registry: every rule id the policy gate answers with (`RuleId`), and for each its
data from `policies/rules.toml`: what it covers, what a worker should do instead, and examples
that must classify as declared. The examples are checked when the policy loads, so the rule
table, the code and the labelled corpus cannot drift apart (docs/policy.md, "Rules as data")."""

from __future__ import annotations

import importlib.resources
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gitsup.errors import GitsupError
from gitsup.policy.ecosystem import GENERIC

if TYPE_CHECKING:
    pass

RULES_FILE = "gitsup/policies/rules.toml"
# The context examples are judged in: docs/policy.md, "The fixed context".
EXAMPLE_WORKTREE = "/home/dev/repo"
EXAMPLE_HOME = "/home/dev"
# What an `instead` text may name, filled in with the project's forms (`policy/ecosystem.py`).
PLACEHOLDERS = ("test", "runs", "bare", "tools")
# Said for a rule id the registry does not know (never for one of `RuleId`).
DEFAULT_INSTEAD = "do the work another way within the policy"


class RuleId(StrEnum):
    """Every rule id a `Decision` can carry. `A.*` allow, `D1`-`D4` and `deny.*` deny (docs/policy.md,
    "Deny: D1-D4"), `ask.*` ask, `tool.*` the file, web and MCP tools."""

    A_CREATE = "A.create"
    A_GIT_CHANGE = "A.git-change"
    A_GIT_READ = "A.git-read"
    A_LOCAL_DEV = "A.local-dev"
    A_READ_ONLY = "A.read-only"
    A_REPO = "A.repo"
    A_SANDBOXED = "A.sandboxed"
    A_STRUCTURE = "A.structure"
    D1_ALIAS = "D1.alias"
    D1_FORGE = "D1.forge"
    D1_PUSH = "D1.push"
    D1_REGISTRY = "D1.registry"
    D2_PROTECTED_HEAD = "D2.protected-head"
    D2_PROTECTED_REF = "D2.protected-ref"
    D3_GIT_CONFIG = "D3.git-config"
    D3_HOOKS_DIR = "D3.hooks-dir"
    D3_HOOKS_PATH = "D3.hooks-path"
    D4_BLOCK_DEVICE = "D4.block-device"
    D4_CHMOD_ROOT = "D4.chmod-root"
    D4_DOWNLOAD_EXEC = "D4.download-exec"
    D4_FORK_BOMB = "D4.fork-bomb"
    D4_RM_ROOT = "D4.rm-root"
    DENY_REPO = "deny.repo"
    ASK_ASSIGNMENT = "ask.assignment"
    ASK_BACKGROUND = "ask.background"
    ASK_COMMAND_NAME = "ask.command-name"
    ASK_COMMAND_PATH = "ask.command-path"
    ASK_EXPANSION = "ask.expansion"
    ASK_FUNCTION = "ask.function"
    ASK_GIT_ALIAS = "ask.git-alias"
    ASK_GIT_CHANGE = "ask.git-change"
    ASK_GIT_CONFIG = "ask.git-config"
    ASK_GIT_CWD = "ask.git-cwd"
    ASK_GIT_DIR = "ask.git-dir"
    ASK_GIT_OPTION = "ask.git-option"
    ASK_INSTALL = "ask.install"
    ASK_INTERPRETER = "ask.interpreter"
    ASK_MUTATION = "ask.mutation"
    ASK_NETWORK = "ask.network"
    ASK_OUTSIDE_PATH = "ask.outside-path"
    ASK_REPO = "ask.repo"
    ASK_RUN = "ask.run"
    ASK_RUNNER_OPTION = "ask.runner-option"
    ASK_TOO_COMPLEX = "ask.too-complex"
    ASK_UNKNOWN = "ask.unknown"
    ASK_UNPARSEABLE = "ask.unparseable"
    ASK_UTILITY_OPTION = "ask.utility-option"
    ASK_WRAPPER = "ask.wrapper"
    TOOL_ASK_USER = "tool.ask_user"
    TOOL_GIT_DIR = "tool.git-dir"
    TOOL_INVALID_INPUT = "tool.invalid-input"
    TOOL_MCP = "tool.mcp"
    TOOL_OUTSIDE_PATH = "tool.outside-path"
    TOOL_READ = "tool.read"
    TOOL_UNKNOWN = "tool.unknown"
    TOOL_UNRESOLVED = "tool.unresolved-path"
    TOOL_WEB = "tool.web"
    TOOL_WRITE = "tool.write"


def is_allow(rule: str) -> bool:
    return rule.startswith("A.") or rule in (RuleId.TOOL_READ, RuleId.TOOL_WRITE)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolExample(_Model):
    tool: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


Example = str | ToolExample


class RuleSpec(_Model):
    message: str = Field(min_length=1)
    instead: str = ""
    configured: bool = False  # only a repository policy can trigger it
    match: tuple[Example, ...] = ()
    not_match: tuple[Example, ...] = ()
    match_sandboxed: tuple[Example, ...] = ()
    not_match_sandboxed: tuple[Example, ...] = ()


class RulesFile(_Model):
    rules: dict[str, RuleSpec]


@dataclass(frozen=True)
class Rule:
    id: RuleId
    message: str
    instead: str
    spec: RuleSpec


@cache
def registry() -> Mapping[str, Rule]:
    """The rule table, read once per process. Every `RuleId` has an entry and every entry is a
    `RuleId`; ask and deny rules say what to do instead; every rule has a `match` example
    unless a repository policy is what triggers it. Anything else is a `GitsupError`."""
    text = (importlib.resources.files("gitsup.policies") / "rules.toml").read_text("utf-8")
    return build_registry(text, RULES_FILE)


def build_registry(text: str, path: str) -> Mapping[str, Rule]:
    try:
        data = RulesFile.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise GitsupError(f"{path}: invalid TOML: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise GitsupError(f"{path}: {where}: {first['msg']}") from exc
    known = {r.value for r in RuleId}
    unknown = sorted(set(data.rules) - known)
    if unknown:
        raise GitsupError(f"{path}: rules that are not in the registry (RuleId): {unknown}")
    missing = sorted(known - set(data.rules))
    if missing:
        raise GitsupError(f"{path}: registered rule ids without an entry: {missing}")
    out: dict[str, Rule] = {}
    for rid, spec in data.rules.items():
        if not is_allow(rid) and not spec.instead:
            raise GitsupError(f"{path}: rule {rid} does not say what to do instead")
        unknown_words = sorted(set(_PLACEHOLDER.findall(spec.instead)) - set(PLACEHOLDERS))
        if unknown_words:
            raise GitsupError(f"{path}: rule {rid}: unknown placeholder {{{unknown_words[0]}}}")
        if not spec.configured and not (spec.match or spec.match_sandboxed):
            raise GitsupError(f"{path}: rule {rid} has no `match` example")
        out[rid] = Rule(RuleId(rid), spec.message, spec.instead, spec)
    return out


_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def fill(text: str, words: Mapping[str, str]) -> str:
    """`text` with each `{name}` placeholder replaced by `words[name]` (the project's forms,
    `policy/ecosystem.py`); an unknown name is left as written."""
    return _PLACEHOLDER.sub(lambda m: words.get(m.group(1), m.group(0)), text)


def instead(rule: str, words: Mapping[str, str] | None = None) -> str:
    """What a worker should do instead of what `rule` stopped, in the project's own forms
    (`words`; without them, the forms of every ecosystem the allow list knows)."""
    found = registry().get(rule)
    if found is None or not found.instead:
        return DEFAULT_INSTEAD
    if words is None:
        words = GENERIC.words()
    return fill(found.instead, words)
