"""After a supervisor died: prove what is gone, then continue or park (`recover`), and
reconcile desired state with actual state (`doctor`).

Nothing here deletes uncommitted work: a task that is parked by `doctor --fix` has its
worktree snapshotted to `refs/sup/<id>/wip` first (the finalizer does it).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from gitsup.errors import GitsupError
from gitsup.faults import fault
from gitsup.host.contain import (
    Cgroup,
    cgroup_from_dict,
    find_cgroup_base,
    list_gitsup_cgroups,
    marked_processes,
)
from gitsup.host.proc import signal_group
from gitsup.host.procid import ProcessId, pid_alive
from gitsup.ids import TaskId
from gitsup.layout import Layout
from gitsup.names import TASK_MARKER
from gitsup.spec import TaskSpec
from gitsup.state import TERMINAL
from gitsup.store.events import Event
from gitsup.store.lease import CLEANUP_PENDING, Lease
from gitsup.store.record import TaskRecord
from gitsup.store.suprepo import SupRepo
from gitsup.supervision.supervisor import Supervisor
from gitsup.verification.confined import RUNNER_LABELS, runner_of
from gitsup.workers.kinds import worker_kind

if TYPE_CHECKING:
    from gitsup.workers.agents import AgentInfo


@dataclass
class WorkerProof:
    gone: bool
    how: str
    killed: list[int] = field(default_factory=list)


def _worker_cgroup(record: TaskRecord) -> Cgroup | None:
    w = record.worker or {}
    path, inode = w.get("cgroup"), w.get("cgroup_inode")
    if isinstance(path, str) and isinstance(inode, int):
        return Cgroup(Path(path), inode)
    if isinstance(path, dict):
        return cgroup_from_dict(path)
    return None


def prove_worker_gone(record: TaskRecord, *, kill: bool) -> WorkerProof:
    """The old worker is provably gone: its cgroup was emptied (killed if need be) and
    removed, or its pid is gone / belongs to another process, and no process carries the
    task's marker. A cgroup that cannot be removed fails the proof."""
    cg = _worker_cgroup(record)
    killed: list[int] = []
    if cg is not None and cg.path.exists():
        if not cg.exists():
            return WorkerProof(False, f"cgroup {cg.path} was replaced (inode differs)")
        procs = cg.procs()
        if procs:
            if not kill:
                return WorkerProof(False, f"cgroup {cg.path} still has {len(procs)} process(es)")
            killed += procs
            if not cg.kill(timeout=10.0):
                return WorkerProof(False, f"cgroup {cg.path} could not be emptied", killed)
        if not cg.remove():
            # an empty cgroup that stays is no proof: nothing keeps a process out of it
            return WorkerProof(False, f"cgroup {cg.path} could not be removed", killed)
    w = record.worker or {}
    ident = ProcessId.from_dict(w) if isinstance(w.get("pid"), int) else None
    if ident is not None and ident.alive():
        if not kill:
            return WorkerProof(False, f"worker pid {ident.pid} is alive")
        signal_group(int(w.get("pgid") or ident.pid), signal.SIGKILL)
        killed.append(ident.pid)
        end = time.monotonic() + 5
        while ident.alive() and time.monotonic() < end:
            time.sleep(0.02)
        if ident.alive():
            return WorkerProof(False, f"worker pid {ident.pid} survived SIGKILL", killed)
    marked = marked_processes(record.id)
    if marked:
        if not kill:
            return WorkerProof(
                False, f"{len(marked)} process(es) still carry {TASK_MARKER}={record.id}"
            )
        for p in marked:
            with contextlib.suppress(psutil.Error):
                p.kill()
                killed.append(p.pid)
        _gone, alive = psutil.wait_procs(marked, timeout=5)
        if alive:
            return WorkerProof(False, f"{len(alive)} marked process(es) survived SIGKILL", killed)
    how = "cgroup empty" if cg is not None else "pid gone (no cgroup: weaker proof)"
    return WorkerProof(True, how, killed)


