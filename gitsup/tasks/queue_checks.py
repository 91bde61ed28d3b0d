"""Testing a composition of queued candidates: the union of their required checks on the
composed tree, memoised per (tree, check, environment) in the queue state, run in a throw-away worktree
confined as a task's checks are (gitsup/verification/confined.py)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gitsup.environment.recipe import ENVIRONMENT_FILE
from gitsup.errors import Exit, GitsupError
from gitsup.ids import Oid, TaskId
from gitsup.integration.keys import protected_paths
from gitsup.spec import Check, TaskSpec
from gitsup.store.eventtypes import QueueEnvironmentFailed, QueueTested
from gitsup.store.record import CandidateNote, CheckResult
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.queue_state import MAX_RESULTS, Entry, Queue, QueueError
from gitsup.verification.confined import (
    ConfinedChecks,
    Confinement,
    Setup,
    SetupFailed,
    environment_digest,
)

DEFAULT_RETRIES = 1  # `git config sup.queue.retries`, `queue run --retries`

if TYPE_CHECKING:
    import concurrent.futures as cf


@dataclass
class RunResult:
    into: str
    integrated: list[str] = field(default_factory=list)
    sent_back: list[dict[str, Any]] = field(default_factory=list)
    check_runs: int = 0  # in this run
    check_commands: int = 0
    check_retries: int = 0  # fresh runs after a failing check (not in check_runs/commands)
    check_seconds: float = 0.0
    wall_seconds: float = 0.0
    resumed: list[str] = field(default_factory=list)
    target: str = ""
    # what confined the last composition's checks: sandbox, network, cgroup
    confinement: dict[str, Any] = field(default_factory=dict)
    # checks that failed and then passed on the same tree when run again: {tree, tasks, checks}
    flaky: list[dict[str, Any]] = field(default_factory=list)
    slots: int = 1  # compositions under test at once
    # the time the runner waited for checks (with slots: for the first of those running)
    waited_seconds: float = 0.0
    # the critical path: check attempts (first runs and retries) that had to happen one after
    # another, each started on what the ones before had shown (with one slot: all of them)
    check_rounds: int = 0
    # the schedule, for reading it (not in `as_dict`): per tested composition `slot`,
    # `tasks`, `tree`, `checks`, `confirming`, `start`, `end` (seconds since the run began),
    # `attempts`, `depth` (its place on the critical path), `passed`
    timeline: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["timeline"]
        return out

    @property
    def exit_code(self) -> int:
        return Exit.OK if not self.sent_back else Exit.PARKED


def _check_key(c: Check) -> str:
    """What makes two checks the same work: the argv (names are labels; two tasks that call
    `pytest -q` differently run it once per tree)."""
    return json.dumps(list(c.argv), separators=(",", ":"))


@dataclass
class _Step:
    entry: Entry
    note: CandidateNote
    checks: list[Check]
    merge: Oid = field(default_factory=lambda: Oid(""))  # the unsigned composition
    tree: Oid = field(default_factory=lambda: Oid(""))


@dataclass
class Composition:
    """One unit of a slot's work: the checks `todo` on one composed tree (the queue's seam
    between deciding what to test and where a check runs)."""

    commit: Oid  # the unsigned composition commit
    tree: Oid
    tasks: list[str]  # the candidates it holds, in queue order
    todo: list[Check]  # the checks the memo does not know (or knows failed unconfirmed)
    confinement: Confinement
    env: str  # the environment digest (part of the memo key)
    retries: int  # fresh runs of a failing check in this run
    # memo keys of `todo` that failed once before without being run again: this run
    # confirms them (a pass now makes them flaky)
    suspect: list[str] = field(default_factory=list)

    def keys(self) -> list[str]:
        return [f"{self.tree} {self.env} {_check_key(c)}" for c in self.todo]


@dataclass
class Tested:
    results: list[CheckResult]
    commands: int  # check processes of the first run
    retries: int  # fresh runs after a failing check
    flaky: list[str]  # checks that failed, then passed on a fresh run
    seconds: float  # inside the confined runs
    confinement: dict[str, Any]
    setup_failed: SetupFailed | None = None
    setup_report: dict[str, Any] = field(default_factory=dict)
    ended: float = field(default_factory=time.monotonic)  # when its last check ended


class CheckSlots(Protocol):
    """Where the compositions' checks run when not on this machine (the cluster's task
    hosts, gitsup/cluster/checks.py): `submit` (from the runner's thread only) returns a
    future of the composition's `Tested`, for exactly the tree the composition names."""

    def submit(self, comp: Composition) -> cf.Future[Tested]: ...

    def close(self) -> None: ...


def run_composition(
    box: ConfinedChecks,
    comp: Composition,
    *,
    setup: Setup | None,
    say: Callable[[str], None],
) -> Tested:
    """The checks of one composition in `box`, confined as a task's checks are
    (gitsup/verification/confined.py); the first failure ends a run. A failing check runs
    again, in a fresh confined run (new worktree, private dirs, cgroup and network
    namespace), up to `comp.retries` times: one that then passes is flaky (recorded, blamed on
    nobody); one that fails every time has failed. Touches nothing but `box`, so slots run
    it side by side, each with its own box."""
    t0 = time.monotonic()
    retries = comp.retries

    def run(checks: list[Check]) -> list[CheckResult]:
        return box.run(
            comp.commit,
            checks,
            say=say,
            stop_at_failure=True,
            confinement=comp.confinement,
            setup=setup,
        )

    try:
        results = run(comp.todo)
        again_n, commands = 0, len(results)
        flaky: list[str] = []
        tries: dict[str, int] = {}
        while results and not results[-1].passed:
            i = len(results) - 1
            key = _check_key(comp.todo[i])
            tries[key] = tries.get(key, 0) + 1
            if tries[key] > retries:
                break
            say(
                f"check {comp.todo[i].name} failed on {comp.tree[:12]}: running it again in a "
                f"fresh run (retry {tries[key]} of {retries})"
            )
            again = run(comp.todo[i:])
            again_n += 1
            if again and again[0].passed and comp.todo[i].name not in flaky:
                flaky.append(comp.todo[i].name)
            results = results[:i] + again
    except SetupFailed as exc:
        return Tested(
            [], 0, 0, [], time.monotonic() - t0, box.applied.as_dict(), exc, box.setup_report
        )
    return Tested(results, commands, again_n, flaky, time.monotonic() - t0, box.applied.as_dict())


def spec_or_none(ctx: SupRepo, task: str) -> TaskSpec | None:
    """The queued task's spec; None when it cannot be read."""
    try:
        return ctx.store.load_spec(TaskId(task))
    except (OSError, ValueError):
        return None


class CompositionTester:
    """The check-running part of the queue runner (`queue.Runner.checks`): compositions,
    their checks in confined boxes, the memo of results and the flaky checks seen."""

    def __init__(
        self,
        ctx: SupRepo,
        q: Queue,
        res: RunResult,
        *,
        retries: int,
        slots: int,
        say: Callable[[str], None],
        hosts: CheckSlots | None = None,
    ) -> None:
        self.ctx = ctx
        self.repo = ctx.repo
        self.q = q
        self.res = res
        self.retries = retries  # fresh runs of a failing check before it counts as failed
        self.slots = slots  # compositions under test at once (gitsup/tasks/queue_slots.py)
        self.say = say
        # the slots elsewhere (the cluster's task hosts), else None: here, confined
        self.hosts = hosts
        self._box: ConfinedChecks | None = None
        self._recipe_setup: tuple[Setup | None] | None = None
        # per tree: the checks that failed, then passed in a fresh run (from this run or the memo)
        self.flaky: dict[str, list[str]] = {}
        self._spec_cache: dict[
            str, TaskSpec | None
        ] = {}  # the queued tasks' specs, read once a run
        # the critical path so far: the deepest `depth` of a recorded composition (a
        # composition started now comes after every result recorded so far)
        self.depth = 0
        self.began = 0.0  # when the run began (time.monotonic)

    def composition(
        self,
        steps: list[_Step],
        k: int,
        *,
        memo: dict[str, dict[str, Any]] | None = None,
        digests: dict[Confinement, str] | None = None,
    ) -> tuple[Composition, list[dict[str, Any]]]:
        """The work of testing the first k candidates: the union of their required checks
        on the tree of the k-th composition, and what the memo already knows of it (per
        tree, check and environment: a result is reused only while the recipe and the main
        checkout's included trees are what they were when it was made;
        `confined.environment_digest`; `memo` and `digests`: what the caller read already).
        Returns (the composition with `todo` the checks the
        memo does not know, the known failures)."""
        s = steps[k - 1]
        checks: dict[str, Check] = {}
        for step in steps[:k]:
            for c in step.checks:
                key = _check_key(c)
                seen = checks.get(key)
                if seen is None:
                    checks[key] = c
                elif c.timeout > seen.timeout:  # one run, with the longer time limit
                    checks[key] = seen.model_copy(update={"timeout": c.timeout})
        conf = Confinement.of(self._spec_of(st.entry.task) for st in steps[:k])
        env = digests.get(conf) if digests is not None else None
        if env is None:
            env = self._env_digest(conf)
            if digests is not None:
                digests[conf] = env
        results = self.q.read()[0].results if memo is None else memo
        known = {key: results.get(f"{s.tree} {env} {key}") for key in checks}
        for key, memo in known.items():
            if memo is not None and memo.get("passed") and memo.get("flaky"):
                self._note_flaky(s.tree, [checks[key].name])
        failed = [
            {"name": checks[key].name, "output_tail": r.get("output_tail", "")}
            for key, r in known.items()
            if r is not None and not r.get("passed") and not r.get("unconfirmed")
        ]
        # failed once, never run again (a slot's speculative run): to be confirmed
        suspect = {key for key, r in known.items() if r is not None and r.get("unconfirmed")}
        comp = Composition(
            commit=s.merge,
            tree=s.tree,
            tasks=[st.entry.task for st in steps[:k]],
            todo=[checks[key] for key, r in known.items() if r is None or key in suspect],
            confinement=conf,
            env=env,
            retries=self.retries,
            suspect=[f"{s.tree} {env} {key}" for key in suspect],
        )
        return comp, failed

    def _spec_of(self, task: str) -> TaskSpec | None:
        if task not in self._spec_cache:
            self._spec_cache[task] = spec_or_none(self.ctx, task)
        return self._spec_cache[task]

    def _env_digest(self, conf: Confinement) -> str:
        try:
            return environment_digest(self.repo, conf, protected_paths(self.repo))
        except GitsupError as exc:
            raise _environment_failure(exc) from None

    def test(self, steps: list[_Step], k: int) -> tuple[bool, list[dict[str, Any]]]:
        """Run the union of the first k candidates' required checks on the tree of the
        k-th composition, unless the memo knows them. Returns (passed, failures)."""
        comp, failed = self.composition(steps, k)
        if failed:
            return False, failed
        if not comp.todo:
            return True, []
        self.say(
            f"testing {k} candidate(s) on {comp.tree[:12]}: {', '.join(c.name for c in comp.todo)}"
        )
        self.publish([(1, comp)], [st.entry.task for st in steps])
        t0, after = time.monotonic(), self.depth
        if self.hosts is not None:
            tested = self.hosts.submit(comp).result()
        else:
            if self._box is None:
                self._box = self.new_box("")
            tested = run_composition(self._box, comp, setup=self.setup(), say=self.say)
        self.res.waited_seconds += time.monotonic() - t0
        return self.record(comp, tested, slot=1, started=t0, after=after)

    def publish(self, under_test: list[tuple[int, Composition]], predicted: list[str]) -> None:
        """What is under test in each slot now, and the predicted order (`git sup queue`)."""
        from gitsup.tasks.queue_state import write_runner_status

        write_runner_status(
            self.q,
            {
                "pid": os.getpid(),
                "slots": self.slots,
                "predicted": predicted,
                "under_test": [
                    {
                        "slot": i,
                        "tasks": c.tasks,
                        "tree": c.tree,
                        "checks": [x.name for x in c.todo],
                        "since": round(time.time(), 3),
                    }
                    for i, c in under_test
                ],
            },
        )

    def record(
        self,
        comp: Composition,
        tested: Tested,
        *,
        slot: int = 1,
        started: float | None = None,
        after: int | None = None,
    ) -> tuple[bool, list[dict[str, Any]]]:
        """A composition's results into the memo, the counters and the queue's log (by the
        runner's own thread: the one writer of the queue's state). `slot` ran it from
        `started` (time.monotonic; default: its end less its time in checks), when the
        critical path was `after` rounds deep (default: as deep as it is now)."""
        started = tested.ended - tested.seconds if started is None else started
        after = self.depth if after is None else after
        self.res.check_seconds += tested.seconds
        self.res.confinement = tested.confinement
        if tested.setup_failed is not None:
            self._setup_failed(comp.commit, tested.setup_failed, tested.setup_report)
        results, flaky = tested.results, list(tested.flaky)
        # a check that failed before (unconfirmed) and passes now is flaky too
        for c, r, key in zip(comp.todo, results, comp.keys(), strict=False):
            if r.passed and key in comp.suspect and c.name not in flaky:
                flaky.append(c.name)
        confirming = bool(comp.suspect)  # a second look at a composition: a retry
        self.res.check_runs += 0 if confirming else 1
        self.res.check_commands += 0 if confirming else tested.commands
        self.res.check_retries += tested.retries + (1 if confirming else 0)
        with self.q.change(f"checks on {comp.tree[:12]}") as st:
            st.check_runs += 0 if confirming else 1
            st.check_commands += 0 if confirming else tested.commands
            for r, key in zip(results, comp.keys(), strict=False):
                # attempts of a failing check: this run's, and the one before if suspect
                tries = comp.retries + 1 + (1 if key in comp.suspect else 0)
                st.results[key] = {
                    "passed": r.passed,
                    "output_tail": r.output_tail,
                    "confinement": tested.confinement,
                    **({"flaky": True} if r.passed and r.name in flaky else {}),
                    **({"unconfirmed": True} if not r.passed and tries <= self.retries else {}),
                }
            for old in list(st.results)[:-MAX_RESULTS]:  # the newest are the ones reused
                del st.results[old]
        failed = [{"name": r.name, "output_tail": r.output_tail} for r in results if not r.passed]
        attempts = (1 if results else 0) + tested.retries
        self.depth = max(self.depth, after + attempts)
        self.res.check_rounds = self.depth
        self.res.timeline.append(
            {
                "slot": slot,
                "tasks": comp.tasks,
                "tree": comp.tree,
                "checks": [c.name for c in comp.todo],
                "confirming": confirming,
                "start": round(started - self.began, 3),
                "end": round(tested.ended - self.began, 3),
                "attempts": attempts,
                "depth": after + attempts,
                "passed": not failed,
            }
        )
        self.q.event(
            QueueTested(
                tasks=comp.tasks,
                tree=comp.tree,
                passed=not failed,
                checks=[{"name": r.name, "passed": r.passed} for r in results],
                confinement=tested.confinement,
                **({"flaky": flaky} if flaky else {}),
            )
        )
        if flaky:
            self._note_flaky(comp.tree, flaky)
            self.res.flaky.append({"tree": comp.tree, "tasks": comp.tasks, "checks": flaky})
        return not failed, failed

    def _note_flaky(self, tree: str, names: list[str]) -> None:
        seen = self.flaky.setdefault(tree, [])
        seen += [n for n in names if n not in seen]

    def new_box(self, slot: str) -> ConfinedChecks:
        """A throw-away place for confined checks (one per slot: its own worktree and
        private dirs; each check its own cgroup and network namespace)."""
        return ConfinedChecks(
            self.repo,
            prefix=f"gitsup-queue-{os.getpid()}-{slot}",
            marker=f"queue/{self.q.branch}",
            label="queue",
            protect=protected_paths(self.repo),
        )

    def _setup_failed(self, commit: Oid, exc: SetupFailed, report: dict[str, Any]) -> None:
        """The environment, not a candidate: nobody is blamed, nothing leaves the queue."""
        self.q.event(
            QueueEnvironmentFailed(
                commit=commit,
                command=list(exc.result.argv),
                exit_code=exc.result.exit_code,
                timed_out=exc.result.timed_out,
                output_tail=str(report.get("output_tail", "")),
            )
        )
        raise QueueError(
            f"environment failure of the queue: {exc.message}",
            hint="no candidate was blamed and the queue is unchanged; check "
            f"{ENVIRONMENT_FILE} (`git sup env show`) and the registry it reaches, "
            "then `git sup queue run` again",
            exit_code=Exit.FAILED,
        ) from None

    def setup(self) -> Setup | None:
        """The setup phase of every composition: the main checkout's environment recipe, as
        a task started now gets it (the same environment everywhere a candidate runs)."""
        if self._recipe_setup is None:
            from gitsup.environment.recipe import load_recipe

            try:
                recipe = load_recipe(self.repo.main_workdir)
                self._recipe_setup = (Setup.of(recipe, self.repo.common_dir),)
            except GitsupError as exc:
                raise _environment_failure(exc) from None
        return self._recipe_setup[0]

    def close(self) -> None:
        if self.hosts is not None:
            self.hosts.close()
        if self._box is not None:
            self._box.close()


def _environment_failure(exc: GitsupError) -> QueueError:
    """The queue's environment (its recipe, the digest of what a check runs in) failed: no
    candidate is to blame."""
    return QueueError(
        f"environment failure of the queue: {exc.message}", hint=exc.hint, exit_code=Exit.FAILED
    )
