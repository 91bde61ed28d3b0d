"""`include`: ignored paths of the main checkout (dependency trees such as `node_modules`,
`.venv`, `vendor/`, `target/`; local configuration) in a task's worktree, copy-on-write.

A task sees them, and so do its checks, its reviewer and the checks `integrate` and the queue
run; what it writes there never reaches the main checkout's copy or another task's. How
(docs/environments.md):

- `overlay` (a directory, with the sandbox's mount namespace): the bootstrap mounts an overlay
  at the path in the worktree, inside each sandboxed process's mount namespace, whose only
  lower layer is the main checkout's directory (never written) and whose upper layer is the
  task's own, `<task dir>/env/<n>/upper` (hidden from the task: it writes there only through
  the overlay). Nothing is copied; the worktree on the host holds an empty directory.
- `reflink` / `copy` (a file; a directory without the mount namespace: `sup.sandbox off`, or
  `auto` on a host without it): a copy into the worktree (`cp -a --reflink=auto`), sharing
  the blocks where the file system can clone them, else the bytes copied. Never a hard link,
  never a link to the main checkout.

What the main checkout says of each entry decides whether it is given: only a path its Git
ignores (a tracked one is in the task's checkout already; an untracked, unignored one would
be committed by the task), inside the checkout after links are resolved, not a protected
path (credentials, gitsup's keys), a directory or a regular file. The others are refused and
listed, as the sandbox rules record theirs. A missing one is listed as missing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitsup.environment.recipe import Recipe
from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.host.bootstrap import covers, denied, open_beneath

FICLONE = 0x40049409  # ioctl(2): share the source's blocks (btrfs, XFS, bcachefs, ...)
_NO_CLONE = {errno.EOPNOTSUPP, errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.EPERM, errno.ENOSYS}
STATE_FILE = "included.json"


@dataclass(frozen=True)
class Source:
    """One include entry as the main checkout has it: `kind` dir, file or missing."""

    path: str
    source: str  # its real path in the main checkout ("" when missing)
    kind: str


@dataclass
class Resolution:
    sources: list[Source] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


@dataclass
class Included:
    """What a worktree got: per entry its method (overlay, reflink, copy, missing), the bytes
    and files copied and the time it took; the refused entries; the overlays the sandbox
    description carries (`include`)."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    overlays: list[dict[str, str]] = field(default_factory=list)
    fresh: bool = True  # made now (not read back from an earlier start)

    def report(self) -> dict[str, Any]:
        return {"include": list(self.entries), "refused": list(self.refused)}

    def to_data(self) -> dict[str, Any]:
        return {**self.report(), "overlays": self.overlays}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Included:
        return cls(
            entries=list(data.get("include", [])),
            refused=list(data.get("refused", [])),
            overlays=list(data.get("overlays", [])),
            fresh=False,
        )


def resolve(main: GitRepo, recipe: Recipe, deny: Sequence[str]) -> Resolution:
    """Each include entry of `recipe` as the main checkout `main` has it; `deny`: the globs no
    task may reach (gitsup.host.sandbox.protected_globs)."""
    out = Resolution(refused=list(recipe.refused))
    if not recipe.include:
        return out
    top = os.path.realpath(main.workdir)
    git_dirs = [os.path.realpath(main.common_dir), os.path.realpath(main.git_dir)]
    for rel in recipe.include:
        full = os.path.join(top, rel)
        if not os.path.lexists(full):
            out.sources.append(Source(rel, "", "missing"))
            continue
        real = os.path.realpath(full)
        if not real.startswith(top + "/") or any(_under(real, g) for g in git_dirs):
            out.refused.append(
                f"include {rel}: leads out of the main checkout through a link; not applied"
            )
            continue
        if denied(real, list(deny)) or covers(real, list(deny)):
            out.refused.append(
                f"include {rel}: a protected path (credentials, gitsup's keys); not applied"
            )
            continue
        st = os.stat(real)
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else ""
        if not kind:
            out.refused.append(f"include {rel}: neither a directory nor a file; not applied")
            continue
        state = main.path_state(os.path.relpath(real, top))
        if state == "tracked":
            out.refused.append(
                f"include {rel}: tracked in the main checkout (a task's checkout has it); "
                "not applied"
            )
            continue
        if state != "ignored":
            out.refused.append(
                f"include {rel}: not ignored by the main checkout (the task would commit it); "
                "not applied"
            )
            continue
        out.sources.append(Source(rel, real, kind))
    return out


