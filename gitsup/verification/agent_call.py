"""One read-only Claude Code call: a fresh process, a prompt, the final message's text.

Used by the `claude` reviewer and the `claude` decider. Only Read, Grep and Glob
inside the worktree are ever allowed; every other tool request is denied.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitsup.workers.base import (
    PermissionAnswer,
    PermissionRequest,
    TurnCompleted,
    WorkerExited,
    WorkerOptions,
    WorkerSetup,
)

if TYPE_CHECKING:
    from gitsup.store.ledger import CallSink

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
    network: Callable[[Mapping[str, str]], AbstractContextManager[Any]] | None = None,
    wrap_for: Callable[[str | None], Callable[[list[str]], list[str]] | None] | None = None,
    abort: threading.Event | None = None,
    kind: str = "claude",
    on_call: CallSink | None = None,
) -> str:
    """Run one turn and return the final assistant message. Raises ClaudeCallError.

    `kind` "codex" runs the Codex CLI instead, with a throw-away CODEX_HOME; it has no
    read-only file tools, so every command and patch it asks for is declined (it judges
    from the prompt's evidence).

    `network(env)`, if given, is entered around the call and yields where the call runs:
    an object with `netns` (None: the host network) and `env` (added to the call's env).
    `wrap_for(netns)`, if given, is the bootstrap prefix (sandbox, namespace) for the call's
    process in that namespace. `on_call`, if given, is told the call's cost and usage."""
    with network(env) if network is not None else contextlib.nullcontext() as net:
        ns = net.netns if net is not None else None
        if net is not None and ns is not None:
            env = {**env, **net.env}
        wrap: Callable[[list[str]], list[str]] | None = None
        if wrap_for is not None:
            wrap = wrap_for(ns)
        elif ns is not None:
            from gitsup.host.contain import bootstrap_argv

            def wrap(argv: list[str]) -> list[str]:
                return bootstrap_argv(argv, cgroup=None, netns=ns)

        with _codex_home(kind, env) as home:
            if kind == "codex":
                tools = ()  # no read-only file tools: every command and patch is declined
            return _run(
                prompt, label, cwd, env, timeout, argv, tools, wrap, abort, kind, home, on_call
            )


@contextlib.contextmanager
def _codex_home(kind: str, env: Mapping[str, str]) -> Iterator[str | None]:
    """A throw-away CODEX_HOME for a "codex" call, removed afterwards; None for the others."""
    if kind != "codex":
        yield None
        return
    import shutil
    import tempfile

    home = tempfile.mkdtemp(prefix="gitsup-codex-", dir=env.get("TMPDIR"))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run(
    prompt: str,
    label: str,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    argv: Sequence[str],
    tools: Sequence[str],
    wrap: Callable[[list[str]], list[str]] | None,
    abort: threading.Event | None,
    kind: str,
    codex_home: str | None,
    on_call: CallSink | None,
) -> str:
    from gitsup.policy import decide_tool, load_policy
    from gitsup.workers.kinds import one_shot_kind

    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    wctx = WorkerSetup(
        task_id=label,
        worktree=cwd,
        task_dir=cwd,
        env=env,
        argv=tuple(argv),
        inbox=inbox,
        options=WorkerOptions(
            tools=",".join(tools),
            ask_tools=(),
            wrap=wrap,
            codex_home=Path(codex_home) if codex_home else None,
        ),
    )
    if kind == "acp":  # an ACP agent: every call but the read-only tools asks, and is denied
        from gitsup.workers.claude.worker import ASK_TOOLS

        wctx = dataclasses.replace(
            wctx, options=dataclasses.replace(wctx.options, ask_tools=ASK_TOOLS)
        )
    worker = one_shot_kind(kind).adapter_class()(wctx)
    policy = load_policy(None)
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
                        False,
                        "Read-only: only " + ", ".join(tools) + " inside the worktree."
                        if tools
                        else "Read-only: no command or change; judge from the evidence given.",
                    ),
                )
            elif isinstance(item, TurnCompleted):
                from gitsup.store.ledger import report_call, role_of

                report_call(on_call, role_of(label), item.cost_usd, item.usage, item.models)
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
