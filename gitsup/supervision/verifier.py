"""Verification: import the worker's commits, run the acceptance checks, judge the
candidate, then the independent reviewer. The answer is ready, repair (problems the worker
can fix) or park (with the reasons); whether a repair round starts is the task machine's
call (gitsup/supervision/machine.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

from gitsup.errors import GitsupError
from gitsup.faults import fault
from gitsup.host.contain import create_cgroup
from gitsup.ids import Oid
from gitsup.spec import Check
from gitsup.store import eventtypes as et
from gitsup.store.payload import typed
from gitsup.store.record import CheckResult, ReviewResult
from gitsup.supervision.context import TaskContext
from gitsup.supervision.finaliser import Finaliser
from gitsup.supervision.launcher import Launcher
from gitsup.supervision.taskio import Verified
from gitsup.verification.checks import run_check
from gitsup.verification.review import (
    MAX_EVIDENCE_WORKER_TAIL,
    Attempt,
    ReviewFinding,
    ReviewRequest,
    WorkerSaid,
    evidence_bundle,
    run_review,
)


class Verifier:
    def __init__(
        self,
        ctx: TaskContext,
        launcher: Launcher,
        finaliser: Finaliser,
        *,
        review_attempt: Attempt | None = None,
    ) -> None:
        self.ctx = ctx
        self.launcher = launcher
        self.finaliser = finaliser
        self.review_attempt = review_attempt
        self._seen_findings: set[str] = set()
        self._clean_before_checks = True

    def verify(self, park_reason: str | None) -> Verified:
        """Checks, then review; `park_reason` parks whatever they find."""
        refused = self.finaliser.import_work()
        if refused is not None:
            return Verified("park", (refused,))
        results = self._run_checks()
        fault("after_checks")
        if self.ctx.abort.is_set():
            return Verified("stop", (self.ctx.abort_reason(),))
        head, fixable = self._candidate_problems(results)
        hard: list[str] = [park_reason] if park_reason else []
        findings: list[ReviewFinding] = []
        if not fixable and not hard:
            verdict_problems, hard_review, findings = self._review(results)
            fixable += verdict_problems
            hard += hard_review
        # A stop asked for during checks or review ends the task stopped, never completed.
        if self.ctx.abort.is_set():
            return Verified("stop", (self.ctx.abort_reason(),))
        if not fixable and not hard:
            return Verified("ready", head=head)
        if hard:
            return Verified("park", (*hard, *fixable), head=head)
        return Verified(
            "repair",
            tuple(fixable),
            tuple(results),
            tuple(findings),
            head=head,
            worker_alive=self.launcher.worker_alive(),
        )

    # --- the setup phase -----------------------------------------------------------------

    def setup(self) -> list[str]:
        """`[environment] setup`, once per task before the worker's first turn, confined as a
        check is, with the `setup_egress` endpoints and a copy of the warmed caches. Returns
        why the task cannot start (empty: it can, or there is nothing to set up)."""
        from pathlib import Path

        from gitsup.environment import setup as envsetup

        done = self.ctx.record.setup
        if isinstance(done, dict) and done.get("passed"):
            return []  # a task taken over after its setup passed
        try:
            recipe = envsetup.task_recipe(
                self.launcher.repo.main_workdir, self.ctx.spec.environment
            )
            if not recipe.setup:
                return []
            endpoints = envsetup.setup_endpoints(recipe.setup_egress)
            kinds = envsetup.cache_kinds(recipe.cache)
        except GitsupError as exc:
            return [f"setup: {exc.message}"]
        env = self.launcher.judge_env()
        home = Path(
            env.get("HOME") or self.launcher.layout.task_dir(self.ctx.task) / "sandbox/home"
        )
        shared = envsetup.shared_cache_root(self.launcher.layout.common_dir)
        try:
            cache_env, copied = envsetup.copy_caches(shared, envsetup.task_cache_root(home), kinds)
        except GitsupError as exc:
            return [f"setup: {exc.message}"]
        env.update(cache_env)
        checks = envsetup.setup_checks(recipe.setup, recipe.setup_timeout)
        self.ctx.emit(
            et.SetupStarted(
                commands=[list(c.argv) for c in checks],
                egress=endpoints,
                caches=[k.name for k in kinds],
                cache_bytes=copied,
            )
        )
        results: list[CheckResult] = []
        for check in checks:
            if self.ctx.abort.is_set():
                break
            r = self._run_one_check(check, env, who="setup", also=endpoints)
            results.append(r)
            if not r.passed:
                break
        failed = next((r for r in results if not r.passed), None)
        last = failed or (results[-1] if results else None)
        duration = round(sum(r.duration for r in results), 3)
        passed = failed is None and len(results) == len(checks)
        outcome: dict[str, Any] = {
            "passed": passed,
            "command": list(last.argv) if last else [],
            "exit_code": last.exit_code if last else None,
            "timed_out": bool(last and last.timed_out),
            "duration": duration,
            "output_tail": envsetup.tail("\n".join(r.output_tail for r in results)),
        }
        self.ctx.emit(et.SetupFinished(**outcome))
        self.ctx.record.setup = {
            **outcome,
            "caches": [k.name for k in kinds],
            "cache_bytes": copied,
        }
        self.ctx.save()
        if passed:
            return []
        if failed is None:  # stopped before every command ran
            return [f"setup: stopped ({self.ctx.abort_reason()})"]
        how = (
            f"timed out after {recipe.setup_timeout:g}s"
            if failed.timed_out
            else f"exited {failed.exit_code}"
        )
        end = failed.output_tail.strip()[-envsetup.REASON_TAIL :]
        return [f"setup failed: `{' '.join(failed.argv)}` {how}; output: {end}"]

    # --- checks -------------------------------------------------------------------------

    def _run_checks(self) -> list[CheckResult]:
        results: list[CheckResult] = []
        env = self.launcher.judge_env()
        # The worker's result is judged as it was before the checks ran: what the checks
        # write themselves (__pycache__, .pytest_cache, build output) is not its change.
        wt = self.finaliser.worktree_repo()
        self._clean_before_checks = wt is None or wt.is_clean()
        for check in self.ctx.spec.effective_checks(self.ctx.record.baseline):
            if self.ctx.abort.is_set():
                break
            self.ctx.emit(et.AcceptanceStarted(name=check.name, argv=list(check.argv)))
            r = self._run_one_check(check, env)
            results.append(r)
            self.ctx.emit(typed("acceptance_result", r.model_dump(mode="json")))
        self.ctx.record.checks = results
        self.ctx.save()
        return results

    def _run_one_check(
        self, check: Check, env: dict[str, str], *, who: str = "check", also: Sequence[str] = ()
    ) -> CheckResult:
        """One check (or setup command), in its own cgroup (when available) and network
        namespace (if asked; `also`: the setup phase's endpoints)."""
        with contextlib.ExitStack() as stack:
            cg = None
            base = self.launcher.cg_base
            if base is not None:
                with contextlib.suppress(GitsupError, OSError):
                    cg = create_cgroup(
                        f"{self.ctx.task}-{who[0]}{os.urandom(3).hex()}",
                        base,
                        self.launcher.limits(),
                    )
            net = self.launcher.net.network_for(
                who, stack, env, agent=False, also=also, gated=who == "setup"
            )
            if net.env:
                env = {**env, **net.env}
            try:
                result = run_check(
                    check,
                    cwd=self.ctx.worktree,
                    env=env,
                    repair_round=self.ctx.record.repair_rounds,
                    abort=self.ctx.abort,
                    wrap=self.launcher.wrapper(cg, net.netns),
                )
                hits = [why for _kind, why in cg.limit_hits()] if cg is not None else []
                if hits:  # what the check ran into is said where its output is read
                    tail = "\n".join([result.output_tail, *(f"check {h}" for h in hits)])
                    result = result.model_copy(update={"output_tail": tail.strip()})
                return result
            finally:
                if cg is not None:
                    cg.kill(timeout=5.0)
                    cg.remove()

    def _candidate_problems(self, results: list[CheckResult]) -> tuple[Oid | None, list[str]]:
        """The branch head verified, and what keeps it from being a candidate."""
        problems = []
        failed = [r.name for r in results if r.required and not r.passed]
        if failed:
            problems.append("required checks failed: " + ", ".join(failed))
        head = self.finaliser.branch_head()
        self.ctx.record.head = head
        if self.ctx.spec.autonomy.require_local_commit:
            if head is None or head == self.ctx.record.baseline:
                problems.append("no local commit after the baseline")
            elif not self.ctx.repo.is_ancestor(Oid(self.ctx.record.baseline), head):
                problems.append("branch head does not descend from the baseline")
        if not self._clean_before_checks:
            problems.append("worktree has uncommitted changes")
        return head, problems

    # --- review -------------------------------------------------------------------------

    def _worker_said(self) -> WorkerSaid:
        """The worker's last turn result and the tail of its output, from the event log's
        last records (what was redacted there stays redacted)."""
        last: str | None = None
        lines: list[str] = []
        for ev in self.ctx.journal.log.recent(1 << 19):
            if ev.type == "turn_completed":
                last = str(ev.data.get("result") or "")
            elif ev.type == "worker_output":
                lines.append(str(ev.data.get("text") or ""))
        tail = "\n".join(lines)
        return WorkerSaid(last, tail[-2 * MAX_EVIDENCE_WORKER_TAIL :])

    def _review(
        self, results: list[CheckResult]
    ) -> tuple[list[str], list[str], list[ReviewFinding]]:
        """Returns (fixable problems, park reasons, findings)."""
        kind = self.ctx.spec.review.kind
        if kind == "none":
            self.ctx.record.review = ReviewResult(kind="none", verdict=None)
            return [], [], []
        wt = self.finaliser.worktree_repo()
        if wt is None:
            return [], ["worktree is gone; nothing to review"], []
        evidence = wt.evidence(Oid(self.ctx.record.baseline))
        # from the worktree's own Git dir: it holds the task's commits
        policy = (
            wt.policy_change(Oid(self.ctx.record.baseline), evidence.head) if evidence.head else []
        )
        bundle = evidence_bundle(
            self.ctx.task, self.ctx.spec, results, evidence, policy, worker=self._worker_said()
        )
        self.ctx.emit(
            et.ReviewStarted(
                kind=kind,
                repair_round=self.ctx.record.repair_rounds,
                complete=evidence.complete,
                head=evidence.head,
            )
        )
        _, wrap_for = self.launcher.read_only_wrappers()
        wrap = self.launcher.judge_wrap("reviewer")
        ctx = ReviewRequest(
            self.ctx.task,
            self.ctx.worktree,
            self.launcher.judge_env(),
            self.ctx.spec,
            bundle,
            network=self.launcher.net.agent_network("reviewer", self.ctx.spec.review.kind),
            wrap=wrap,
            wrap_for=wrap_for,
            abort=self.ctx.abort,
            on_call=self.ctx.on_call,
        )

        def on_attempt(n: int, err: str | None) -> None:
            if err:
                self.ctx.emit(et.ReviewResult(attempt=n, error=err))

        result, verdict = run_review(ctx, on_attempt=on_attempt, attempt_fn=self.review_attempt)
        self.ctx.record.review = result
        self.ctx.emit(typed("review_result", result.model_dump(mode="json")))
        self.ctx.save()
        if verdict is None:
            return [], [f"review failed after {result.attempts} attempt(s): {result.error}"], []
        serious = [f for f in verdict.findings if f.severity in ("P0", "P1")]
        if serious:
            return (
                [],
                [f"review: {f.severity} finding: {f.title}" for f in serious],
                verdict.findings,
            )
        if verdict.verdict == "human":
            return [], ["review: a person must decide (verdict human)"], verdict.findings
        if verdict.verdict == "pass":
            return [], [], verdict.findings
        repeated = [f for f in verdict.findings if f.key() in self._seen_findings]
        if repeated:
            return (
                [],
                [f"review: finding repeated from an earlier round: {f.title}" for f in repeated],
                verdict.findings,
            )
        self._seen_findings.update(f.key() for f in verdict.findings)
        titles = "; ".join(f.title for f in verdict.findings) or "no findings given"
        return [f"review asked for revisions: {titles}"], [], verdict.findings
