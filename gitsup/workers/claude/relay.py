"""`git sup hook claude`: the Claude Code command-hook relay (standard library only).

For people who register gitsup once in their own Claude Code settings::

    {"hooks": {"PreToolUse": [{"hooks": [{"type": "command",
        "command": "python3 -P -m gitsup.hookrelay"}]}], ...}}

Claude Code runs the command for every hook event with the event JSON on stdin. The
relay finds the supervisor that owns the session's working directory and forwards the
JSON to it over a unix socket; the supervisor's reply (a hook decision, or nothing) is
printed unchanged. Without an owner the relay is a no-op: exit 0, empty output, at once.
A supervisor that does not answer within the bound is treated as "no decision" (fail
open), so a supervisor bug never wedges Claude Code.

The owner registry: a supervisor owning worktree W listens on
``$GIT_COMMON_DIR/sup/hooks/<hash of W>.sock`` (or, when that path is too long for a
unix socket, ``/tmp/gitsup-<uid>/h-<hash of W>.sock``). The relay finds W and the common
Git directory by walking up from the cwd to the worktree's ``.git`` file or directory,
without Git or pygit2.

This module runs once per tool call, so it imports only small parts of the standard
library. ``python3 -P -m gitsup.hookrelay`` is the fast path (``-P``: not the working
directory on sys.path, where a worktree could hold a ``gitsup/`` of its own); the ``git sup hook claude``
console command goes through the CLI framework and is slower.

Wire format on the socket: the request is the hook JSON, then the client shuts its
write side down; the reply is the bytes to print (possibly empty), then EOF.
"""

from __future__ import annotations

import os
import sys

from gitsup.names import RECORD_FILE

DEFAULT_TIMEOUT = 65.0  # seconds; a little above the supervisor's own decision bound
MAX_PAYLOAD = 4 * 1024 * 1024
_SUN_PATH_MAX = 104  # portable limit for sockaddr_un.sun_path, including the NUL


def _digest(text: str) -> str:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # pragma: no cover - other interpreters
        from hashlib import sha256
    return str(sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:20])


def _fallback_dir() -> str:
    return f"/tmp/gitsup-{os.getuid()}"


def socket_path_for(common_dir: str, worktree: str) -> str:
    """The registry socket of the supervisor owning `worktree` (both absolute, real paths)."""
    name = f"{_digest(worktree)}.sock"
    primary = os.path.join(common_dir, "sup", "hooks", name)
    if len(primary.encode()) < _SUN_PATH_MAX:
        return primary
    return os.path.join(_fallback_dir(), "h-" + name)


def private_git_dir_owner(gitdir: str) -> str | None:
    """The repository's common dir when `gitdir` is a task's private Git dir
    (`<common>/sup/tasks/<id>/git`), else None."""
    parts = os.path.normpath(gitdir).rsplit(os.sep, 4)
    if (
        len(parts) == 5
        and parts[1:] == ["sup", "tasks", parts[3], "git"]
        and os.path.isfile(os.path.join(gitdir, os.pardir, RECORD_FILE))
    ):
        return parts[0]
    return None


def locate(cwd: str) -> tuple[str, str] | None:
    """(common git dir, worktree root) for `cwd`, or None outside a Git checkout."""
    d = os.path.realpath(cwd)
    while True:
        dotgit = os.path.join(d, ".git")
        if os.path.isdir(dotgit):
            return dotgit, d
        if os.path.isfile(dotgit):
            try:
                with open(dotgit, encoding="utf-8") as f:
                    line = f.read(4096).strip()
            except OSError:
                return None
            if not line.startswith("gitdir:"):
                return None
            gitdir = line[len("gitdir:") :].strip()
            if not os.path.isabs(gitdir):
                gitdir = os.path.join(d, gitdir)
            # a task's private Git dir (whose `commondir` names itself) belongs to the
            # repository it lives in
            common = private_git_dir_owner(gitdir) or gitdir
            if common == gitdir:
                try:
                    with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as f:
                        rel = f.read(4096).strip()
                    common = rel if os.path.isabs(rel) else os.path.join(gitdir, rel)
                except OSError:
                    pass
            return os.path.realpath(common), d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\", "/": "/"}


def _cwd_of(payload: bytes) -> str | None:
    """The payload's top-level "cwd" string. Parsed by hand: importing json costs more
    than the rest of the relay (Claude Code puts "cwd" in every hook payload)."""
    i = payload.find(b'"cwd"')
    if i < 0:
        return None
    text = payload[i + 5 :].decode("utf-8", "surrogateescape")
    k = 0
    while k < len(text) and text[k] in " \t\r\n":
        k += 1
    if text[k : k + 1] != ":":
        return None
    k += 1
    while k < len(text) and text[k] in " \t\r\n":
        k += 1
    if text[k : k + 1] != '"':
        return None
    out: list[str] = []
    k += 1
    while k < len(text):
        c = text[k]
        if c == '"':
            return "".join(out)
        if c == "\\":
            e = text[k + 1 : k + 2]
            if e == "u":
                try:
                    code = int(text[k + 2 : k + 6], 16)
                except ValueError:
                    return None
                if 0xD800 <= code < 0xDC00 and text[k + 6 : k + 8] == "\\u":
                    try:
                        low = int(text[k + 8 : k + 12], 16)
                    except ValueError:
                        return None
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    k += 6
                out.append(chr(code))
                k += 6
                continue
            if e not in _ESCAPES:
                return None
            out.append(_ESCAPES[e])
            k += 2
            continue
        out.append(c)
        k += 1
    return None


def relay(payload: bytes, *, cwd: str | None = None, timeout: float | None = None) -> bytes:
    """Forward one hook payload to its owning supervisor; b"" means no decision."""
    where = cwd or _cwd_of(payload) or os.getcwd()
    found = locate(where)
    if found is None:
        return b""
    path = socket_path_for(*found)
    if timeout is None:
        try:
            timeout = float(os.environ.get("GITSUP_HOOK_TIMEOUT", "") or DEFAULT_TIMEOUT) + 2.0
        except ValueError:
            timeout = DEFAULT_TIMEOUT
    import _socket

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        try:
            s.connect(path)
        except OSError:
            return b""  # no owner (no socket, or nobody listening)
        try:
            s.sendall(payload)
            s.shutdown(_socket.SHUT_WR)
            chunks = []
            total = 0
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                total += len(chunk)
                if total > MAX_PAYLOAD:
                    return b""
                chunks.append(chunk)
        except OSError:  # includes the timeout: fail open
            return b""
        return b"".join(chunks)
    finally:
        s.close()


def main() -> int:
    if os.environ.get("GITSUP_HOOK_SECRET"):
        # A session gitsup runs itself: its own http hooks already reach the supervisor.
        return 0
    try:
        payload = sys.stdin.buffer.read(MAX_PAYLOAD + 1)
    except OSError:
        return 0
    if not payload or len(payload) > MAX_PAYLOAD:
        return 0
    try:
        out = relay(payload)
    except Exception:  # never let a relay bug block Claude Code
        return 0
    if out:
        sys.stdout.buffer.write(out)
        sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
