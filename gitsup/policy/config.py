"""The effective policy: packaged `policies/default.toml` plus a repository's `.gitsup/policy.toml`.

Both files are validated at the boundary (pydantic); a malformed file is a `GitsupError` naming the
file, the key and the problem. The repository file can only *add*: protected branches, test
runners, and rules that tighten (`ask`, `deny`). Deny detection (D1-D3) is code, run before the
allow list, and no key turns it off.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gitsup.protected import is_protected


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UtilitySpec(_Model):
    operands: Literal["files", "data", "pattern", "filter", "none"] = "files"
    arg_opts: tuple[str, ...] = ()
    path_opts: tuple[str, ...] = ()
    two_value_opts: tuple[str, ...] = ()
    forbid: tuple[str, ...] = ()
    require: tuple[str, ...] = ()
    allowed_opts: tuple[str, ...] | None = None
    create: bool = False
    # sandboxed mutators: operands are written ("write") or removed ("remove", never W itself)
    mutate: Literal["", "write", "remove"] = ""


class RunnerSpec(_Model):
    argv: tuple[str, ...] = Field(min_length=1)
    forbid: tuple[str, ...] = ()
    require: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    # options whose value (separate, attached or after `=`) is a file the program reads or runs:
    # it must be inside W and never stdin (`-`, /dev/stdin)
    path_opts: tuple[str, ...] = ()
    # positional words (globs) that make it ask: a target named `deploy`, `VAR=value` overrides
    ask_words: tuple[str, ...] = ()
    # "OPTION=GLOB": the option with a value matching the glob names code to load or run (a
    # plugin or module by name, an init hook, an interpreter, options smuggled into an ini
    # override): it asks, unless the value also matches one of the option's `ok_values`
    # (`-p=no:*` turns a pytest plugin off)
    ask_values: tuple[str, ...] = ()
    ok_values: tuple[str, ...] = ()

    @field_validator("ask_values", "ok_values")
    @classmethod
    def _option_globs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for item in v:
            opt, eq, glob = item.partition("=")
            if not (opt.startswith("-") and len(opt) > 1 and eq and glob):
                raise ValueError(f"expected OPTION=GLOB such as '-p=*': {item!r}")
        return v

    def value_opts(self) -> tuple[str, ...]:
        """The options `ask_values` names."""
        return _value_opts(self.ask_values)

    def asks_for(self, opt: str, value: str) -> bool:
        """True when option `opt` with `value` names code to load or run."""

        def hit(items: tuple[str, ...]) -> bool:
            for item in items:
                o, _, glob = item.partition("=")
                if o == opt and fnmatch.fnmatchcase(value, glob):
                    return True
            return False

        return hit(self.ask_values) and not hit(self.ok_values)

    @field_validator("argv")
    @classmethod
    def _words(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not w or any(c.isspace() for c in w) for w in v):
            raise ValueError("argv items must be non-empty words without spaces")
        return v


@cache
def _value_opts(ask_values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item.partition("=")[0] for item in ask_values))


class WrapperSpec(_Model):
    opts_with_arg: tuple[str, ...] = ()
    positionals: int = Field(default=0, ge=0, le=4)
    joined: bool = False


class AllowSection(_Model):
    utility: dict[str, UtilitySpec] = Field(default_factory=dict)
    runner: tuple[RunnerSpec, ...] = ()


class ScriptSpec(_Model):
    """An interpreter that may run a script file inside W when sandboxed."""

    names: tuple[str, ...] = Field(min_length=1)  # program names (globs allowed)
    flags: tuple[str, ...] = ()  # options allowed before the script (short ones may cluster)
    arg_opts: tuple[str, ...] = ()  # options allowed before the script that take a value
    # options whose value is inline code (`python -c CODE`, `node -e CODE`): allowed when the
    # code names no publishing, pushing or hook operation (sandboxed.inline_code_mentions)
    inline: tuple[str, ...] = ()
    # code read from stdin (`python3 - <<'EOF'`) is allowed when it is the part's own heredoc or
    # herestring (visible, and checked like inline code)
    stdin: bool = False


class SandboxedAllowSection(_Model):
    """Rules that allow only when the task's kernel sandbox is enforced (docs/policy.md, "Sandboxed mode")."""

    runner: tuple[RunnerSpec, ...] = ()
    mutate: dict[str, UtilitySpec] = Field(default_factory=dict)
    script: tuple[ScriptSpec, ...] = ()
    # utilities whose operands and path options only read: outside W allowed (the kernel decides
    # what the task may read); their arguments may be unresolved expansions
    read: tuple[str, ...] = ()
    # utilities that only print their arguments (`echo $PATH`): unresolved expansions allowed
    print: tuple[str, ...] = ()
    # programs whose job is to publish or release (`np`, `semantic-release`): asked for even when
    # run from the worktree (`./node_modules/.bin/np`) or through `npx` / `npm exec`
    release_tools: tuple[str, ...] = ()


