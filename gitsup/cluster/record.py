"""Git is the record: a task's refs and notes on the review remote (`sup.reviewRemote`), and
what another clone does with them.

- `publish`: push a task's refs (`refs/sup/<id>/{baseline,wip,candidate,log,record}`) and
  the notes (merged with the remote's, never pushed over them) to the review remote. The
  supervisor does it at every turn's end and at the task's end when
  `git config sup.cluster.publish true` (gitsup/supervision/publisher.py).
- `fetch_task`: bring a task's refs and notes into this clone, and, for a task that does
  not live here, a copy of its record, spec and sealed log in its task dir (marked
  `fetched.json`), so `git sup show`, `log`, `report` and `wait` read it as any other.
- `adopt`: continue here a task whose host is gone: fetch it, make its branch, worktree and
  private Git dir from the last published wip (else the candidate, else the baseline),
  continue its log from the sealed chain with `host_changed`, then take it over as
  `git sup recover --takeover` does (a new worker with the takeover context).

The remote's gate keeps the record honest across hosts: `refs/sup/*` and `refs/notes/sup`
only move forward and are never deleted, and no protected branch moves without a signed
integration. A host that was taken for dead but is not cannot publish over the task's
newer state: its push is not a fast-forward, and is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitsup import jsonio
from gitsup.errors import GitsupError
from gitsup.git import NOTES_REF, GitRepo
from gitsup.git import remote as transport
from gitsup.ids import Oid, TaskId, parse_task_id
from gitsup.layout import task_branch, task_record_ref, task_refs
from gitsup.names import RECORD_FILE, SPEC_FILE
from gitsup.state import TERMINAL
from gitsup.store.events import Event
from gitsup.store.record import TaskRecord
from gitsup.store.suprepo import SupRepo, worktree_root
from gitsup.supervision.publisher import Published, publish_refs, review_remote

if TYPE_CHECKING:
    from gitsup.spec import TaskSpec

__all__ = [
    "Fetched",
    "adopt",
    "fetch_task",
    "host_name",
    "is_fetched",
    "publish",
]


def host_name(repo: GitRepo | None = None) -> str:
    """This host's name when none is given: `git config sup.cluster.host`, else the
    system's host name."""
    configured = repo.config_get("sup.cluster.host") if repo is not None else None
    return configured or socket.gethostname()


def is_fetched(ctx: SupRepo, task: str) -> bool:
    """Is the task dir here a copy fetched from the review remote (the task lives elsewhere)?"""
    return ctx.layout.fetched(parse_task_id(task)).exists()


# --- publish ---------------------------------------------------------------------------------


def publish(ctx: SupRepo, task: str, *, remote: str | None = None) -> Published:
    """Seal the task's log and push its refs and notes to the review remote (`remote`, else
    `sup.reviewRemote`). Safe while its supervisor runs (the seal is locked and
    compare-and-swap). Raises GitsupError when the remote or a gate refuses."""
    from gitsup.supervision.journal import task_log

    tid = parse_task_id(task)
    ctx.store.load(tid)
    if is_fetched(ctx, tid):
        raise GitsupError(
            f"task {tid} is a copy fetched from the review remote; its own host publishes it"
        )
    with task_log(ctx.layout, tid, _spec(ctx.layout.task_dir(tid) / SPEC_FILE)) as log:
        log.seal(ctx.repo, "published")
    return publish_refs(ctx.repo, ctx.layout, tid, remote=remote)


# --- fetch -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    task: TaskId
    remote: str
    local: bool  # the task lives in this clone (only its refs and notes were fetched)
    record: TaskRecord | None  # the record as published (None: not published yet)
    refs: dict[str, Oid]


def _fetch_refs(ctx: SupRepo, tid: TaskId, remote: str) -> dict[str, Oid]:
    repo = ctx.repo
    try:
        theirs = transport.fetch_and_one(
            repo.main_workdir,
            repo.common_dir,
            remote,
            [f"refs/sup/{tid}/*:refs/sup/{tid}/*"],
            NOTES_REF,
        )
    except transport.TransportError as exc:
        raise GitsupError(
            f"cannot fetch task {tid} from {remote}: {exc.message}",
            hint="a local ref of the task that is not behind the remote's is not overwritten",
        ) from exc
    if theirs is not None:
        repo.merge_notes(theirs)
    names = [*task_refs(tid).values(), task_record_ref(tid)]
    return {n: t for n in names if (t := repo.ref_target(n)) is not None}


