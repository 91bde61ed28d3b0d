"""One objects directory read on its own (`ObjectStore`): where a task's worker wrote its
new objects, without the alternates it lists."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2

from gitsup.errors import GitsupError

_OBJECT_TYPES = {
    "commit": pygit2.enums.ObjectType.COMMIT,
    "tree": pygit2.enums.ObjectType.TREE,
    "blob": pygit2.enums.ObjectType.BLOB,
    "tag": pygit2.enums.ObjectType.TAG,
}
_OBJECT_NAMES = {int(v): k for k, v in _OBJECT_TYPES.items()}


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
        try:
            kind, data = self._odb.read(pygit2.Oid(hex=oid))
        except KeyError:
            return None
        except (pygit2.GitError, OSError, ValueError) as exc:
            raise GitsupError(f"object {oid} is unreadable: {exc}") from exc
        name = _OBJECT_NAMES.get(int(kind))
        if name is None:
            raise GitsupError(f"object {oid} has an unknown type {int(kind)}")
        return name, bytes(data)