class DefaultFile(_Model):
    version: Literal[1]
    protected: tuple[str, ...]
    inert_vars: tuple[str, ...]
    shells: tuple[str, ...]
    interpreters: tuple[str, ...]
    downloaders: tuple[str, ...]
    http_clients: tuple[str, ...] = ()
    runs_programs: tuple[str, ...] = ()
    network: tuple[str, ...]
    installers: tuple[str, ...]
    python_m_tools: tuple[str, ...] = ()
    git_publish: tuple[str, ...]
    git_publish_nested: tuple[str, ...]
    forge: dict[str, tuple[str, ...]]
    publish: dict[str, tuple[str, ...]]
    wrappers: dict[str, WrapperSpec]
    allow: AllowSection
    sandboxed_allow: SandboxedAllowSection = SandboxedAllowSection()
    sandbox: dict[str, Any] = Field(default_factory=dict)  # filesystem rules (gitsup.host.sandbox)


class RepoAllow(_Model):
    runner: tuple[RunnerSpec, ...] = ()


class RepoSandboxedAllow(_Model):
    runner: tuple[RunnerSpec, ...] = ()


Word = str | tuple[str, ...]  # one word of a rule's pattern, or its alternatives


class RepoRule(_Model):
    """A `[[rules]]` entry of `.gitsup/policy.toml`: a decision for the commands whose words
    start with `pattern`, with examples checked when the policy loads."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    decision: Literal["deny", "ask", "allow"]
    # the program, then a prefix of its arguments; a list is a set of alternatives
    pattern: tuple[Word, ...] = Field(min_length=1, max_length=32)
    message: str = ""
    match: tuple[str, ...] = Field(min_length=1)  # commands that must be decided by this rule
    not_match: tuple[str, ...] = ()  # commands that must not be

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: tuple[Word, ...]) -> tuple[Word, ...]:
        for item in v:
            alts = (item,) if isinstance(item, str) else item
            if not alts:
                raise ValueError("a list of alternatives must not be empty")
            for w in alts:
                if not w or any(c.isspace() for c in w):
                    raise ValueError(f"pattern words are non-empty words without spaces: {w!r}")
        return v

    def matches(self, argv: Sequence[str]) -> bool:
        """True when `argv` starts with the pattern (the program also by its basename; a word
        with `*` is a glob)."""
        if len(argv) < len(self.pattern):
            return False
        for k, item in enumerate(self.pattern):
            word = argv[k]
            alts = (item,) if isinstance(item, str) else item
            if k == 0 and "/" in word:
                word = word.rstrip("/").rsplit("/", 1)[-1]
            if not any(a == word or ("*" in a and fnmatch.fnmatchcase(word, a)) for a in alts):
                return False
        return True

    def text(self) -> str:
        """The pattern as people write a command: alternatives joined with `|`."""
        return " ".join(w if isinstance(w, str) else "|".join(w) for w in self.pattern)

    def reason(self) -> str:
        """The reason of a decision this rule made (it names the rule: `hit` reads it back)."""
        verb = {"deny": "denies", "ask": "asks for", "allow": "allows"}[self.decision]
        said = self.message or f"the repository policy {verb} `{self.text()}`"
        return f"{_RULE_PREFIX}{self.id!r}: {said}"


_RULE_PREFIX = "repository rule "


def hit_by(reason: str) -> str | None:
    """The id of the repository rule a decision's reason names, or None."""
    if not reason.startswith(_RULE_PREFIX + "'"):
        return None
    return reason[len(_RULE_PREFIX) + 1 :].split("'", 1)[0]