def _published(repo: GitRepo, tid: TaskId) -> dict[str, bytes]:
    tip = repo.ref_target(task_record_ref(tid))
    return dict(repo.read_tree_blobs(tip)) if tip is not None else {}


def _sealed_log(repo: GitRepo, tid: TaskId) -> bytes:
    tip = repo.ref_target(task_refs(tid)["log"])
    if tip is None:
        return b""
    return b"".join(b for n, b in repo.read_tree_blobs(tip) if n.endswith(".jsonl"))


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def fetch_task(ctx: SupRepo, task: str, *, remote: str | None = None) -> Fetched:
    """Fetch the task's refs and notes from the review remote. A task that does not live
    in this clone gets (or has refreshed) a copy of its published record, spec and sealed
    log in its task dir, marked as fetched, for `show`, `log`, `report` and `wait`."""
    tid = parse_task_id(task)
    name = review_remote(ctx.repo, remote)
    refs = _fetch_refs(ctx, tid, name)
    d = ctx.layout.task_dir(tid)
    if d.exists() and not ctx.layout.fetched(tid).exists():
        with contextlib.suppress(GitsupError):
            return Fetched(tid, name, True, ctx.store.load(tid), refs)
        return Fetched(tid, name, True, None, refs)
    files = _published(ctx.repo, tid)
    if RECORD_FILE not in files:
        if task_refs(tid)["baseline"] not in refs:
            raise GitsupError(
                f"the review remote {name} has no task {tid}",
                hint="its host publishes it once `git config sup.cluster.publish true` is set there",
            )
        return Fetched(tid, name, False, None, refs)
    ctx.layout.ensure()
    d.mkdir(exist_ok=True)
    for fname in (SPEC_FILE, RECORD_FILE):
        if fname in files:
            _write(d / fname, files[fname])
    _write(ctx.layout.events(tid), _sealed_log(ctx.repo, tid))
    marker = {"remote": name, "fetched_at": time.time(), "refs": refs}
    _write(ctx.layout.fetched(tid), json.dumps(marker, indent=1).encode())
    return Fetched(tid, name, False, ctx.store.load(tid), refs)


# --- adopt (failover) ------------------------------------------------------------------------


def _spec(path: Path) -> Any:
    from gitsup.spec import TaskSpec

    return TaskSpec.model_validate_json(path.read_bytes())


def _previous_host(raw: dict[str, Any], events: bytes) -> str | None:
    """The host the task last ran on: the record's `host`, else the log's last word on it."""
    host = raw.get("host")
    if isinstance(host, str) and host:
        return host
    found: str | None = None
    for line in events.splitlines():
        with contextlib.suppress(ValueError):
            ev = jsonio.loads(line)
            data = ev.get("data") if isinstance(ev, dict) else None
            if not isinstance(data, dict):
                continue
            if ev.get("type") == "host_changed" and isinstance(data.get("to"), str):
                found = data["to"]
            elif ev.get("type") == "worker_started" and isinstance(data.get("host"), str):
                found = data["host"]
    return found