def require_worker_gone(
    ctx: SupRepo, record: TaskRecord, task: str, *, at: str, worker: str, kept: str, hint: str
) -> WorkerProof:
    """The task's `worker` proven gone (killed if need be), or the action is refused: the
    record says it was left behind (`at` the action) and the error says what is `kept`."""
    proof = prove_worker_gone(record, kill=True)
    if not proof.gone:
        record.left_behind = [f"at {at}: {proof.how}"]
        ctx.store.save(record)
        raise GitsupError(
            f"task {task}: its {worker} is not provably gone ({proof.how}); {kept}", hint=hint
        )
    return proof


def release_dead(ctx: SupRepo, record: TaskRecord) -> WorkerProof:
    """What a task's dead supervisor held, let go: its worker proven gone (killed if need
    be), its network namespaces and egress gates removed, and, once the worker is gone,
    its worktree lease released. The task itself is left as it is (recoverable)."""
    proof = prove_worker_gone(record, kill=True)
    _remove_dead_netns(record.id)
    if proof.gone:
        _release_lease(ctx, record)
    return proof


def _owner(record: TaskRecord) -> ProcessId | None:
    return ProcessId.from_dict(record.supervisor)


def recover_task(
    ctx: SupRepo,
    task: str,
    *,
    takeover: bool,
    park: bool = False,
    on_event: Callable[[Event], None] | None = None,
    allow_new_binary: bool = False,
    extend: float | None = None,
) -> TaskRecord:
    """`extend`: with `takeover`, the continued task's deadline falls that many seconds
    from now."""
    reconcile_takeovers(ctx.layout, task)
    record = ctx.store.load(task)
    if ctx.layout.fetched(TaskId(record.id)).exists():
        raise GitsupError(
            f"task {task} is a copy fetched from the review remote: it runs in another clone",
            hint="when its host is gone, `git sup adopt-remote <id>` continues it here",
        )
    if record.state in TERMINAL:
        raise GitsupError(
            f"task {task} already ended ({record.state.value}, {record.status.value}); nothing to recover"
        )
    owner = _owner(record)
    if owner is not None and owner.alive():
        raise GitsupError(
            f"task {task} is owned by a live supervisor (pid {owner.pid})",
            hint=f"`git sup stop {task}` stops it; recover is for tasks whose supervisor died",
        )
    if ctx.store.staged_final(TaskId(task)) is not None:
        return complete_ended(ctx, TaskId(task), on_event=on_event)
    if not takeover:
        raise GitsupError(
            f"the supervisor of task {task} is dead (state {record.state.value})",
            hint=f"`git sup recover {task} --takeover` continues it with a new worker; add --park to park it",
        )
    spec = _spec_of(ctx, TaskId(task))
    if not park and worker_kind(spec.worker.kind).persistent and (record.worker or {}).get("pid"):
        # A persistent worker survives its supervisor: re-adopt it when its identity
        # still matches; a replaced process is refused and the task is parked.
        from gitsup.workers.base import WorkerError

        lease = ctx.leases.acquire(record.worktree, record.id, steal_dead=True)
        sup = Supervisor(ctx.repo, ctx.layout, record, spec, lease, on_event=on_event)
        try:
            return sup.adopt({"supervisor": record.supervisor, "worker": record.worker})
        except WorkerError as exc:
            record = ctx.store.load(task)
            if record.state in TERMINAL:
                return record
            ctx.leases.release(lease)
            park = True
            record.reasons.append(f"worker not re-adopted: {exc}")
            ctx.store.save(record)
    if not park:
        _same_agent_binary(ctx, record, spec, allow_new_binary)
    # A takeover is a transaction: the lease says `cleanup-pending` before anything of the
    # old owner's is touched, and is settled once the cleanup is done; a taker that dies
    # in between leaves a lease the next reader reconciles (`reconcile_takeovers`).
    lease = _take_pending(ctx, record)
    fault("takeover_cleanup_pending")
    proof = prove_worker_gone(record, kill=True)
    fault("takeover_worker_proven")
    if not proof.gone:
        # No new worker beside one that may live on: the task parks, its work saved, and
        # the lease stays held (`left_behind`) until `git sup doctor --fix` proves it gone.
        park = True
        record.left_behind = [f"at recovery: {proof.how}"]
        record.reasons.append(
            f"recovered: the old worker is not provably gone ({proof.how}); parked, "
            "the worktree lease stays held (see `git sup doctor --fix`)"
        )
        ctx.store.save(record)
    previous: dict[str, Any] = {
        "supervisor": record.supervisor,
        "worker": record.worker,
        "spawn_pending": record.spawn_pending,
        "worker_proof": proof.how,
        "killed": proof.killed,
    }
    previous["netns_removed"] = _remove_dead_netns(task)
    previous.update(_compare_head(ctx, record))
    fault("takeover_cleaned")
    lease = ctx.leases.settle(lease)
    record.paused_by_user = None  # the paused worker is gone with its supervisor
    sup = Supervisor(ctx.repo, ctx.layout, record, spec, lease, on_event=on_event)
    if extend is not None and not park:
        previous["extend"] = extend
        sup.machine.set_deadline(time.monotonic(), extend)
    return sup.resume(park=park, previous=previous)


