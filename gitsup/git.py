"""The Git gateway: the only module that imports pygit2.

Everything gitsup keeps in Git goes through here: refs under `refs/sup/`
(compare-and-swap, with reflog messages), the `refs/notes/sup` notes, the
sealed event-log commit chain, task worktrees, and the read-only views that
make up a candidate's evidence. The user's own checkout and index are never
touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from pygit2.enums import FileStatus, SortMode

from gitsup.errors import GitsupError
from gitsup.ids import Oid

NOTES_REF = "refs/notes/sup"
SUP_REF_PREFIX = "refs/sup/"
_ZERO = "0" * 40


class RefConflict(GitsupError):
    """A compare-and-swap ref update found another value than expected."""


@dataclass(frozen=True)
class CommitInfo:
    oid: Oid
    summary: str
    author: str
    time: int
    parents: tuple[Oid, ...]


@dataclass(frozen=True)
class UntrackedFile:
    path: str
    size: int
    content: str | None  # None when skipped (too big, binary, not a regular file)
    skipped: str | None = None


@dataclass
class Evidence:
    """What a reviewer needs to judge a task's work, bounded."""

    baseline: Oid
    head: Oid | None
    diff: str
    diff_stat: str
    commits: list[CommitInfo]
    untracked: list[UntrackedFile]
    complete: bool
    truncated: list[str] = field(default_factory=list)


def _sig(repo: pygit2.Repository) -> pygit2.Signature:
    try:
        return repo.default_signature
    except (KeyError, pygit2.GitError):
        return pygit2.Signature("gitsup", "gitsup@localhost", int(time.time()), 0)


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