def _continue_here(
    ctx: SupRepo,
    tid: TaskId,
    remote: str,
    on_event: Callable[[Event], None] | None,
    allow_new_binary: bool,
    *,
    run: bool,
) -> TaskRecord:
    """The task lives in this clone (it ran here, and its supervisor died): an ended task is
    returned; one whose sealed log is what the review remote has (or ahead of it) is taken
    over here as `git sup recover --takeover` does. One another host continued since (the
    remote's log is ahead of this clone's) is refused: continuing this copy would fork it."""
    from gitsup.supervision.recovery import recover_task

    record = ctx.store.load(tid)
    if record.state in TERMINAL:
        return record
    repo = ctx.repo
    ours = repo.ref_target(task_refs(tid)["log"])
    try:
        theirs = transport.fetch_one(
            repo.main_workdir, repo.common_dir, remote, task_refs(tid)["log"]
        )
    except transport.TransportError as exc:
        raise GitsupError(f"cannot read task {tid} on {remote}: {exc.message}") from exc
    if (
        theirs is not None
        and theirs != ours
        and (ours is None or not repo.is_ancestor(theirs, ours))
    ):
        raise GitsupError(
            f"task {tid} went on in another clone since this one ran it (its log on {remote} "
            "is ahead of this clone's); continuing this copy would fork it",
            hint=f"move this clone's copy away (`git sup discard {tid} --force`, then remove "
            f"its task dir {ctx.layout.task_dir(tid)}) and adopt it again",
        )
    if not run:
        return record
    return recover_task(
        ctx, tid, takeover=True, on_event=on_event, allow_new_binary=allow_new_binary
    )


def _same_spec(tid: TaskId, remote: str, published: bytes, spec: TaskSpec) -> None:
    """The spec published with the task's record is the one it was submitted with: a
    record rewritten by a host must not change what the task's worker, checks and policy
    are (GitsupError, bad input: no host may continue it)."""
    from gitsup.spec import TaskSpec

    try:
        theirs = TaskSpec.model_validate_json(published).model_dump(mode="json")
    except ValueError:
        theirs = None
    if theirs != spec.model_dump(mode="json"):
        raise GitsupError(
            f"the spec of task {tid} published on {remote} is not the one it was submitted "
            "with: refusing to continue it"
        )


def _reset_ref(repo: GitRepo, ref: str, to: Oid) -> None:
    current = repo.ref_target(ref)
    if current is not None and current != to:
        repo.update_ref(ref, to, old=current, message="gitsup: adopting the task failed")


