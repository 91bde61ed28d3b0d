"""The integration queue: ready candidates reach a target branch one signed integration
each, and the target only ever moves to a tree whose required checks passed on it.

One queue per target branch. Its state is a commit chain on
`refs/sup/queue/<branch>/state` (the tree holds `queue.json`; every change is one commit,
compare-and-swap), its events a log sealed into `refs/sup/queue/<branch>/log` like a task's.
A runner holds a lease on the queue (`$GIT_COMMON_DIR/sup/queue/<branch>`), so two runners
never integrate into the same branch at once; a runner killed mid-step leaves a provably
dead lease that the next `queue run` takes over.

A run: compose the queued candidates in order on the target (in-memory merges, unsigned
commits); a candidate that does not merge cleanly is sent back with the conflicting paths.
Test the whole composition (the union of the candidates' required checks, in a throw-away
worktree, inside the task sandbox). On failure, binary-search the shortest failing prefix:
its last candidate is the culprit (sent back with the failing output), the longest passing
prefix is integrated, and the rest is composed and tested again. Check results are kept
per (tree, check), so a tree tested once is never tested again for the same check.
Integrating a prefix writes one signed merge commit per candidate (the trailers of
`git sup integrate`) and moves the target once, by compare-and-swap, to the tested tip.

Crash safety: the target moves before the queue state says "integrated". A resumed
runner first reconciles: a queued candidate the target already contains is recorded as
integrated (never integrated twice); nothing leaves the queue without an outcome.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gitsup import proc
from gitsup.boundary.integrate import (
    _record,
    _require_integrated,
    _sign,
    _signing,
    _trust,
    inside_task,
)
from gitsup.checks import run_check
from gitsup.errors import Exit, GitsupError
from gitsup.events import EventLog
from gitsup.faults import fault
from gitsup.git import GitRepo, RefConflict
from gitsup.ids import Oid, TaskId, parse_task_id
from gitsup.layout import task_refs
from gitsup.lease import Lease
from gitsup.record import CandidateNote, CheckResult
from gitsup.spec import Check, TaskSpec
from gitsup.state import Status
from gitsup.tasks import Context

STATE_FILE = "queue.json"
DEFAULT_BATCH = 16
MAX_RESULTS = 128  # check results kept in the state (per tree and check)


class QueueError(GitsupError):
    """A queue command was refused (exit 2)."""


# --- state ------------------------------------------------------------------------------


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

    def __init__(self, ctx: Context, into: str) -> None:
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

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def change(self, what: str) -> Iterator[QueueState]:
        """Read, let the caller change, write one new state commit (under the lock)."""
        with self._lock():
            state, tip = self.read()
            yield state
            self.repo.append_segment(
                self.ref, name=STATE_FILE, data=state.as_json(), message=what, expected_old=tip
            )

    def event(self, type: str, data: dict[str, Any], *, seal: str | None = None) -> None:
        with self.log:
            self.log.append(type, data)
            if seal:
                self.log.seal(self.repo, seal)


# --- add, remove, list -----------------------------------------------------------------


def _ready_candidate(ctx: Context, task: str) -> tuple[Oid, CandidateNote]:
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


def default_target(ctx: Context) -> str:
    return ctx.repo.head_branch() or "main"


def add(ctx: Context, tasks: Sequence[str], into: str | None = None) -> QueueState:
    q = Queue(ctx, into or default_target(ctx))
    if ctx.repo.ref_target(q.target_ref) is None:
        raise QueueError(f"no branch {q.branch} to integrate into")
    found = [(t, *_ready_candidate(ctx, t)) for t in tasks]
    with q.change(f"queue add {' '.join(tasks)}") as state:
        for task, cand, _note in found:
            held = state.find(task)
            if held is not None and held.status == "queued":
                raise QueueError(f"task {task} is already queued into {q.branch}")
            if held is not None and held.status == "integrated":
                raise QueueError(f"task {task} was already integrated into {q.branch}")
            state.entries.append(Entry(task=task, candidate=cand, added_at=time.time()))
    for task, cand, _note in found:
        q.event("queue_added", {"task": task, "candidate": cand}, seal=f"queued {task}")
    return q.read()[0]


def remove(ctx: Context, task: str, into: str | None = None) -> QueueState:
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
        q.event("queue_removed", {"task": task}, seal=f"removed {task}")
        return q.read()[0]
    raise QueueError(f"task {task} is not queued", hint="`git sup queue` lists the queues")


def queue_branches(ctx: Context) -> list[str]:
    out = []
    for name, _ in ctx.repo.direct_refs(["refs/sup/queue/"]):
        if name.endswith("/state"):
            out.append(name.removeprefix("refs/sup/queue/").removesuffix("/state"))
    return out


def list_queues(ctx: Context) -> list[QueueState]:
    return [Queue(ctx, b).read()[0] for b in queue_branches(ctx)]


# --- the runner ------------------------------------------------------------------------


@dataclass
class RunResult:
    into: str
    integrated: list[str] = field(default_factory=list)
    sent_back: list[dict[str, Any]] = field(default_factory=list)
    check_runs: int = 0  # in this run
    check_commands: int = 0
    check_seconds: float = 0.0
    wall_seconds: float = 0.0
    resumed: list[str] = field(default_factory=list)
    target: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def exit_code(self) -> int:
        return Exit.OK if not self.sent_back else Exit.PARKED


def _check_key(c: Check) -> str:
    return json.dumps([c.name, list(c.argv)], separators=(",", ":"))


def _task_checks(ctx: Context, task: str, note: CandidateNote) -> list[Check]:
    from gitsup.boundary.integrate import _required_checks

    return _required_checks(ctx, parse_task_id(task), note)


def _spec(ctx: Context, task: str) -> TaskSpec | None:
    try:
        path = ctx.layout.task_dir(TaskId(task)) / "spec.json"
        return TaskSpec.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None


@dataclass
class _Step:
    entry: Entry
    note: CandidateNote
    checks: list[Check]
    merge: Oid = field(default_factory=lambda: Oid(""))  # the unsigned composition
    tree: Oid = field(default_factory=lambda: Oid(""))


class Runner:
    def __init__(
        self,
        ctx: Context,
        into: str,
        *,
        batch: int = DEFAULT_BATCH,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.repo = ctx.repo
        self.q = Queue(ctx, into)
        self.batch = max(1, batch)
        self.say = on_progress or (lambda _m: None)
        self.res = RunResult(into=self.q.branch)
        self._wt_root: Path | None = None
        self._env: dict[str, str] = {}
        self._plans: dict[str, Callable[[list[str]], list[str]] | None] = {}
        self._repairs: list[tuple[Entry, str, str, dict[str, Any]]] = []

    # lease

    def _acquire(self) -> Lease:
        from gitsup.lease import LeaseConflict

        try:
            return self.ctx.leases.acquire(self.q.dir, f"queue:{self.q.branch}", steal_dead=True)
        except LeaseConflict as exc:
            raise QueueError(
                f"another queue runner (pid {exc.held.owner.pid}) is integrating into "
                f"{self.q.branch}; the queue is leased to it",
                hint="wait for it (`git sup queue` shows the progress); a runner that died is "
                "taken over by the next `git sup queue run`",
            ) from None

    def run(self) -> RunResult:
        start = time.monotonic()
        why = inside_task(self.ctx, env=os.environ, cwd=os.getcwd())
        if why:
            raise QueueError(f"refusing to run the queue from inside a task: {why}")
        if self.repo.ref_target(self.q.target_ref) is None:
            raise QueueError(f"no branch {self.q.branch} to integrate into")
        lease = self._acquire()
        try:
            self.q.event("queue_run_started", {"pid": os.getpid()})
            self._reconcile()
            self._loop()
        finally:
            self.res.wall_seconds = round(time.monotonic() - start, 3)
            self.res.target = self.repo.ref_target(self.q.target_ref) or ""
            self.q.event(
                "queue_run_finished",
                {k: v for k, v in self.res.as_dict().items() if k != "sent_back"},
                seal="queue run finished",
            )
            self._cleanup()
            self.ctx.leases.release(lease)
        return self.res

    # crash recovery: the target may already contain what the state still calls queued

    def _reconcile(self) -> None:
        state, _ = self.q.read()
        target = self.repo.ref_target(self.q.target_ref)
        assert target is not None
        done: dict[str, str] = {}
        for e in state.queued():
            if self.repo.is_ancestor(Oid(e.candidate), target):
                done[e.task] = self._integration_of(target, e.candidate)
        if not done:
            return
        cands = {e.task: e.candidate for e in state.queued()}
        for task, commit in done.items():
            self._record_integrated(task, cands[task], commit)
        with self.q.change(f"resume: {len(done)} already integrated") as st:
            for e in st.queued():
                if e.task in done:
                    e.status, e.integration_commit = "integrated", done[e.task]
                    e.finished_at = time.time()
        self.res.resumed += list(done)
        self.q.event("queue_resumed", {"integrated": done}, seal="resumed")

    def _integration_of(self, target: Oid, candidate: str) -> str:
        tip: Oid | None = target
        for _ in range(10_000):
            if tip is None:
                break
            info = self.repo.commit_info(tip)
            parents = list(info.parents)
            if len(parents) > 1 and parents[1] == candidate:
                return tip
            tip = Oid(parents[0]) if parents else None
        return ""

    def _record_integrated(self, task: str, candidate: str, commit: str) -> None:
        """The note, the task's event and record say integrated (also what a killed runner
        could not finish)."""
        tid = TaskId(task)
        cand = Oid(candidate)
        text = self.repo.read_note(cand)
        if text is None:
            return
        note = CandidateNote.parse(text)
        if note.status == Status.INTEGRATED:
            return
        from gitsup.boundary.integrate import IntegrateResult

        info = self.repo.commit_info(Oid(commit)) if commit else None
        before = info.parents[0] if info and info.parents else ""
        res = IntegrateResult(
            task=task,
            candidate=cand,
            into=self.q.branch,
            strategy="merge",
            target_before=before,
            result=commit or cand,
            integrated=True,
        )
        with self.ctx.store.lock(tid):
            _record(self.ctx, self.repo, self.ctx.store.load(tid), tid, note, res)

    # the loop

    def _loop(self) -> None:
        self._collect_repairs()
        while True:
            state, _ = self.q.read()
            pending = state.queued()[: self.batch]
            if not pending:
                return
            steps = self._prepare(pending)
            if steps:
                self._land(steps)
            self._flush_repairs()

    def _prepare(self, pending: list[Entry]) -> list[_Step]:
        """Candidates still ready and built on an integrated baseline; the rest go back."""
        steps = []
        target = self.repo.ref_target(self.q.target_ref)
        assert target is not None
        untrusted = self._untrusted_baselines(target, pending)
        for e in pending:
            cand = self.repo.ref_target(task_refs(TaskId(e.task))["candidate"])
            text = self.repo.read_note(Oid(e.candidate))
            note = CandidateNote.parse(text) if text else None
            if cand != e.candidate or note is None or note.status != Status.READY:
                why = (
                    "its candidate ref moved since it was queued"
                    if cand != e.candidate
                    else f"the candidate is {note.status.value if note else 'without a note'}"
                )
                self._finish(e, "parked", why, {"base": target}, park_task=False)
                continue
            bad = untrusted.get(note.baseline)
            if bad:
                self._finish(e, "parked", bad, {"base": target}, park_task=True)
                continue
            steps.append(_Step(e, note, _task_checks(self.ctx, e.task, note)))
        return steps

    def _untrusted_baselines(self, target: Oid, pending: list[Entry]) -> dict[str, str]:
        """The target's history since the trust root must be integrated (else nothing is
        built on it), and so must what each baseline adds to it: baseline -> why not.
        Two `rev-list`s for the whole batch."""
        trust = _trust(self.repo)
        _require_integrated(trust, self.q.branch, target, target)
        baselines: set[str] = set()
        for e in pending:
            text = self.repo.read_note(Oid(e.candidate))
            with contextlib.suppress(GitsupError):
                if text:
                    baselines.add(CandidateNote.parse(text).baseline)
        found = trust.check([(b, target, b) for b in sorted(baselines)])
        return {
            b: f"the task's baseline {b[:12]} brings {u.total} commit(s) that are not "
            f"integrated ({u.commit[:12]} {u.why})"
            for b, u in found.items()
            if u is not None
        }

    def _compose(self, base: Oid, steps: list[_Step]) -> list[_Step]:
        """Chain unsigned merges of `steps` on `base`; conflicting candidates go back."""
        out: list[_Step] = []
        tip = base
        for s in steps:
            tree, conflicts = self.repo.merge_tree(tip, Oid(s.entry.candidate))
            if tree is None:
                shown = ", ".join(conflicts[:20])
                self._finish(
                    s.entry,
                    "conflict",
                    f"does not merge cleanly onto {self.q.branch} "
                    f"{'(with the candidates ahead of it) ' if out else ''}: conflicts in {shown}",
                    {"conflicts": conflicts, "base": base, "composed_on": tip},
                    park_task=True,
                )
                continue
            s.tree = tree
            s.merge = self.repo.commit_tree(
                tree,
                [tip, Oid(s.entry.candidate)],
                f"gitsup queue composition\n\nSup-Task: {s.entry.task}\n",
            )
            tip = s.merge
            out.append(s)
        return out

    def _land(self, steps: list[_Step]) -> None:
        base = self.repo.ref_target(self.q.target_ref)
        assert base is not None
        steps = self._compose(base, steps)
        if not steps:
            return
        n = len(steps)
        ok, _ = self._test(steps, n)
        if ok:
            self._integrate(base, steps)
            return
        # binary search for the shortest failing prefix: lo passes (0: the target), hi fails
        lo, hi = 0, n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            good, _ = self._test(steps, mid)
            if good:
                lo = mid
            else:
                hi = mid
        culprit = steps[hi - 1]
        _, failed = self._test(steps, hi)  # from the memo: no new run
        if lo:
            self._integrate(base, steps[:lo])
        self._finish(
            culprit.entry,
            "failed",
            f"required checks fail when composed onto {self.q.branch}"
            + (f" after {hi - 1} queued candidate(s)" if hi > 1 else "")
            + ": "
            + ", ".join(f["name"] for f in failed),
            {
                "failed": failed,
                "base": base,
                "composed_on": steps[hi - 2].merge if hi > 1 else base,
            },
            park_task=True,
        )

    # checks

    def _test(self, steps: list[_Step], k: int) -> tuple[bool, list[dict[str, Any]]]:
        """Run the union of the first k candidates' required checks on the tree of the
        k-th composition (memoised per tree and check). Returns (passed, failures)."""
        s = steps[k - 1]
        checks: dict[str, Check] = {}
        for step in steps[:k]:
            for c in step.checks:
                checks.setdefault(_check_key(c), c)
        state, _ = self.q.read()
        known = {key: state.results.get(f"{s.tree} {key}") for key in checks}
        failed = [
            {"name": checks[key].name, "output_tail": r.get("output_tail", "")}
            for key, r in known.items()
            if r is not None and not r.get("passed")
        ]
        if failed:
            return False, failed
        todo = [checks[key] for key, r in known.items() if r is None]
        if not todo:
            return True, []
        self.say(f"testing {k} candidate(s) on {s.tree[:12]}: {', '.join(c.name for c in todo)}")
        results = self._run_checks(s.merge, todo)
        self.res.check_runs += 1
        self.res.check_commands += len(results)
        with self.q.change(f"checks on {s.tree[:12]}") as st:
            st.check_runs += 1
            st.check_commands += len(results)
            for c, r in zip(todo, results, strict=False):
                st.results[f"{s.tree} {_check_key(c)}"] = {
                    "passed": r.passed,
                    "output_tail": r.output_tail,
                }
            for old in list(st.results)[:-MAX_RESULTS]:  # the newest are the ones reused
                del st.results[old]
        failed = [{"name": r.name, "output_tail": r.output_tail} for r in results if not r.passed]
        self.q.event(
            "queue_tested",
            {
                "tasks": [st.entry.task for st in steps[:k]],
                "tree": s.tree,
                "passed": not failed,
                "checks": [{"name": r.name, "passed": r.passed} for r in results],
            },
        )
        return not failed, failed

    def _run_checks(self, commit: Oid, checks: list[Check]) -> list[CheckResult]:
        if self._wt_root is None:
            self._wt_root = Path(tempfile.mkdtemp(prefix=f"gitsup-queue-{os.getpid()}-"))
        wt = self._wt_root / "worktree"
        self.repo.add_detached_worktree(wt, commit)
        try:
            wrap = self._sandbox(wt, checks)
            self._fresh_box()
            out = []
            for c in checks:
                t0 = time.monotonic()
                r = run_check(c, cwd=wt, env=self._env, wrap=wrap)
                self.res.check_seconds += time.monotonic() - t0
                self.say(f"check {c.name}: {'passed' if r.passed else 'FAILED'}")
                out.append(r)
                if not r.passed:
                    break  # the composition fails; the rest would not change that
            return out
        finally:
            self.repo.remove_detached_worktree(wt)

    def _sandbox(self, wt: Path, checks: list[Check]) -> Callable[[list[str]], list[str]] | None:
        """The task sandbox for the checks (mode from `git config sup.sandbox`, default auto),
        with the throw-away worktree as the only writable tree."""
        from gitsup.contain import bootstrap_argv
        from gitsup.sandbox import build_plan, load_rules, required_problems, resolve_mode

        env = proc.child_env(
            {"GITSUP_INTEGRATION": f"queue/{self.q.branch}"}, drop=("GITSUP_TASK",)
        )
        key = json.dumps([str(wt), [list(c.argv) for c in checks]])
        if key in self._plans:
            return self._plans[key]
        mode = resolve_mode(None, self.repo.config_get("sup.sandbox"))
        # An (empty) private Git dir makes the plan keep the whole common dir read-only:
        # a check writes only in its worktree and its private HOME and TMPDIR.
        (self.q.dir / "git").mkdir(exist_ok=True)
        plan = build_plan(
            mode=mode,
            rules=load_rules(self.repo.main_workdir),
            worktree=wt,
            common_dir=self.ctx.layout.common_dir,
            task_dir=self.q.dir,
            branch="",
            env=env,
            programs=[list(c.argv) for c in checks],
        )
        problems = required_problems(plan)
        if problems:
            raise GitsupError("; ".join(problems))
        self._env = dict(plan.env)
        wrap: Callable[[list[str]], list[str]] | None = None
        if plan.active:

            def wrap(argv: list[str]) -> list[str]:
                return bootstrap_argv(argv, cgroup=None, netns=None, sandbox=plan.argv(files=argv))

        self._plans[key] = wrap
        return wrap

    def _fresh_box(self) -> None:
        """Empty the checks' private HOME, TMPDIR and Git dir: nothing one composition's
        checks leave there (a planted `usercustomize.py`, a config) reaches the next."""
        box = self.q.dir / "sandbox"
        for d in (box / "home", box / "tmp", self.q.dir / "git"):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True, exist_ok=True)

    def _cleanup(self) -> None:
        if self._wt_root is not None:
            shutil.rmtree(self._wt_root, ignore_errors=True)

    # integration of a tested prefix

    def _integrate(self, base: Oid, steps: list[_Step]) -> None:
        signing = _signing(self.repo)
        trust = _trust(self.repo)
        tip = base
        made: list[tuple[_Step, Oid]] = []
        for s in steps:
            note = s.note
            goal = note.goal.strip().splitlines()[0] if note.goal.strip() else ""
            passed = ", ".join(f"{c.name}=passed" for c in s.checks) or "none"
            verdict = note.review.verdict if note.review and note.review.verdict else "none"
            message = (
                f"Merge gitsup candidate {s.entry.task} into {self.q.branch}\n\n"
                + (f"{goal}\n\n" if goal else "")
                + f"Sup-Task: {s.entry.task}\nSup-Candidate: {s.entry.candidate}\n"
                + f"Sup-Baseline: {note.baseline}\nSup-Checks: {passed}\nSup-Review: {verdict}\n"
                + f"Sup-Queue: {self.q.branch}\n"
            )
            tip = _sign(self.repo, signing, s.tree, [tip, Oid(s.entry.candidate)], message)
            made.append((s, tip))
        bad = trust.check([(self.target_ref_name, base, tip)])[self.target_ref_name]
        if bad is not None:
            raise QueueError(
                f"the signed integrations would not pass the gate: {bad.commit[:12]} {bad.why}; "
                f"{self.q.branch} untouched",
                hint="`git sup init` adds the integration key to the allowed signers",
            )
        checkout = self.repo.checked_out_branches().get(self.q.branch)
        if checkout is not None and not GitRepo.open(checkout).is_clean():
            raise QueueError(
                f"{self.q.branch} is checked out in {checkout} with uncommitted changes",
                hint="commit or stash them, then `git sup queue run` again",
            )
        fault("queue_before_move")
        try:
            self.repo.update_ref(
                self.target_ref_name,
                tip,
                old=base,
                message=f"gitsup queue: {len(made)} integration(s) into {self.q.branch}",
            )
        except RefConflict as exc:
            raise QueueError(
                f"{self.q.branch} moved while the queue ran ({exc}); nothing was changed",
                hint="`git sup queue run` again composes on the new tip",
            ) from None
        if checkout is not None:
            try:
                GitRepo.open(checkout).advance_checkout(base, tip)
            except GitsupError as exc:
                self.say(f"the checkout {checkout} was not advanced: {exc.message}")
        fault("queue_after_move")
        for s, commit in made:
            self._record_integrated(s.entry.task, s.entry.candidate, commit)
        done = {s.entry.task: c for s, c in made}
        with self.q.change(f"integrated {len(made)} into {self.q.branch}") as st:
            for e in st.entries:
                if e.task in done and e.status in ("queued", "removed"):
                    if e.status == "removed":  # `queue remove` came after it was tested
                        e.reason = "removed while it was being integrated; it is integrated"
                    e.status, e.integration_commit = "integrated", done[e.task]
                    e.finished_at = time.time()
        self.res.integrated += list(done)
        for s, commit in made:
            self.q.event("queue_integrated", {"task": s.entry.task, "commit": commit})
        self.q.event(
            "queue_target_moved", {"from": base, "to": tip}, seal=f"{self.q.branch} at {tip[:12]}"
        )

    @property
    def target_ref_name(self) -> str:
        return self.q.target_ref

    # sending a candidate back

    def _finish(
        self, e: Entry, kind: str, reason: str, evidence: dict[str, Any], *, park_task: bool
    ) -> None:
        """A candidate leaves the queue without being integrated: parked with its evidence
        (the candidate note and the task record say so, so `integrate` refuses it too)."""
        if park_task:
            self._park_task(e, reason, evidence)
        with self.q.change(f"{kind}: {e.task}") as st:
            for x in st.queued():
                if x.task == e.task:
                    x.status, x.reason, x.evidence = "parked", reason, evidence
                    x.finished_at = time.time()
        item = {"task": e.task, "kind": kind, "reason": reason, "evidence": evidence}
        self.res.sent_back.append(item)
        self.q.event("queue_parked", dict(item), seal=f"parked {e.task}")
        self.say(f"{e.task}: {kind}: {reason}")
        if park_task:
            # started once the batch has landed: the repair's base is the new target
            self._repairs.append((e, kind, reason, item))

    def _flush_repairs(self) -> None:
        todo, self._repairs = self._repairs, []
        for e, kind, reason, item in todo:
            repair, why_not = self._start_repair(e, kind, reason, item["evidence"])
            item["repair_task"] = repair
            if not repair:
                item["no_repair"] = why_not
                continue
            with self.q.change(f"repair task {repair} for {e.task}") as st:
                for x in st.entries:
                    if x.task == e.task and x.status == "parked" and not x.repair_task:
                        x.status, x.repair_task = "repair", repair
            self.q.event(
                "queue_repair", {"task": e.task, "repair_task": repair}, seal=f"repair {e.task}"
            )
            self.say(f"{e.task}: repair task {repair} started")

    def _start_repair(
        self, e: Entry, kind: str, reason: str, evidence: dict[str, Any]
    ) -> tuple[str, str]:
        """A repairable worker (claude, tmux) gets a repair task: the same spec on the new
        base, its goal carrying the evidence. Returns (task id, "") or ("", why not)."""
        spec = _spec(self.ctx, e.task)
        if spec is None:
            return "", "the task's spec is gone"
        if spec.worker.kind == "process":
            return "", "its worker (process) cannot take a repair turn"
        if self.repair_rounds(e) >= spec.autonomy.max_repair_rounds:
            return "", f"repair rounds exhausted ({spec.autonomy.max_repair_rounds})"
        from gitsup.detach import start_detached

        base = self.repo.ref_target(self.q.target_ref) or ""
        lines = [
            spec.goal,
            "",
            f"Integration repair (queue into {self.q.branch}): candidate {e.candidate} of "
            f"task {e.task} {reason}.",
            f"This worktree starts at {self.q.branch} {base}. Bring that candidate's work in "
            f"(e.g. `git merge {e.candidate}` or `git cherry-pick` its commits), make it fit "
            "what is on the branch now so the required checks pass, and commit.",
        ]
        if evidence.get("conflicts"):
            lines.append("Conflicting paths: " + ", ".join(evidence["conflicts"][:50]))
        for f in evidence.get("failed", [])[:5]:
            lines += [f"Failing check {f['name']}, end of its output:", f["output_tail"][-3000:]]
        try:
            rec = start_detached(
                self.ctx,
                spec.model_copy(update={"base": self.q.branch, "goal": "\n".join(lines)}),
            )
        except GitsupError as exc:
            return "", f"the repair task could not start: {exc.message}"
        return rec.id, ""

    def repair_rounds(self, e: Entry) -> int:
        state, _ = self.q.read()
        rounds, cur = 0, e
        while cur.repair_of:
            rounds += 1
            prev = state.find(cur.repair_of)
            if prev is None:
                break
            cur = prev
        return rounds

    def _collect_repairs(self) -> None:
        """Repair tasks that finished: a ready candidate re-enters the queue (at its end)."""
        from gitsup.state import TERMINAL

        state, _ = self.q.read()
        done: dict[str, tuple[str, str]] = {}
        for e in state.entries:
            if e.status != "repair" or not e.repair_task:
                continue
            try:
                rec = self.ctx.store.load(e.repair_task)
            except GitsupError:
                done[e.task] = ("parked", "")
                continue
            if rec.state not in TERMINAL:
                continue
            cand = self.repo.ref_target(task_refs(TaskId(rec.id))["candidate"])
            ok = rec.status == Status.READY and cand is not None
            done[e.task] = ("repaired", cand or "") if ok else ("parked", "")
        if not done:
            return
        with self.q.change(f"repairs finished: {' '.join(done)}") as st:
            for e in st.entries:
                if e.task not in done or e.status != "repair":
                    continue
                outcome, repaired = done[e.task]
                e.status = outcome
                if outcome == "repaired":
                    st.entries.append(
                        Entry(
                            task=e.repair_task,
                            candidate=repaired,
                            added_at=time.time(),
                            repair_of=e.task,
                        )
                    )
                else:
                    e.reason += f"; repair task {e.repair_task} did not end ready"
        for task, (outcome, _cand) in done.items():
            self.q.event("queue_repair_finished", {"task": task, "outcome": outcome})

    def _park_task(self, e: Entry, reason: str, evidence: dict[str, Any]) -> None:
        tid = TaskId(e.task)
        with self.ctx.store.lock(tid):
            text = self.repo.read_note(Oid(e.candidate))
            if text is None:
                return
            note = CandidateNote.parse(text)
            if note.status != Status.READY:
                return
            why = f"integration queue into {self.q.branch}: {reason}"
            parked = note.model_copy(
                update={"status": Status.PARKED, "reasons": [*note.reasons, why]}
            )
            data = parked.model_dump(mode="json", by_alias=True)
            data["queue_evidence"] = evidence
            self.repo.write_note(Oid(e.candidate), json.dumps(data, indent=2) + "\n")
            with EventLog(self.ctx.layout.events(tid), tid) as log:
                log.append(
                    "candidate_parked",
                    {"by": "queue", "into": self.q.branch, "reason": reason, "evidence": evidence},
                )
                log.seal(self.repo, f"parked by the queue into {self.q.branch}")
            record = self.ctx.store.load(tid)
            record.status = Status.PARKED
            record.reasons.append(why)
            self.ctx.store.save(record)


def run(
    ctx: Context,
    into: str | None = None,
    *,
    batch: int | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> list[RunResult]:
    branches = [_branch(into)] if into else queue_branches(ctx)
    if not branches:
        raise QueueError("nothing is queued", hint="`git sup queue add ID...` queues candidates")
    size = batch or int(ctx.repo.config_get("sup.queueBatch") or DEFAULT_BATCH)
    return [Runner(ctx, b, batch=size, on_progress=on_progress).run() for b in branches]


def detach_run(ctx: Context, into: str | None, batch: int | None) -> tuple[int, Path]:
    """`queue run --detach`: the same runner in its own session, output in the queue dir."""
    import sys

    branch = _branch(into or default_target(ctx))
    q = Queue(ctx, branch)
    log = q.dir / "runner.log"
    argv = [sys.executable, "-m", "gitsup", "queue", "run", "--into", branch]
    if batch:
        argv += ["--batch", str(batch)]
    pid = proc.spawn_detached(argv, cwd=str(ctx.repo.main_workdir), log=log)
    return pid, log
