"""Publishing a task to the review remote (`sup.reviewRemote`): everything another clone
needs to show it, or to continue it when this one is gone.

What goes there, each ref pushed as it is here (the remote's gate lets `refs/sup/*` only
move forward and never be deleted, so a publication never rewrites one):

    refs/sup/<id>/baseline    the baseline
    refs/sup/<id>/wip         the task's state: first parent the task branch's head, tree the
                              worktree (tracked and untracked files); each publication's wip
                              has the previous one as its second parent, so it only grows
    refs/sup/<id>/candidate   once the task ended with a commit after the baseline
    refs/sup/<id>/log         the sealed event log (sealed right before it is pushed)
    refs/sup/<id>/record      `task.json` and `spec.json`, one commit per change
    refs/notes/sup            merged with the remote's first (fetch, merge, push; again when
                              another clone pushed in between), never pushed over it; notes
                              that only grew since this supervisor pushed them are pushed
                              as they are (a fast-forward), merged when that is refused

With `git config sup.cluster.publish true` the supervisor publishes at the end of every turn
(after the worker's commits are imported, while the worker is held) and at the end of the
task. A publication that fails is an event (`publish_failed`); the task goes on.

A turn's publication is taken while the worker is held (the wip snapshot, the log sealed)
and pushed in the background, so that verification does not wait for the remote. The pushes
are ordered: one thread pushes them, one after the other, and the task's last publication
waits for the one in flight before it pushes; a push names the refs as they are when it
starts, so a later push never carries older refs than an earlier one (and the remote's gate
would refuse a ref moving back all the same).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gitsup.errors import GitsupError
from gitsup.git import NOTES_REF, WIP_MAX_FILE_BYTES, GitRepo, RefConflict
from gitsup.git import remote as transport
from gitsup.ids import Oid, TaskId
from gitsup.layout import Layout, task_record_ref, task_refs
from gitsup.names import RECORD_FILE, SPEC_FILE
from gitsup.store.record import TaskRecord
from gitsup.store.taskgit import ImportLimits, import_tree, open_worktree
from gitsup.supervision.context import TaskContext

PUBLISH_KEY = "sup.cluster.publish"
NOTES_ATTEMPTS = 8


def publish_enabled(repo: GitRepo) -> bool:
    value = (repo.config_get(PUBLISH_KEY) or "").strip().lower()
    return value in ("true", "yes", "on", "1")


def review_remote(repo: GitRepo, remote: str | None = None) -> str:
    """The review remote: `remote` when given, else `git config sup.reviewRemote`."""
    name = remote or repo.config_get("sup.reviewRemote")
    if not name:
        raise GitsupError(
            "no review remote to publish to",
            hint="`git config sup.reviewRemote <remote>` (a remote gated by `git sup gate install`)",
        )
    return name


@dataclass(frozen=True)
class Published:
    remote: str
    refs: dict[str, Oid] = field(default_factory=dict)  # what the remote now has, by ref
    notes: Oid | None = None


def record_refs(repo: GitRepo, layout: Layout, task: TaskId) -> Oid | None:
    """A new commit on `refs/sup/<id>/record` when `task.json` or `spec.json` changed."""
    d = layout.task_dir(task)
    files = {}
    for name in (RECORD_FILE, SPEC_FILE):
        path = d / name
        if path.is_file():
            files[name] = path.read_bytes()
    ref = task_record_ref(task)
    old = repo.ref_target(ref)
    return repo.commit_files(
        ref, files, message=f"gitsup: record of task {task}\n", expected_old=old
    )


def snapshot_wip(
    repo: GitRepo, layout: Layout, record: TaskRecord, limits: ImportLimits
) -> Oid | None:
    """A new `refs/sup/<id>/wip` holding the task's state now (first parent the task
    branch's head, tree the worktree's files, second parent the wip before), unless the
    wip already holds exactly that. The worker must be held (its files not changing)."""
    from pathlib import Path

    task = TaskId(record.id)
    head = repo.branch_target(record.branch) or Oid(record.baseline)
    wt = Path(record.worktree)
    if not wt.is_dir():
        return None
    omitted: list[dict[str, object]] = []
    tree = open_worktree(layout, task, wt).working_tree.snapshot_tree(
        include_untracked=True,
        max_file_bytes=WIP_MAX_FILE_BYTES,
        baseline=Oid(record.baseline),
        omitted=omitted,
    )
    import_tree(repo, layout, task, tree, limits)
    ref = task_refs(task)["wip"]
    old = repo.ref_target(ref)
    if old is not None:
        info = repo.commit_info(old)
        if info.parents[:1] == (head,) and repo.tree_of(old) == tree:
            return None
    parents = [head] if old is None else [head, old]
    commit = repo.commit_tree(
        tree,
        parents,
        f"gitsup: state of task {task}\n\n"
        "The task branch's head (first parent) and the worktree's files, published at the "
        "end of a turn.\n",
    )
    repo.update_ref(ref, commit, old=old, message=f"gitsup: state of {task}")
    return commit


def publish_refs(
    repo: GitRepo,
    layout: Layout,
    task: TaskId,
    *,
    remote: str | None = None,
    notes_pushed: Oid | None = None,
) -> Published:
    """Push the task's refs (atomically) and merge-push the notes to the review remote
    (skipped while the notes are still `notes_pushed`, what this caller pushed last): the
    notes merged with the remote's first, then pushed in the same atomic push as the refs;
    when that push is refused, the refs alone, then the notes as `publish_notes` does. Notes
    that only grew since `notes_pushed` are first pushed as they are (the remote's gate and
    Git take them only as a fast-forward), merged as above when that is refused.
    Raises GitsupError (transport.TransportError when the remote or a gate refused)."""
    name = review_remote(repo, remote)
    if layout.record(task).is_file():
        record_refs(repo, layout, task)
    names = [*task_refs(task).values(), task_record_ref(task)]
    have = {r: t for r in names if (t := repo.ref_target(r)) is not None}
    specs = [f"{r}:{r}" for r in have]
    current = repo.ref_target(NOTES_REF)
    if current is None or current == notes_pushed:
        # no notes here, or none since the last publication: the task's refs only
        transport.push(repo.main_workdir, name, specs)
        return Published(name, have, current)
    notes = [*specs, f"{NOTES_REF}:{NOTES_REF}"]
    if notes_pushed is not None and _grew(repo, notes_pushed, current):
        # ours only grew since this caller pushed them: when the remote still has those,
        # ours are a fast-forward there, pushed as they are (no fetch, no merge); when
        # another clone pushed notes since, Git refuses the push and they are merged below
        with contextlib.suppress(transport.TransportError):
            transport.push(repo.main_workdir, name, notes)
            return Published(name, have, current)
    # the notes merged with the remote's first, then pushed with the task's refs: one push
    try:
        theirs = transport.fetch_one(repo.main_workdir, repo.common_dir, name, NOTES_REF)
    except transport.TransportError:
        transport.push(repo.main_workdir, name, specs)  # the task's refs all the same
        raise
    ours = repo.merge_notes(theirs) if theirs is not None else current
    if ours is not None and ours != theirs:
        try:
            transport.push(repo.main_workdir, name, notes)
            return Published(name, have, ours)
        except transport.TransportError:
            # another clone pushed notes in between (or a ref was refused): one at a time
            pass
    transport.push(repo.main_workdir, name, specs)
    if ours is None or ours == theirs:
        return Published(name, have, ours)
    return Published(name, have, publish_notes(repo, name))


def _grew(repo: GitRepo, old: Oid, new: Oid) -> bool:
    try:
        return repo.is_ancestor(old, new)
    except Exception:  # `old` is not here any more (pygit2.GitError): not known to be
        return False


def publish_notes(repo: GitRepo, remote: str) -> Oid | None:
    """Make the remote's `refs/notes/sup` hold this repository's notes and its own: fetch
    it, merge it into ours (GitRepo.merge_notes), push the result (a fast-forward there).
    When another clone pushed in between, the gate refuses ours as a rewrite: again."""
    for attempt in range(1, NOTES_ATTEMPTS + 1):
        theirs = transport.fetch_one(repo.main_workdir, repo.common_dir, remote, NOTES_REF)
        ours = repo.merge_notes(theirs) if theirs is not None else repo.ref_target(NOTES_REF)
        if ours is None or ours == theirs:
            return ours
        try:
            transport.push(repo.main_workdir, remote, [f"{NOTES_REF}:{NOTES_REF}"])
            return ours
        except transport.TransportError:
            if attempt == NOTES_ATTEMPTS:
                raise
    return None  # not reached


class Publisher:
    """The supervisor's publications (`sup.cluster.publish`): at a turn's end (pushed in the
    background) and the task's (pushed once the turn's push in flight is done)."""

    def __init__(
        self, ctx: TaskContext, limits: Callable[[], ImportLimits], *, enabled: bool | None = None
    ) -> None:
        self.ctx = ctx
        self.repo, self.layout = ctx.repo, ctx.layout
        self._limits = limits
        self.enabled = publish_enabled(ctx.repo) if enabled is None else enabled
        # the notes tip the last publication pushed (at first, the last this clone pushed
        # to that remote: the remote has it, or notes grown from it)
        self._notes_pushed: Oid | None = None
        # the one push in the background (a turn's), and whether another is due after it
        self._lock = threading.Lock()
        self._pusher: threading.Thread | None = None
        self._again = False
        self._remote = ctx.repo.config_get("sup.reviewRemote") or "(sup.reviewRemote is not set)"
        self._task, self._common_dir = TaskId(ctx.record.id), ctx.repo.common_dir
        if self.enabled:  # a supervisor takes the task: its end is not published yet
            self.layout.published(self._task).unlink(missing_ok=True)
            self._notes_pushed = _notes_pushed(self.layout, self._remote)

    def turn(self) -> None:
        """A turn ended (the worker's commits imported, the worker held): its state in the
        wip and the log sealed now, everything pushed in the background."""
        if not self.enabled:
            return
        errors = self._snapshot()
        if errors:
            self._failed("turn", errors)
        with self._lock:
            if self._pusher is not None:
                # a push runs: one more follows it (refs as they are then: this turn's)
                self._again = True
                return
            self._pusher = threading.Thread(
                target=self._push_turns, name="gitsup-publish", daemon=True
            )
            self._pusher.start()

    def end(self) -> None:
        """The task ended (its record final, its log sealed): everything pushed, after the
        turn's push in flight (never at the same time, never overtaken by it); then
        `Layout.published` says so."""
        if not self.enabled:
            return
        self.wait()
        errors = self._push()
        if errors:
            self._failed("end", errors)
            self.ctx.journal.seal("publish failed")
        # the end is on the remote (or its failure in the log): who waits for it may go on
        # before this process has exited (gitsup/cluster/hostwork.py)
        with contextlib.suppress(OSError):  # then the process's exit says it
            marker = self.layout.published(self._task)
            marker.write_text("ok\n" if not errors else "failed\n", encoding="utf-8")

    def wait(self) -> None:
        """Return once no turn's push is in flight or due."""
        while True:
            with self._lock:
                pusher = self._pusher
            if pusher is None:
                return
            pusher.join()

    def _push_turns(self) -> None:
        """The background pusher: this turn's publication, then the one due after it."""
        again = True
        try:
            while again:
                errors = self._push(own_repo=True)
                if errors:
                    self._failed("turn", errors)
                with self._lock:
                    again, self._again = self._again, False
        finally:
            with self._lock:
                self._pusher, self._again = None, False

    def _snapshot(self) -> list[str]:
        record = self.ctx.record
        errors = []
        try:
            snapshot_wip(self.repo, self.layout, record, self._limits())
        except (GitsupError, RefConflict, OSError) as exc:
            # the refs are pushed all the same: the wip as it was published last
            errors.append(f"wip snapshot: {exc}")
        self.ctx.journal.seal(f"turn {record.turns} ended: published")
        return errors

    def _push(self, *, own_repo: bool = False) -> list[str]:
        """Push the task's refs and notes; the errors. `own_repo`: through a repository
        object of this thread's own (the supervisor's is not shared across threads)."""
        try:
            repo = GitRepo.open(self._common_dir) if own_repo else self.repo
            done = publish_refs(repo, self.layout, self._task, notes_pushed=self._notes_pushed)
            if done.notes is not None and done.notes != self._notes_pushed:
                _remember_notes(self.layout, self._remote, done.notes)
            self._notes_pushed = done.notes
        except (GitsupError, RefConflict, OSError) as exc:
            return [str(exc)]
        except Exception as exc:
            if not own_repo:
                raise
            # in the background nothing else would hear of it
            return [f"{type(exc).__name__}: {exc}"]
        return []

    def _failed(self, stage: str, errors: list[str]) -> None:
        from gitsup.store import eventtypes as et

        self.ctx.emit(
            et.PublishFailed(remote=self._remote, stage=stage, error="; ".join(errors)[:4000])
        )


def _notes_known(layout: Layout) -> dict[str, object]:
    """`Layout.notes_pushed`, read; empty when missing or not what was written."""
    import json

    try:
        known = json.loads(layout.notes_pushed.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _notes_pushed(layout: Layout, remote: str) -> Oid | None:
    oid = _notes_known(layout).get(remote)
    return Oid(oid) if isinstance(oid, str) and len(oid) in (40, 64) else None


def _remember_notes(layout: Layout, remote: str, notes: Oid) -> None:
    import json

    from gitsup.host.fsutil import atomic_write

    known = _notes_known(layout)
    known[remote] = str(notes)
    with contextlib.suppress(OSError):
        atomic_write(layout.notes_pushed, json.dumps(known).encode("utf-8"))
