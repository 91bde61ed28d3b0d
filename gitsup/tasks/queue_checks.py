"""Testing a composition of queued candidates: the union of their required checks on the
composed tree, memoised per (tree, check) in the queue state, run in a throw-away worktree
inside the task sandbox."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gitsup.errors import Exit, GitsupError
from gitsup.git import GitRepo
from gitsup.host import proc
from gitsup.ids import Oid
from gitsup.spec import Check
from gitsup.store.eventtypes import QueueTested
from gitsup.store.record import CandidateNote, CheckResult
from gitsup.tasks.lifecycle import SupRepo
from gitsup.tasks.queue_state import MAX_RESULTS, Entry, Queue
from gitsup.verification.checks import run_check


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
    _wt_root: Path | None
    _env: dict[str, str]
    _plans: dict[str, Callable[[list[str]], list[str]] | None]

    def _test(self, steps: list[_Step], k: int) -> tuple[bool, list[dict[str, Any]]]:
        """Run the union of the first k candidates' required checks on the tree of the
        k-th composition (memoised per tree and check). Returns (passed, failures)."""
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
            QueueTested(
                tasks=[st.entry.task for st in steps[:k]],
                tree=s.tree,
                passed=not failed,
                checks=[{"name": r.name, "passed": r.passed} for r in results],
            )
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
        from gitsup.host.contain import bootstrap_argv
        from gitsup.host.sandbox import build_plan, load_rules, required_problems, resolve_mode
        from gitsup.integration.keys import protected_paths

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
            protect=protected_paths(self.repo),
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
