"""Nested repositories a task left in its worktree, moved out before a person looks.

A `.git` below the worktree's top (a directory, or a file or link naming a Git dir
elsewhere) makes that directory a repository whose config and hooks the task wrote. The
person's `git` in the worktree enters it wherever the directory is a gitlink in the index
(`git add -A` and `commit -a` check whether it is modified, so do `diff-files`,
`diff-index` and `stash`, and the porcelain `status` and `diff` when the task's
`.gitmodules` sets `ignore` for it): Git then runs `git status` inside it, with its
fsmonitor, hooks and every other setting the task chose. No setting of the superproject
stops that, so gitsup takes the nested `.git` entries out of the worktree when the task's
processes are gone: each is moved, as it is, to `<task dir>/nested/<path>/.git` (nothing is
lost; the working files stay where they are). An unpopulated gitlink is not entered.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

NESTED_DIR = "nested"
# next to the moved ones, once a quarantine has run: `git sup doctor` looks again only at
# the ended tasks without it (made by an older gitsup, or whose quarantine failed)
_CHECKED = "nested-checked"


def checked(task_dir: Path) -> bool:
    """Has `quarantine` run to the end for this task dir?"""
    return (task_dir / _CHECKED).exists()


def find(worktree: Path) -> list[str]:
    """The `.git` entries below `worktree`'s top (paths relative to it, sorted), whatever
    their type. Follows no symlink and does not look inside a found `.git`."""
    found: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(worktree / rel if rel else worktree))
        except OSError:
            continue
        for e in entries:
            path = f"{rel}/{e.name}" if rel else e.name
            if e.name == ".git":
                if rel:
                    found.append(path)
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(path)
            except OSError:
                continue
    return sorted(found)


def quarantine(worktree: Path, task_dir: Path) -> list[dict[str, str]]:
    """Move every nested `.git` of `worktree` to `<task_dir>/nested/<path>` (a free name:
    `.git.1`, `.git.2` … when an earlier one is there), then mark the task dir `checked`.
    Returns {"path", "to"} for each moved; raises OSError when one cannot be moved (what
    was moved stays moved, and the mark is not written)."""
    moved: list[dict[str, str]] = []
    for rel in find(worktree):
        src = worktree / rel
        dest = task_dir / NESTED_DIR / rel
        n = 0
        while os.path.lexists(dest):
            n += 1
            dest = dest.with_name(f".git.{n}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        st = os.lstat(src)
        try:
            os.rename(src, dest)
        except OSError:
            # another file system: copy as it is (links as links), then remove
            if stat.S_ISDIR(st.st_mode):
                shutil.copytree(src, dest, symlinks=True)
                shutil.rmtree(src)
            else:
                shutil.copy2(src, dest, follow_symlinks=False)
                os.unlink(src)
        moved.append({"path": rel, "to": str(dest)})
    (task_dir / _CHECKED).write_text(f"{len(moved)}\n")
    return moved