def prepare(res: Resolution, *, worktree: Path, state: Path, overlay: bool) -> Included:
    """Give `worktree` the resolved entries: directories as overlays when `overlay` (the
    sandbox has a mount namespace) and the kernel has overlayfs (layers under `state`), else
    copies. An entry the worktree's own checkout does not ignore, or whose path the worktree
    already holds (other than as an empty directory), is refused."""
    done = Included(refused=list(res.refused))
    overlay = overlay and overlay_available()
    root = os.path.realpath(worktree)
    state.mkdir(parents=True, exist_ok=True)
    try:
        checkout: GitRepo | None = GitRepo.open(root)
    except GitsupError:
        checkout = None
    for n, src in enumerate(res.sources):
        if src.kind == "missing":
            done.entries.append(
                {"path": src.path, "method": "missing", "bytes": 0, "files": 0, "ms": 0.0}
            )
            continue
        # what the main checkout ignores, the worktree's checkout (its baseline's rules) must
        # ignore too, or the task would commit it
        if checkout is not None:
            state_here = checkout.path_state(src.path, is_dir=src.kind == "dir")
            if state_here != "ignored":
                why = "tracked in" if state_here == "tracked" else "not ignored by"
                done.refused.append(
                    f"include {src.path}: {why} the task's checkout (its baseline); not applied"
                )
                continue
        t0 = time.monotonic()
        parent_rel, _, name = src.path.rpartition("/")
        try:
            parent = open_beneath(root, parent_rel, create=True) if parent_rel else _open_dir(root)
        except OSError as exc:
            done.refused.append(
                f"include {src.path}: cannot reach it in the worktree ({exc.strerror}); not applied"
            )
            continue
        try:
            here = f"/proc/self/fd/{parent}/{name}"
            if not _free(here):
                done.refused.append(
                    f"include {src.path}: the task's worktree has it already; not applied"
                )
                continue
            if src.kind == "dir" and overlay:
                layer = state / str(n)
                shutil.rmtree(layer, ignore_errors=True)
                (layer / "upper").mkdir(parents=True)
                (layer / "work").mkdir()
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=parent)
                relocated = relocate_scripts(
                    src.source, os.path.join(root, src.path), layer / "upper"
                )
                done.overlays.append(
                    {
                        "lower": src.source,
                        "upper": str(layer / "upper"),
                        "work": str(layer / "work"),
                        "root": root,
                        "path": src.path,
                    }
                )
                method, size, files = "overlay", 0, 0
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(name, dir_fd=parent)
                size, files, method = copy_into(src.source, root, src.path)
                relocated = 0
                if src.kind == "dir":
                    dest = os.path.join(root, src.path)
                    relocated = relocate_scripts(src.source, dest, Path(dest))
        except (OSError, GitsupError) as exc:
            why = exc.message if isinstance(exc, GitsupError) else exc.strerror or str(exc)
            done.refused.append(f"include {src.path}: {why}; not applied")
            continue
        finally:
            os.close(parent)
        ms = round((time.monotonic() - t0) * 1000, 1)
        entry: dict[str, Any] = {
            "path": src.path,
            "method": method,
            "bytes": size,
            "files": files,
            "ms": ms,
        }
        if relocated:
            entry["relocated"] = relocated
        done.entries.append(entry)
    return done