def reconcile_takeovers(layout: Layout, task: str | None = None) -> list[tuple[str, str]]:
    """Takeovers interrupted half-way (a `cleanup-pending` lease whose taker is dead),
    reconciled: the cleanup is finished (the old worker killed and proven gone, the dead
    supervisors' network namespaces removed), then the takeover is rolled back (the lease
    released: the task is again one whose supervisor died, `recover --takeover` continues
    it). A proof that fails keeps the lease, settled, and says so in `left_behind`, as a
    takeover's own failed proof does. `task`: only that task's lease. Returns (task, what
    was done) per reconciled lease."""
    from gitsup.store.lease import LeaseStore
    from gitsup.store.records import TaskStore

    leases, store = LeaseStore(layout.leases), TaskStore(layout)
    done: list[tuple[str, str]] = []
    for lease in leases.all():
        if lease.state != CLEANUP_PENDING or lease.owner_alive:
            continue
        if task is not None and lease.task != task:
            continue
        if not layout.task_dir(TaskId(lease.task)).is_dir():
            continue  # no such task: a stale lease, `doctor --fix` releases it
        with store.lock(TaskId(lease.task)):
            current = leases.get(lease.path)
            if current is None or current.state != CLEANUP_PENDING or current.owner_alive:
                continue  # reconciled or taken meanwhile
            record = store.load(lease.task)
            taker = f"a takeover by pid {current.owner.pid} was interrupted"
            proof = prove_worker_gone(record, kill=True)
            _remove_dead_netns(record.id)
            if proof.gone:
                leases.release(current)
                what = f"{taker}: cleanup finished ({proof.how}), takeover rolled back"
            else:
                leases.settle(current)
                record.left_behind = [f"at an interrupted takeover: {proof.how}"]
                what = f"{taker}: the old worker is not provably gone ({proof.how}); lease kept"
            record.reasons.append(what)
            store.save(record)
            done.append((record.id, what))
    return done