class GitRepo:
    """A non-bare repository (or one of its linked worktrees), opened with pygit2."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self._repo = repo

    # --- opening ------------------------------------------------------------------

    @classmethod
    def discover(cls, start: str | os.PathLike[str] = ".") -> GitRepo:
        start_path = os.path.abspath(os.fspath(start))
        found = pygit2.discover_repository(start_path)
        if found is None:
            raise GitsupError(
                f"not a Git repository: {start_path}",
                hint="run git sup inside a Git checkout, or `git init` one first",
            )
        return cls.open(found)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> GitRepo:
        try:
            repo = pygit2.Repository(os.fspath(path))
        except pygit2.GitError as exc:
            raise GitsupError(f"cannot open Git repository {os.fspath(path)}: {exc}") from exc
        return cls(repo)

    @classmethod
    def open_task(cls, git_dir: Path, worktree: Path | None) -> GitRepo:
        """A task's private repository with its files in `worktree`, opened from the path
        the supervisor knows: the worktree's `.git` file (worker-writable) is not read.
        Without a worktree: only its refs and objects."""
        if worktree is not None and not worktree.is_dir():
            raise GitsupError(f"worktree {worktree} does not exist")
        try:
            repo = pygit2.Repository(os.fspath(git_dir), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
            if worktree is not None:
                repo.workdir = os.fspath(worktree)
        except (pygit2.GitError, OSError) as exc:
            raise GitsupError(f"cannot open the task's Git dir {git_dir}: {exc}") from exc
        return cls(repo)

    # --- locations ----------------------------------------------------------------

    @property
    def is_bare(self) -> bool:
        return bool(self._repo.is_bare)

    @property
    def git_dir(self) -> Path:
        return Path(self._repo.path).resolve()

    @property
    def common_dir(self) -> Path:
        """$GIT_COMMON_DIR: shared by the main checkout and every linked worktree."""
        git_dir = self.git_dir
        commondir_file = git_dir / "commondir"
        if commondir_file.is_file():
            target = commondir_file.read_text().strip()
            return (git_dir / target).resolve()
        return git_dir

    @property
    def workdir(self) -> Path:
        wd = self._repo.workdir
        if wd is None:
            raise GitsupError(f"{self.git_dir} is a bare repository; gitsup needs a checkout")
        return Path(wd).resolve()

    @property
    def main_workdir(self) -> Path:
        """The main checkout's top directory (not a linked worktree's)."""
        common = self.common_dir
        if common.name == ".git":
            return common.parent
        return Path(GitRepo.open(common).workdir)

    def require_checkout(self) -> None:
        if self.is_bare:
            raise GitsupError(
                f"{self.git_dir} is a bare repository",
                hint="gitsup runs tasks in worktrees of a non-bare repository; clone it first",
            )

    # --- config -------------------------------------------------------------------

    def config_get(self, key: str) -> str | None:
        try:
            value = self._repo.config[key]
        except KeyError:
            return None
        return str(value)

    def config_get_all(self, key: str) -> list[str]:
        try:
            return [str(v) for v in self._repo.config.get_multivar(key)]
        except (KeyError, pygit2.GitError):
            return []

    def config_set(self, key: str, value: str) -> None:
        self._repo.config[key] = value

    def config_set_multi(self, key: str, values: Sequence[str]) -> None:
        cfg = self._repo.config
        with contextlib.suppress(KeyError, pygit2.GitError):
            cfg.delete_multivar(key, ".*")
        for v in values:
            cfg.set_multivar(key, "^$", v)

    def config_add(self, key: str, value: str) -> None:
        self._repo.config.set_multivar(key, "^$", value)

    # --- commits and refs -----------------------------------------------------------

    def head_commit(self) -> Oid:
        if self._repo.head_is_unborn:
            raise GitsupError(
                "HEAD has no commit yet (unborn branch)",
                hint="commit something first; a task is anchored to a commit",
            )
        return Oid(str(self._repo.head.target))

    def head_branch(self) -> str | None:
        """Short name of the checked-out branch, or None when detached/unborn."""
        if self._repo.head_is_unborn or self._repo.head_is_detached:
            return None
        return str(self._repo.head.shorthand)

    def resolve_commit(self, rev: str) -> Oid:
        if rev == "HEAD":
            return self.head_commit()
        try:
            obj = self._repo.revparse_single(rev)
            commit = obj.peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as exc:
            raise GitsupError(
                f"cannot resolve {rev!r} to a commit",
                hint="pass --base a branch, tag or commit id that exists in this repository",
            ) from exc
        return Oid(str(commit.id))

    def ref_target(self, name: str) -> Oid | None:
        try:
            ref = self._repo.references[name]
        except (KeyError, pygit2.InvalidSpecError):
            return None
        ref = ref.resolve()
        return Oid(str(ref.target))

    def update_ref(self, name: str, new: Oid, *, old: Oid | None, message: str) -> None:
        """Compare-and-swap: move `name` from `old` (None: must not exist) to `new`."""
        refs = self._repo.references
        if name.startswith(SUP_REF_PREFIX):
            # core.logAllRefUpdates logs only heads/remotes/notes; an existing log file
            # makes libgit2 keep the reflog message of refs/sup/ too.
            with contextlib.suppress(OSError):
                log = self.common_dir / "logs" / name
                log.parent.mkdir(parents=True, exist_ok=True)
                log.touch(exist_ok=True)
        try:
            if old is None:
                try:
                    self._repo.create_reference_direct(
                        name, pygit2.Oid(hex=new), False, message=message
                    )
                except pygit2.AlreadyExistsError as exc:
                    raise RefConflict(f"{name} already exists") from exc
                return
            try:
                ref = refs[name]
            except KeyError as exc:
                raise RefConflict(f"{name} does not exist (expected {old[:12]})") from exc
            if str(ref.target) != old:
                raise RefConflict(f"{name} is at {str(ref.target)[:12]}, expected {old[:12]}")
            # libgit2 re-checks the old value under the ref lock (conditional update).
            ref.set_target(pygit2.Oid(hex=new), message)
        except (pygit2.GitError, OSError) as exc:  # OSError: another writer holds the ref lock
            raise RefConflict(f"cannot update {name}: {exc}") from exc

    def delete_ref(self, name: str, *, old: Oid | None = None) -> None:
        try:
            ref = self._repo.references[name]
        except KeyError:
            return
        if old is not None and str(ref.target) != old:
            raise RefConflict(f"{name} moved to {str(ref.target)[:12]}; not deleting")
        ref.delete()

    def is_ancestor(self, ancestor: Oid, descendant: Oid) -> bool:
        if ancestor == descendant:
            return True
        return bool(self._repo.descendant_of(pygit2.Oid(hex=descendant), pygit2.Oid(hex=ancestor)))

    def ahead_behind(self, local: Oid, upstream: Oid) -> tuple[int, int]:
        a, b = self._repo.ahead_behind(pygit2.Oid(hex=local), pygit2.Oid(hex=upstream))
        return int(a), int(b)

    def commit_info(self, oid: Oid) -> CommitInfo:
        c = self._repo[pygit2.Oid(hex=oid)].peel(pygit2.Commit)
        return CommitInfo(
            oid=Oid(str(c.id)),
            summary=c.message.split("\n", 1)[0],
            author=f"{c.author.name} <{c.author.email}>",
            time=int(c.commit_time),
            parents=tuple(Oid(str(p)) for p in c.parent_ids),
        )

    def commits_between(self, base: Oid, head: Oid, limit: int = 1000) -> list[CommitInfo]:
        """Commits reachable from head and not from base, newest first."""
        walker = self._repo.walk(pygit2.Oid(hex=head), SortMode.TOPOLOGICAL | SortMode.TIME)
        walker.hide(pygit2.Oid(hex=base))
        out: list[CommitInfo] = []
        for c in walker:
            if len(out) >= limit:
                break
            out.append(self.commit_info(Oid(str(c.id))))
        return out

    def branch_target(self, branch: str) -> Oid | None:
        return self.ref_target(f"refs/heads/{branch}")

    def create_branch(self, branch: str, target: Oid) -> None:
        try:
            self._repo.branches.local.create(
                branch, self._repo[pygit2.Oid(hex=target)].peel(pygit2.Commit)
            )
        except pygit2.AlreadyExistsError as exc:
            raise GitsupError(f"branch {branch} already exists") from exc

    def local_branches(self) -> list[str]:
        return list(self._repo.branches.local)

    def delete_branch(self, branch: str) -> None:
        b = self._repo.branches.local.get(branch)
        if b is not None:
            b.delete()

    # --- worktrees ----------------------------------------------------------------

    def add_worktree(self, name: str, path: Path, branch: str) -> None:
        """Check out `branch` into a new linked worktree at `path` (must not exist), named
        `name` (the last component of `path`, as git names it).

        `git worktree add` with parallel checkout (`checkout.workers`, unless the user set
        it): several times faster than libgit2's single-threaded checkout on a large tree.
        No hook of the user's runs (`core.hooksPath` is pointed at nothing), submodules are
        not recursed into, the user's checkout and index are not touched, and a failed or
        interrupted add leaves neither files nor a registration behind."""
        from gitsup import proc

        if path.name != name:
            raise GitsupError(f"worktree {path} must be named {path.name}, not {name}")
        if self._repo.references.get(f"refs/heads/{branch}") is None:
            raise GitsupError(f"cannot create worktree {path}: no branch {branch}")
        if os.path.lexists(path):
            raise GitsupError(f"cannot create worktree {path}: it already exists")
        argv = ["git", "-c", "core.hooksPath=/dev/null", "-c", "submodule.recurse=false"]
        if self.config_get("checkout.workers") is None:
            argv += ["-c", f"checkout.workers={checkout_workers()}"]
        argv += ["worktree", "add", "--quiet", os.fspath(path), branch]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            res = proc.run(argv, cwd=self.common_dir, env=proc.child_env(), timeout=1800)
        except (OSError, GitsupError) as exc:
            self._undo_add(name, path)
            raise GitsupError(f"cannot create worktree {path}: {exc}") from exc
        except BaseException:
            self._undo_add(name, path)
            raise
        if not res.ok:
            self._undo_add(name, path)
            why = res.output.strip() or ("timed out" if res.timed_out else f"exit {res.returncode}")
            raise GitsupError(f"cannot create worktree {path}: {why}")
        if self.worktree_name_of(path) != name:
            # git picked another name (a stale registration held this one): not ours to use.
            self._undo_add(name, path)
            raise GitsupError(
                f"cannot create worktree {path}: a registration named {name} already exists",
                hint="`git worktree prune` removes registrations whose files are gone",
            )

    def _undo_add(self, name: str, path: Path) -> None:
        """Remove what a failed add made: the files at `path` and the registration that
        points at `path` (never another one, whatever its name)."""
        with contextlib.suppress(Exception):
            registered = self.worktree_name_of(path)
            if os.path.lexists(path):
                shutil.rmtree(path)
            if registered is not None:
                self._repo.lookup_worktree(registered).prune(True)

    def worktree_names(self) -> list[str]:
        return list(self._repo.list_worktrees())

    def worktree_path(self, name: str) -> Path | None:
        try:
            wt = self._repo.lookup_worktree(name)
        except (KeyError, pygit2.GitError):
            return None
        return Path(wt.path)

    def worktree_name_of(self, path: Path) -> str | None:
        """The administrative name of the linked worktree registered at `path`."""
        want = os.path.realpath(path)
        for name in self.worktree_names():
            p = self.worktree_path(name)
            if p is not None and os.path.realpath(p) == want:
                return name
        return None

    def set_head_branch(self, branch: str) -> None:
        """Point HEAD at refs/heads/<branch> without touching the index or the files."""
        self._repo.set_head(f"refs/heads/{branch}")

    def remove_worktree(self, name: str, path: Path | None) -> None:
        """Delete the worktree's files and its administrative entry (found from the
        worktree's .git file when it has another name, e.g. a pooled worktree)."""
        if path is not None:
            # Found by its registered path: the worktree's `.git` file may point at the
            # task's private Git dir rather than at the administrative entry.
            name = self.worktree_name_of(path) or name
        if path is not None and path.exists():
            shutil.rmtree(path)
        try:
            wt = self._repo.lookup_worktree(name)
        except (KeyError, pygit2.GitError):
            return
        wt.prune(True)

    # --- integration (the person/CI side of the boundary) ------------------------------

    def checked_out_branches(self) -> dict[str, Path]:
        """Branch short name -> top directory of every checkout (main + linked) that has it."""
        out: dict[str, Path] = {}
        common = self.common_dir
        main = GitRepo.open(common)
        if not main.is_bare:
            branch = main.head_branch()
            if branch is not None:
                out[branch] = main.workdir.resolve()
        for name in self.worktree_names():
            p = self.worktree_path(name)
            if p is None or not p.exists():
                continue
            # The registration's HEAD, not the checkout's `.git` file: a task worktree's
            # `.git` points at its private Git dir, whose HEAD the worker controls.
            try:
                head = (common / "worktrees" / name / "HEAD").read_text().strip()
            except OSError:
                continue
            if head.startswith("ref: refs/heads/"):
                out.setdefault(head.removeprefix("ref: refs/heads/"), p.resolve())
        return out

    def merge_tree(self, ours: Oid, theirs: Oid) -> tuple[Oid | None, list[str]]:
        """Merge two commits in memory: (tree, []) when clean, (None, conflicted paths) otherwise."""
        index = self._repo.merge_commits(pygit2.Oid(hex=ours), pygit2.Oid(hex=theirs))
        if index.conflicts is not None:
            paths = sorted({e.path for entry in index.conflicts for e in entry if e is not None})
            return None, paths
        return Oid(str(index.write_tree(self._repo))), []

    def add_detached_worktree(self, path: Path, commit: Oid) -> None:
        """A throw-away linked worktree at `commit` (no branch), e.g. for integration checks."""
        from gitsup import proc

        res = proc.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(path), commit],
            cwd=self.common_dir,
            env=proc.child_env(),
            timeout=300,
        )
        if not res.ok:
            raise GitsupError(f"cannot create worktree {path}: {res.output.strip()}")

    def remove_detached_worktree(self, path: Path) -> None:
        from gitsup import proc

        proc.run(
            ["git", "worktree", "remove", "--force", str(path)],
            cwd=self.common_dir,
            env=proc.child_env(),
            timeout=120,
        )
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
        proc.run(["git", "worktree", "prune"], cwd=self.common_dir, env=proc.child_env())

    def advance_checkout(self, old: Oid, new: Oid) -> None:
        """Move this (clean) checkout's index and files from `old` to `new` the way
        `git merge --ff-only` does (`read-tree -m -u`: refuses to lose local changes)."""
        from gitsup import proc

        env = proc.child_env()
        proc.run(["git", "update-index", "-q", "--refresh"], cwd=self.workdir, env=env)
        res = proc.run(
            ["git", "read-tree", "-m", "-u", old, new], cwd=self.workdir, env=env, timeout=300
        )
        if not res.ok:
            raise GitsupError(f"cannot update the checkout {self.workdir}: {res.output.strip()}")

    # --- blobs, trees, commits for gitsup's own records ------------------------------

    def append_segment(
        self,
        ref: str,
        *,
        name: str,
        data: bytes,
        message: str,
        expected_old: Oid | None,
    ) -> Oid:
        """Add one blob `name` to the tree of `ref`'s tip as a new commit (CAS update).

        Cost is one blob, one tree (entries = number of segments) and one commit.
        """
        repo = self._repo
        blob = repo.create_blob(data)
        if expected_old is not None:
            parent = repo[pygit2.Oid(hex=expected_old)].peel(pygit2.Commit)
            builder = repo.TreeBuilder(parent.tree)
            parents = [parent.id]
        else:
            builder = repo.TreeBuilder()
            parents = []
        builder.insert(name, blob, pygit2.enums.FileMode.BLOB)
        tree = builder.write()
        sig = _sig(repo)
        commit = repo.create_commit(None, sig, sig, message, tree, parents)
        self.update_ref(ref, Oid(str(commit)), old=expected_old, message=message.split("\n")[0])
        return Oid(str(commit))

    def commit_message(self, oid: Oid) -> str:
        return str(self._repo[pygit2.Oid(hex=oid)].peel(pygit2.Commit).message)

    def tree_has_file(self, commit: Oid, path: str) -> bool:
        """Whether `path` (relative, `/`-separated) names a file in the commit's tree."""
        tree = self._repo[pygit2.Oid(hex=commit)].peel(pygit2.Commit).tree
        try:
            entry = tree[path]
        except (KeyError, ValueError):
            return False
        return entry.type_str == "blob"

    def read_tree_blobs(self, commit: Oid) -> Iterator[tuple[str, bytes]]:
        tree = self._repo[pygit2.Oid(hex=commit)].peel(pygit2.Commit).tree
        for entry in sorted(tree, key=lambda e: e.name or ""):
            obj = self._repo[entry.id]
            if isinstance(obj, pygit2.Blob):
                yield entry.name or "", obj.data

    # --- raw objects and ref listings (a task's private Git dir, gitsup.gitstate) -------

    def has_object(self, oid: str) -> bool:
        return pygit2.Oid(hex=oid) in self._repo.odb

    def write_object(self, kind: str, data: bytes) -> Oid:
        return Oid(str(self._repo.odb.write(_OBJECT_TYPES[kind], data)))

    def direct_refs(self, prefixes: Sequence[str]) -> list[tuple[str, Oid]]:
        """(name, target) of every non-symbolic ref under `prefixes`, sorted by name."""
        out: list[tuple[str, Oid]] = []
        for name in self._repo.references:
            if not name.startswith(tuple(prefixes)):
                continue
            with contextlib.suppress(KeyError, pygit2.GitError, pygit2.InvalidSpecError):
                ref = self._repo.references[name]
                if ref.type == pygit2.enums.ReferenceType.DIRECT:
                    out.append((name, Oid(str(ref.target))))
        return sorted(out, key=lambda r: r[0].encode())

    def head_ref(self) -> tuple[str | None, Oid | None]:
        """(the ref HEAD names, or None when detached; its commit, or None when unborn)."""
        try:
            head = self._repo.references["HEAD"]
        except (KeyError, pygit2.GitError) as exc:
            raise GitsupError(f"cannot read HEAD of {self.git_dir}: {exc}") from exc
        if head.type == pygit2.enums.ReferenceType.DIRECT:
            return None, Oid(str(head.target))
        name = str(head.target)
        try:
            return name, Oid(str(head.resolve().target))
        except (KeyError, pygit2.GitError):
            return name, None

    # --- notes --------------------------------------------------------------------

    def write_note(self, target: Oid, text: str) -> None:
        sig = _sig(self._repo)
        # libgit2 reads the notes tip, commits and moves the ref without compare-and-swap:
        # concurrent writers (tasks finishing together) silently lose notes or fail on the
        # ref lock. Serialize this repository's writers and check that the note landed.
        lock = self.common_dir / "sup" / "notes.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            for attempt in range(1, 6):
                try:
                    self._repo.create_note(text, sig, sig, target, NOTES_REF, True)
                except (OSError, pygit2.GitError):
                    if attempt == 5:
                        raise
                else:
                    if self.read_note(target) == text:
                        return
                time.sleep(0.05 * attempt)
            raise GitsupError(f"the note on {target[:12]} did not stick: {NOTES_REF} kept moving")
        finally:
            os.close(fd)

    def read_note(self, target: Oid) -> str | None:
        try:
            return str(self._repo.lookup_note(target, NOTES_REF).message)
        except (KeyError, pygit2.GitError):
            return None

    def changed_paths(self, base: Oid, head: Oid) -> set[str]:
        """Paths that differ between two commits' trees (both sides of a rename)."""
        a = self._repo[pygit2.Oid(hex=base)].peel(pygit2.Commit).tree
        b = self._repo[pygit2.Oid(hex=head)].peel(pygit2.Commit).tree
        out: set[str] = set()
        for delta in a.diff_to_tree(b).deltas:
            out.add(delta.old_file.path)
            out.add(delta.new_file.path)
        return out

    def diff_size(self, base: Oid, head: Oid) -> tuple[int, int, int]:
        """(files changed, insertions, deletions) between two commits."""
        a = self._repo[pygit2.Oid(hex=base)].peel(pygit2.Commit).tree
        b = self._repo[pygit2.Oid(hex=head)].peel(pygit2.Commit).tree
        stats = a.diff_to_tree(b).stats
        return int(stats.files_changed), int(stats.insertions), int(stats.deletions)

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

    def is_clean(self) -> bool:
        try:
            status = self._repo.status(untracked_files="all")
        except pygit2.GitError as exc:
            raise GitsupError(f"cannot read the status of {self.workdir}: {exc}") from exc
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
        untracked files over `max_file_bytes`, nested repositories' .git directories, and
        files the baseline's own ignore rules (or info/exclude, core.excludesFile) ignore.
        """
        try:
            return self._snapshot_tree(include_untracked, max_file_bytes, baseline, omitted)
        except pygit2.GitError as exc:  # e.g. a corrupt object in the HEAD tree
            raise GitsupError(f"cannot snapshot {self.workdir}: {exc}") from exc

    def _snapshot_tree(
        self,
        include_untracked: bool,
        max_file_bytes: int | None,
        baseline: Oid | None,
        omitted: list[dict[str, object]] | None,
    ) -> Oid:
        repo = self._repo
        workdir = Path(self.workdir)
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
                if new and max_file_bytes is not None and st.st_size > max_file_bytes:
                    skipped.append(
                        _omitted(rel, st.st_size, f"larger than the {max_file_bytes}-byte limit")
                    )
                    return
                blob = repo.create_blob_fromdisk(str(full))
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
        from gitsup import proc

        res = proc.run(
            ["git", "check-ignore", "-v", "-z", "--no-index", "--stdin"],
            cwd=self.workdir,
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

    def commit_tree(self, tree: Oid, parents: Sequence[Oid], message: str) -> Oid:
        sig = _sig(self._repo)
        oid = self._repo.create_commit(
            None, sig, sig, message, pygit2.Oid(hex=tree), [pygit2.Oid(hex=p) for p in parents]
        )
        return Oid(str(oid))

    def tree_of(self, commit: Oid) -> Oid:
        return Oid(str(self._repo[pygit2.Oid(hex=commit)].peel(pygit2.Commit).tree.id))

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
        snapshot = self.snapshot_tree(include_untracked=False)
        diff = base_commit.tree.diff_to_tree(repo[pygit2.Oid(hex=snapshot)].peel(pygit2.Tree))
        patch = diff.patch or ""
        stats = diff.stats.format(pygit2.enums.DiffStatsFormat.FULL, 80) if diff.deltas else ""
        raw = patch.encode("utf-8", "replace")
        if len(raw) > max_diff_bytes:
            patch = raw[:max_diff_bytes].decode("utf-8", "ignore") + "\n[diff truncated]\n"
            truncated.append(f"diff: {len(raw)} bytes, kept {max_diff_bytes}")
        commits: list[CommitInfo] = []
        if head is not None:
            commits = self.commits_between(baseline, head, limit=max_commits + 1)
            if len(commits) > max_commits:
                commits = commits[:max_commits]
                truncated.append(f"commits: more than {max_commits}")
        untracked: list[UntrackedFile] = []
        workdir = Path(self.workdir)
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


def checkout_workers() -> int:
    """Parallel checkout workers for a new worktree: writing many small files is bound by
    the file system more than by the CPU, so twice the cores (at least 2, at most 16)."""
    return max(2, min(16, 2 * (os.cpu_count() or 1)))


def read_bounded_file(root: Path, rel: str, limit: int, truncated: list[str]) -> UntrackedFile:
    """Read a file under root without following symlinks or escaping root."""
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
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        return UntrackedFile(rel, st.st_size, None, f"unreadable: {exc.strerror}")
    with os.fdopen(fd, "rb") as fh:
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


def is_zero(oid: str) -> bool:
    return oid == _ZERO