class RepoFile(_Model):
    """`.gitsup/policy.toml`: additive only."""

    version: Literal[1] = 1
    protected: tuple[str, ...] = ()
    allow: RepoAllow = RepoAllow()
    sandboxed_allow: RepoSandboxedAllow = RepoSandboxedAllow()
    ask: tuple[str, ...] = ()  # command prefixes that always ask ("cargo build")
    deny: tuple[str, ...] = ()  # command prefixes that are denied ("terraform apply")
    sandbox: dict[str, Any] = Field(default_factory=dict)  # gitsup/host/sandbox.py reads it
    rules: tuple[RepoRule, ...] = ()

    @field_validator("rules")
    @classmethod
    def _unique(cls, v: tuple[RepoRule, ...]) -> tuple[RepoRule, ...]:
        seen: set[str] = set()
        for r in v:
            if r.id in seen:
                raise ValueError(f"two rules with the id {r.id!r}")
            seen.add(r.id)
        return v

    @field_validator("protected")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if not name or name.startswith("-") or any(c.isspace() for c in name):
                raise ValueError(f"not a branch name: {name!r}")
        return v

    @field_validator("ask", "deny")
    @classmethod
    def _prefixes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s.split() for s in v):
            raise ValueError("each entry is a non-empty command prefix such as 'cargo build'")
        return v


