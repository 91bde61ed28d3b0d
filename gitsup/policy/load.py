"""The last stage of the shell policy: the effective policy loaded and checked. The packaged
`policies/default.toml`, a repository's `.gitsup/policy.toml` and `git config sup.protected`
make one immutable `Policy` (config.py); then every rule's examples are run through the
classifier (`examples.py`): the built-in ones once per process, a repository's `[[rules]]` at
every load (docs/policy.md, "Rules a repository writes"). A wrong example, like a malformed
file, is a `GitsupError`."""

from __future__ import annotations

import importlib.resources
import tomllib
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gitsup.errors import GitsupError
from gitsup.policy.config import DefaultFile, Policy, RepoFile, RunnerSpec
from gitsup.policy.examples import check_examples, check_repo_rules
from gitsup.protected import effective

REPO_POLICY = Path(".gitsup") / "policy.toml"


def load_policy(repo_root: Path | None = None, *, extra_protected: Sequence[str] = ()) -> Policy:
    """Default policy, plus `<repo_root>/.gitsup/policy.toml` if present, plus
    `extra_protected` (e.g. from `git config sup.protected`)."""
    repo_text: tuple[str, str] | None = None
    if repo_root is not None:
        path = Path(repo_root) / REPO_POLICY
        try:
            repo_text = (str(path), path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            repo_text = None
        except (OSError, UnicodeDecodeError) as exc:
            raise GitsupError(f"cannot read policy file {path}: {exc}") from exc
    return _build(repo_text, tuple(extra_protected))


def _validation_error(path: str, exc: ValidationError) -> GitsupError:
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    problem = first["msg"]
    more = len(exc.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return GitsupError(
        f"invalid policy file {path}: key {key!r}: {problem}{suffix}",
        hint="fix the file; see docs/policy.md for the schema",
    )


def _read_toml(path: str, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GitsupError(
            f"invalid policy file {path}: key '(syntax)': {exc}",
            hint="the file must be valid TOML; see docs/policy.md",
        ) from exc


@cache
def _default_file() -> DefaultFile:
    res = importlib.resources.files("gitsup.policies") / "default.toml"
    text = res.read_text(encoding="utf-8")
    path = "gitsup/policies/default.toml"
    try:
        return DefaultFile.model_validate(_read_toml(path, text))
    except ValidationError as exc:
        raise _validation_error(path, exc) from exc


def _python_m(runners: Sequence[RunnerSpec], tools: Sequence[str]) -> list[RunnerSpec]:
    out: list[RunnerSpec] = []
    for r in runners:
        if r.argv[0] in tools:
            for py in ("python", "python3"):
                out.append(r.model_copy(update={"argv": (py, "-m", *r.argv)}))
    return out


@cache
def _build(repo: tuple[str, str] | None, extra_protected: tuple[str, ...]) -> Policy:
    d = _default_file()
    repo_file = RepoFile()
    sources = ["gitsup/policies/default.toml"]
    if repo is not None:
        path, text = repo
        try:
            repo_file = RepoFile.model_validate(_read_toml(path, text))
        except ValidationError as exc:
            raise _validation_error(path, exc) from exc
        sources.append(path)
    for name in extra_protected:
        if not name or name.startswith("-") or any(c.isspace() for c in name):
            raise GitsupError(f"invalid protected branch from git config sup.protected: {name!r}")
    if extra_protected:
        sources.append("git config sup.protected")
    protected: list[str] = []
    # The one definition of `sup.protected` (gitsup/protected.py): defaults plus additions.
    for name in effective((*d.protected, *repo_file.protected, *extra_protected)):
        if name not in protected:
            protected.append(name)
    if repo is not None or extra_protected:
        _build(None, ())  # the default policy, whose rule examples are checked once
    runners = [*d.allow.runner, *repo_file.allow.runner]
    runners += _python_m(runners, d.python_m_tools)
    sandboxed = [*d.sandboxed_allow.runner, *repo_file.sandboxed_allow.runner]
    policy = Policy(
        protected=tuple(protected),
        inert_vars=frozenset(d.inert_vars),
        shells=frozenset(d.shells),
        interpreters=frozenset(d.interpreters),
        downloaders=frozenset(d.downloaders),
        network=frozenset(d.network),
        installers=frozenset(d.installers),
        git_publish=frozenset(d.git_publish),
        git_publish_nested=frozenset(_pair(s) for s in d.git_publish_nested),
        forge={k: frozenset(_pair(s) for s in v) for k, v in d.forge.items()},
        publish={k: tuple(tuple(s.split()) for s in v) for k, v in d.publish.items()},
        wrappers=dict(d.wrappers),
        utilities=dict(d.allow.utility),
        runners=tuple(runners),
        sandboxed_runners=tuple(sandboxed),
        sandboxed_mutators=dict(d.sandboxed_allow.mutate),
        sandboxed_scripts=d.sandboxed_allow.script,
        sandboxed_reads=frozenset(d.sandboxed_allow.read),
        sandboxed_prints=frozenset(d.sandboxed_allow.print),
        release_tools=frozenset(d.sandboxed_allow.release_tools),
        http_clients=frozenset(d.http_clients),
        runs_programs=frozenset(d.runs_programs),
        ask_prefixes=tuple(tuple(s.split()) for s in repo_file.ask),
        deny_prefixes=tuple(tuple(s.split()) for s in repo_file.deny),
        deny_rules=tuple(r for r in repo_file.rules if r.decision == "deny"),
        ask_rules=tuple(r for r in repo_file.rules if r.decision == "ask"),
        sources=tuple(sources),
    )
    if repo is None and not extra_protected:
        # Every rule's examples classify as declared (policies/rules.toml), or nothing loads.
        check_examples(policy)
    if repo_file.rules and repo is not None:
        # The repository's rules: allow rules that would weaken a deny are refused, and every
        # example classifies as declared (docs/policy.md, "Rules a repository writes").
        policy = check_repo_rules(
            policy, tuple(r for r in repo_file.rules if r.decision == "allow"), repo[0]
        )
    return policy


def _pair(s: str) -> tuple[str, str]:
    words = s.split()
    return (words[0], words[1] if len(words) > 1 else "")
