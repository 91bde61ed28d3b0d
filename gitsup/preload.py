"""Importing modules in the background while the caller waits on something else.

A task's start waits for `git` to check out its worktree (a few tenths of a second to
seconds), and right after it imports what runs the task: the supervisor, the sandbox, the
worker's adapter and, for a network namespace, pyroute2 (together about 0.15 s of one core).
`preloading` runs those imports in a thread during the wait and joins the thread before the
caller goes on, so that no module is ever imported by two threads at once.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Iterable, Iterator


@contextlib.contextmanager
def preloading(modules: Iterable[str]) -> Iterator[None]:
    """Import `modules` in a background thread while the body runs; wait for it on leaving.

    An import that fails is left alone: the caller's own import of that module raises the
    error where it is needed (a module that raised is not kept in `sys.modules`)."""
    todo = [name for name in dict.fromkeys(modules) if name not in sys.modules]
    if not todo:
        yield
        return

    def load() -> None:
        for name in todo:
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=load, name="gitsup-preload", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