@dataclass(frozen=True, eq=False)
class Policy:
    """The immutable effective policy. Build it with `load_policy` (load.py)."""

    protected: tuple[str, ...]
    inert_vars: frozenset[str]
    shells: frozenset[str]
    interpreters: frozenset[str]
    downloaders: frozenset[str]
    network: frozenset[str]
    installers: frozenset[str]
    git_publish: frozenset[str]
    git_publish_nested: frozenset[tuple[str, str]]
    forge: Mapping[str, frozenset[tuple[str, str]]]
    publish: Mapping[str, tuple[tuple[str, ...], ...]]
    wrappers: Mapping[str, WrapperSpec]
    utilities: Mapping[str, UtilitySpec]
    runners: tuple[RunnerSpec, ...]
    sandboxed_runners: tuple[RunnerSpec, ...] = ()
    sandboxed_mutators: Mapping[str, UtilitySpec] = field(default_factory=dict)
    sandboxed_scripts: tuple[ScriptSpec, ...] = ()
    sandboxed_reads: frozenset[str] = frozenset()
    sandboxed_prints: frozenset[str] = frozenset()
    release_tools: frozenset[str] = frozenset()
    http_clients: frozenset[str] = frozenset()
    runs_programs: frozenset[str] = frozenset()
    ask_prefixes: tuple[tuple[str, ...], ...] = ()
    deny_prefixes: tuple[tuple[str, ...], ...] = ()
    # `[[rules]]` of the repository, by decision; an allow rule that would weaken a deny is
    # not applied: it is in `refused_rules`, and `refused` says why
    deny_rules: tuple[RepoRule, ...] = ()
    ask_rules: tuple[RepoRule, ...] = ()
    allow_rules: tuple[RepoRule, ...] = ()
    refused_rules: tuple[RepoRule, ...] = ()
    refused: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    _cache: dict[tuple[str, str, str, bool], Any] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    _runner_index: dict[str, tuple[RunnerSpec, ...]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    _sandboxed_index: dict[str, tuple[RunnerSpec, ...]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    _deny_names: dict[str, frozenset[str] | None] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    # program name -> the deny rule families that judge it (deny/scan.py `_families`)
    _deny_dispatch: dict[str, int] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    def runners_for(self, prog: str, *, sandboxed: bool = False) -> tuple[RunnerSpec, ...]:
        """Runners whose first word is `prog` (or a glob); `sandboxed`: the runners of
        `[sandboxed_allow]` instead."""
        runners = self.sandboxed_runners if sandboxed else self.runners
        index = self._sandboxed_index if sandboxed else self._runner_index
        if not index:
            built: dict[str, list[RunnerSpec]] = {}
            for r in runners:
                built.setdefault(r.argv[0], []).append(r)
            index.update({k: tuple(v) for k, v in built.items()})
            index.setdefault("", ())
            # the runners whose first word is a glob, under a key no program name has
            index["*"] = tuple(r for r in runners if "*" in r.argv[0])
        found: tuple[RunnerSpec, ...] = index.get(prog, ()) if prog != "*" else ()
        globs = index["*"]
        if not globs:
            return found
        return found + tuple(r for r in globs if fnmatch.fnmatchcase(prog, r.argv[0]))

    def script_for(self, prog: str) -> ScriptSpec | None:
        """The `[[sandboxed_allow.script]]` entry naming `prog`."""
        for spec in self.sandboxed_scripts:
            if any(prog == n or fnmatch.fnmatchcase(prog, n) for n in spec.names):
                return spec
        return None

    def is_protected(self, ref: str) -> bool:
        """True when `ref` names a protected branch (`main`, `refs/heads/main`)."""
        return _protected_match(self.protected, ref)

    def summary(self) -> dict[str, Any]:
        """A JSON-able view of the effective policy (for `git sup policy show`)."""
        return {
            "sources": list(self.sources),
            "protected": list(self.protected),
            "inert_vars": sorted(self.inert_vars),
            "shells": sorted(self.shells),
            "interpreters": sorted(self.interpreters),
            "network": sorted(self.network),
            "installers": sorted(self.installers),
            "git_publish": sorted(self.git_publish),
            "git_publish_nested": sorted(" ".join(p) for p in self.git_publish_nested),
            "forge": {k: sorted(" ".join(p) for p in v) for k, v in sorted(self.forge.items())},
            "publish": {k: [" ".join(p) for p in v] for k, v in sorted(self.publish.items())},
            "wrappers": sorted(self.wrappers),
            "utilities": sorted(self.utilities),
            "runners": [
                {
                    "argv": list(r.argv),
                    "forbid": list(r.forbid),
                    "require": list(r.require),
                    "only": list(r.only),
                }
                for r in self.runners
            ],
            "sandboxed_allow": {
                "runners": [
                    {
                        "argv": list(r.argv),
                        "forbid": list(r.forbid),
                        "path_opts": list(r.path_opts),
                        "ask_words": list(r.ask_words),
                    }
                    for r in self.sandboxed_runners
                ],
                "mutate": sorted(self.sandboxed_mutators),
                "script": [list(s.names) for s in self.sandboxed_scripts],
                "read": sorted(self.sandboxed_reads),
                "print": sorted(self.sandboxed_prints),
                "release_tools": sorted(self.release_tools),
            },
            "ask": [" ".join(p) for p in self.ask_prefixes],
            "deny": [" ".join(p) for p in self.deny_prefixes],
            "rules": [
                {
                    "id": r.id,
                    "decision": r.decision,
                    "pattern": r.text(),
                    "message": r.message,
                    "refused": r in self.refused_rules,
                }
                for r in (
                    *self.deny_rules,
                    *self.ask_rules,
                    *self.allow_rules,
                    *self.refused_rules,
                )
            ],
            "refused": list(self.refused),
        }

    def repo_rules(self) -> tuple[RepoRule, ...]:
        """The repository's `[[rules]]` that apply, stricter first."""
        return (*self.deny_rules, *self.ask_rules, *self.allow_rules)

    def replaced(self, **changes: Any) -> Policy:
        """This policy with some fields changed (`allow_rules=…`, `refused=…`) and caches of
        its own."""
        fresh: dict[str, Any] = {f.name: {} for f in fields(self) if f.name.startswith("_")}
        return replace(self, **changes, **fresh)


@cache
def _protected_match(patterns: tuple[str, ...], ref: str) -> bool:
    return is_protected(ref, patterns)
