"""One objects directory read on its own (`ObjectStore`): where a task's worker wrote its
new objects, without the alternates it lists; and loose objects written a chunk at a time
(`stage_loose`, `install_loose`), so an object is copied without ever being held whole."""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pygit2

from gitsup.errors import GitsupError

_OBJECT_TYPES = {
    "commit": pygit2.enums.ObjectType.COMMIT,
    "tree": pygit2.enums.ObjectType.TREE,
    "blob": pygit2.enums.ObjectType.BLOB,
    "tag": pygit2.enums.ObjectType.TAG,
}
_OBJECT_NAMES = {int(v): k for k, v in _OBJECT_TYPES.items()}
STREAM_CHUNK = 1 << 20


class ObjectStore:
    """One objects directory (loose objects and packs) read on its own, without the
    alternates it lists: where a task's worker wrote its new objects."""

    def __init__(self, objects_dir: Path) -> None:
        self.path = objects_dir
        odb = pygit2.Odb()
        try:
            odb.add_backend(pygit2.OdbBackendLoose(os.fspath(objects_dir), 0, False), 2)
            odb.add_backend(pygit2.OdbBackendPack(os.fspath(objects_dir)), 1)
        except (pygit2.GitError, OSError) as exc:
            raise GitsupError(f"cannot read objects in {objects_dir}: {exc}") from exc
        self._odb = odb

    def read(self, oid: str) -> tuple[str, bytes] | None:
        """(kind, content) of `oid`, None when absent. Raises GitsupError for an object
        that cannot be read (corrupt, or its content does not hash to its name)."""
        found = self._looked_up(oid, self._odb.read)
        return None if found is None else (found[0], bytes(found[1]))

    def header(self, oid: str) -> tuple[str, int] | None:
        """(kind, size) of `oid` without inflating its content; None when absent."""
        found = self._looked_up(oid, self._odb.read_header)
        return None if found is None else (found[0], int(found[1]))

    def _looked_up(self, oid: str, how: Callable[[pygit2.Oid], Any]) -> tuple[str, Any] | None:
        """(kind name, what `how` gave besides the kind) of `oid`; None when absent."""
        try:
            kind, rest = how(pygit2.Oid(hex=oid))
        except KeyError:
            return None
        except (pygit2.GitError, OSError, ValueError) as exc:
            raise GitsupError(f"object {oid} is unreadable: {exc}") from exc
        name = _OBJECT_NAMES.get(int(kind))
        if name is None:
            raise GitsupError(f"object {oid} has an unknown type {int(kind)}")
        return name, rest

    def stream_blob(self, oid: str, git_dir: Path, chunk: int = STREAM_CHUNK) -> Iterator[bytes]:
        """The content of blob `oid`, `chunk` bytes at a time (`git cat-file` reads this
        store; `git_dir` is a repository whose configuration gitsup trusts, never the
        store's own). The caller verifies what it gets: the content is not checked here."""
        from gitsup.host import proc

        env = proc.child_env(
            {"GIT_DIR": os.fspath(git_dir), "GIT_OBJECT_DIRECTORY": os.fspath(self.path)}
        )
        try:
            p = proc.spawn_piped(["git", "cat-file", "blob", oid], cwd=git_dir, env=env)
        except OSError as exc:
            raise GitsupError(f"cannot run git cat-file: {exc}") from exc
        assert p.stdin is not None and p.stdout is not None and p.stderr is not None
        p.stdin.close()
        try:
            fd = p.stdout.fileno()
            while True:
                data = os.read(fd, chunk)
                if not data:
                    break
                yield data
            err = p.stderr.read(4096).decode("utf-8", "replace").strip()
            if p.wait() != 0:
                raise GitsupError(f"object {oid} is unreadable: {err or 'git cat-file failed'}")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()


# Loose objects are deflated at Git's own default for them (core.looseCompression).
_LOOSE_LEVEL = 1


def stage_loose(kind: str, size: int, chunks: Iterable[bytes], oid: str, into: Path) -> Path:
    """Write the loose object file of `kind`/`size` from `chunks` into the directory
    `into`, hashing as it goes; returns its path. Raises GitsupError (and leaves nothing)
    when the content is not `size` bytes or does not hash to `oid`."""
    h = hashlib.sha1(usedforsecurity=False)
    z = zlib.compressobj(_LOOSE_LEVEL)
    head = f"{kind} {size}\0".encode()
    h.update(head)
    path = into / oid
    got = 0
    try:
        with open(path, "wb") as fh:
            fh.write(z.compress(head))
            for data in chunks:
                got += len(data)
                if got > size:
                    break
                h.update(data)
                fh.write(z.compress(data))
            fh.write(z.flush())
        close = getattr(chunks, "close", None)
        if close is not None:  # a stream read only in part: its reader is stopped now
            close()
        if got != size:
            raise GitsupError(
                f"object {oid} holds {got if got < size else 'more than ' + str(size)} bytes, its header says {size}"
            )
        actual = h.hexdigest()
        if actual != oid:
            raise GitsupError(
                f"forged object in the task's Git dir: {oid} holds content hashing to {actual}"
            )
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    os.chmod(path, 0o444)
    return path


def install_loose(staged: Path, oid: str, objects_dir: Path) -> None:
    """Move a file made by `stage_loose` into `objects_dir` as the loose object `oid`
    (an object already there is kept: same name, same content)."""
    target = objects_dir / oid[:2] / oid[2:]
    if target.exists():
        staged.unlink()
        return
    target.parent.mkdir(mode=0o755, exist_ok=True)
    os.replace(staged, target)
