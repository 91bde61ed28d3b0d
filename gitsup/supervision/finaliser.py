"""The task's Git side: importing the worker's commits into the task branch, and the one
finaliser (wip snapshot, candidate ref and note, `candidate_*`, the lease)."""

from __future__ import annotations

import time
from typing import Any

from gitsup.errors import GitsupError
from gitsup.git import WIP_MAX_FILE_BYTES, GitRepo, RefConflict, nested
from gitsup.ids import Oid
from gitsup.layout import task_refs
from gitsup.state import EXIT_OF, STATUS_OF, State, Status
from gitsup.store import eventtypes as et
from gitsup.store.events import EventLog
from gitsup.store.record import CandidateNote
from gitsup.store.taskgit import (
    ImportLimits,
    ImportOverLimit,
    ImportRefused,
    import_tree,
    import_work,
    open_worktree,
    private_dir,
    seal,
    uses_private_dir,
)
from gitsup.supervision.context import TaskContext
from gitsup.supervision.launcher import Launcher


class Finaliser:
    def __init__(self, ctx: TaskContext, launcher: Launcher) -> None:
        self.ctx = ctx
        self.launcher = launcher
        self._worker_ref: str | None = f"refs/heads/{ctx.record.branch}"
        self._import_refused: str | None = None
        self._left: list[str] = []

    def branch_head(self) -> Oid | None:
        return self.ctx.repo.branch_target(self.ctx.record.branch)

    def worktree_repo(self) -> GitRepo | None:
        try:
            return open_worktree(self.ctx.layout, self.ctx.task, self.ctx.worktree)
        except GitsupError:
            return None

    def limits(self) -> ImportLimits:
        return ImportLimits.resolve(self.ctx.repo, self.ctx.spec.limits.model_dump())

    def import_work(self) -> str | None:
        """Import the worker's commits into the task branch (verified). Returns why the
        import was refused (also recorded as a reason), None when it went through."""
        try:
            res = import_work(
                self.ctx.repo,
                self.ctx.layout,
                self.ctx.task,
                Oid(self.ctx.record.baseline),
                self.ctx.record.branch,
                self.limits(),
            )
        except (ImportRefused, GitsupError) as exc:
            reason = f"import refused: {exc.message}"
            if reason != self._import_refused:
                self._import_refused = reason
                self.ctx.emit(et.ImportRefused(reason=exc.message))
            if reason not in self.ctx.record.reasons:
                self.ctx.record.reasons.append(reason)
            return reason
        self._import_refused = None
        if res is None:
            return None
        if res.ref != self._worker_ref:
            self.ctx.emit(et.WorkerBranchChanged(from_=self._worker_ref, to=res.ref, tip=res.tip))
            self._worker_ref = res.ref
        if res.moved:
            self.ctx.emit(
                et.WorkImported(
                    branch=self.ctx.record.branch,
                    from_=res.previous,
                    to=res.tip,
                    objects=res.objects,
                    size=res.bytes,
                )
            )
        return None

    def _reseal(self) -> None:
        """The worker is gone: the shell of its Git dir back as gitsup wrote it (what a
        sandbox without a mount namespace let it change), so the person's `git` in the
        worktree runs nothing the worker wrote."""
        if not uses_private_dir(self.ctx.layout, self.ctx.task) or not self.ctx.worktree.is_dir():
            return
        try:
            seal(self.ctx.repo, self.ctx.layout, self.ctx.task, self.ctx.worktree)
        except OSError as exc:
            self.ctx.record.reasons.append(f"cannot rewrite the task's Git dir config: {exc}")

    def _move_nested_out(self) -> None:
        """The task's processes are gone: the nested repositories it left in its worktree
        (their `.git`, whose config and hooks it wrote) moved into the task dir, so the
        person's `git` in the worktree enters none (gitsup/git/nested.py)."""
        if not self.ctx.worktree.is_dir():
            return
        moved: list[dict[str, str]] = []
        try:
            moved = nested.quarantine(self.ctx.worktree, self.ctx.layout.task_dir(self.ctx.task))
        except OSError as exc:
            self.ctx.record.reasons.append(
                f"cannot move a nested repository out of the worktree: {exc}; "
                "do not run git in the worktree before removing every .git below its top"
            )
        if moved:
            self.ctx.emit(et.NestedGitMoved(moved=list(moved)))

    def finalise(self, final: State, verified_head: str | None) -> State:
        """Everything before the terminal transition (the worker is already stopped).
        Returns the final state: a ready task whose branch moved after verification, or
        whose work could not be imported, parks."""
        self.launcher.end_judges()
        left = self._left = self.launcher.left_behind()
        if not left and self.ctx.record.left_behind:
            left = self._left = list(self.ctx.record.left_behind)  # found before (recovery)
        if left:
            # The lease is released only when cleanup proved the worker gone.
            self.ctx.record.left_behind = left
            self.ctx.record.reasons.append(
                "cleanup could not prove the worker gone: "
                + "; ".join(left)
                + "; the worktree lease stays held (see `git sup doctor`, "
                "`git sup doctor --fix`)"
            )
            self.ctx.emit(et.WorkerLeftBehind(what=left, lease=str(self.launcher.lease.path)))
        self._reseal()
        if self.import_work() is not None and final == State.COMPLETED:
            final = State.BLOCKED
        status = STATUS_OF[final]
        head = self.branch_head()
        self.ctx.record.head = head
        if final == State.COMPLETED and head != verified_head:
            # The branch moved after verification: not what was verified.
            final, status = State.BLOCKED, Status.PARKED
            self.ctx.record.reasons.append("branch moved after verification")
        if status != Status.READY:
            self._save_wip(head)
        self._move_nested_out()
        if (
            head is not None
            and head != self.ctx.record.baseline
            and self.ctx.repo.is_ancestor(Oid(self.ctx.record.baseline), head)
        ):
            self._write_candidate(head, status)
        self.ctx.record.status = status
        self.ctx.record.finished_at = time.time()
        self.ctx.record.exit_code = EXIT_OF[status]
        cand, reasons = self.ctx.record.candidate, list(self.ctx.record.reasons)
        if status == Status.READY:
            self.ctx.emit(et.CandidateReady(candidate=cand, reasons=reasons))
        elif status in (Status.PARKED, Status.STOPPED):
            self.ctx.emit(et.CandidateParked(candidate=cand, reasons=reasons))
        else:
            self.ctx.emit(et.CandidateFailed(candidate=cand, reasons=reasons))
        return final

    def close(self, final: State) -> None:
        """After the terminal transition: `task_finished` and the record in its terminal
        state (Journal.finish: a record that says the task ended finds its log complete),
        the last seal, the lease."""
        status = STATUS_OF[final]
        self.ctx.journal.finish(
            final,
            et.TaskFinished(
                state=final.value, status=status.value, exit_code=self.ctx.record.exit_code
            ),
        )
        self.ctx.journal.seal(f"task finished: {status.value}")
        self.ctx.journal.close()
        if not self._left:
            self.launcher.release_lease()
        self.ctx.journal.drain()

    def _save_wip(self, head: Oid | None) -> None:
        wt = self.worktree_repo()
        if wt is None:
            return
        omitted: list[dict[str, Any]] = []
        try:
            # The worker's state: its files, and its commits when they were not imported
            # (e.g. on a branch that does not descend from the baseline).
            tree = wt.working_tree.snapshot_tree(
                include_untracked=True,
                max_file_bytes=WIP_MAX_FILE_BYTES,
                baseline=Oid(self.ctx.record.baseline),
                omitted=omitted,
            )
            parent = head or Oid(self.ctx.record.baseline)
            # What is not saved is said (event, record, `git sup show`), never dropped silently.
            omitted = bound_not_captured(omitted)
            self.ctx.record.not_captured = omitted
            if tree == self.ctx.repo.tree_of(parent):
                if omitted:
                    self.ctx.emit(et.WipSaved(ref=None, commit=None, not_captured=omitted))
                return
            try:
                import_tree(self.ctx.repo, self.ctx.layout, self.ctx.task, tree, self.limits())
            except ImportOverLimit as exc:
                # Over a limit: no snapshot; the work stays in the task's private Git dir,
                # which only discard removes (and the entry makes discard ask for --force).
                omitted = bound_not_captured(
                    [
                        *omitted,
                        {
                            "path": str(private_dir(self.ctx.layout, self.ctx.task)),
                            "bytes": 0,
                            "why": f"not imported: {exc.message}",
                            "blocks_discard": True,
                        },
                    ]
                )
                self.ctx.record.not_captured = omitted
                self.ctx.emit(et.WipSaved(ref=None, commit=None, not_captured=omitted))
                return
            ref = task_refs(self.ctx.task)["wip"]
            old = self.ctx.repo.ref_target(ref)
            # A wip published before (gitsup/supervision/publisher.py) stays an ancestor:
            # the review remote only lets the ref move forward.
            commit = self.ctx.repo.commit_tree(
                tree,
                [parent] if old is None else [parent, old],
                f"gitsup: work in progress of task {self.ctx.task}\n\n"
                "Uncommitted changes (tracked and untracked) saved when the task ended.\n",
            )
            self.ctx.repo.update_ref(
                ref, commit, old=old, message=f"gitsup: wip of {self.ctx.task}"
            )
        except (GitsupError, OSError) as exc:
            self.ctx.emit(et.ProtocolNoise(error=f"wip snapshot failed: {exc}"))
            return
        self.ctx.record.wip = commit
        self.ctx.emit(et.WipSaved(ref=ref, commit=commit, not_captured=omitted))

    def _write_candidate(self, head: Oid, status: Status) -> None:
        ref = task_refs(self.ctx.task)["candidate"]
        old = self.ctx.repo.ref_target(ref)
        try:
            if old != head:
                self.ctx.repo.update_ref(
                    ref, head, old=old, message=f"gitsup: candidate {status.value}"
                )
        except RefConflict as exc:
            self.ctx.record.reasons.append(f"candidate ref not written: {exc}")
            return
        self.ctx.record.candidate = head
        note = CandidateNote(
            task=self.ctx.task,
            status=status,
            baseline=self.ctx.record.baseline,
            candidate=head,
            branch=self.ctx.record.branch,
            goal=self.ctx.spec.goal,
            checks=self.ctx.record.checks,
            review=self.ctx.record.review,
            turns=self.ctx.record.turns,
            cost_usd=self.ctx.record.cost_usd,
            repair_rounds=self.ctx.record.repair_rounds,
            reasons=self.ctx.record.reasons,
            decisions=self.ctx.record.decisions,
            created_at=self.ctx.record.created_at,
            finished_at=time.time(),
            cost=_cost_breakdown(self.ctx.task, self.ctx.journal.log),
            policy_change=self.ctx.repo.policy_change(Oid(self.ctx.record.baseline), head),
            agent_binary=self.ctx.record.agent_binary,
            **_comments(self.ctx.repo, self.ctx.task, self.ctx.journal.log, head),
        )
        self.ctx.repo.write_note(head, note.to_text())