def adopt_pane(
    ctx: SupRepo,
    task: str,
    pane: str,
    *,
    socket: str | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> TaskRecord:
    """`git sup adopt-tmux`: hand a tmux pane a person started in the worktree of a tmux
    task whose supervisor is gone to a new supervisor, which supervises it from then on
    as it does a re-adopted pane (hooks through the relay, the watchdog; detached at the
    end, never killed). Refused (exit 2): an ended task, one a live supervisor owns,
    another worker kind, and a pane that is unknown, dead, in another worktree, another
    user's, not running the task's agent executable or not reaching the supervisor
    (gitsup/workers/claude/tmux_pane.py). The old worker must be provably gone first, and
    the lease moves as in a takeover (`cleanup-pending`, then settled)."""
    from gitsup.host.proc import child_env
    from gitsup.workers.claude.tmux_pane import check_agent, locate_pane

    reconcile_takeovers(ctx.layout, task)
    record = ctx.store.load(task)
    if ctx.layout.fetched(TaskId(record.id)).exists():
        raise GitsupError(f"task {task} is a copy fetched from the review remote")
    if record.state in TERMINAL:
        raise GitsupError(
            f"task {task} already ended ({record.state.value}, {record.status.value}); "
            "there is nothing to hand a pane to"
        )
    owner = _owner(record)
    if owner is not None and owner.alive():
        raise GitsupError(
            f"task {task} is supervised by a live supervisor (pid {owner.pid})",
            hint=f"`git sup stop {task}` first, or `git sup attach {task}` to its own pane",
        )
    located = locate_pane(pane, socket=socket, worktree=Path(record.worktree))
    spec = _spec_of(ctx, TaskId(task))
    if spec.worker.kind != "tmux":
        raise GitsupError(
            f"task {task} runs a {spec.worker.kind} worker; only a tmux task adopts a pane"
        )
    recorded = record.agent_binary or {}
    found = check_agent(
        located,
        worktree=Path(record.worktree),
        agent_sha256=str(recorded.get("sha256") or "") or None,
        env=child_env(),
    )
    old = record.worker or {}
    lease = _take_pending(ctx, record)
    try:
        proof = require_worker_gone(
            ctx,
            record,
            task,
            at="adopt-tmux",
            worker="old worker",
            kept="the pane was not adopted and the lease stays held",
            hint="`git sup doctor --fix` stops what is left",
        )
    except GitsupError:
        ctx.leases.settle(lease)
        raise
    previous: dict[str, Any] = {
        "supervisor": record.supervisor,
        "worker": old,
        "worker_proof": proof.how,
        "killed": proof.killed,
        "netns_removed": _remove_dead_netns(task),
        "pane": found.pane_id,
        "socket": found.socket,
    }
    lease = ctx.leases.settle(lease)
    record.worker = found.identity()
    record.paused_by_user = None
    record.reasons.append(
        f"tmux pane {found.pane_id} (pid {found.pid}) a person started in the worktree was "
        "adopted; it runs outside the task's sandbox"
    )
    ctx.store.save(record)
    sup = Supervisor(ctx.repo, ctx.layout, record, spec, lease, on_event=on_event)
    from gitsup.workers.base import WorkerError

    try:
        return sup.adopt(previous, action="adopted")
    except WorkerError as exc:
        # Not adopted: the person's pane is not the task's worker (a later takeover must
        # never kill it), and the old one is gone: the lease goes back.
        record = ctx.store.load(task)
        record.worker = old
        ctx.store.save(record)
        ctx.leases.release(lease)
        raise GitsupError(f"tmux pane {found.pane_id} was not adopted: {exc}") from exc


def _compare_head(ctx: SupRepo, record: TaskRecord) -> dict[str, Any]:
    """The worktree's HEAD at recovery against what the record knows (the task branch, the
    last import), whatever the turn count: a commit the dead supervisor never imported is
    said (`recovered.previous`, a reason), and the import that follows takes it."""
    from gitsup.store.taskgit import worker_head

    now = worker_head(ctx.layout, TaskId(record.id))
    known = ctx.repo.branch_target(record.branch) if record.branch else None
    moved = now is not None and now != known
    if moved:
        record.reasons.append(
            f"at recovery the worktree's HEAD ({str(now)[:12]}) was not what the record knew "
            f"({str(known or record.baseline)[:12]}): work the dead supervisor never imported"
        )
    return {
        "worktree_head": now,
        "recorded_head": known,
        "head_moved": moved,
        "turns": record.turns,
    }


def _same_agent_binary(ctx: SupRepo, record: TaskRecord, spec: TaskSpec, allow_new: bool) -> None:
    """A new worker runs the agent executable the task started with: a changed one (its
    sha256) is refused unless `allow_new`, which records it. One that is unsafe or not as
    pinned is refused either way (gitsup/workers/agentbin.py)."""
    from gitsup.workers.agentbin import changed
    from gitsup.workers.preflight import worker_agent_binary

    current = worker_agent_binary(ctx.repo, spec)
    if current is None:
        return
    why = changed(record.agent_binary, current)
    if why is None:
        return
    if not allow_new:
        raise GitsupError(
            f"cannot continue task {record.id}: {why}",
            hint=f"`git sup recover {record.id} --takeover --allow-new-binary` continues "
            "with the new one; --park parks the task",
        )
    record.reasons.append(f"continued with a new agent executable: {why}")
    record.agent_binary = current.as_dict()
    ctx.store.save(record)


same_agent_binary = _same_agent_binary  # for a reopened task's new worker (gitsup/tasks/reopen.py)


def recover_hint(ctx: SupRepo, task: str) -> str:
    """What to do about a task whose supervisor is gone."""
    staged = ctx.store.staged_final(TaskId(task))
    if staged is not None:
        return (
            f"it ended ({staged.status.value}) before its record was completed: "
            f"`git sup recover {task}` completes it"
        )
    return f"`git sup recover {task} --takeover` continues or parks it"


def complete_ended(
    ctx: SupRepo, task: TaskId, *, on_event: Callable[[Event], None] | None = None
) -> TaskRecord:
    """Complete a task whose supervisor died as it ended, after it staged the terminal
    record (`Journal.finish`): its outcome was settled (candidate, wip, note, the record
    staged). `task_finished` is appended when the log lacks it, the staged record becomes
    the record, the log is sealed, the dead supervisor's network namespace removed, the
    lease released (unless cleanup could not prove the worker gone) and the task's end
    notified unless the log records that it was. No worker runs."""
    from gitsup.git import RefConflict
    from gitsup.store import eventtypes as et
    from gitsup.supervision.journal import task_log

    with ctx.store.lock(task):
        staged = ctx.store.staged_final(task)
        if staged is None:  # completed by another `recover` meanwhile
            return ctx.store.load(task)
        spec = _spec_of(ctx, task)
        log = task_log(ctx.layout, task, spec)
        with log:
            if not any(ev.type == "task_finished" for ev in log.recent()):
                ev = log.append(
                    et.TaskFinished(
                        state=staged.state.value,
                        status=staged.status.value,
                        exit_code=staged.exit_code,
                    )
                )
                if on_event is not None:
                    on_event(ev)
            staged.reasons.append(
                "the supervisor died as the task ended; `git sup recover` completed its record"
            )
            ctx.store.stage_final(staged)
            ctx.store.commit_final(task)
            with contextlib.suppress(GitsupError, RefConflict):
                log.seal(ctx.repo, f"task finished: {staged.status.value} (record completed)")
    _remove_dead_netns(task)
    if not staged.left_behind:
        _release_lease(ctx, staged)
    from gitsup.attention import notify

    done = staged.model_dump(mode="json")
    notifier = notify.notifier_for(ctx.repo, ctx.layout, spec, task, current=lambda: done)
    if notifier is not None:
        notifier.finish_late([ev.as_dict() for ev in log.read()])
        notifier.join(120.0)
    return staged


def _spec_of(ctx: SupRepo, task: TaskId) -> TaskSpec:
    return ctx.store.load_spec(task)


def _release_lease(ctx: SupRepo, record: TaskRecord) -> None:
    """Release the lease of `record`'s worktree if that task holds it."""
    lease = ctx.leases.get(record.worktree)
    if lease is not None and lease.task == record.id:
        ctx.leases.break_lease(lease.path)


def _remove_dead_netns(task: str) -> list[str]:
    """The network namespaces a dead supervisor of `task` left behind, removed."""
    from gitsup.host.contain import list_gitsup_netns, remove_netns

    gone = []
    for ns in list_gitsup_netns():
        if ns.label == task and not pid_alive(ns.pid) and remove_netns(ns.name):
            gone.append(ns.name)
    _stop_dead_gates(task)
    return gone


def _dead_gates(task: str) -> list[Any]:
    """The egress gates (processes of their own) serving `task` in a namespace made by a
    supervisor that is gone."""
    from gitsup.host.egress_gate import running_gates

    out = []
    for gate in running_gates():
        if gate.task != task:
            continue
        # the namespace's name is gitsup-<task>-<supervisor pid>-<hex>
        pid = Path(gate.netns).name.rsplit("-", 2)[-2:][0]
        if not pid.isdigit() or not pid_alive(int(pid)):
            out.append(gate)
    return out


def _stop_dead_gates(task: str) -> list[int]:
    from gitsup.host.egress_gate import stop_gate

    return [g.pid for g in _dead_gates(task) if stop_gate(g.pid)]


def network_isolation() -> str:
    """What network isolation tasks get here (doctor's first line)."""
    from gitsup.host.contain import netns_available

    why = netns_available()
    if why is None:
        return (
            "network: isolated by default (loopback-only namespaces; agents reach only their "
            "model API through the egress gate)"
        )
    return f'network: NOT isolated (network = "auto" falls back to the host network): {why}'


# --- doctor --------------------------------------------------------------------------------


@dataclass
class DoctorFinding:
    kind: str
    detail: str
    task: str | None = None
    fixed: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "task": self.task, "detail": self.detail, "fixed": self.fixed}


