"""Task-level operations behind the CLI: init, start, show, ls, stop, discard."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitsup.errors import Exit, GitsupError
from gitsup.git import WIP_MAX_FILE_BYTES, GitRepo
from gitsup.host.procid import ProcessId
from gitsup.ids import Oid, TaskId, parse_task_id
from gitsup.layout import task_branch, task_refs
from gitsup.preload import preloading
from gitsup.state import TERMINAL, State, Status
from gitsup.store.records import TaskLock
from gitsup.store.suprepo import SupRepo, worktree_root
from gitsup.tasks.listing import LsRow
from gitsup.workers.kinds import KINDS

if TYPE_CHECKING:
    from gitsup.spec import TaskSpec
    from gitsup.store.events import Event
    from gitsup.store.record import TaskRecord
    from gitsup.supervision.journal import EventSink
    from gitsup.supervision.launcher import WorkerFactory


SUP_NOTES_DISPLAY = "refs/notes/[s]up"  # exactly refs/notes/sup, quiet while it is missing


# --- init ---------------------------------------------------------------------------


@dataclass(frozen=True)
class InitResult:
    sup_dir: str
    protected: list[str]
    display_ref: bool
    changed: list[str]
    hooks: list[str]


def init_repo(
    ctx: SupRepo, *, protected: list[str] | None = None, explicit: bool = False
) -> InitResult:
    """Idempotent: state dir, notes display ref, protected branches, the boundary (hook,
    signing key, allowed signers, trust root; see gitsup/integration/setup.py).

    Serialized across processes: several first `git sup start`s at once must neither fail
    on libgit2's .git/config lock nor add the same values twice. `explicit`: a person ran
    `git sup init` (the boundary's settings snapshot is rewritten)."""
    created = not ctx.layout.root.exists()
    ctx.layout.ensure()
    with TaskLock(ctx.layout.root / "init.lock"):
        res = _init_repo_locked(ctx, protected=protected, explicit=explicit)
    if created and f"created {ctx.layout.root}" not in res.changed:
        res.changed.insert(0, f"created {ctx.layout.root}")
    return res


def _init_repo_locked(
    ctx: SupRepo, *, protected: list[str] | None = None, explicit: bool = False
) -> InitResult:
    changed: list[str] = []
    if not ctx.layout.root.exists():
        changed.append(f"created {ctx.layout.root}")
    ctx.layout.ensure()
    repo = ctx.repo
    refs = repo.config_get_all("notes.displayRef")
    if "refs/notes/sup" not in refs and SUP_NOTES_DISPLAY not in refs:
        # Only refs/notes/sup, as a pattern: a displayRef naming a ref that does not exist
        # yet makes `git log` warn; a pattern that matches nothing does not.
        repo.config_add("notes.displayRef", SUP_NOTES_DISPLAY)
        changed.append(f"notes.displayRef += {SUP_NOTES_DISPLAY}")
    # sup.protected adds to the defaults (gitsup/protected.py): what is configured is
    # protected, and so are the defaults.
    from gitsup.protected import DEFAULT_PROTECTED, effective

    current = repo.config_get_all("sup.protected")
    configured = list(protected) if protected else (current or list(DEFAULT_PROTECTED))
    if current != configured:
        repo.config_set_multi("sup.protected", configured)
        changed.append("sup.protected = " + " ".join(configured))
    wanted = list(effective(configured))
    hooks: list[str] = []
    from gitsup.integration.setup import init_boundary

    hooks, more = init_boundary(repo, explicit=explicit)
    changed.extend(more)
    return InitResult(str(ctx.layout.root), wanted, True, changed, hooks)


# --- start --------------------------------------------------------------------------


def prepare_task(
    ctx: SupRepo,
    spec: TaskSpec,
    *,
    detached: bool = False,
    source: str | None = None,
    task_id: TaskId | None = None,
    host: str | None = None,
) -> tuple[TaskRecord, Any]:
    """Validate, allocate the task, take the lease, create branch, worktree and baseline ref.
    `source`: the branch the baseline was taken from, when `spec.base` is its commit (the
    attempts of a best-of-N group share one resolved baseline). `task_id` and `host`: a
    cluster task's id (its submitter chose it) and the host that runs it.

    Returns the record (state idle) and the lease. Undoes its own steps on failure.
    """
    repo = ctx.repo
    baseline = repo.resolve_commit(spec.base)  # validate before writing anything
    source_branch = source or source_branch_of(ctx, spec.base)
    from gitsup.workers.preflight import preflight_start

    agent = preflight_start(ctx, spec, baseline)  # refuses before anything is written
    from gitsup.environment.recipe import load_recipe

    recipe = load_recipe(repo.main_workdir, spec.environment)  # a bad environment file: exit 2
    from gitsup.environment.setup import cache_kinds, setup_endpoints

    setup_endpoints(recipe.setup_egress)  # an unknown preset or a bad host:port: exit 2
    cache_kinds(recipe.cache)
    from gitsup.policy import load_policy

    # a malformed `.gitsup/policy.toml`, or a rule example that does not classify as declared,
    # is said now rather than at the worker's first request
    load_policy(repo.main_workdir, extra_protected=repo.config_get_all("sup.protected"))
    undo: list[Any] = []
    if not ctx.layout.root.exists():
        # The first start also sets the repository up; a start that fails takes that back.
        undo.append(_init_undo(ctx))
    try:
        init_repo(ctx)
        store = ctx.store
        task = store.create(task_id)
    except BaseException:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()
        raise
    task_dir = ctx.layout.task_dir(task)
    wt_path = worktree_root(ctx) / task
    branch = task_branch(task)
    refs = task_refs(task)
    undo.append(lambda: _rmtree(task_dir))
    try:
        if wt_path.exists():
            raise GitsupError(f"worktree path {wt_path} already exists")
        lease = ctx.leases.acquire(wt_path, task)
        undo.append(lambda: ctx.leases.release(lease))
        ctx.store.save_spec(task, spec)
        repo.create_branch(branch, baseline)
        undo.append(lambda: repo.delete_branch(branch))
        spare = None
        from gitsup.tasks import pool

        use_pool = pool.pool_size(ctx) > 0
        if use_pool:
            spare = pool.take(ctx, baseline)
        if spare is not None:
            undo.append(lambda: repo.remove_worktree(task, wt_path))
            pool.install_spare(ctx, spare, wt_path, branch, baseline)
        else:
            with preloading(after_checkout(spec)):
                repo.add_worktree(task, wt_path, branch)
            undo.append(lambda: repo.remove_worktree(task, wt_path))
        from gitsup.store import taskgit as gitstate

        gitstate.create(repo, ctx.layout, task, wt_path, branch, baseline)
        if use_pool:
            pool.refill_in_background(ctx)
        repo.update_ref(refs["baseline"], baseline, old=None, message=f"gitsup: baseline of {task}")
        undo.append(lambda: repo.delete_ref(refs["baseline"]))
        from gitsup.store.record import TaskRecord

        record = TaskRecord(
            id=task,
            goal=spec.goal,
            baseline=baseline,
            base_rev=spec.base,
            source_branch=source_branch,
            branch=branch,
            worktree=str(wt_path),
            worker_kind=spec.worker.kind,
            detached=detached,
            host=host,
            agent_binary=agent.as_dict() if agent is not None else None,
        )
        store.save(record)
        from gitsup.store.events import EventLog
        from gitsup.store.eventtypes import TaskStarted

        with EventLog(ctx.layout.events(task), task) as log:
            log.worker = 0  # before any worker
            log.append(
                TaskStarted(
                    goal=spec.goal,
                    baseline=Oid(baseline),
                    base=spec.base,
                    branch=branch,
                    worktree=str(wt_path),
                    worker=spec.worker.kind,
                    checks=[c.name for c in spec.effective_checks(baseline)],
                )
            )
        return record, lease
    except BaseException:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()
        raise


# What a task imports once its worktree is checked out, besides its worker kind's adapter
# module (gitsup/workers/kinds.py; the supervisor's own modules come with
# gitsup.supervision.supervisor): imported while `git` checks the worktree out.
TASK_MODULES = (
    "gitsup.store.taskgit",
    "gitsup.store.record",
    "gitsup.store.events",
    "gitsup.supervision.supervisor",
    "gitsup.host.sandbox",
)


def after_checkout(spec: TaskSpec) -> list[str]:
    """The modules a task of `spec` imports after its checkout (pyroute2 for a network
    namespace: its package imports all of its modules, about 0.1 s)."""
    kind = KINDS.get(spec.worker.kind, KINDS["process"])
    mods = [*TASK_MODULES, kind.module]
    if spec.isolation.network != "host":
        mods.append("pyroute2")
    return mods


def _init_undo(ctx: SupRepo) -> Any:
    """A step that undoes a first `init` (state directory, config, pre-push hook) as long as
    nothing else has used or changed them since; it never removes another task's state."""
    config = ctx.repo.common_dir / "config"
    config_before = config.read_bytes() if config.exists() else None
    from gitsup.git.hooks import hooks_dir

    hooks = hooks_dir(ctx.repo)
    hook_before = {
        name: (hooks / name).read_bytes() if (hooks / name).is_file() else None
        for name in ("pre-push", "pre-push.local")
    }

    def undo() -> None:
        layout = ctx.layout
        others = [p for p in layout.tasks.iterdir()] if layout.tasks.exists() else []
        leases = list(layout.leases.glob("*.json")) if layout.leases.exists() else []
        if others or leases:
            return  # another task started meanwhile: the set-up is in use
        _rmtree(layout.root)
        if config_before is not None:
            config.write_bytes(config_before)
        for name, before in hook_before.items():
            path = hooks / name
            if before is None:
                with contextlib.suppress(OSError):
                    path.unlink()
            elif not path.is_file() or path.read_bytes() != before:
                path.write_bytes(before)
                path.chmod(0o755)

    return undo


def source_branch_of(ctx: SupRepo, base: str) -> str | None:
    """The branch a task's baseline comes from (`HEAD`'s, or `base` when it names one)."""
    return ctx.repo.head_branch() if base == "HEAD" else _branch_name(ctx.repo, base)


def _branch_name(repo: GitRepo, rev: str) -> str | None:
    for cand in (rev, rev.removeprefix("refs/heads/")):
        if repo.branch_target(cand) is not None:
            return cand
    return None


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def run_task(
    ctx: SupRepo,
    spec: TaskSpec,
    *,
    on_event: EventSink | None = None,
    on_prepared: Any = None,
    worker_factory: WorkerFactory | None = None,
) -> TaskRecord:
    record, lease = prepare_task(ctx, spec)
    if on_prepared is not None:
        on_prepared(record)
    from gitsup.supervision.supervisor import Supervisor, default_worker_factory

    sup = Supervisor(
        ctx.repo,
        ctx.layout,
        record,
        spec,
        lease,
        on_event=on_event,
        worker_factory=worker_factory or default_worker_factory,
    )
    return remove_unstarted(ctx, sup.run())


def remove_unstarted(ctx: SupRepo, record: TaskRecord) -> TaskRecord:
    """A task whose worker never started leaves no worktree or branch behind (its record,
    event log and baseline ref stay: they say what happened)."""
    if record.state != State.FAILED or (record.worker or {}).get("pid") is not None:
        return record
    if record.turns or record.candidate or record.wip:
        return record
    repo = ctx.repo
    tid = TaskId(record.id)
    wt = Path(record.worktree) if record.worktree else None
    if repo.branch_target(record.branch) not in (None, record.baseline):
        return record
    removed = []
    try:
        if wt is not None and (wt.exists() or repo.worktree_path(tid) is not None):
            wrepo = GitRepo.open(wt) if wt.exists() else None
            if wrepo is not None and not wrepo.is_clean():
                return record
            repo.remove_worktree(tid, wt)
            removed.append("worktree")
        if repo.branch_target(record.branch) is not None:
            repo.delete_branch(record.branch)
            removed.append("branch")
    except (GitsupError, OSError):
        return record
    if removed:
        record.reasons.append(f"the worker never started: its {' and '.join(removed)} were removed")
        record.discarded_at = time.time()
        ctx.store.save(record)
    return record


# --- show / ls / log -------------------------------------------------------------------


def show_dict(ctx: SupRepo, record: TaskRecord) -> dict[str, Any]:
    d = record.model_dump(mode="json")
    from gitsup.store.events import EventLog

    d["events"] = EventLog(ctx.layout.events(TaskId(record.id)), TaskId(record.id)).count()
    d["refs"] = {k: v for k, v in task_refs(TaskId(record.id)).items()}
    d["owner_alive"] = record.state not in TERMINAL and _owner_alive(record)
    d["queue_evidence"] = queue_evidence(ctx, record)
    d["policy_change"] = policy_change(ctx, record)
    from gitsup.tasks.human import pending

    d["pending"] = pending(ctx, record)
    from gitsup.tasks.comments import comments_of

    got = comments_of(ctx, record)
    d["comments"] = [*got["revises"], *got["comments"]]
    return d


def queue_evidence(ctx: SupRepo, record: TaskRecord) -> dict[str, Any] | None:
    """Why the integration queue sent the candidate back (its note's `queue_evidence`: the
    failing composition checks with their output, or the conflicting paths), else None."""
    if not record.candidate:
        return None
    text = ctx.repo.read_note(Oid(record.candidate))
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    ev = data.get("queue_evidence") if isinstance(data, dict) else None
    return ev if isinstance(ev, dict) else None


def policy_change(ctx: SupRepo, record: TaskRecord) -> list[str]:
    """The paths under `.gitsup/` the task's candidate (else its branch head) changes."""
    head = record.candidate or record.head
    if not head or not record.baseline:
        return []
    try:
        return ctx.repo.policy_change(Oid(record.baseline), Oid(head))
    except (GitsupError, KeyError, ValueError):
        return []  # objects gone (a pruned task): nothing to say


def _owner_alive(record: TaskRecord) -> bool:
    pid = ProcessId.from_dict(record.supervisor)
    return bool(pid and pid.alive())


def list_tasks(ctx: SupRepo, records: list[dict[str, Any]] | None = None) -> list[LsRow]:
    """One row per task (gitsup/tasks/listing.py), from `records` when the caller read them."""
    from gitsup.tasks.listing import Listing
    from gitsup.tasks.listing import list_tasks as rows_of

    return rows_of(Listing.of(ctx), records)


def read_events(ctx: SupRepo, task: str) -> Iterator[Event]:
    from gitsup.store.events import EventLog

    tid = parse_task_id(task)
    ctx.store.load(tid)
    return EventLog(ctx.layout.events(tid), tid).read()


# --- stop / discard ----------------------------------------------------------------------


def stop_task(ctx: SupRepo, task: str, *, wait: float = 60.0) -> TaskRecord:
    record = ctx.store.load(task)
    if record.state in TERMINAL:
        raise GitsupError(
            f"task {task} already ended ({record.state.value}, {record.status.value})"
        )
    owner = ProcessId.from_dict(record.supervisor)
    if owner is None or not owner.alive():
        from gitsup.supervision.recovery import recover_hint

        raise GitsupError(
            f"task {task} is {record.state.value} but its supervisor is not running",
            hint=f"{recover_hint(ctx, task)}; `git sup doctor` lists such tasks",
        )
    from gitsup.supervision.supervisor import STOP_REQUEST_FILE

    with contextlib.suppress(OSError):
        (ctx.layout.task_dir(TaskId(record.id)) / STOP_REQUEST_FILE).write_text(
            f"`git sup stop` (pid {os.getpid()})\n", encoding="utf-8"
        )
    os.kill(owner.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        record = ctx.store.load(task)
        if record.state in TERMINAL:
            return record
        if not owner.alive():
            break
        time.sleep(0.05)
    record = ctx.store.load(task)
    if record.state not in TERMINAL:
        raise GitsupError(
            f"task {task} did not stop within {wait:g}s (state {record.state.value})",
            exit_code=Exit.INTERNAL,
        )
    return record


@dataclass(frozen=True)
class DiscardResult:
    task: str
    removed: list[str]
    kept: list[str]


def discard_task(ctx: SupRepo, task: str, *, force: bool = False) -> DiscardResult:
    """Remove the task's worktree and lease. Its refs (branch, baseline, candidate,
    wip, log) stay: they are the record. Refuses while a live supervisor owns it,
    and when uncommitted work is not captured in a ref (unless `force`). A task that had
    not ended (its supervisor died) is discarded only after the worker-gone proof of
    recovery (its worker killed if need be); without it, nothing is removed."""
    record = ctx.store.load(task)
    tid = TaskId(record.id)
    repo = ctx.repo
    lease = ctx.leases.get(record.worktree) if record.worktree else None
    if record.left_behind:
        raise GitsupError(
            f"task {task} left its worker behind ({'; '.join(record.left_behind)})",
            hint="`git sup doctor --fix` stops it and releases the lease; then discard",
        )
    if lease is not None and lease.owner_alive:
        raise GitsupError(
            f"task {task} is owned by a running supervisor (pid {lease.owner.pid})",
            hint=f"`git sup stop {task}` first",
        )
    if record.state not in TERMINAL and record.worker:
        # Its supervisor died mid-task: the worker may live on. The same proof as at
        # recovery (cgroup emptied, pid gone, no marked process), or nothing is removed.
        from gitsup.supervision.recovery import require_worker_gone

        require_worker_gone(
            ctx,
            record,
            task,
            at="discard",
            worker="worker",
            kept="the worktree and its lease are kept",
            hint="`git sup doctor --fix` stops it and releases the lease; then discard",
        )
    if not force:
        uncaptured = _uncaptured_work(ctx, record)
        if uncaptured:
            raise GitsupError(
                f"refusing to discard task {task}: {uncaptured} are not captured in any ref",
                hint="commit them on the task branch, or pass --force to discard them",
            )
    removed: list[str] = []
    wt = Path(record.worktree) if record.worktree else None
    if wt is not None and (wt.exists() or repo.worktree_path(tid) is not None):
        repo.remove_worktree(tid, wt)
        removed.append(f"worktree {wt}")
    from gitsup.store import taskgit as gitstate

    if gitstate.remove(ctx.layout, tid):
        removed.append(f"private Git dir {gitstate.private_dir(ctx.layout, tid)}")
    from gitsup.environment.include import remove_layers

    if remove_layers(ctx.layout.task_dir(tid) / "env"):
        removed.append(f"include layers {ctx.layout.task_dir(tid) / 'env'}")
    if lease is not None:
        ctx.leases.break_lease(lease.path)
        removed.append("stale lease")
    if record.state not in TERMINAL:
        record.reasons.append("discarded before it ended")
        record.state = State.STOPPED
        record.status = Status.STOPPED
        record.finished_at = time.time()
    record.discarded_at = time.time()
    ctx.store.save(record)
    kept = [f"refs/heads/{record.branch}"] if repo.branch_target(record.branch) else []
    kept += [n for n in task_refs(tid).values() if repo.ref_target(n) is not None]
    return DiscardResult(record.id, removed, kept)


def _uncaptured_work(ctx: SupRepo, record: TaskRecord) -> str | None:
    """Uncommitted changes in the worktree that no wip ref holds."""
    repo = ctx.repo
    wt = Path(record.worktree) if record.worktree else None
    if wt is None or not wt.exists():
        return None
    from gitsup.store import taskgit as gitstate

    try:
        wrepo = gitstate.open_worktree(ctx.layout, TaskId(record.id), wt)
    except GitsupError:
        return None
    wip = repo.ref_target(task_refs(TaskId(record.id))["wip"])
    try:
        head: Oid | None = wrepo.head_commit()
    except GitsupError:
        head = None
    omitted: list[dict[str, object]] = []
    tree = wrepo.working_tree.snapshot_tree(
        include_untracked=True,
        max_file_bytes=WIP_MAX_FILE_BYTES,
        baseline=Oid(record.baseline) if record.baseline else None,
        omitted=omitted,
    )
    lost = [i for i in omitted if i.get("blocks_discard", True)]
    if lost:
        return "not saved by a snapshot: " + ", ".join(
            f"{i.get('path')} ({i.get('bytes')} bytes: {i.get('why')})" for i in lost
        )
    if head is not None and not repo.has_object(head):
        return f"commits in {wt} that were never imported into the repository (HEAD {head[:12]})"
    if head is not None and tree == repo.tree_of(head):
        return None
    if wip is not None and repo.tree_of(wip) == tree:
        return None
    n = len([p for p in wrepo.status_entries()])
    return f"uncommitted changes ({n} path(s)) in {wt}"


def status_exit(record: TaskRecord) -> int:
    from gitsup.state import EXIT_OF

    if record.state not in TERMINAL:
        return Exit.OK
    return EXIT_OF.get(record.status, Exit.INTERNAL)


def foreground_exit(record: TaskRecord) -> int:
    """The exit code of a foreground `start`: a task stopped by Ctrl-C (SIGINT) exits 130
    (its work kept, the caller interrupted), any other ends as `status_exit` says."""
    if record.state == State.STOPPED and record.stop_signal == "SIGINT":
        return Exit.INTERRUPTED
    return status_exit(record)


# --- prune ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PruneResult:
    dry_run: bool
    removed: list[dict[str, str]]
    kept: list[dict[str, str]]

    def as_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "removed": self.removed, "kept": self.kept}


def prune_tasks(ctx: SupRepo, *, force: bool = False, dry_run: bool = False) -> PruneResult:
    """Remove the worktrees and branches of tasks that ended. The task's refs under
    refs/sup/ stay. A worktree with uncommitted work no ref holds, and a branch whose
    commits no other ref reaches, are kept unless `force`."""
    repo = ctx.repo
    removed: list[dict[str, str]] = []
    kept: list[dict[str, str]] = []
    for record in sorted(ctx.store.iter_records(), key=lambda r: (r.created_at, r.id)):
        if record.state not in TERMINAL:
            continue
        tid = TaskId(record.id)
        wt = Path(record.worktree) if record.worktree else None
        wt_present = wt is not None and (wt.exists() or repo.worktree_path(tid) is not None)
        lease = ctx.leases.get(record.worktree) if record.worktree else None
        if record.left_behind:
            left = "its worker was left behind (`git sup doctor --fix`)"
            kept.append({"task": record.id, "what": "task", "why": left})
            continue
        if lease is not None and lease.owner_alive:
            kept.append({"task": record.id, "what": "task", "why": "a running process owns it"})
            continue
        if wt_present and wt is not None:
            why = None if force else _uncaptured_work(ctx, record)
            if why:
                kept.append({"task": record.id, "what": f"worktree {wt}", "why": why})
                continue
            if not dry_run:
                from gitsup.store import taskgit as gitstate

                repo.remove_worktree(tid, wt)
                gitstate.remove(ctx.layout, tid)
                from gitsup.environment.include import remove_layers

                remove_layers(ctx.layout.task_dir(tid) / "env")
                if lease is not None:
                    ctx.leases.break_lease(lease.path)
                record.discarded_at = record.discarded_at or time.time()
                ctx.store.save(record)
            removed.append({"task": record.id, "what": f"worktree {wt}"})
        tip = repo.branch_target(record.branch) if record.branch else None
        if tip is None:
            continue
        held = _held_elsewhere(ctx, record, tip)
        if not held and not force:
            kept.append(
                {
                    "task": record.id,
                    "what": f"branch {record.branch}",
                    "why": f"its commit {tip[:12]} is on no other branch or task ref",
                }
            )
            continue
        if not dry_run:
            repo.delete_branch(record.branch)
        removed.append({"task": record.id, "what": f"branch {record.branch}"})
    return PruneResult(dry_run, removed, kept)


def _held_elsewhere(ctx: SupRepo, record: TaskRecord, tip: Oid) -> bool:
    """Whether another ref (a task ref of this task, or any other branch) reaches `tip`."""
    repo = ctx.repo
    refs = task_refs(TaskId(record.id))
    others = [repo.ref_target(refs[k]) for k in ("candidate", "wip", "baseline") if k in refs]
    others += [
        t
        for b in repo.local_branches()
        if b != record.branch and (t := repo.branch_target(b)) is not None
    ]
    return any(o is not None and (o == tip or repo.is_ancestor(tip, o)) for o in others)
