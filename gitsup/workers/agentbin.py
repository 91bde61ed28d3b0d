"""The agent's executable, checked before it runs and recorded with the task.

The one agent lookup (gitsup/workers/agentproc.py `find_agent`: `[worker] argv`, else
`GITSUP_<KIND>_BIN`, else the name on PATH, else a project-local install) gives a path;
this module resolves it (symlinks followed) and refuses it unless the file is owned by
gitsup's user or root and neither it, nor the directory holding it, nor the directory of
the name it was found under is writable by group or others: a binary anybody else can
replace is not one gitsup vouches for. A script (`#!`) has its interpreter checked the same
way (`#!/usr/bin/env node`: the `node` on the task's PATH); only the script itself is
hashed. What the script loads in turn (a node package's other files) is not checked.

The identity (path, device and inode, size, owner, sha256, version when the preflight
already asked for it) goes into the task record, the `worker_started` event and the
candidate note. A pin, `git config sup.<agent>.sha256 <hex>` (agent: claude, codex, acp),
refuses any other file. `git sup recover` refuses to go on with a binary whose sha256
changed since the task started, unless `--allow-new-binary`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsup.errors import GitsupError

_SETTING = "[worker] argv"


class UnsafeBinary(GitsupError):
    """The agent's executable is not one gitsup runs (exit 2)."""


@dataclass(frozen=True)
class AgentBinary:
    agent: str
    found: str  # the path the lookup gave
    path: str  # resolved, absolute
    dev: int
    inode: int
    size: int
    uid: int
    sha256: str
    version: str | None = None
    interpreter: str | None = None  # a script's interpreter, resolved

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "agent": self.agent,
            "found": self.found,
            "path": self.path,
            "dev": self.dev,
            "inode": self.inode,
            "size": self.size,
            "uid": self.uid,
            "sha256": self.sha256,
            "version": self.version,
        }
        if self.interpreter is not None:
            d["interpreter"] = self.interpreter
        return d


