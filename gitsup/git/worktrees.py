"""Worktrees of the repository: a task's own worktree (added with a parallel checkout),
the branches checked out anywhere, and the detached worktrees the integration checks use."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from gitsup.errors import GitsupError
from gitsup.ids import Oid

if TYPE_CHECKING:
    from gitsup.git.repo import GitRepo


class Worktrees:
    """Task worktrees, and the person/CI side of the boundary: checked-out branches and
    throw-away detached worktrees. Part of a `GitRepo` (`repo.worktrees`), whose methods of
    the same names call these."""

    def __init__(self, git: GitRepo) -> None:
        self._git = git
        self._repo = git._repo

    # --- worktrees ----------------------------------------------------------------

    def add_worktree(self, name: str, path: Path, branch: str) -> None:
        """Check out `branch` into a new linked worktree at `path` (must not exist), named
        `name` (the last component of `path`, as git names it).

        `git worktree add` with parallel checkout (`checkout.workers`, unless the user set
        it): several times faster than libgit2's single-threaded checkout on a large tree.
        No hook of the user's runs (`core.hooksPath` is pointed at nothing), submodules are
        not recursed into, the user's checkout and index are not touched, and a failed or
        interrupted add leaves neither files nor a registration behind."""
        from gitsup.host import proc

        if path.name != name:
            raise GitsupError(f"worktree {path} must be named {path.name}, not {name}")
        if self._repo.references.get(f"refs/heads/{branch}") is None:
            raise GitsupError(f"cannot create worktree {path}: no branch {branch}")
        if os.path.lexists(path):
            raise GitsupError(f"cannot create worktree {path}: it already exists")
        argv = ["git", "-c", "core.hooksPath=/dev/null", "-c", "submodule.recurse=false"]
        if self._git.config_get("checkout.workers") is None:
            argv += ["-c", f"checkout.workers={checkout_workers()}"]
        argv += ["worktree", "add", "--quiet", os.fspath(path), branch]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            res = proc.run(argv, cwd=self._git.common_dir, env=proc.child_env(), timeout=1800)
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
        common = self._git.common_dir
        main = type(self._git).open(common)
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

    def add_detached_worktree(self, path: Path, commit: Oid) -> None:
        """A throw-away linked worktree at `commit` (no branch), e.g. for integration checks.
        None of the user's hooks runs (a `post-checkout` hook would run with the user's
        authority in a tree a candidate wrote), submodules are not recursed into."""
        from gitsup.host import proc

        res = proc.run(
            [
                *("git", "-c", "core.hooksPath=/dev/null", "-c", "submodule.recurse=false"),
                *("worktree", "add", "--detach", "--quiet", str(path), commit),
            ],
            cwd=self._git.common_dir,
            env=proc.child_env(),
            timeout=300,
        )
        if not res.ok:
            raise GitsupError(f"cannot create worktree {path}: {res.output.strip()}")

    def remove_detached_worktree(self, path: Path) -> None:
        from gitsup.host import proc

        proc.run(
            ["git", "worktree", "remove", "--force", str(path)],
            cwd=self._git.common_dir,
            env=proc.child_env(),
            timeout=120,
        )
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
        proc.run(["git", "worktree", "prune"], cwd=self._git.common_dir, env=proc.child_env())

    def advance_checkout(self, old: Oid, new: Oid) -> None:
        """Move this (clean) checkout's index and files from `old` to `new` the way
        `git merge --ff-only` does (`read-tree -m -u`: refuses to lose local changes)."""
        from gitsup.host import proc

        env = proc.child_env()
        proc.run(["git", "update-index", "-q", "--refresh"], cwd=self._git.workdir, env=env)
        res = proc.run(
            ["git", "read-tree", "-m", "-u", old, new], cwd=self._git.workdir, env=env, timeout=300
        )
        if not res.ok:
            raise GitsupError(
                f"cannot update the checkout {self._git.workdir}: {res.output.strip()}"
            )


def checkout_workers() -> int:
    """Parallel checkout workers for a new worktree: writing many small files is bound by
    the file system more than by the CPU, so twice the cores (at least 2, at most 16)."""
    return max(2, min(16, 2 * (os.cpu_count() or 1)))
