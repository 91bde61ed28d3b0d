"""A person's requests for a cluster task (`git sup answer`, `send`, `continue` in the clone
that submitted it), carried to the host that runs the task, whichever that is.

- The submitter sends the request as an **update** of the task's workflow (`request`): the
  workflow keeps it in its inbox, durably, and the update answers once a host said what became
  of it: the event that took it (exit 0), or its refusal with the host's exit code (2: an
  unknown request, one already answered, a worker that takes no messages, …).
- The host's activity polls the inbox (a query, `inbox`) while the task runs there and hands
  each request to the task's supervisor through the local channel (`gitsup.tasks.human`, with
  `via` `cluster` and the submitter's `by`), then signals the outcome (`done`).

A request lives in the workflow until a host answers it: when the host dies first, the host
that continues the task takes it (an answer to an ask of the dead worker is refused there:
asks do not survive a supervisor, docs/human.md); when the task ends first, it is refused.
A worker never reaches any of this: the frontend is outside its network namespace, and the
local channel is outside its sandbox."""

from __future__ import annotations

import asyncio
from typing import Any

from gitsup.cluster.client import connect
from gitsup.cluster.settings import ClusterSettings
from gitsup.errors import Exit, GitsupError
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.human import Taken

# how long the submitter waits for a host to take a request: the host polls about twice a
# second, then its supervisor has the local channel's 10 s; a task moving to another host
# (docs/cluster.md, "The model": Failover) takes the heartbeat timeout and the adoption on top
ACK_TIMEOUT = 60.0
POLL_INTERVAL = 0.5


def request(
    settings: ClusterSettings,
    task: str,
    kind: str,
    data: dict[str, Any],
    *,
    by: str,
    timeout: float = ACK_TIMEOUT,
) -> Taken:
    """Send `kind` (answer, send, continue) with `data` to the task's host and wait for what
    its supervisor made of it. Raises GitsupError with the host's exit code when refused."""
    return asyncio.run(_request(settings, task, {"kind": kind, "data": data, "by": by}, timeout))


async def _request(
    settings: ClusterSettings, task: str, req: dict[str, Any], timeout: float
) -> Taken:
    from temporalio.client import (
        WorkflowUpdateFailedError,
        WorkflowUpdateRPCTimeoutOrCancelledError,
    )
    from temporalio.exceptions import ApplicationError
    from temporalio.service import RPCError, RPCStatusCode

    from gitsup.cluster.workflow import CONTROL_UPDATE

    client = await connect(settings)
    handle = client.get_workflow_handle(task)
    kind = str(req["kind"])
    try:
        taken = await asyncio.wait_for(
            handle.execute_update(CONTROL_UPDATE, req, result_type=dict), timeout
        )
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        # (the update's call, cancelled by the timeout, says so with its own error)
        raise GitsupError(
            f"task {task}: no host took the {kind} request within {timeout:g}s",
            hint="the request stays with the task and its host takes it when it can; "
            f"`git sup show {task}` says where it runs",
            exit_code=Exit.INTERNAL,
        ) from None
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError):
            details = cause.details[0] if cause.details else {}
            details = details if isinstance(details, dict) else {}
            raise GitsupError(
                cause.message,
                hint=details.get("hint"),
                exit_code=int(details.get("exit") or Exit.BAD_INPUT),
            ) from None
        raise GitsupError(f"task {task}: {kind} refused: {cause or exc}") from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise GitsupError(f"task {task} already ended ({exc.message})") from None
        raise GitsupError(
            f"the cluster at {settings.address} refused: {exc.message}", exit_code=Exit.INTERNAL
        ) from None
    return Taken(
        str(taken.get("task", task)),
        str(taken.get("ref", "")),
        str(taken.get("event", "")),
        dict(taken.get("data") or {}),
        host=str(taken.get("host") or "") or None,
    )


def apply(ctx: SupRepo, task: str, req: dict[str, Any], *, host: str) -> dict[str, Any]:
    """On the host `host`: hand one request of the inbox to the task's supervisor (the local
    channel); the outcome the workflow gets (`seq` and `taken`, or `error`, `exit`, `hint`),
    which says the host that gave it."""
    from gitsup.tasks import human

    seq = int(req["seq"])
    data = req.get("data") if isinstance(req.get("data"), dict) else {}
    assert isinstance(data, dict)
    by = str(req.get("by") or "") or None
    kind = req.get("kind")
    try:
        if kind == "answer":
            taken = human.answer(
                ctx,
                task,
                str(data.get("request_id", "")),
                str(data.get("decision", "")),
                str(data.get("message", "")),
                via="cluster",
                by=by,
            )
        elif kind == "send":
            taken = human.send(ctx, task, str(data.get("text", "")), via="cluster", by=by)
        elif kind == "continue":
            taken = human.continue_task(
                ctx,
                task,
                add_cost_usd=float(data.get("add_cost_usd") or 0.0),
                add_turns=int(data.get("add_turns") or 0),
                extend=float(data.get("extend") or 0.0),
                via="cluster",
                by=by,
            )
        else:
            raise GitsupError(f"not a request: {kind!r}")
    except GitsupError as exc:
        error = f"{exc.message} (host {host})"
        return {"seq": seq, "error": error, "exit": exc.exit_code, "hint": exc.hint}
    except (ValueError, TypeError) as exc:
        return {"seq": seq, "error": f"a malformed {kind} request: {exc} (host {host})", "exit": 2}
    return {"seq": seq, "taken": {**taken.as_dict(), "host": host}}
