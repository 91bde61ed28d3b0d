"""A repository's location and its branch tips, read from its files without libgit2.

For a command that only reads (`git sup ls`), loading libgit2 costs more than its own work.
This reads the plain layout only: a `.git` directory or a `.git` file naming one, loose refs
and `packed-refs`. Whatever it cannot answer with certainty (reftable refs, a symbolic
branch, an unusual name, a repository another user owns, a bare one, a search that would
cross into another file system) it leaves to the Git gateway (`gitsup.git`): `locate`
answers None, `read_branch` raises `Unsure`.
"""

from __future__ import annotations

import os
import re
import stat

_OID = re.compile(rb"[0-9a-f]{40}([0-9a-f]{24})?")
_NAME = re.compile(r"[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*(/[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*)*")
_BARE = re.compile(rb"^\s*bare\s*=\s*(true|yes|on|1)\s*$", re.MULTILINE | re.IGNORECASE)


class Unsure(Exception):
    """The files do not say for certain: ask the Git gateway."""


def locate(start: str | os.PathLike[str] = ".") -> str | None:
    """$GIT_COMMON_DIR of the checkout around `start`, found the way `GitRepo.discover`
    finds it (the nearest `.git` upwards, on the same file system); None when unsure."""
    d = os.path.abspath(os.fspath(start))
    try:
        dev = os.stat(d).st_dev
    except OSError:
        return None
    while True:
        dotgit = os.path.join(d, ".git")
        try:
            st = os.stat(dotgit)
        except FileNotFoundError:
            st = None
        except OSError:
            return None
        if st is not None:
            return _common_dir(d, dotgit, st)
        if os.path.isfile(os.path.join(d, "HEAD")):
            return None  # perhaps a bare repository or a Git dir itself: the gateway says
        parent = os.path.dirname(d)
        if parent == d:
            return None
        try:
            if os.stat(parent).st_dev != dev:
                return None
        except OSError:
            return None
        d = parent


def _common_dir(top: str, dotgit: str, st: os.stat_result) -> str | None:
    if st.st_uid != os.geteuid():
        return None  # ownership rules (safe.directory) are the gateway's to apply
    if stat.S_ISDIR(st.st_mode):
        git_dir = dotgit
    elif stat.S_ISREG(st.st_mode):
        try:
            with open(dotgit, "rb") as f:
                text = f.read(4096)
        except OSError:
            return None
        if not text.startswith(b"gitdir: ") or text.count(b"\n") > 1:
            return None
        target = os.fsdecode(text[len(b"gitdir: ") :].strip())
        git_dir = os.path.join(top, target)
    else:
        return None
    if not os.path.isfile(os.path.join(git_dir, "HEAD")):
        return None
    common = git_dir
    try:
        with open(os.path.join(git_dir, "commondir"), "rb") as f:
            common = os.path.join(git_dir, os.fsdecode(f.read().strip()))
    except FileNotFoundError:
        pass
    except OSError:
        return None
    common = os.path.realpath(common)
    if not os.path.isdir(os.path.join(common, "objects")):
        return None
    try:
        with open(os.path.join(common, "config"), "rb") as f:
            if _BARE.search(f.read()):
                return None
    except FileNotFoundError:
        pass
    except OSError:
        return None
    return common


class BranchReader:
    """Branch tips of one repository (`common_dir`): a loose ref, else `packed-refs`."""

    def __init__(self, common_dir: str) -> None:
        self.common_dir = common_dir
        self._packed: dict[str, str] | None = None
        self._reftable: bool | None = None
        self._folders: dict[str, frozenset[str]] = {}

    def read_branch(self, name: str) -> str | None:
        """The commit id `refs/heads/<name>` names, None when there is no such branch."""
        if not name:
            return None
        if not _NAME.fullmatch(name) or name.endswith(".lock"):
            raise Unsure(name)
        if self._reftable is None:
            self._reftable = os.path.exists(os.path.join(self.common_dir, "reftable"))
        if self._reftable:
            raise Unsure("reftable")
        ref = f"refs/heads/{name}"
        folder, _, leaf = ref.rpartition("/")
        if leaf not in self._listing(folder):  # one directory read for many branches
            return self._packed_refs().get(ref)
        try:
            with open(os.path.join(self.common_dir, ref), "rb") as f:
                data = f.read(200).strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return self._packed_refs().get(ref)
        except OSError as exc:
            raise Unsure(ref) from exc
        if _OID.fullmatch(data):
            return data.decode()
        raise Unsure(ref)  # symbolic, or being written

    def _listing(self, folder: str) -> frozenset[str]:
        names = self._folders.get(folder)
        if names is None:
            try:
                names = frozenset(os.listdir(os.path.join(self.common_dir, folder)))
            except (FileNotFoundError, NotADirectoryError):
                names = frozenset()
            except OSError as exc:
                raise Unsure(folder) from exc
            self._folders[folder] = names
        return names

    def _packed_refs(self) -> dict[str, str]:
        if self._packed is None:
            packed: dict[str, str] = {}
            try:
                with open(os.path.join(self.common_dir, "packed-refs"), "rb") as f:
                    lines = f.read().splitlines()
            except FileNotFoundError:
                lines = []
            except OSError as exc:
                raise Unsure("packed-refs") from exc
            for line in lines:
                if line[:1] in (b"#", b"^") or not line:
                    continue
                oid, _, ref = line.partition(b" ")
                if not _OID.fullmatch(oid):
                    raise Unsure("packed-refs")
                packed[os.fsdecode(ref)] = oid.decode()
            self._packed = packed
        return self._packed