def made_before(state: Path) -> Included | None:
    """What an earlier start of the task made (kept in `state`), if anything."""
    try:
        data = json.loads((state / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return Included.from_data(data) if isinstance(data, dict) else None


def for_task(
    main: GitRepo,
    recipe: Recipe,
    *,
    worktree: Path,
    state: Path,
    overlay: bool,
    deny: Sequence[str],
) -> Included:
    """A task's include, resolved from `recipe` and made now, kept in `state` so that a later
    start of the same task (a takeover) finds it (`made_before`)."""
    done = prepare(resolve(main, recipe, deny), worktree=worktree, state=state, overlay=overlay)
    from gitsup.host.fsutil import atomic_write

    atomic_write(state / STATE_FILE, json.dumps(done.to_data()).encode())
    return done


def overlay_available() -> bool:
    """Whether this kernel has overlayfs (built in, loaded, or a module a mount loads)."""
    try:
        if "\toverlay\n" in Path("/proc/filesystems").read_text():
            return True
    except OSError:
        return False
    return Path("/lib/modules", os.uname().release, "kernel", "fs", "overlayfs").is_dir()


def remove_layers(state: Path) -> bool:
    """Remove a task's include layers (what its processes wrote there) with its worktree;
    whether there were any."""
    if not state.exists():
        return False
    shutil.rmtree(state, ignore_errors=True)
    return True


_VENV_PYTHON = re.compile(rb"(/[^\s\"'\x00]+)/bin/python[0-9.]*(?=[\s\"']|$)")


def relocate_scripts(source: str, dest: str, into: Path) -> int:
    """A Python virtual environment (a directory with `pyvenv.cfg`) names itself by absolute
    path in its `bin/`: each console script's `#!<venv>/bin/python` and the activate scripts'
    `VIRTUAL_ENV`. In a task those are the main checkout's paths, which the sandbox hides
    (`.venv/bin/pytest`: not found), and would be the main checkout's environment, not the
    task's. Write each such file of `source/bin`, with the venv's path replaced by `dest`
    (where the task sees the entry), to `into/bin` (the overlay's upper layer, or the copy
    itself), keeping its mode, owner and times. Returns how many files were rewritten."""
    if not os.path.isfile(os.path.join(source, "pyvenv.cfg")):
        return 0
    bindir = os.path.join(source, "bin")
    out_dir = into / "bin"
    if os.path.islink(bindir) or os.path.islink(out_dir):  # never written through a link
        return 0
    try:
        entries = sorted(os.scandir(bindir), key=lambda e: e.name)
    except OSError:
        return 0
    real = os.path.realpath(source)
    found: list[tuple[str, bytes, os.stat_result]] = []
    prefixes = {real.encode()}
    for e in entries:
        st = e.stat(follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
            continue
        with open(e.path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            continue
        for m in _VENV_PYTHON.finditer(data):
            if os.path.realpath(os.fsdecode(m.group(1))) == real:
                prefixes.add(m.group(1))
        found.append((e.name, data, st))
    ends = rb"(?=[/\s\"':]|$)"
    pattern = re.compile(
        b"("
        + b"|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True))
        + b")"
        + ends
    )
    count = 0
    for name, data, st in found:
        new = pattern.sub(os.fsencode(dest).replace(b"\\", b"\\\\"), data)
        if new == data:
            continue
        if not out_dir.is_dir():
            bst = os.stat(bindir)
            out_dir.mkdir(parents=True)
            os.chmod(out_dir, stat.S_IMODE(bst.st_mode))
            with contextlib.suppress(PermissionError):  # another user's: ours then
                os.chown(out_dir, bst.st_uid, bst.st_gid)
        tmp = out_dir / f".{name}.gitsup-new"
        tmp.write_bytes(new)
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        with contextlib.suppress(PermissionError):
            os.chown(tmp, st.st_uid, st.st_gid)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, out_dir / name)
        count += 1
    return count


def identity(src: Source) -> str:
    """What changes when the main checkout's copy of an include entry changes, for the
    queue's memo of check results (gitsup/tasks/queue_checks.py): of a directory, a hash of
    every entry's path, type, mode, size, modification time and inode below it (metadata
    only: a `stat` per entry, nothing read; `npm ci`, `pip install`, an edited file or a
    replaced tree all change it); of a file, a hash of its content; `missing` when absent."""
    import hashlib

    if src.kind == "missing":
        return "missing"
    h = hashlib.sha256()
    if src.kind == "file":
        with contextlib.suppress(OSError), open(src.source, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return "file:" + h.hexdigest()
    top = os.lstat(src.source)
    h.update(f".\0{top.st_mode}\0{top.st_mtime_ns}\0{top.st_ino}\n".encode())
    stack = [src.source]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            h.update(f"{d}\0unreadable\n".encode())
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            rel = os.path.relpath(e.path, src.source)
            h.update(
                f"{rel}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode(
                    "utf-8", "surrogateescape"
                )
            )
            if stat.S_ISDIR(st.st_mode):
                stack.append(e.path)
    return "dir:" + h.hexdigest()


# --- copies ---------------------------------------------------------------------------------


def copy_into(src: str, root: str, rel: str) -> tuple[int, int, str]:
    """Copy the file or directory `src` to `root/rel` (which must not exist; its parent was
    entered without following a link) with `cp -a`: links as links (never followed), modes
    and times kept; blocks shared where the file system can clone them. Returns (bytes,
    files, method: reflink or copy)."""
    from gitsup.host import proc

    dest = os.path.join(root, rel)
    parent = os.path.dirname(dest)
    if os.path.realpath(parent) != parent:
        raise OSError(errno.ELOOP, "a link on the way in the worktree")
    method = "reflink" if can_clone(src, Path(parent)) else "copy"
    res = proc.run(
        ["cp", "-a", "--reflink=auto", "--no-target-directory", "--", src, dest],
        env=proc.child_env(),
        max_output=4096,
    )
    if not res.ok:
        raise GitsupError(f"cannot copy {src} into the worktree: {res.output.strip()}")
    if os.path.isfile(src):
        return os.path.getsize(src), 1, method
    size, files = tree_size(dest)
    return size, files, method


def _copy_file(src: str, dst: str, st: os.stat_result, clone: list[bool]) -> None:
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    sfd = os.open(src, os.O_RDONLY | flags)
    try:
        dfd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | flags, 0o600)
        try:
            if not (clone[0] and _clone(sfd, dfd, clone)):
                _copy_bytes(sfd, dfd, st.st_size)
            os.fchmod(dfd, stat.S_IMODE(st.st_mode))
            os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def _clone(sfd: int, dfd: int, clone: list[bool]) -> bool:
    try:
        fcntl.ioctl(dfd, FICLONE, sfd)
        return True
    except OSError as exc:
        if exc.errno not in _NO_CLONE:
            raise
        clone[0] = False
        return False


def _copy_bytes(sfd: int, dfd: int, size: int) -> None:
    left = size
    try:
        while left > 0:
            n = os.copy_file_range(sfd, dfd, min(left, 1 << 30))
            if n == 0:
                break
            left -= n
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
        while chunk := os.read(sfd, 1 << 20):
            os.write(dfd, chunk)


# --- what `git sup env show` says -----------------------------------------------------------


def tree_size(path: str, limit: int = 2_000_000) -> tuple[int, int]:
    """(bytes, files) below `path` (links not followed; at most `limit` entries looked at)."""
    size = files = seen = 0
    stack = [path]
    while stack and seen < limit:
        p = stack.pop()
        try:
            st = os.lstat(p)
        except OSError:
            continue
        seen += 1
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError), os.scandir(p) as it:
                stack.extend(e.path for e in it)
        elif stat.S_ISREG(st.st_mode):
            size, files = size + st.st_size, files + 1
    return size, files


def can_clone(src: str, dst_dir: Path) -> bool:
    """Whether a file of the tree `src` can be cloned (FICLONE) into `dst_dir` (tried on one
    file, removed again)."""
    first = src if os.path.isfile(src) else _first_file(src)
    if first is None or not dst_dir.is_dir():
        return False
    probe = dst_dir / f".gitsup-clone-probe-{os.getpid()}"
    clone = [True]
    try:
        _copy_file(first, str(probe), os.lstat(first), clone)
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return clone[0]


def _first_file(path: str, limit: int = 1000) -> str | None:
    stack, seen = [path], 0
    while stack and seen < limit:
        p = stack.pop()
        seen += 1
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size:
            return p
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError), os.scandir(p) as it:
                stack.extend(e.path for e in it)
    return None


def _open_dir(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def _free(path: str) -> bool:
    """Nothing there, or an empty directory (not a link)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode):
        return False
    with os.scandir(path) as it:
        return next(it, None) is None


def _under(p: str, d: str) -> bool:
    return p == d or p.startswith(d.rstrip("/") + "/")


def union(lists: Iterable[Sequence[str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for lst in lists for p in lst))