def adopt(
    ctx: SupRepo,
    task: str,
    *,
    host: str | None = None,
    remote: str | None = None,
    run: bool = True,
    on_event: Callable[[Event], None] | None = None,
    allow_new_binary: bool = False,
    spec: TaskSpec | None = None,
) -> TaskRecord:
    """Continue in this clone a task another host ran and published (its host is gone):

    1. fetch its refs and notes; an ended task is only fetched (its record returned);
    2. its branch at the head the last published wip names (else its candidate, else its
       baseline), a worktree under this clone's worktree root with its private Git dir,
       the wip's files as the worktree's uncommitted changes;
    3. its record (this worktree, no supervisor, no worker) and spec from the remote; its
       log rebuilt from the sealed chain and continued (`host_changed`: from, to, what it
       continues from);
    4. with `run`, taken over as `git sup recover --takeover` does: a new worker, told
       that it takes over, supervised here until the task ends (returns the final record).

    `spec`: the task's spec as its submitter gave it (an engine holds it): the one
    published on the review remote, which any host that publishes could have written, must
    be the same, else the task is not continued (GitsupError). The published record is
    checked: its id, branch (`sup/<id>`) and baseline (`refs/sup/<id>/baseline`), and the
    state it continues from descends from the baseline.

    A task that lives in this clone (it ran here) is taken over here instead, as
    `git sup recover --takeover` does, unless another host continued it since."""
    from gitsup.store import eventtypes as et
    from gitsup.store import taskgit
    from gitsup.supervision.journal import task_log
    from gitsup.supervision.recovery import recover_task
    from gitsup.tasks.lifecycle import init_repo

    tid = parse_task_id(task)
    repo, layout = ctx.repo, ctx.layout
    ctx.refuse_in_task("adopt a task")
    name = review_remote(repo, remote)
    d = layout.task_dir(tid)
    if d.exists() and not layout.fetched(tid).exists():
        return _continue_here(ctx, tid, name, on_event, allow_new_binary, run=run)
    refs = _fetch_refs(ctx, tid, name)
    files = _published(repo, tid)
    if RECORD_FILE not in files or SPEC_FILE not in files:
        raise GitsupError(f"the review remote {name} has no published record of task {tid}")
    raw = jsonio.loads(files[RECORD_FILE])
    record = TaskRecord.model_validate(raw)
    if record.state in TERMINAL:
        fetched = fetch_task(ctx, tid, remote=name)
        return fetched.record or record
    if spec is not None:
        _same_spec(tid, name, files[SPEC_FILE], spec)
        files[SPEC_FILE] = spec.model_dump_json(indent=1).encode()
    wref, cref = task_refs(tid)["wip"], task_refs(tid)["candidate"]
    baseline = Oid(record.baseline)
    # What is published is only data to check: the task's own branch and baseline, and a
    # state that descends from it (never a branch of this clone's, such as a protected one).
    branch = task_branch(tid)
    if record.id != tid or record.branch != branch:
        raise GitsupError(f"the record of task {tid} on {name} names another task or branch")
    if refs.get(task_refs(tid)["baseline"]) != baseline:
        raise GitsupError(f"the record of task {tid} on {name} names another baseline")
    if wref in refs:
        snap, frm = refs[wref], "wip"
        parents = repo.commit_info(snap).parents
        if not parents:
            raise GitsupError(f"the wip of task {tid} on {name} names no head")
        head = parents[0]
    elif cref in refs:
        snap = head = refs[cref]
        frm = "candidate"
    else:
        snap = head = baseline
        frm = "baseline"
    if not repo.is_ancestor(baseline, head):
        raise GitsupError(f"the {frm} of task {tid} on {name} does not descend from its baseline")
    init_repo(ctx)
    wt = worktree_root(ctx) / tid
    if os.path.lexists(wt):
        raise GitsupError(f"cannot adopt task {tid}: {wt} already exists")
    current = repo.branch_target(branch)
    if current is not None and current != head:
        raise GitsupError(f"cannot adopt task {tid}: branch {branch} exists at {current[:12]}")
    to = host or host_name(repo)
    undo: list[Callable[[], object]] = []
    try:
        if current is None:
            repo.create_branch(branch, head)
            undo.append(lambda: repo.delete_branch(branch))
        # A fetched copy becomes the task itself.
        for stale in (layout.fetched(tid), layout.events(tid), layout.record(tid)):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        d.mkdir(parents=True, exist_ok=True)
        undo.append(lambda: shutil.rmtree(d, ignore_errors=True))
        (d / SPEC_FILE).write_bytes(files[SPEC_FILE])
        spec = _spec(d / SPEC_FILE)
        repo.add_worktree(tid, wt, branch)
        undo.append(lambda: repo.remove_worktree(tid, wt))
        taskgit.create(repo, layout, tid, wt, branch, head)
        if snap != head and repo.tree_of(snap) != repo.tree_of(head):
            transport.read_tree_onto(taskgit.private_dir(layout, tid), wt, head, snap)
        previous = _previous_host(raw if isinstance(raw, dict) else {}, _sealed_log(repo, tid))
        record.worktree = str(wt)
        record.head = head
        record.supervisor = None
        record.worker = None
        record.spawn_pending = False
        record.paused_by_user = None
        record.left_behind = []
        if "host" in TaskRecord.model_fields:
            setattr(record, "host", to)  # noqa: B010 (a field this gitsup may not have)
        record.reasons.append(
            f"continued on host {to} from the {frm} published"
            + (f" by host {previous}" if previous else "")
        )
        ctx.store.save(record)
        log_ref, log_tip = task_refs(tid)["log"], refs.get(task_refs(tid)["log"])
        if log_tip is not None:
            # the commit restore_sealed adds, taken back: the fetched chain stays as it was
            undo.insert(0, lambda: _reset_ref(repo, log_ref, log_tip))
        with task_log(layout, tid, spec) as log:
            last = log.restore_sealed(repo, f"continued on host {to}")
            log.append(
                et.HostChanged(
                    from_=previous, to=to, continued_from=frm, commit=snap, head=head, last_seq=last
                )
            )
    except BaseException:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()
        raise
    if not run:
        return record
    return recover_task(
        ctx, tid, takeover=True, on_event=on_event, allow_new_binary=allow_new_binary
    )