@dataclass(frozen=True)
class DoctorReport:
    """What `git sup doctor` found: the findings, and (when probed) the host's network
    isolation, the task sandbox and every known agent (`AgentInfo`)."""

    findings: list[DoctorFinding]
    network: str | None = None
    sandbox: str | None = None
    agents: list[AgentInfo] = field(default_factory=list)


def diagnose(ctx: SupRepo, *, fix: bool, probe: bool = True) -> DoctorReport:
    """Reconcile the tasks (`doctor`), then, with `probe`, probe the host's isolation, the
    sandbox and the agents."""
    findings = doctor(ctx, fix=fix)
    if not probe:
        return DoctorReport(findings)
    from gitsup.host.proc import child_env
    from gitsup.workers.agents import probe_agents

    return DoctorReport(
        findings, network_isolation(), sandbox_summary(ctx), probe_agents(child_env())
    )


def doctor(ctx: SupRepo, *, fix: bool) -> list[DoctorFinding]:
    findings: list[DoctorFinding] = []
    # Takeovers interrupted half-way: always reconciled (finishing a transaction, not a fix).
    for tid, what in reconcile_takeovers(ctx.layout):
        f = DoctorFinding("takeover-interrupted", what, tid)
        f.fixed = "reconciled"
        findings.append(f)
    records = {r.id: r for r in ctx.store.iter_records()}
    # Tasks whose supervisor died.
    for rec in records.values():
        if rec.state in TERMINAL or ctx.layout.fetched(rec.id).exists():
            continue  # ended, or a copy of a task that runs in another clone
        owner = _owner(rec)
        if owner is not None and owner.alive():
            continue
        f = DoctorFinding(
            "orphaned-task",
            f"state {rec.state.value} but supervisor "
            + (f"pid {owner.pid} is gone" if owner else "never recorded")
            + (", spawn was pending" if rec.spawn_pending else ""),
            rec.id,
        )
        staged = ctx.store.staged_final(rec.id)
        if staged is not None:
            f.detail += f"; it ended ({staged.status.value}) before its record was completed"
        elif not Path(rec.worktree).exists():
            f.detail += "; worktree is missing"
        if fix:
            try:
                done = recover_task(ctx, rec.id, takeover=True, park=True)
                f.fixed = (
                    f"record completed ({done.status.value})"
                    if staged is not None
                    else "parked (work saved to refs/sup/<id>/wip when uncommitted)"
                )
            except GitsupError as exc:
                f.fixed = f"not fixed: {exc.message}"
        findings.append(f)
    # Ended tasks whose cleanup could not prove the worker gone (their lease stays held).
    for rec in records.values():
        if rec.state not in TERMINAL or not rec.left_behind:
            continue
        f = DoctorFinding("worker-left-behind", "; ".join(rec.left_behind), rec.id)
        if fix:
            proof = prove_worker_gone(rec, kill=True)
            if proof.gone:
                fresh = ctx.store.load(rec.id)
                fresh.left_behind = []
                ctx.store.save(fresh)
                records[rec.id] = fresh
                _release_lease(ctx, rec)
                f.fixed = f"gone ({proof.how}); lease released"
            else:
                f.fixed = f"not fixed: {proof.how}"
        findings.append(f)
    # Leases whose owner is dead.
    for lease in ctx.leases.all():
        if lease.owner_alive:
            continue
        held_by = records.get(TaskId(lease.task))
        if held_by is not None and held_by.left_behind:
            continue  # reported above: released once the worker is proven gone
        f = DoctorFinding(
            "stale-lease", f"{lease.path} held by dead pid {lease.owner.pid}", lease.task
        )
        if fix and (held_by is None or ctx.store.load(held_by.id).state in TERMINAL):
            ctx.leases.break_lease(lease.path)
            f.fixed = "released"
        findings.append(f)
    # Lease files set aside as unreadable: a lease nobody can read protected nothing
    # meanwhile; a person looks at what it was (doctor never deletes them).
    for q in ctx.leases.quarantined():
        findings.append(
            DoctorFinding(
                "quarantined-lease",
                f"{q} ({q.stat().st_size} bytes): an unreadable lease file, set aside; "
                "remove it once you know which worktree it held",
            )
        )
    # cgroups that belong to no running task.
    if find_cgroup_base() is not None:
        for cg in list_gitsup_cgroups():
            runner = runner_of(cg.name)
            task: str | None = cg.name[:15]  # <task id>-w<n> or <task id>-c<hex>
            if runner is not None:  # a check of integrate or the queue: its command is gone
                if pid_alive(runner[1]):
                    continue
                task = None
            else:
                owner_rec = records.get(TaskId(cg.name[:15]))
                if owner_rec is None:
                    continue  # another repository's task: not ours to judge
                owner = _owner(owner_rec)
                if owner_rec.state not in TERMINAL and owner is not None and owner.alive():
                    continue
            procs = cg.procs()
            f = DoctorFinding("orphan-cgroup", f"{cg.path} with {len(procs)} process(es)", task)
            if fix:
                empty = cg.kill()
                f.fixed = (
                    "killed and removed"
                    if empty and cg.remove()
                    else "not fixed: could not empty it"
                )
            findings.append(f)
    # Network namespaces whose supervisor is gone.
    from gitsup.host.contain import list_gitsup_netns, netns_available, remove_netns

    for ns in list_gitsup_netns():
        check = ns.label in RUNNER_LABELS  # a check of integrate or the queue
        if (ns.label not in records and not check) or pid_alive(ns.pid):
            continue  # another repository's, or still in use
        f = DoctorFinding(
            "orphan-netns",
            f"{ns.path} of dead {'command' if check else 'supervisor'} pid {ns.pid}",
            None if check else ns.label,
        )
        if fix:
            f.fixed = "removed" if remove_netns(ns.name) else "not fixed: could not remove it"
        findings.append(f)
    # Egress gates (processes of their own) whose task no live supervisor runs.
    from gitsup.host.egress_gate import stop_gate

    for task_id, rec in records.items():
        owner = _owner(rec)
        if rec.state not in TERMINAL and owner is not None and owner.alive():
            continue  # in use, by the supervisor that started it or one that took over
        for gate in _dead_gates(str(task_id)):
            f = DoctorFinding(
                "orphan-egress-gate", f"egress gate pid {gate.pid} serving {gate.netns}", task_id
            )
            if fix:
                f.fixed = "stopped" if stop_gate(gate.pid) else "not fixed: could not stop it"
            findings.append(f)
    why = netns_available()
    if why is not None:
        findings.append(
            DoctorFinding(
                "no-network-isolation", f'tasks with network = "auto" use the host network: {why}'
            )
        )
    # Worktrees that are gone, or left behind.
    for rec in list(records.values()):
        if rec.discarded_at is None and rec.worktree and not Path(rec.worktree).exists():
            findings.append(DoctorFinding("missing-worktree", rec.worktree, rec.id))
    for name in ctx.repo.worktree_names():
        if len(name) == 15 and name[8] == "-" and name not in records:
            findings.append(
                DoctorFinding("unknown-worktree", f"git worktree {name} has no task record", name)
            )
    findings += _unsealed_git_dirs(ctx, records, fix=fix)
    findings += _nested_repositories(ctx, records, fix=fix)
    # The boundary: protected branches, integrations, the hook, the gate's settings.
    from gitsup.integration.setup import tampering

    findings.extend(DoctorFinding(kind, detail) for kind, detail in tampering(ctx.repo))
    misconfigured = _sandbox_problem(ctx)
    if misconfigured is not None:
        findings.append(DoctorFinding("sandbox", f"misconfigured: {misconfigured}"))
    return findings


