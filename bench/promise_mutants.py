"""Hand-written mutants of the promises mutmut cannot reach (their tests run the real
`git sup` console script, which imports gitsup from the checkout, not from mutmut's copy).

Each mutant deletes or weakens the code that keeps one promise, in place, runs the tests
that pin that promise, and puts the file back. A mutant whose tests still pass is a missing
test. Developer workflow, not CI: about 5 minutes on 2 cores.

    .venv/bin/python bench/promise_mutants.py            # all
    .venv/bin/python bench/promise_mutants.py detach     # those whose name contains "detach"
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent


class Mutant(NamedTuple):
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


T = "tests/supervision/test_promises_task.py::"
C = "tests/cli/test_promises_cli.py::"
B = "tests/boundary/test_promises_boundary.py::"

MUTANTS = [
    Mutant(
        "ready-only-for-the-verified-commit",
        "gitsup/supervision/finaliser.py",
        "if final == State.COMPLETED and head != verified_head:",
        "if False:",
        (T + "test_the_branch_moving_after_verification_parks_the_task",),
    ),
    Mutant(
        "optional-checks-do-not-park",
        "gitsup/supervision/verifier.py",
        "failed = [r.name for r in results if r.required and not r.passed]",
        "failed = [r.name for r in results if not r.passed]",
        (T + "test_what_the_worker_is_told_and_which_failing_check_parks",),
    ),
    Mutant(
        "required-checks-park",
        "gitsup/supervision/verifier.py",
        "failed = [r.name for r in results if r.required and not r.passed]",
        "failed = []",
        (T + "test_what_the_worker_is_told_and_which_failing_check_parks",),
    ),
    Mutant(
        "require-local-commit-off",
        "gitsup/supervision/verifier.py",
        "if self.spec.autonomy.require_local_commit:",
        "if True:",
        (T + "test_require_local_commit",),
    ),
    Mutant(
        "require-local-commit-on",
        "gitsup/supervision/verifier.py",
        "if self.spec.autonomy.require_local_commit:",
        "if False:",
        (T + "test_require_local_commit",),
    ),
    Mutant(
        "per-check-timeout",
        "gitsup/verification/checks.py",
        "timeout=check.timeout,",
        "timeout=None,",
        (T + "test_a_check_over_its_timeout_is_stopped_with_its_process_group",),
    ),
    Mutant(
        "forbidden-in-the-prompt",
        "gitsup/spec.py",
        "        if self.forbidden:\n",
        "        if False:\n",
        (T + "test_what_the_worker_is_told_and_which_failing_check_parks",),
    ),
    Mutant(
        "baseline-in-the-environment",
        "gitsup/supervision/launcher.py",
        '"GITSUP_BASELINE": self.record.baseline,',
        "",
        (T + "test_what_the_worker_is_told_and_which_failing_check_parks",),
    ),
    Mutant(
        "detach-own-session",
        "gitsup/tasks/detach.py",
        "start_new_session=True,",
        "start_new_session=False,",
        (C + "test_detach_returns_while_the_task_runs_in_its_own_session",),
    ),
    Mutant(
        "wait-timeout",
        "gitsup/tasks/detach.py",
        "if end is not None and time.monotonic() > end:",
        "if False:",
        (C + "test_detach_returns_while_the_task_runs_in_its_own_session",),
    ),
    Mutant(
        "doctor-missing-worktree",
        "gitsup/supervision/recovery.py",
        'findings.append(Finding("missing-worktree", rec.worktree, rec.id))',
        "pass",
        (C + "test_doctor_finds_missing_and_unknown_worktrees",),
    ),
    Mutant(
        "doctor-stale-lease",
        "gitsup/supervision/recovery.py",
        "        if lease.owner_alive:\n            continue\n",
        "        continue\n",
        (C + "test_wait_and_doctor_when_the_supervisor_died",),
    ),
    Mutant(
        "sigint-exits-130",
        "gitsup/cli/start_cmd.py",
        'if "stopped: signal SIGINT" in record.reasons:',
        "if False:",
        (C + "test_a_signalled_foreground_start_stops_the_task_and_keeps_its_work",),
    ),
    Mutant(
        "pre-push-process-tree-worker",
        "gitsup/boundary/pusher.py",
        "if r_w is not None and (",
        "if False and (",
        (B + "test_a_push_from_inside_a_tasks_process_tree_is_refused",),
    ),
    Mutant(
        "pre-push-process-tree-cwd",
        "gitsup/boundary/pusher.py",
        "if cwd_p and _within(cwd_p, r.worktree):",
        "if False:",
        (B + "test_a_push_from_inside_a_tasks_process_tree_is_refused",),
    ),
    Mutant(
        "integrate-rechecks-clean-target",
        "gitsup/integration/integrate.py",
        "    if checkout is not None:\n        _require_clean(checkout, branch)\n    message =",
        "    message =",
        (B + "test_integrate_rechecks_a_clean_target_after_its_checks",),
    ),
    Mutant(
        "pool-spare-not-at-baseline",
        "gitsup/tasks/pool.py",
        "    if spare.commit == baseline:\n",
        "    if True:\n",
        ("tests/tasks/test_promises_pool.py",),
    ),
    Mutant(
        "launcher-resolved-interpreter",
        "gitsup/git/hooks.py",
        "python=shlex.quote(os.path.realpath(python or sys.executable)),",
        "python=shlex.quote(python or sys.executable),",
        ("tests/tasks/test_promises_init.py",),
    ),
]


def run(m: Mutant) -> tuple[bool, float, str]:
    path = ROOT / m.path
    original = path.read_text()
    if original.count(m.old) != 1:
        raise SystemExit(f"{m.name}: the code to mutate is not in {m.path} exactly once")
    t0 = time.monotonic()
    try:
        path.write_text(original.replace(m.old, m.new))
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *m.tests],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    finally:
        path.write_text(original)
    # pytest exits 1 when tests failed; anything else (a collection error, no test) is no kill
    why = next((line for line in res.stdout.splitlines() if line.startswith("E ")), "")
    return res.returncode == 1, time.monotonic() - t0, why[:150] or res.stdout[-150:]


def main(argv: list[str]) -> int:
    chosen = [m for m in MUTANTS if not argv or any(a in m.name for a in argv)]
    killed = 0
    for m in chosen:
        dead, took, why = run(m)
        killed += dead
        print(f"{'killed  ' if dead else 'SURVIVED'} {m.name} ({took:.0f}s): {why}", flush=True)
    print(f"promise mutants: {killed}/{len(chosen)} killed")
    return 0 if killed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
