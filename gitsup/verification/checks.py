"""Acceptance checks: argv (never a shell), in the worktree, with a timeout and bounded output."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from gitsup.errors import GitsupError
from gitsup.host import proc
from gitsup.spec import Check
from gitsup.store.record import CheckResult

OUTPUT_TAIL = 4000


def run_check(
    check: Check,
    *,
    cwd: Path,
    env: Mapping[str, str],
    repair_round: int = 0,
    wrap: Callable[[list[str]], list[str]] | None = None,
    abort: threading.Event | None = None,
) -> CheckResult:
    argv = list(check.argv)
    if wrap is not None:
        argv = wrap(argv)
    try:
        res = proc.run(
            argv,
            cwd=cwd,
            env=env,
            timeout=check.timeout,
            max_output=256 * 1024,
            abort=abort,
            redact=True,
        )
    except GitsupError as exc:
        return CheckResult(
            name=check.name,
            argv=list(check.argv),
            required=check.required,
            exit_code=None,
            passed=False,
            output_tail=exc.message,
            repair_round=repair_round,
        )
    tail = res.output[-OUTPUT_TAIL:]
    if res.timed_out:
        tail += f"\n[timed out after {check.timeout:g}s]"
    return CheckResult(
        name=check.name,
        argv=list(check.argv),
        required=check.required,
        exit_code=res.returncode,
        passed=res.ok,
        timed_out=res.timed_out,
        duration=_seconds(res.duration),
        output_tail=tail,
        repair_round=repair_round,
    )


def _seconds(x: float) -> float:  # to the millisecond
    return float(f"{x:.3f}")