def _unsealed_git_dirs(
    ctx: SupRepo, records: dict[TaskId, TaskRecord], *, fix: bool
) -> list[DoctorFinding]:
    """Tasks whose private Git dir's shell (config, commondir, hooks, info) is not what
    gitsup wrote: made by a gitsup that let the worker write it, or changed in a sandbox
    without a mount namespace. The person's `git` in such a worktree may run what the
    worker configured. `--fix` rewrites the shell of a task no live supervisor owns."""
    from gitsup.store import taskgit

    out: list[DoctorFinding] = []
    for rec in records.values():
        tid = TaskId(rec.id)
        wt = Path(rec.worktree) if rec.worktree else None
        if (
            rec.discarded_at is not None
            or wt is None
            or not wt.is_dir()
            or not taskgit.uses_private_dir(ctx.layout, tid)
            or not taskgit.private_dir(ctx.layout, tid).is_dir()
            or taskgit.is_sealed(ctx.layout, tid)
        ):
            continue
        f = DoctorFinding(
            "git-shell",
            f"the config, hooks or info of {taskgit.private_dir(ctx.layout, tid)} are not "
            "gitsup's (a task made by an older gitsup, or a sandbox without a mount "
            "namespace): `git` in its worktree may run what the worker configured",
            rec.id,
        )
        if fix:
            owner = _owner(rec)
            if rec.state not in TERMINAL and owner is not None and owner.alive():
                f.fixed = "not fixed: a running supervisor owns it (it is rewritten at its end)"
            else:
                try:
                    taskgit.seal(ctx.repo, ctx.layout, tid, wt)
                    f.fixed = "rewritten"
                except OSError as exc:
                    f.fixed = f"not fixed: {exc}"
        out.append(f)
    return out


