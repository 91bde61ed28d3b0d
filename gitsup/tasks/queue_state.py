"""The integration queue's state: one queue per target branch, a commit chain on
`refs/sup/queue/<branch>/state` (the tree holds `queue.json`; every change is one commit,
compare-and-swap) and its event log; adding, removing and listing queued candidates."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.host.fsutil import locked
from gitsup.ids import Oid, TaskId, parse_task_id
from gitsup.layout import task_refs
from gitsup.state import Status
from gitsup.store.events import EventLog
from gitsup.store.eventtypes import QueueAdded, QueueRemoved
from gitsup.store.payload import Payload
from gitsup.store.record import CandidateNote
from gitsup.store.suprepo import SupRepo

STATE_FILE = "queue.json"


DEFAULT_BATCH = 16


MAX_RESULTS = 128  # check results kept in the state (per tree, check and environment)


class QueueError(GitsupError):
    """A queue command was refused (exit 2)."""


@dataclass
class Entry:
    task: str
    candidate: str
    added_at: float
    # queued | integrated | parked | repair | removed
    status: str = "queued"
    reason: str = ""
    integration_commit: str = ""
    # conflicts: paths; failed: [{name, output_tail}]; base: the target it was tried on
    evidence: dict[str, Any] = field(default_factory=dict)
    repair_task: str = ""
    repair_of: str = ""
    finished_at: float | None = None
    # the paths under .gitsup/ it changes, consented to by `queue add --allow-policy-change`
    policy_change: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Entry:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class QueueState:
    into: str
    entries: list[Entry] = field(default_factory=list)
    check_runs: int = 0  # compositions tested (one run of the required checks on a tree)
    check_commands: int = 0  # individual check processes run
    # "<tree> <check key>" -> {"passed": bool, "output_tail": str}
    results: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_json(self) -> bytes:
        d = {
            "version": 1,
            "into": self.into,
            "entries": [asdict(e) for e in self.entries],
            "check_runs": self.check_runs,
            "check_commands": self.check_commands,
            "results": self.results,
        }
        return (json.dumps(d, indent=1) + "\n").encode()

    @classmethod
    def parse(cls, data: bytes, into: str) -> QueueState:
        try:
            d = json.loads(data)
            return cls(
                into=str(d.get("into", into)),
                entries=[Entry.from_dict(e) for e in d.get("entries", [])],
                check_runs=int(d.get("check_runs", 0)),
                check_commands=int(d.get("check_commands", 0)),
                results=dict(d.get("results", {})),
            )
        except (ValueError, TypeError, AttributeError) as exc:
            raise GitsupError(f"the state of the queue into {into} is unreadable: {exc}") from None

    def queued(self) -> list[Entry]:
        return [e for e in self.entries if e.status == "queued"]

    def find(self, task: str) -> Entry | None:
        for e in reversed(self.entries):
            if e.task == task:
                return e
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "into": self.into,
            "queued": [e.task for e in self.queued()],
            "entries": [asdict(e) for e in self.entries],
            "check_runs": self.check_runs,
            "check_commands": self.check_commands,
        }


def _branch(into: str) -> str:
    branch = into.removeprefix("refs/heads/")
    if not branch or branch.startswith(("/", "-")) or ".." in branch or branch.endswith("/"):
        raise QueueError(f"not a branch name: {into!r}")
    return branch


def state_ref(branch: str) -> str:
    return f"refs/sup/queue/{branch}/state"


def log_ref(branch: str) -> str:
    return f"refs/sup/queue/{branch}/log"


class Queue:
    """One target branch's queue: its state in Git, its directory, its event log."""

    def __init__(self, ctx: SupRepo, into: str) -> None:
        self.ctx = ctx
        self.repo: GitRepo = ctx.repo
        self.branch = _branch(into)
        self.target_ref = f"refs/heads/{self.branch}"
        self.ref = state_ref(self.branch)
        self.dir = ctx.layout.root / "queue" / self.branch.replace("/", "%2F")
        self.dir.mkdir(parents=True, exist_ok=True)
        # `queue/<branch>` as the log's id: EventLog seals it into refs/sup/queue/<branch>/log
        self.log = EventLog(self.dir / "events.jsonl", TaskId(f"queue/{self.branch}"))

    # state: read, and change under a lock with compare-and-swap

    def read(self) -> tuple[QueueState, Oid | None]:
        tip = self.repo.ref_target(self.ref)
        if tip is None:
            return QueueState(into=self.branch), None
        for name, data in self.repo.read_tree_blobs(tip):
            if name == STATE_FILE:
                return QueueState.parse(data, self.branch), tip
        raise GitsupError(f"{self.ref} has no {STATE_FILE}")

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.dir / "lock")

    @contextlib.contextmanager
    def change(self, what: str) -> Iterator[QueueState]:
        """Read, let the caller change, write one new state commit (under the lock)."""
        with self._lock():
            state, tip = self.read()
            yield state
            self.repo.append_segment(
                self.ref, name=STATE_FILE, data=state.as_json(), message=what, expected_old=tip
            )

    def event(self, payload: Payload, *, seal: str | None = None) -> None:
        with self.log:
            self.log.append(payload)
            if seal:
                self.log.seal(self.repo, seal)


