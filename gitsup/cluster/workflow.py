"""The task workflow: one per task id, its result the task's final record.

This module is loaded into Temporal's workflow sandbox: it imports only the standard library
and `temporalio`, and does nothing but schedule the one activity (the supervisor on a host,
`gitsup/cluster/hostwork.py`), hand back what it returns, and keep the inbox of a person's
requests for the task (`git sup answer`, `send`, `continue`: `gitsup/cluster/control.py`)
until the host that runs the task says what became of each."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

WORKFLOW = "gitsup-task"
ACTIVITY = "gitsup-run-task"
# a running task has no end the workflow could know; its deadline is its own (the spec's)
RUN_LIMIT = timedelta(days=30)

# A person's requests for the task: the update the submitter's clone sends, the query the
# host's activity polls, the signal by which the host says what became of one
CONTROL_UPDATE = "control"
CONTROL_INBOX = "control_inbox"
CONTROL_DONE = "control_done"
CONTROL_KINDS = ("answer", "send", "continue")
ENDED = ("completed", "blocked", "failed", "stopped", "ended")


@workflow.defn(name=WORKFLOW)
class TaskWorkflow:
    """Input: {"task", "spec", "baseline", "source", "heartbeat", "attempts", "submitter"}."""

    def __init__(self) -> None:
        self._state = "submitted"
        self._seq = 0
        self._inbox: list[dict[str, Any]] = []  # requests no host has answered yet
        self._outcomes: dict[int, dict[str, Any]] = {}

    @workflow.run
    async def run(self, job: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._run(job)
        finally:
            # a request no host took before the task ended is refused, never left hanging
            for request in self._inbox:
                self._outcomes[int(request["seq"])] = {
                    "error": f"task {job['task']} ended before its host took the request",
                    "exit": 2,
                }
            self._inbox = []
            await workflow.wait_condition(workflow.all_handlers_finished)

    async def _run(self, job: dict[str, Any]) -> dict[str, Any]:
        self._state = "running"
        try:
            result = await _job_activity(
                ACTIVITY,
                job,
                heartbeat=float(job["heartbeat"]),
                attempts=int(job.get("attempts", 0)),
                # a stop waits for the host to stop the task and push its work
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):
                self._state = "stopped"
                raise
            self._state = "failed"
            return {
                "task": job["task"],
                "state": "failed",
                "status": "failed",
                "reasons": [f"no host could run it: {_message(exc)}"],
                "exit": 4,
            }
        self._state = str(result.get("state", "ended"))
        return result

    @workflow.query
    def state(self) -> str:
        return self._state

    @workflow.update(name=CONTROL_UPDATE)
    async def control(self, request: dict[str, Any]) -> dict[str, Any]:
        """A person's request (`kind`: answer, send, continue; its data; `by`): queued for the
        host that runs the task, whichever it is now or later; answers what that host's
        supervisor made of it (the event that took it), or fails with its refusal."""
        self._seq += 1
        seq = self._seq
        self._inbox.append({**request, "seq": seq})
        await workflow.wait_condition(lambda: seq in self._outcomes)
        outcome = self._outcomes.pop(seq)
        if "error" in outcome:
            raise ApplicationError(
                str(outcome["error"]),
                {"exit": outcome.get("exit", 2), "hint": outcome.get("hint")},
                type="GitsupError",
                non_retryable=True,
            )
        taken: dict[str, Any] = outcome["taken"]
        return taken

    @control.validator
    def _admit(self, request: dict[str, Any]) -> None:
        if request.get("kind") not in CONTROL_KINDS:
            raise ApplicationError(f"not a request: {request.get('kind')!r}", type="GitsupError")
        if self._state in ENDED:
            raise ApplicationError(f"the task already ended ({self._state})", type="GitsupError")

    @workflow.query(name=CONTROL_INBOX)
    def inbox(self) -> list[dict[str, Any]]:
        return list(self._inbox)

    @workflow.signal(name=CONTROL_DONE)
    def done(self, outcome: dict[str, Any]) -> None:
        """From the host: what became of request `seq` (`taken`, else `error` and `exit`).
        The first word on a request stands."""
        seq = int(outcome.get("seq", 0))
        if not any(int(r["seq"]) == seq for r in self._inbox):
            return
        self._inbox = [r for r in self._inbox if int(r["seq"]) != seq]
        self._outcomes[seq] = outcome


async def _job_activity(
    name: str, job: dict[str, Any], *, heartbeat: float, attempts: int, **options: Any
) -> dict[str, Any]:
    """The activity `name` run on `job`, lost to another worker when silent for `heartbeat`
    seconds; tried again after 1 s, the wait doubling up to 10 s, `attempts` times in all (0
    is without end); a refusal (GitsupError) never."""
    result: dict[str, Any] = await workflow.execute_activity(
        name,
        job,
        start_to_close_timeout=RUN_LIMIT,
        heartbeat_timeout=timedelta(seconds=heartbeat),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=10),
            maximum_attempts=attempts,
            non_retryable_error_types=["GitsupError"],
        ),
        **options,
    )
    return result


def _message(exc: BaseException) -> str:
    cause = exc.cause if isinstance(exc, ActivityError) else None
    return str(cause or exc)


QUEUE_WORKFLOW = "gitsup-queue"
INTEGRATE_ACTIVITY = "gitsup-integrate"


def integrator_queue(queue: str) -> str:
    """The task queue only integrators poll (`git sup host run --integrator`): task hosts
    never get the integration activity."""
    return f"{queue}.integrator"


@workflow.defn(name=QUEUE_WORKFLOW)
class QueueWorkflow:
    """One per target branch (its id names the repository's queue and the branch). Input:
    {"into", "tasks": [{"task", "policy_change"}]}. It runs on the integrators' task queue,
    and so does its activity (the integration)."""

    @workflow.run
    async def run(self, job: dict[str, Any]) -> dict[str, Any]:
        return await _job_activity(INTEGRATE_ACTIVITY, job, heartbeat=60, attempts=3)


CHECK_WORKFLOW = "gitsup-queue-check"
CHECK_ACTIVITY = "gitsup-check-composition"


def checks_queue(queue: str) -> str:
    """The task queue only task hosts poll for the queue's composition checks: an integrator
    (`git sup host run --integrator`) never runs candidate code."""
    return f"{queue}.checks"


@workflow.defn(name=CHECK_WORKFLOW)
class CheckWorkflow:
    """The checks of one composition, as one activity on a task host (gitsup/cluster/checks.py).
    Its id names the work (the composed tree, the environment, the checks), so a composition
    asked for twice is tested once. Input: {"base", "candidates", "tree", "checks", "heartbeat",
    "attempts", ...}. A host that goes silent (heartbeat timeout) loses the activity to
    another host; a refusal (GitsupError) is not retried."""

    @workflow.run
    async def run(self, job: dict[str, Any]) -> dict[str, Any]:
        return await _job_activity(
            CHECK_ACTIVITY,
            job,
            heartbeat=float(job["heartbeat"]),
            attempts=int(job.get("attempts", 5)),
        )