def _nested_repositories(
    ctx: SupRepo, records: dict[TaskId, TaskRecord], *, fix: bool
) -> list[DoctorFinding]:
    """Ended tasks whose worktree may still hold nested repositories (`.git` entries below
    its top, whose config and hooks the task wrote): made by a gitsup that left them there,
    or whose move at the end failed. `--fix` moves them into the task dir as the end of a
    task does (gitsup/git/nested.py)."""
    from gitsup.git import nested

    out: list[DoctorFinding] = []
    for rec in records.values():
        tid = TaskId(rec.id)
        wt = Path(rec.worktree) if rec.worktree else None
        task_dir = ctx.layout.task_dir(tid)
        if (
            rec.state not in TERMINAL
            or rec.discarded_at is not None
            or wt is None
            or not wt.is_dir()
            or nested.checked(task_dir)
        ):
            continue
        found = nested.find(wt)
        if not found:
            continue
        f = DoctorFinding(
            "nested-git",
            f"{len(found)} nested repositories in the worktree ({', '.join(found[:5])}"
            f"{', …' if len(found) > 5 else ''}): the person's `git add -A`, `stash` or "
            "`status` there may run what the task configured in them",
            rec.id,
        )
        if fix:
            try:
                moved = nested.quarantine(wt, task_dir)
                f.fixed = f"moved into {task_dir / nested.NESTED_DIR} ({len(moved)})"
            except OSError as exc:
                f.fixed = f"not fixed: {exc}"
        out.append(f)
    return out


