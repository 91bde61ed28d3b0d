"""The repository itself (`GitRepo`): opening, locations, config, commits and refs
(compare-and-swap), gitsup's record chains, raw objects, merges and notes. Its worktrees
(gitsup/git/worktrees.py) and their state (gitsup/git/worktree_state.py) are parts it holds;
its methods of the same names call them."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Self

import pygit2
from pygit2.enums import SortMode

from gitsup.errors import GitsupError
from gitsup.git.objectstore import _OBJECT_TYPES
from gitsup.git.types import NOTES_REF, SUP_REF_PREFIX, CommitInfo, Evidence, RefConflict, _sig
from gitsup.host.fsutil import locked
from gitsup.ids import Oid
from gitsup.layout import REPO_POLICY_DIR


def config_values_at(path: Path, key: str) -> list[str]:
    """`git config --get-all KEY` as Git sees it from the directory `path` (its repository's
    config, then the user's and the system's); empty when unset or when Git fails."""
    from gitsup.host import proc

    try:
        res = proc.run(["git", "config", "--get-all", key], cwd=path, timeout=10)
    except GitsupError:
        return []
    if not res.ok:
        return []
    return [line.strip() for line in res.output.splitlines() if line.strip()]


class GitRepo:
    """A non-bare repository (or one of its linked worktrees), opened with pygit2."""

    def __init__(self, repo: pygit2.Repository) -> None:
        from gitsup.git.worktree_state import WorkingTree
        from gitsup.git.worktrees import Worktrees

        self._repo = repo
        self.worktrees = Worktrees(self)
        self.working_tree = WorkingTree(self)

    # --- opening ------------------------------------------------------------------

    @classmethod
    def discover(cls, start: str | os.PathLike[str] = ".") -> Self:
        start_path = os.path.abspath(os.fspath(start))
        found = pygit2.discover_repository(start_path)
        if found is None:
            raise GitsupError(
                f"not a Git repository: {start_path}",
                hint="run git sup inside a Git checkout, or `git init` one first",
            )
        return cls.open(found)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Self:
        try:
            repo = pygit2.Repository(os.fspath(path))
        except pygit2.GitError as exc:
            raise GitsupError(f"cannot open Git repository {os.fspath(path)}: {exc}") from exc
        return cls(repo)

    @classmethod
    def open_task(cls, git_dir: Path, worktree: Path | None) -> Self:
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
        return Path(type(self).open(common).workdir)

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

    # --- raw objects and ref listings (a task's private Git dir, gitsup.store.taskgit) -------

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
        with self._notes_lock():
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

    def _notes_lock(self) -> contextlib.AbstractContextManager[None]:
        """Writers of `refs/notes/sup` on this machine, one at a time."""
        return locked(self.common_dir / "sup" / "notes.lock")

    def merge_notes(self, theirs: Oid) -> Oid | None:
        """Bring the notes commit `theirs` (another repository's `refs/notes/sup`, fetched)
        into this repository's notes, keeping both: a fast-forward when this one's are
        behind, else a merge commit whose tree holds every note of either side (on an object
        both annotate differently, this repository's note stays). Serialized with
        `write_note`'s writers; compare-and-swap. Returns the notes tip."""
        with self._notes_lock():
            ours = self.ref_target(NOTES_REF)
            if ours == theirs or (ours is not None and self.is_ancestor(theirs, ours)):
                return ours
            if ours is None or self.is_ancestor(ours, theirs):
                self.update_ref(NOTES_REF, theirs, old=ours, message="gitsup: notes fast-forward")
                return theirs
            repo = self._repo
            notes = dict(self._notes_of(theirs))
            notes.update(self._notes_of(ours))  # ours win on an object both annotate
            builder = repo.TreeBuilder()
            for target, blob in sorted(notes.items()):
                builder.insert(target, pygit2.Oid(hex=blob), pygit2.enums.FileMode.BLOB)
            sig = _sig(repo)
            message = "gitsup: merge notes\n\nNotes of both sides kept.\n"
            commit = repo.create_commit(
                None,
                sig,
                sig,
                message,
                builder.write(),
                [pygit2.Oid(hex=ours), pygit2.Oid(hex=theirs)],
            )
            merged = Oid(str(commit))
            self.update_ref(NOTES_REF, merged, old=ours, message="gitsup: merge notes")
            return merged

    def _notes_of(self, commit: Oid) -> Iterator[tuple[str, str]]:
        """(annotated object id, note blob id) of every note in a notes commit's tree, its
        fan-out directories (`ab/cdef…`) joined back into the object id."""
        todo: list[tuple[str, pygit2.Tree]] = [
            ("", self._repo[pygit2.Oid(hex=commit)].peel(pygit2.Commit).tree)
        ]
        while todo:
            prefix, tree = todo.pop()
            for entry in tree:
                name = prefix + (entry.name or "")
                if entry.type_str == "tree":
                    sub = self._repo[entry.id]
                    if isinstance(sub, pygit2.Tree):
                        todo.append((name, sub))
                elif entry.type_str == "blob" and len(name) == 40:
                    yield name, str(entry.id)

    def commit_files(
        self, ref: str, files: dict[str, bytes], *, message: str, expected_old: Oid | None
    ) -> Oid | None:
        """A new commit on `ref` (compare-and-swap from `expected_old`) whose tree holds
        exactly `files` (flat names), unless the tip already holds them: then None."""
        repo = self._repo
        builder = repo.TreeBuilder()
        for name, data in sorted(files.items()):
            builder.insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
        tree = builder.write()
        parents = []
        if expected_old is not None:
            parent = repo[pygit2.Oid(hex=expected_old)].peel(pygit2.Commit)
            if parent.tree.id == tree:
                return None
            parents = [parent.id]
        sig = _sig(repo)
        commit = Oid(str(repo.create_commit(None, sig, sig, message, tree, parents)))
        self.update_ref(ref, commit, old=expected_old, message=message.split("\n")[0])
        return commit

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

    def policy_change(self, base: Oid, head: Oid) -> list[str]:
        """The paths under `.gitsup/` (the repository's gitsup policy) that differ between
        two commits, sorted; `.gitsup` itself when it was a file, link or submodule."""
        return sorted(
            p
            for p in self.changed_paths(base, head)
            if p == REPO_POLICY_DIR or p.startswith(REPO_POLICY_DIR + "/")
        )

    def diff_size(self, base: Oid, head: Oid) -> tuple[int, int, int]:
        """(files changed, insertions, deletions) between two commits."""
        a = self._repo[pygit2.Oid(hex=base)].peel(pygit2.Commit).tree
        b = self._repo[pygit2.Oid(hex=head)].peel(pygit2.Commit).tree
        stats = a.diff_to_tree(b).stats
        return int(stats.files_changed), int(stats.insertions), int(stats.deletions)

    # --- review comments (gitsup/store/comments.py) -----------------------------------------

    def file_at(self, commit: Oid, path: str) -> bytes | None:
        """The content of file `path` in the commit's tree, or None when it names no file."""
        tree = self._repo[pygit2.Oid(hex=commit)].peel(pygit2.Commit).tree
        try:
            entry = tree[path]
        except (KeyError, ValueError):
            return None
        obj = self._repo[entry.id]
        return bytes(obj.data) if isinstance(obj, pygit2.Blob) else None

    def changed_old_lines(self, base: Oid, head: Oid, path: str) -> list[tuple[int, int]] | None:
        """Where `path` changed from `base` to `head`, as (first, last) line ranges of its
        `base` side; a pure insertion after line n is (n, n + 1). None when `head` has no such
        file (removed or renamed away)."""
        if self.file_at(head, path) is None:
            return None
        a = self._repo[pygit2.Oid(hex=base)].peel(pygit2.Commit).tree
        b = self._repo[pygit2.Oid(hex=head)].peel(pygit2.Commit).tree
        diff = a.diff_to_tree(b, context_lines=0, interhunk_lines=0)
        out: list[tuple[int, int]] = []
        for patch in diff:
            if patch is None or patch.delta.old_file.path != path:
                continue
            for h in patch.hunks:
                if h.old_lines == 0:
                    out.append((h.old_start, h.old_start + 1))
                else:
                    out.append((h.old_start, h.old_start + h.old_lines - 1))
        return out

    def merge_tree(self, ours: Oid, theirs: Oid) -> tuple[Oid | None, list[str]]:
        """Merge two commits in memory: (tree, []) when clean, (None, conflicted paths) otherwise."""
        index = self._repo.merge_commits(pygit2.Oid(hex=ours), pygit2.Oid(hex=theirs))
        if index.conflicts is not None:
            paths = sorted({e.path for entry in index.conflicts for e in entry if e is not None})
            return None, paths
        return Oid(str(index.write_tree(self._repo))), []

    def signature(self, commit: Oid) -> tuple[str, str]:
        """(`%G?` status letter, signer) of `commit` as `git log --show-signature` verifies
        it against the repository's allowed signers ("N", "" when unsigned or unreadable)."""
        from gitsup.host import proc

        res = proc.run(
            ["git", "log", "-1", "--no-walk", "--format=%G?%x00%GS", commit],
            cwd=self.common_dir,
            env=proc.child_env(),
            timeout=60,
        )
        status, _, signer = res.output.strip().partition("\x00")
        if not res.ok or len(status) != 1:
            return "N", ""
        return status, signer

    def commit_tree(self, tree: Oid, parents: Sequence[Oid], message: str) -> Oid:
        sig = _sig(self._repo)
        oid = self._repo.create_commit(
            None, sig, sig, message, pygit2.Oid(hex=tree), [pygit2.Oid(hex=p) for p in parents]
        )
        return Oid(str(oid))

    def tree_of(self, commit: Oid) -> Oid:
        return Oid(str(self._repo[pygit2.Oid(hex=commit)].peel(pygit2.Commit).tree.id))

    # --- worktrees (gitsup/git/worktrees.py) ----------------------------------------

    def add_worktree(self, name: str, path: Path, branch: str) -> None:
        self.worktrees.add_worktree(name, path, branch)

    def worktree_names(self) -> list[str]:
        return self.worktrees.worktree_names()

    def worktree_path(self, name: str) -> Path | None:
        return self.worktrees.worktree_path(name)

    def worktree_name_of(self, path: Path) -> str | None:
        return self.worktrees.worktree_name_of(path)

    def set_head_branch(self, branch: str) -> None:
        self.worktrees.set_head_branch(branch)

    def remove_worktree(self, name: str, path: Path | None) -> None:
        self.worktrees.remove_worktree(name, path)

    def checked_out_branches(self) -> dict[str, Path]:
        return self.worktrees.checked_out_branches()

    def add_detached_worktree(self, path: Path, commit: Oid) -> None:
        self.worktrees.add_detached_worktree(path, commit)

    def remove_detached_worktree(self, path: Path) -> None:
        self.worktrees.remove_detached_worktree(path)

    def advance_checkout(self, old: Oid, new: Oid) -> None:
        self.worktrees.advance_checkout(old, new)

    # --- the state of this worktree (gitsup/git/worktree_state.py) --------------------

    def status_entries(self) -> dict[str, int]:
        return self.working_tree.status_entries()

    def dirty_paths(self) -> set[str]:
        return self.working_tree.dirty_paths()

    def path_state(self, rel: str, *, is_dir: bool | None = None) -> str:
        return self.working_tree.path_state(rel, is_dir=is_dir)

    def is_clean(self) -> bool:
        return self.working_tree.is_clean()

    def untracked_paths(self) -> list[str]:
        return self.working_tree.untracked_paths()

    def evidence(self, baseline: Oid) -> Evidence:
        """The worktree's evidence against `baseline`, within the default bounds
        (`working_tree.evidence` takes others)."""
        return self.working_tree.evidence(baseline)
