"""The Git gateway: the only package that imports pygit2.

Everything gitsup keeps in Git goes through here: refs under `refs/sup/`
(compare-and-swap, with reflog messages), the `refs/notes/sup` notes, the
sealed event-log commit chain, task worktrees, and the read-only views that
make up a candidate's evidence. The user's own checkout and index are never
touched.

`GitRepo` (`repo.py`: opening, locations, config, refs, records, objects, notes) holds
its parts, one module each: `worktrees.py` (task and detached worktrees, checked-out
branches) and `worktree_state.py` (status, snapshots, evidence); `types.py` holds what they
hand out and `objectstore.py` reads one objects directory on its own.
"""

from __future__ import annotations

from gitsup.git.objectstore import ObjectStore
from gitsup.git.repo import GitRepo
from gitsup.git.types import (
    NOTES_REF,
    SUP_REF_PREFIX,
    CommitInfo,
    Evidence,
    RefConflict,
    UntrackedFile,
    is_zero,
)
from gitsup.git.worktree_state import WIP_MAX_FILE_BYTES, read_bounded_file
from gitsup.git.worktrees import checkout_workers

__all__ = [
    "NOTES_REF",
    "SUP_REF_PREFIX",
    "WIP_MAX_FILE_BYTES",
    "CommitInfo",
    "Evidence",
    "GitRepo",
    "ObjectStore",
    "RefConflict",
    "UntrackedFile",
    "checkout_workers",
    "is_zero",
    "read_bounded_file",
]