def _sandbox_problem(ctx: SupRepo) -> str | None:
    from gitsup.host.sandbox import resolve_mode

    try:
        resolve_mode(None, ctx.repo.config_get("sup.sandbox"))
    except GitsupError as exc:
        return exc.message
    return None


def sandbox_summary(ctx: SupRepo) -> str:
    """What the task sandbox enforces on this host (doctor's second line)."""
    from gitsup.host.sandbox import describe_host, resolve_mode

    try:
        mode = resolve_mode(None, ctx.repo.config_get("sup.sandbox"))
    except GitsupError as exc:
        return f"misconfigured: {exc.message}"
    return describe_host(mode)


__all__ = [
    "DoctorFinding",
    "WorkerProof",
    "complete_ended",
    "doctor",
    "prove_worker_gone",
    "recover_hint",
    "recover_task",
    "release_dead",
    "require_worker_gone",
]


def _take_pending(ctx: SupRepo, record: TaskRecord) -> Lease:
    """The dead owner's lease, taken as `cleanup-pending` (a takeover's first step: a taker
    that dies before settling it leaves it to `reconcile_takeovers`)."""
    return ctx.leases.acquire(
        record.worktree,
        record.id,
        steal_dead=True,
        state=CLEANUP_PENDING,
        extra={"taken_from": record.supervisor},
    )