def _comments(repo: GitRepo, task: str, log: EventLog, head: Oid) -> dict[str, Any]:
    """The review comments the note carries, with their status against `head`
    (gitsup/store/comments.py); nothing when the task has none."""
    from gitsup.store.comments import note_fields, read

    try:
        return note_fields(repo, task, read(log), head)
    except Exception as exc:  # the note is written regardless; the log keeps the comments
        return {"comments_error": str(exc)[:300]}


def _cost_breakdown(task: str, log: EventLog) -> dict[str, Any] | None:
    from gitsup.store.ledger import task_cost

    try:
        return task_cost(task, (e.as_dict() for e in log.read())).breakdown()
    except Exception:
        return None


NOT_CAPTURED_LIST_LIMIT = 200


def bound_not_captured(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most NOT_CAPTURED_LIST_LIMIT entries (those that block a discard first); the rest
    become one summary entry with their count and total size."""
    if len(items) <= NOT_CAPTURED_LIST_LIMIT:
        return items
    ordered = sorted(items, key=lambda i: not i.get("blocks_discard", True))
    keep, rest = ordered[: NOT_CAPTURED_LIST_LIMIT - 1], ordered[NOT_CAPTURED_LIST_LIMIT - 1 :]
    summary = {
        "path": f"({len(rest)} more paths)",
        "bytes": sum(int(i.get("bytes") or 0) for i in rest),
        "why": "; ".join(sorted({str(i.get("why")) for i in rest})),
        "blocks_discard": any(i.get("blocks_discard", True) for i in rest),
    }
    return [*keep, summary]
