"""One read-only Claude Code call: a fresh process, a prompt, the final message's text.

Used by the `claude` reviewer and the `claude` decider. Only Read, Grep and Glob
inside the worktree are ever allowed; every other tool request is denied.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from gitsup.workers.base import (
    PermissionAnswer,
    PermissionRequest,
    TurnCompleted,
    WorkerContext,
    WorkerExited,
)

READ_ONLY_TOOLS = ("Read", "Grep", "Glob")


class ClaudeCallError(Exception):
    pass


def claude_call(
    prompt: str,
    *,
    label: str,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    argv: Sequence[str] = (),
    tools: Sequence[str] = READ_ONLY_TOOLS,
    abort: threading.Event | None = None,
) -> str:
    """Run one turn and return the final assistant message. Raises ClaudeCallError."""
    from gitsup.policy import Policy, decide_tool
    from gitsup.workers.claude import ClaudeWorker

    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    wctx = WorkerContext(
        task_id=label,
        worktree=cwd,
        task_dir=cwd,
        env=env,
        argv=tuple(argv),
        inbox=inbox,
        options={"tools": ",".join(tools), "ask_tools": ()},
    )
    worker = ClaudeWorker(wctx)
    policy = Policy.load(None)
    deadline = time.monotonic() + timeout
    try:
        worker.start(prompt)
    except Exception as exc:
        raise ClaudeCallError(f"could not start: {exc}") from exc
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClaudeCallError(f"timed out after {timeout:g}s")
            if abort is not None and abort.is_set():
                raise ClaudeCallError("stopped: stop requested")
            try:
                item = inbox.get(timeout=left if abort is None else min(left, 0.2))
            except queue.Empty:
                continue
            if isinstance(item, PermissionRequest):
                allow = False
                if item.tool_name in tools:
                    d = decide_tool(
                        item.tool_name, item.tool_input, worktree=str(cwd), policy=policy
                    )
                    allow = d.verdict == "allow"
                worker.answer(
                    item.request_id,
                    PermissionAnswer(True, updated_input=item.tool_input)
                    if allow
                    else PermissionAnswer(
                        False, "Read-only: only " + ", ".join(tools) + " inside the worktree."
                    ),
                )
            elif isinstance(item, TurnCompleted):
                if item.is_error:
                    from gitsup.workers.stream_json import model_failure

                    f = model_failure(item)
                    if f is not None:
                        what = "authentication failed" if f.kind == "auth" else f.kind
                        raise ClaudeCallError(f"model API {what}: {f.message[:300]}")
                    raise ClaudeCallError(
                        f"turn ended with {item.subtype}: {(item.result or '')[:300]}"
                    )
                return item.result or ""
            elif isinstance(item, WorkerExited):
                raise ClaudeCallError(f"exited without an answer ({item.classification})")
    finally:
        worker.stop(grace=2.0)
