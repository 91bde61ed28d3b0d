"""A task's setup phase and its package caches (docs/environments.md).

`setup` commands run once per task, in the task sandbox, before the worker's first turn (and
before the checks of `integrate` and of the queue's compositions, in their throw-away
worktree): the same environment everywhere a candidate's code runs. Only they reach the
`setup_egress` endpoints (presets or `host:port`); the agent phase has the task's usual
network.

Caches: one shared layer per kind under `$GIT_COMMON_DIR/sup/cache/env/<kind>/`, written only
by the user's `git sup env warm` (the recipe's setup run in a throw-away worktree of the main
checkout's HEAD, in the sandbox, its cache a copy inside that run's private HOME, moved over
the shared layer when the setup passed). A task never sees the shared layer: before its setup
it gets a copy of it in its own private HOME (`cp --reflink=auto`, so copy-on-write where the
file system can), which the package manager reads and writes as its cache; nothing a task
writes there goes back. The caches' variables name that copy.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gitsup.environment.recipe import Recipe
from gitsup.errors import GitsupError
from gitsup.host import proc
from gitsup.spec import Check, Environment

# what each `setup_egress` preset allows (off until named)
PRESETS: Mapping[str, tuple[str, ...]] = {
    "npm": ("registry.npmjs.org:443",),
    "pypi": ("pypi.org:443", "files.pythonhosted.org:443"),
    "crates": ("crates.io:443", "static.crates.io:443", "index.crates.io:443"),
    "go": ("proxy.golang.org:443", "sum.golang.org:443"),
}


@dataclass(frozen=True)
class CacheKind:
    """A package manager's cache: the directory name and the variables that point at it."""

    name: str
    env: tuple[tuple[str, str], ...]  # (variable, value template: {dir} is the cache's copy)

    def variables(self, where: Path) -> dict[str, str]:
        return {k: v.format(dir=where) for k, v in self.env}


CACHES: Mapping[str, CacheKind] = {
    "npm": CacheKind("npm", (("npm_config_cache", "{dir}"),)),
    "pip": CacheKind("pip", (("PIP_CACHE_DIR", "{dir}"),)),
    # cargo keeps its downloaded crates in CARGO_HOME/registry
    "cargo": CacheKind("cargo", (("CARGO_HOME", "{dir}"),)),
    "go": CacheKind("go", (("GOMODCACHE", "{dir}"), ("GOFLAGS", "-mod=mod"))),
}

OUTPUT_TAIL = 4000
REASON_TAIL = 600  # the end of a failed setup's output a task's reason carries


def task_recipe(main_root: Path | None, spec_env: Environment | None) -> Recipe:
    """The recipe of a task: the main checkout's file, with the keys the spec gives."""
    from gitsup.environment.recipe import load_recipe

    return load_recipe(main_root, spec_env)


def setup_endpoints(entries: Iterable[str]) -> list[str]:
    """The `host:port` endpoints of `setup_egress` entries (presets expanded); GitsupError
    (exit 2) for an entry that is neither."""
    from gitsup.host.egress import parse_endpoint

    out: list[str] = []
    for entry in entries:
        e = entry.strip()
        if e in PRESETS:
            out += PRESETS[e]
            continue
        try:
            parse_endpoint(e)
        except GitsupError:
            raise GitsupError(
                f"setup_egress entry {entry!r} is neither a preset "
                f"({', '.join(PRESETS)}) nor host:port",
                hint="[environment] setup_egress (docs/environments.md)",
            ) from None
        out.append(e)
    return list(dict.fromkeys(out))


def cache_kinds(names: Iterable[str]) -> list[CacheKind]:
    out: list[CacheKind] = []
    for name in names:
        kind = CACHES.get(name.strip())
        if kind is None:
            raise GitsupError(
                f"[environment] cache {name!r} is not a cache gitsup knows ({', '.join(CACHES)})",
                hint="[environment] cache (docs/environments.md)",
            )
        out.append(kind)
    return out


def setup_checks(commands: Sequence[Sequence[str]], timeout: float) -> list[Check]:
    """The setup commands as the check runner runs them (argv, never a shell, unless the
    command is a string the recipe split, which may name `sh -c` itself)."""
    return [
        Check(
            name=f"setup {i + 1}" if len(commands) > 1 else "setup", argv=list(a), timeout=timeout
        )
        for i, a in enumerate(commands)
    ]


def shared_cache_root(common_dir: Path) -> Path:
    """Where `git sup env warm` keeps the shared layer (one directory per kind)."""
    return Path(common_dir) / "sup" / "cache" / "env"


def task_cache_root(home: Path) -> Path:
    """Where a task's (or a confined run's) copy of the caches lives: its private HOME."""
    return home / ".cache" / "gitsup-env"


def copy_caches(shared: Path, dest: Path, kinds: Sequence[CacheKind]) -> tuple[dict[str, str], int]:
    """A fresh copy of each kind's shared layer in `dest/<kind>` (empty when nothing was
    warmed); returns the variables that point at the copies and the bytes copied."""
    env: dict[str, str] = {}
    copied = 0
    for kind in kinds:
        src, dst = shared / kind.name, dest / kind.name
        if dst.exists():
            _remove(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            res = proc.run(
                ["cp", "-a", "--reflink=auto", "--", str(src), str(dst)],
                cwd=dest,
                env=proc.child_env(),
                timeout=3600,
            )
            if not res.ok:
                raise GitsupError(f"cannot copy the {kind.name} cache: {res.output.strip()}")
            copied += tree_bytes(dst)
        else:
            dst.mkdir(parents=True)
        env.update(kind.variables(dst))
    return env, copied


def publish_caches(staged: Path, shared: Path, kinds: Sequence[CacheKind]) -> int:
    """Replace each kind's shared layer with the staged one (a rename: a task copying it at
    that moment copies the old or the new one, never a mix). Returns the bytes published."""
    shared.mkdir(parents=True, exist_ok=True)
    total = 0
    for kind in kinds:
        src, dst = staged / kind.name, shared / kind.name
        if not src.is_dir():
            continue
        total += tree_bytes(src)
        new = shared / f".{kind.name}.new-{os.getpid()}"
        old = shared / f".{kind.name}.old-{os.getpid()}"
        if new.exists():
            _remove(new)
        os.rename(src, new) if _same_fs(src, shared) else _copy(src, new)
        if dst.exists():
            os.rename(dst, old)
        os.rename(new, dst)
        if old.exists():
            _remove(old)
    return total


def tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def tail(text: str, limit: int = OUTPUT_TAIL) -> str:
    return text[-limit:]


def _same_fs(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def _copy(src: Path, dst: Path) -> None:
    res = proc.run(["cp", "-a", "--reflink=auto", "--", str(src), str(dst)], cwd=dst.parent,
                   env=proc.child_env(), timeout=3600)  # fmt: skip
    if not res.ok:
        raise GitsupError(f"cannot copy {src} to {dst}: {res.output.strip()}")


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