def _ready_candidate(ctx: SupRepo, task: str) -> tuple[Oid, CandidateNote]:
    tid = parse_task_id(task)
    if not ctx.store.exists(tid):
        raise QueueError(f"no task {task}", hint="`git sup ls` lists the tasks")
    cand = ctx.repo.ref_target(task_refs(tid)["candidate"])
    if cand is None:
        raise QueueError(f"task {task} has no candidate")
    text = ctx.repo.read_note(cand)
    if text is None:
        raise QueueError(f"candidate {cand[:12]} of task {task} has no note")
    note = CandidateNote.parse(text)
    if note.status != Status.READY:
        raise QueueError(
            f"candidate {cand[:12]} of task {task} is {note.status.value}, not ready",
            hint="only ready candidates enter the queue",
        )
    return cand, note


def default_target(ctx: SupRepo) -> str:
    return ctx.repo.head_branch() or "main"


def add(
    ctx: SupRepo,
    tasks: Sequence[str],
    into: str | None = None,
    *,
    allow_policy_change: bool = False,
) -> QueueState:
    """Queue ready candidates. One that changes `.gitsup/` is refused unless
    `allow_policy_change`; the consent is kept with its entry (and its trailer)."""
    from gitsup.integration.integrate import policy_change_refusal

    q = Queue(ctx, into or default_target(ctx))
    if ctx.repo.ref_target(q.target_ref) is None:
        raise QueueError(f"no branch {q.branch} to integrate into")
    found = [(t, *_ready_candidate(ctx, t)) for t in tasks]
    policy = {t: ctx.repo.policy_change(note.baseline, cand) for t, cand, note in found}
    for t, cand, _note in found:
        if policy[t] and not allow_policy_change:
            raise policy_change_refusal(t, cand, policy[t])
    with q.change(f"queue add {' '.join(tasks)}") as state:
        for task, cand, _note in found:
            held = state.find(task)
            if held is not None and held.status == "queued":
                raise QueueError(f"task {task} is already queued into {q.branch}")
            if held is not None and held.status == "integrated":
                raise QueueError(f"task {task} was already integrated into {q.branch}")
            state.entries.append(
                Entry(task=task, candidate=cand, added_at=time.time(), policy_change=policy[task])
            )
    for task, cand, _note in found:
        q.event(QueueAdded(task=TaskId(task), candidate=Oid(cand)), seal=f"queued {task}")
    return q.read()[0]


def remove(ctx: SupRepo, task: str, into: str | None = None) -> QueueState:
    parse_task_id(task)
    queues = [Queue(ctx, into)] if into else [Queue(ctx, b) for b in queue_branches(ctx)]
    for q in queues:
        state, _ = q.read()
        held = state.find(task)
        if held is None or held.status != "queued":
            continue
        with q.change(f"queue remove {task}") as st:
            e = st.find(task)
            if e is None or e.status != "queued":
                raise QueueError(f"task {task} left the queue meanwhile ({e.status if e else '-'})")
            e.status, e.reason, e.finished_at = "removed", "removed by a person", time.time()
        q.event(QueueRemoved(task=TaskId(task)), seal=f"removed {task}")
        return q.read()[0]
    raise QueueError(f"task {task} is not queued", hint="`git sup queue` lists the queues")


def queue_branches(ctx: SupRepo) -> list[str]:
    out = []
    for name, _ in ctx.repo.direct_refs(["refs/sup/queue/"]):
        if name.endswith("/state"):
            out.append(name.removeprefix("refs/sup/queue/").removesuffix("/state"))
    return out


def list_queues(ctx: SupRepo) -> list[QueueState]:
    return [Queue(ctx, b).read()[0] for b in queue_branches(ctx)]


# --- what a live runner is doing (not in Git: it means nothing once the runner is gone) ---

RUNNER_STATUS = "runner.json"


def write_runner_status(q: Queue, status: dict[str, Any] | None) -> None:
    """The runner's slots (what is under test in each) and the predicted order, written
    whole under a temporary name and renamed; None removes it."""
    import os

    path = q.dir / RUNNER_STATUS
    if status is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    tmp = path.with_name(f".{RUNNER_STATUS}.{os.getpid()}")
    tmp.write_text(json.dumps(status) + "\n")
    os.replace(tmp, path)


def runner_status(ctx: SupRepo, branch: str) -> dict[str, Any] | None:
    """What the live runner of a queue is testing (None without one: a file left by a
    runner that died says nothing)."""
    import os

    path = Queue(ctx, branch).dir / RUNNER_STATUS
    try:
        status = json.loads(path.read_text())
        pid = int(status["pid"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return status if isinstance(status, dict) else None