def find_worker_agent(kind: str, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The agent lookup of a worker kind (raises WorkerError when there is none)."""
    from gitsup.workers.kinds import worker_kind

    agent = worker_kind(kind).agent
    if agent == "claude":
        from gitsup.workers.claude.worker import find_claude

        return find_claude(argv, env, _SETTING)
    if agent == "codex":
        from gitsup.workers.codex.worker import find_codex

        return find_codex(argv, env, _SETTING)
    if agent is None:
        from gitsup.workers.base import WorkerError

        raise WorkerError(f"the {kind} worker runs no agent")
    from gitsup.workers.acp.worker import find_acp

    return find_acp(argv, env, _SETTING)


def _owner_ok(uid: int) -> bool:
    return uid in (0, os.geteuid())


def unsafe(path: str) -> str | None:
    """Why the file at `path` (a resolved path) is not safe to run, or None."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if not _owner_ok(st.st_uid):
        return f"{path} is owned by uid {st.st_uid}, not by this user or root"
    if st.st_mode & 0o022:
        return f"{path} is writable by {_who(st.st_mode)} (mode {stat.S_IMODE(st.st_mode):o})"
    return _unsafe_dir(os.path.dirname(path))


def _unsafe_dir(d: str) -> str | None:
    try:
        st = os.stat(d)
    except OSError as exc:
        return f"its directory {d} cannot be read: {exc.strerror}"
    if not _owner_ok(st.st_uid):
        return f"its directory {d} is owned by uid {st.st_uid}, not by this user or root"
    if st.st_mode & 0o022:
        mode = stat.S_IMODE(st.st_mode)
        return f"its directory {d} is writable by {_who(st.st_mode)} (mode {mode:o})"
    return None


def _who(mode: int) -> str:
    return " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)


def _interpreter(path: str, env: Mapping[str, str]) -> str | None:
    """A script's interpreter (resolved), or None for a binary."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        args = [w for w in words[1:] if not w.startswith("-")]
        if not args:
            return None
        found = shutil.which(args[0], path=env.get("PATH"))
        return os.path.realpath(found) if found else None
    return os.path.realpath(words[0])


# (path, device, inode, size, mtime, ctime) -> sha256: a start hashes once for its preflight
# and its spawn (a change of the file changes its ctime, which nobody can set back). Kept
# across processes too, in gitsup's own config dir (which no task may read or write, whatever
# a repository's sandbox rules say), so a 370 MB agent is hashed once per install, not per
# start.
_sha_cache: dict[tuple[str, int, int, int, int, int], str] = {}


def _cache_file() -> str:
    from gitsup.host.sandbox import gitsup_config_dir

    return os.path.join(
        gitsup_config_dir(os.environ, os.path.expanduser("~")), "cache", "agent-sha256.json"
    )


def _stored(key: tuple[str, int, int, int, int, int]) -> str | None:
    import json

    try:
        with open(_cache_file(), "rb") as f:
            got = json.load(f).get(" ".join(map(str, key)))
    except (OSError, ValueError, AttributeError):
        return None
    return got if isinstance(got, str) and len(got) == 64 else None


def _store(key: tuple[str, int, int, int, int, int], sha: str) -> None:
    import json
    import tempfile

    path = _cache_file()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".agent-sha256.")
        known: dict[str, str] = {}
        try:
            with open(path, "rb") as old:
                loaded = json.load(old)
            if isinstance(loaded, dict):
                known = {k: v for k, v in loaded.items() if not k.startswith(key[0] + " ")}
        except (OSError, ValueError):
            pass
        known[" ".join(map(str, key))] = sha  # the newest identity of each path
        with os.fdopen(fd, "w") as f:
            json.dump(dict(list(known.items())[-64:]), f)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs the next start a hash


def sha256_of(path: str) -> str:
    st = os.stat(path)
    key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _sha_cache:
        stored = _stored(key)
        _sha_cache[key] = stored or _hash(path)
        if stored is None:
            _store(key, _sha_cache[key])
    return _sha_cache[key]


def _hash(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def inspect(
    found: str, agent: str, env: Mapping[str, str], *, version: str | None = None
) -> AgentBinary:
    """Check the executable the lookup found and return its identity; raises UnsafeBinary."""
    path = os.path.realpath(found)
    why = unsafe(path)
    if why is None and os.path.islink(found):  # the name it was found under can be swapped
        why = _unsafe_dir(os.path.dirname(os.path.abspath(found)))
    interpreter = None
    if why is None:
        interpreter = _interpreter(path, env)
        if interpreter is not None:
            bad = unsafe(interpreter)
            why = f"its interpreter: {bad}" if bad else None
    if why is not None:
        raise UnsafeBinary(f"the {agent} executable is refused: {why}")
    st = os.stat(path)
    return AgentBinary(
        agent=agent,
        found=found,
        path=path,
        dev=st.st_dev,
        inode=st.st_ino,
        size=st.st_size,
        uid=st.st_uid,
        sha256=sha256_of(path),
        version=version,
        interpreter=interpreter,
    )


def check_pin(binary: AgentBinary, pin: str | None) -> None:
    """`git config sup.<agent>.sha256`: refuse any other file."""
    if pin is None:
        return
    want = pin.strip().lower()
    if want != binary.sha256:
        raise UnsafeBinary(
            f"the {binary.agent} executable {binary.path} has sha256 {binary.sha256}, "
            f"not {want} (git config sup.{binary.agent}.sha256)"
        )


def changed(recorded: Mapping[str, Any] | None, current: AgentBinary) -> str | None:
    """How the binary differs from the one the task started with (sha256), or None."""
    if not recorded or not recorded.get("sha256"):
        return None
    if recorded.get("sha256") == current.sha256:
        return None
    return (
        f"the {current.agent} executable changed since the task started: "
        f"{recorded.get('path')} sha256 {str(recorded.get('sha256'))[:16]}… is now "
        f"{current.path} sha256 {current.sha256[:16]}…"
    )


def worker_binary(
    kind: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    pin: str | None,
    *,
    version: str | None = None,
) -> AgentBinary | None:
    """The checked identity of the agent a worker of `kind` runs (None: not an agent
    worker, or no agent found: the preflight says that). Raises UnsafeBinary."""
    from gitsup.workers.base import WorkerError
    from gitsup.workers.kinds import worker_kind

    agent = worker_kind(kind).agent
    if agent is None:
        return None

    try:
        exe = find_worker_agent(kind, argv, env)[0]
    except WorkerError:
        return None
    b = inspect(exe, agent, env, version=version)
    check_pin(b, pin)
    return b
