"""Every text the supervisor sends a worker: the task prompt, the recovery note, the
deadline warning and the repair round. Pure functions of their inputs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gitsup.spec import TaskSpec
    from gitsup.store.record import CheckResult
    from gitsup.verification.review import ReviewFinding


def task_prompt(spec: TaskSpec) -> str:
    """The goal as the worker reads it (scope, constraints, checks: `TaskSpec.prompt`)."""
    return spec.prompt()


RECOVERY_NOTE = (
    "Note from the supervisor: an earlier worker on this task was interrupted "
    "(its supervisor stopped). Its work is in this worktree: look at `git status` and "
    "`git log` first, keep what is right, then finish the task and commit locally."
)


def recovery_prompt(spec: TaskSpec) -> str:
    """The first turn of a new worker on a task whose supervisor died."""
    return task_prompt(spec) + "\n\n" + RECOVERY_NOTE


REOPENED_NOTE = (
    "Note from the supervisor: this task was parked and now goes on. The earlier work is in "
    "this worktree: look at `git status` and `git log` first, keep what is right, then finish "
    "the task and commit locally."
)


def reopened_prompt(spec: TaskSpec, message: str) -> str:
    """The first turn of a new worker on a parked task that goes on (`git sup repair`,
    `git sup recover --extend`)."""
    return task_prompt(spec) + "\n\n" + REOPENED_NOTE + ("\n\n" + message if message else "")


def extend_message(seconds: float) -> str:
    return (
        f"The deadline ended the earlier work on this task; it has {int(seconds)} more "
        "seconds. Finish it and commit locally."
    )


def deadline_warning(seconds_left: float) -> str:
    return (
        f"{int(seconds_left)} seconds are left before the deadline. Integrate what you have and "
        "commit it locally now."
    )


def repair_message(
    problems: list[str],
    results: list[CheckResult],
    findings: list[ReviewFinding],
    limit: int = 8000,
) -> str:
    """One bounded corrective message: what failed, the failing output tails, the findings."""
    parts = ["The supervisor verified your work and it is not ready yet.", ""]
    parts += [f"- {p}" for p in problems]
    for r in results:
        if r.required and not r.passed:
            parts += [
                "",
                f"Check {r.name!r} ({' '.join(r.argv)}) failed with exit {r.exit_code}. Output tail:",
                r.output_tail[-1500:],
            ]
    if findings:
        parts += ["", "Reviewer findings:"]
        for f in findings:
            where = f" ({f.path}{':' + str(f.line) if f.line else ''})" if f.path else ""
            parts.append(f"- [{f.severity}] {f.title}{where}: {f.detail[:600]}")
    parts += ["", "Fix these, run the checks, and commit your work locally. Do not push."]
    text = "\n".join(parts)
    return text if len(text) <= limit else text[: limit - 20] + "\n[message cut]"
