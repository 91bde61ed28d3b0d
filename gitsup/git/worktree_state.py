"""The state of a task worktree: status, snapshot trees (with what was left out and why),
and the bounded evidence of a candidate."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import FileStatus

from gitsup.errors import GitsupError
from gitsup.git.types import CommitInfo, Evidence, UntrackedFile
from gitsup.ids import Oid

if TYPE_CHECKING:
    from gitsup.git.repo import GitRepo


class WorkingTree:
    """The state of a task worktree: status, snapshots of its files, and the evidence a
    reviewer reads. Part of a `GitRepo` (`repo.working_tree`), whose methods of the same
    names call these."""

    def __init__(self, git: GitRepo) -> None:
        self._git = git
        self._repo = git._repo

    # --- working tree state (of a task worktree) ------------------------------------

    def status_entries(self) -> dict[str, int]:
        return {k: int(v) for k, v in self._repo.status(untracked_files="all").items()}

    def dirty_paths(self) -> set[str]:
        """Paths with uncommitted changes (untracked included, ignored not)."""
        return {
            p
            for p, flags in self._repo.status(untracked_files="all").items()
            if flags != FileStatus.CURRENT and not flags & FileStatus.IGNORED
        }

    def path_state(self, rel: str, *, is_dir: bool | None = None) -> str:
        """How this checkout's Git sees `rel` (a file or a directory; `is_dir` None: as it is
        on disk): `tracked` when its index holds it or a path below it, `ignored` when its
        ignore rules exclude it, else `untracked`."""
        prefix = rel + "/"
        for entry in self._repo.index:
            if entry.path == rel or entry.path.startswith(prefix):
                return "tracked"
        if is_dir is None:
            full = self._git.workdir / rel
            is_dir = full.is_dir() and not full.is_symlink()
        probe = prefix if is_dir else rel
        try:
            ignored = bool(self._repo.path_is_ignored(probe))
        except pygit2.GitError as exc:
            raise GitsupError(
                f"cannot read the ignore rules of {self._git.workdir}: {exc}"
            ) from exc
        return "ignored" if ignored else "untracked"

    def is_clean(self) -> bool:
        try:
            status = self._repo.status(untracked_files="all")
        except pygit2.GitError as exc:
            raise GitsupError(f"cannot read the status of {self._git.workdir}: {exc}") from exc
        for flags in status.values():
            if flags & FileStatus.IGNORED:
                continue
            if flags != FileStatus.CURRENT:
                return False
        return True

    def snapshot_tree(
        self,
        *,
        include_untracked: bool,
        max_file_bytes: int | None = None,
        baseline: Oid | None = None,
        omitted: list[dict[str, object]] | None = None,
    ) -> Oid:
        """A tree of the worktree as it is on disk (tracked files, optionally untracked
        regular files and symlinks), written without touching the real index or files.

        With `include_untracked`: the working files of nested repositories are captured
        (their .git is not), and with `baseline` so are files ignored only by ignore rules
        that are not in the baseline (a .gitignore the worker added or extended). What is
        left out is appended to `omitted` as {"path", "bytes", "why", "blocks_discard"}:
        untracked files over `max_file_bytes`, nested repositories' .git directories,
        files the baseline's own ignore rules (or info/exclude, core.excludesFile) ignore, and
        regular files with more than one hard link (never read: their other name may be a file
        the worker may not read), or replaced while being read.
        """
        try:
            return self._snapshot_tree(include_untracked, max_file_bytes, baseline, omitted)
        except pygit2.GitError as exc:  # e.g. a corrupt object in the HEAD tree
            raise GitsupError(f"cannot snapshot {self._git.workdir}: {exc}") from exc

    def _snapshot_tree(
        self,
        include_untracked: bool,
        max_file_bytes: int | None,
        baseline: Oid | None,
        omitted: list[dict[str, object]] | None,
    ) -> Oid:
        repo = self._repo
        workdir = Path(self._git.workdir)
        idx = pygit2.Index()
        if not repo.head_is_unborn:
            idx.read_tree(repo.head.peel(pygit2.Commit).tree)
        real = repo.index
        real.read()
        for entry in real:
            idx.add(pygit2.IndexEntry(entry.path, entry.id, entry.mode))
        skipped: list[dict[str, object]] = []

        def add_file(rel: str, full: Path, st: os.stat_result, new: bool) -> None:
            if stat.S_ISLNK(st.st_mode):
                blob = repo.create_blob(os.fsencode(os.readlink(full)))
                mode = pygit2.enums.FileMode.LINK
            elif stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    # never read: its other name may be a file the worker may not read (the
                    # content lives on there, so losing it here loses nothing)
                    item = _omitted(rel, st.st_size, hard_link_reason(st.st_nlink))
                    item["blocks_discard"] = False
                    skipped.append(item)
                    return
                if new and max_file_bytes is not None and st.st_size > max_file_bytes:
                    skipped.append(
                        _omitted(rel, st.st_size, f"larger than the {max_file_bytes}-byte limit")
                    )
                    return
                read = _blob_unlinked(repo, full, st)
                if read is None:  # replaced, or linked, since the lstat: not read
                    skipped.append(_omitted(rel, st.st_size, "replaced while being read"))
                    return
                blob = read
                mode = (
                    pygit2.enums.FileMode.BLOB_EXECUTABLE
                    if st.st_mode & 0o111
                    else pygit2.enums.FileMode.BLOB
                )
            else:
                return
            idx.add(pygit2.IndexEntry(rel, blob, mode))

        def add_dir(rel: str) -> None:
            """Every file under an untracked directory (a nested repository's, or an
            ignored one's), without any .git inside it."""
            base = workdir / rel
            for dirpath, dirnames, filenames in os.walk(base):
                here = Path(dirpath)
                if ".git" in dirnames or ".git" in filenames:
                    dot = here / ".git"
                    skipped.append(
                        _omitted(
                            _rel(dot, workdir),
                            _du(dot),
                            "history of a nested repository (its .git)",
                        )
                    )
                    dirnames[:] = [d for d in dirnames if d != ".git"]
                    filenames = [f for f in filenames if f != ".git"]
                links = [d for d in dirnames if os.path.islink(here / d)]
                dirnames[:] = sorted(d for d in dirnames if d not in links)
                for name in sorted([*filenames, *links]):
                    full = here / name
                    try:
                        st = os.lstat(full)
                    except OSError:
                        continue
                    add_file(_rel(full, workdir), full, st, True)

        ignored: list[str] = []
        statuses = repo.status(untracked_files="all", ignored=include_untracked)
        for rel, flags in statuses.items():
            if flags & FileStatus.IGNORED:
                ignored.append(rel)
                continue
            if flags & FileStatus.WT_NEW and not include_untracked:
                continue
            if flags & (FileStatus.WT_DELETED | FileStatus.INDEX_DELETED) and not os.path.lexists(
                workdir / rel
            ):
                if rel in idx:
                    idx.remove(rel)
                continue
            if flags & (
                FileStatus.WT_NEW
                | FileStatus.WT_MODIFIED
                | FileStatus.WT_TYPECHANGE
                | FileStatus.WT_RENAMED
                | FileStatus.INDEX_NEW
                | FileStatus.INDEX_MODIFIED
            ):
                full = workdir / rel.rstrip("/")
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    add_dir(rel.rstrip("/"))  # a nested repository
                else:
                    add_file(rel, full, st, bool(flags & FileStatus.WT_NEW))
        if ignored:
            for rel, by_baseline in self._ignore_sources(ignored, baseline):
                path = rel.rstrip("/")
                if by_baseline:
                    item = _omitted(
                        path, _du(workdir / path), "ignored by the baseline's ignore rules"
                    )
                    item["blocks_discard"] = False
                    skipped.append(item)
                    continue
                try:
                    st = os.lstat(workdir / path)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    add_dir(path)
                else:
                    add_file(path, workdir / path, st, True)
        if omitted is not None:
            omitted.extend(sorted(skipped, key=lambda i: str(i["path"])))
        return Oid(str(idx.write_tree(repo)))

    def _ignore_sources(self, paths: Sequence[str], baseline: Oid | None) -> list[tuple[str, bool]]:
        """For each ignored path: whether a rule the baseline already had ignores it.
        Without a baseline every ignore counts as the baseline's."""
        if baseline is None:
            return [(p, True) for p in paths]
        from gitsup.host import proc

        res = proc.run(
            ["git", "check-ignore", "-v", "-z", "--no-index", "--stdin"],
            cwd=self._git.workdir,
            env=proc.child_env(),
            input=b"".join(os.fsencode(p) + b"\0" for p in paths),
            max_output=16 * 1024 * 1024,
            merge_stderr=False,
        )
        fields = res.output.split("\0")
        source_of: dict[str, tuple[str, str]] = {}
        for i in range(0, len(fields) - 3, 4):
            src, _line, pattern, path = fields[i : i + 4]
            source_of[path] = (src, pattern)
        tree = self._repo[pygit2.Oid(hex=baseline)].peel(pygit2.Commit).tree
        cache: dict[str, set[str]] = {}
        out = []
        for p in paths:
            src, pattern = source_of.get(p, ("", ""))
            if not src or os.path.isabs(src) or src.startswith(".git/"):
                out.append((p, True))  # info/exclude, core.excludesFile, or unknown
                continue
            if src not in cache:
                try:
                    obj = self._repo[tree[src].id]
                except (KeyError, ValueError):
                    obj = None
                text = obj.data.decode("utf-8", "replace") if isinstance(obj, pygit2.Blob) else ""
                cache[src] = {ln.strip() for ln in text.splitlines()}
            out.append((p, pattern.strip() in cache[src]))
        return out

    def untracked_paths(self) -> list[str]:
        return sorted(
            p for p, f in self._repo.status(untracked_files="all").items() if f & FileStatus.WT_NEW
        )

    def evidence(
        self,
        baseline: Oid,
        *,
        max_diff_bytes: int = 512 * 1024,
        max_untracked_files: int = 50,
        max_untracked_bytes: int = 64 * 1024,
        max_commits: int = 200,
    ) -> Evidence:
        """Baseline-relative view of this worktree: committed + staged + unstaged changes,
        commits since the baseline, untracked regular files. Bounded; `complete` says
        whether anything was cut."""
        repo = self._repo
        truncated: list[str] = []
        base_commit = repo[pygit2.Oid(hex=baseline)].peel(pygit2.Commit)
        head = None if repo.head_is_unborn else Oid(str(repo.head.target))
        # Baseline tree against a snapshot of the worktree's tracked files (committed,
        # staged and unstaged at once); untracked files are listed separately, bounded.
        unread: list[dict[str, object]] = []
        snapshot = self.snapshot_tree(include_untracked=False, omitted=unread)
        # a changed tracked file that was not read (a hard link) is not in the diff
        truncated += [f"{i['path']}: {i['why']}" for i in unread]
        diff = base_commit.tree.diff_to_tree(repo[pygit2.Oid(hex=snapshot)].peel(pygit2.Tree))
        patch = diff.patch or ""
        stats = diff.stats.format(pygit2.enums.DiffStatsFormat.FULL, 80) if diff.deltas else ""
        raw = patch.encode("utf-8", "replace")
        if len(raw) > max_diff_bytes:
            patch = raw[:max_diff_bytes].decode("utf-8", "ignore") + "\n[diff truncated]\n"
            truncated.append(f"diff: {len(raw)} bytes, kept {max_diff_bytes}")
        commits: list[CommitInfo] = []
        if head is not None:
            commits = self._git.commits_between(baseline, head, limit=max_commits + 1)
            if len(commits) > max_commits:
                commits = commits[:max_commits]
                truncated.append(f"commits: more than {max_commits}")
        untracked: list[UntrackedFile] = []
        workdir = Path(self._git.workdir)
        paths = self.untracked_paths()
        if len(paths) > max_untracked_files:
            truncated.append(f"untracked: {len(paths)} files, kept {max_untracked_files}")
            paths = paths[:max_untracked_files]
        for rel in paths:
            untracked.append(read_bounded_file(workdir, rel, max_untracked_bytes, truncated))
        return Evidence(
            baseline=baseline,
            head=head,
            diff=patch,
            diff_stat=stats,
            commits=commits,
            untracked=untracked,
            complete=not truncated,
            truncated=truncated,
        )


def _blob_unlinked(repo: pygit2.Repository, full: Path, st: os.stat_result) -> pygit2.Oid | None:
    """The blob of the regular file `st` describes, read through its own descriptor; None when
    what is there now is another file, not a regular one, or has a second hard link."""
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        now = os.fstat(fd)
        if (
            (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)
            or not stat.S_ISREG(now.st_mode)
            or now.st_nlink > 1
        ):
            return None
        return repo.create_blob_fromiobase(fh)


def hard_link_reason(links: int) -> str:
    """Why a file with more than one hard link is not read: its other name may be anywhere
    on the file system (a worker's link to a file it may not read itself)."""
    return f"hard link ({links} links): not read"


def read_bounded_file(root: Path, rel: str, limit: int, truncated: list[str]) -> UntrackedFile:
    """Read a file under root without following symlinks or escaping root; a file with more
    than one hard link is marked and not read."""
    full = root / rel
    if not _is_within(Path(os.path.normpath(full)), root):
        truncated.append(f"{rel}: escapes the worktree")
        return UntrackedFile(rel, 0, None, "escapes the worktree")
    try:
        st = os.lstat(full)
    except OSError as exc:
        return UntrackedFile(rel, 0, None, f"unreadable: {exc.strerror}")
    if stat.S_ISLNK(st.st_mode):
        return UntrackedFile(rel, 0, None, "symlink (not followed)")
    if not stat.S_ISREG(st.st_mode):
        return UntrackedFile(rel, 0, None, "not a regular file")
    if st.st_nlink > 1:
        truncated.append(f"{rel}: {hard_link_reason(st.st_nlink)}")
        return UntrackedFile(rel, st.st_size, None, hard_link_reason(st.st_nlink))
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return UntrackedFile(rel, st.st_size, None, f"unreadable: {exc.strerror}")
    with os.fdopen(fd, "rb") as fh:
        # what was opened, not what lstat saw: a link made in between is not read either
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            return UntrackedFile(rel, st.st_size, None, "replaced while being read")
        if now.st_nlink > 1:
            truncated.append(f"{rel}: {hard_link_reason(now.st_nlink)}")
            return UntrackedFile(rel, now.st_size, None, hard_link_reason(now.st_nlink))
        data = fh.read(limit + 1)
    if len(data) > limit:
        truncated.append(f"{rel}: {st.st_size} bytes, kept {limit}")
        data = data[:limit]
    if b"\0" in data:
        return UntrackedFile(rel, st.st_size, None, "binary")
    return UntrackedFile(rel, st.st_size, data.decode("utf-8", "replace"))


WIP_MAX_FILE_BYTES = 8 * 1024 * 1024


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _omitted(path: str, size: int, why: str) -> dict[str, object]:
    return {"path": path, "bytes": size, "why": why, "blocks_discard": True}


def _du(path: Path, limit: int = 100_000) -> int:
    """Bytes under `path` (a file or a directory), counting at most `limit` entries."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    total, seen = 0, 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            seen += 1
            if seen > limit:
                return total
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True
