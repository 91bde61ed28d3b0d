"""Testing a composition of queued candidates: the union of their required checks on the
composed tree, memoised per (tree, check, environment) in the queue state, run in a throw-away worktree
confined as a task's checks are (gitsup/verification/confined.py)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gitsup.environment.recipe import ENVIRONMENT_FILE
from gitsup.errors import Exit, GitsupError
from gitsup.git import GitRepo
from gitsup.ids import Oid, TaskId
from gitsup.integration.keys import protected_paths
from gitsup.spec import Check, TaskSpec
from gitsup.store.eventtypes import QueueEnvironmentFailed, QueueTested
from gitsup.store.record import CandidateNote, CheckResult
from gitsup.tasks.lifecycle import SupRepo
from gitsup.tasks.queue_state import MAX_RESULTS, Entry, Queue, QueueError
from gitsup.verification.confined import (
    ConfinedChecks,
    Confinement,
    Setup,
    SetupFailed,
    environment_digest,
)

DEFAULT_RETRIES = 1  # `git config sup.queue.retries`, `queue run --retries`


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

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


class CompositionTester:
    """The check-running half of the queue runner (`queue.Runner`)."""

    ctx: SupRepo
    repo: GitRepo
    q: Queue
    res: RunResult
    say: Callable[[str], None]
    _box: ConfinedChecks | None
    _recipe_setup: tuple[Setup | None] | None = None
    retries: int = DEFAULT_RETRIES  # fresh runs of a failing check before it counts as failed
    # per tree: the checks that failed, then passed in a fresh run (from this run or the memo)
    _flaky: dict[str, list[str]]

    def _specs(self, task: str) -> TaskSpec | None:
        try:
            path = self.ctx.layout.task_dir(TaskId(task)) / "spec.json"
            return TaskSpec.model_validate_json(path.read_bytes())
        except (OSError, ValueError):
            return None

    def _test(self, steps: list[_Step], k: int) -> tuple[bool, list[dict[str, Any]]]:
        """Run the union of the first k candidates' required checks on the tree of the
        k-th composition (memoised per tree, check and environment: a result is reused only
        while the recipe and the main checkout's included trees are what they were when it
        was made; `confined.environment_digest`). Returns (passed, failures)."""
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
        conf = Confinement.of(self._specs(st.entry.task) for st in steps[:k])
        try:
            env = environment_digest(self.repo, conf, protected_paths(self.repo))
        except GitsupError as exc:
            raise QueueError(
                f"environment failure of the queue: {exc.message}",
                hint=exc.hint,
                exit_code=Exit.FAILED,
            ) from None
        state, _ = self.q.read()
        known = {key: state.results.get(f"{s.tree} {env} {key}") for key in checks}
        for key, memo in known.items():
            if memo is not None and memo.get("passed") and memo.get("flaky"):
                self._note_flaky(s.tree, [checks[key].name])
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
        results, commands, retries, flaky = self._run_with_retries(s, todo, conf)
        self.res.check_runs += 1
        self.res.check_commands += commands
        self.res.check_retries += retries
        with self.q.change(f"checks on {s.tree[:12]}") as st:
            st.check_runs += 1
            st.check_commands += commands
            for c, r in zip(todo, results, strict=False):
                st.results[f"{s.tree} {env} {_check_key(c)}"] = {
                    "passed": r.passed,
                    "output_tail": r.output_tail,
                    "confinement": self.res.confinement,
                    **({"flaky": True} if r.passed and r.name in flaky else {}),
                }
            for old in list(st.results)[:-MAX_RESULTS]:  # the newest are the ones reused
                del st.results[old]
        failed = [{"name": r.name, "output_tail": r.output_tail} for r in results if not r.passed]
        self.q.event(
            QueueTested(
                tasks=[st.entry.task for st in steps[:k]],
                tree=s.tree,
                passed=not failed,
                checks=[{"name": r.name, "passed": r.passed} for r in results],
                confinement=self.res.confinement,
                **({"flaky": flaky} if flaky else {}),
            )
        )
        if flaky:
            self._note_flaky(s.tree, flaky)
            self.res.flaky.append(
                {"tree": s.tree, "tasks": [st.entry.task for st in steps[:k]], "checks": flaky}
            )
        return not failed, failed

    def _run_with_retries(
        self, s: _Step, todo: list[Check], conf: Confinement
    ) -> tuple[list[CheckResult], int, int, list[str]]:
        """The checks on one composition; a failing check runs again, in a fresh confined run
        (new worktree, private dirs, cgroup and network namespace), up to `retries` times. A
        check that then passes is flaky (recorded, blamed on nobody); one that fails every
        time has failed. Returns (results, commands of the first run, retries, flaky names)."""
        results = self._run_checks(s.merge, todo, conf)
        retries, commands = 0, len(results)
        flaky: list[str] = []
        tries: dict[str, int] = {}
        while results and not results[-1].passed:
            i = len(results) - 1
            key = _check_key(todo[i])
            tries[key] = tries.get(key, 0) + 1
            if tries[key] > self.retries:
                break
            self.say(
                f"check {todo[i].name} failed on {s.tree[:12]}: running it again in a fresh "
                f"run (retry {tries[key]} of {self.retries})"
            )
            again = self._run_checks(s.merge, todo[i:], conf)
            retries += 1
            if again and again[0].passed and todo[i].name not in flaky:
                flaky.append(todo[i].name)
            results = results[:i] + again
        return results, commands, retries, flaky

    def _note_flaky(self, tree: str, names: list[str]) -> None:
        seen = self._flaky.setdefault(tree, [])
        seen += [n for n in names if n not in seen]

    def _run_checks(self, commit: Oid, checks: list[Check], conf: Confinement) -> list[CheckResult]:
        """The checks on one composition, confined as a task's checks are
        (gitsup/verification/confined.py); the first failure ends the run."""
        if self._box is None:
            self._box = ConfinedChecks(
                self.repo,
                prefix=f"gitsup-queue-{os.getpid()}-",
                marker=f"queue/{self.q.branch}",
                label="queue",
                protect=protected_paths(self.repo),
            )
        t0 = time.monotonic()
        try:
            return self._box.run(
                commit,
                checks,
                say=self.say,
                stop_at_failure=True,
                confinement=conf,
                setup=self._setup(),
            )
        except SetupFailed as exc:
            # the environment, not a candidate: nobody is blamed, nothing leaves the queue
            report = self._box.setup_report
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
        finally:
            self.res.check_seconds += time.monotonic() - t0
            self.res.confinement = self._box.applied.as_dict()

    def _setup(self) -> Setup | None:
        """The setup phase of every composition: the main checkout's environment recipe, as
        a task started now gets it (the same environment everywhere a candidate runs)."""
        if self._recipe_setup is None:
            from gitsup.environment.recipe import load_recipe

            try:
                recipe = load_recipe(self.repo.main_workdir)
                self._recipe_setup = (Setup.of(recipe, self.repo.common_dir),)
            except GitsupError as exc:
                raise QueueError(
                    f"environment failure of the queue: {exc.message}",
                    hint=exc.hint,
                    exit_code=Exit.FAILED,
                ) from None
        return self._recipe_setup[0]

    def _cleanup(self) -> None:
        if self._box is not None:
            self._box.close()
