"""The `claude` worker: Claude Code headless over stream-json.

    claude -p --input-format stream-json --output-format stream-json --verbose
           --permission-prompt-tool stdio --permission-mode default
           --settings <gitsup's: every Bash/Write/Edit call asks>

Every permission request arrives as a `can_use_tool` control request and is
answered exactly once from the supervisor's decision. Configuration that
pre-authorizes Bash (arguments or loaded settings), and `bypassPermissions`,
are refused before anything is spawned.

Repairable (another user turn can be sent after verification), not persistent.
One writer owns stdin; a turn is refused while another is active; a retried
send with the same idempotency key is not sent twice. Stop escalates:
interrupt -> close stdin -> SIGTERM -> SIGKILL of the whole process group,
each with a bounded wait.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gitsup.names import TASK_MARKER
from gitsup.redact import redact_text
from gitsup.workers import stream_json as sj
from gitsup.workers.agentproc import PipedAgent, find_agent
from gitsup.workers.base import (
    Capabilities,
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerError,
    WorkerIdentity,
    WorkerOutput,
    WorkerSetup,
)
from gitsup.workers.claude.rules import (
    check_flag,
    read_settings_value,
    refused_modes,
)

BASE_FLAGS = (
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
    "--permission-mode",
    "default",
)
# Tools whose every call must reach the supervisor as a can_use_tool request.
ASK_TOOLS = ("Bash", "Write", "Edit", "MultiEdit", "NotebookEdit", "WebFetch", "WebSearch")

_ALLOW_FLAGS = ("--allowedTools", "--allowed-tools")
_BAD_MODES = refused_modes("headless")


# The CLI's own retry ladder for a failing model API (HTTP 429/5xx/529, connection errors)
# defaults to 10 retries, about 3 minutes a turn; a request that gets no answer waits
# 10 minutes. Bounded here unless the environment or [worker] env sets them.
MODEL_MAX_RETRIES = 3
MODEL_TIMEOUT_CAP = 300.0


def model_call_env(budget: Any) -> dict[str, str]:
    """CLAUDE_CODE_MAX_RETRIES and API_TIMEOUT_MS for a task's budget: 3 retries (about
    4 s of back-off), and one request may take at most half the no-output timeout, a
    quarter of the deadline and 5 minutes (at least 1 s). A timer set to 0 (off) does
    not bound it."""
    limits = [MODEL_TIMEOUT_CAP]
    if budget.no_output_timeout > 0:
        limits.append(budget.no_output_timeout / 2)
    if budget.deadline > 0:
        limits.append(budget.deadline / 4)
    timeout_ms = int(max(1.0, min(limits)) * 1000)
    return {"CLAUDE_CODE_MAX_RETRIES": str(MODEL_MAX_RETRIES), "API_TIMEOUT_MS": str(timeout_ms)}


def find_claude(
    argv: Sequence[str], env: Mapping[str, str], setting: str = "[worker] argv"
) -> list[str]:
    """The CLI to run: worker.argv, else GITSUP_CLAUDE_BIN, else `claude` on PATH."""
    return find_agent(
        argv,
        env,
        setting=setting,
        env_var="GITSUP_CLAUDE_BIN",
        name="claude",
        missing="the Claude Code CLI (`claude`) is not on PATH; install @anthropic-ai/claude-code, "
        f"set GITSUP_CLAUDE_BIN, or name it in {setting}",
        local=_LOCAL_INSTALLS,
    )


_LOCAL_INSTALLS = (
    Path(".tools/claude/node_modules/.bin/claude"),
    Path("node_modules/.bin/claude"),
)


def _rule_tool(rule: str) -> str:
    return rule.split("(", 1)[0].strip()


def _preauthorizes_bash(rules: Iterable[Any]) -> list[str]:
    bad = []
    for r in rules:
        if isinstance(r, str) and _rule_tool(r) in ("Bash", "*"):
            bad.append(r)
    return bad


def check_arguments(args: Sequence[str]) -> None:
    """Refuse worker arguments that would hide Bash from the supervisor."""
    i = 0
    while i < len(args):
        a = args[i]
        check_flag("headless", args, i)
        name, _, inline = a.partition("=")
        if name in _ALLOW_FLAGS:
            values = [inline] if inline else []
            j = i + 1
            while not inline and j < len(args) and not args[j].startswith("-"):
                values.append(args[j])
                j += 1
            rules = [r for v in values for r in v.replace(",", " ").split() if r]
            bad = _preauthorizes_bash(rules)
            if bad:
                raise WorkerError(
                    f"worker argument {name} {' '.join(values)!r} pre-authorizes Bash ({', '.join(bad)}); "
                    "gitsup must see every Bash call"
                )
        if name == "--settings":
            value = inline or (args[i + 1] if i + 1 < len(args) else "")
            check_settings_value(value, "--settings")
        i += 1


def check_settings_value(value: str, where: str) -> None:
    # The CLI ignores settings it cannot parse in -p mode (None: nothing to check).
    check_settings(read_settings_value(value, where, strict=False), where)


def check_settings(data: Any, where: str) -> None:
    if not isinstance(data, Mapping):
        return
    perms = data.get("permissions")
    if isinstance(perms, Mapping):
        allow = perms.get("allow")
        if isinstance(allow, list):
            bad = _preauthorizes_bash(allow)
            if bad:
                raise WorkerError(
                    f"{where} pre-authorizes Bash with permissions.allow {bad}; "
                    "remove it (gitsup's policy gate answers every Bash call)"
                )
        mode = perms.get("defaultMode")
        if isinstance(mode, str) and mode in _BAD_MODES:
            raise WorkerError(
                f"{where} sets permissions.defaultMode = {mode!r}, which hides permission requests"
            )


def loaded_settings_files(worktree: Path, env: Mapping[str, str]) -> list[Path]:
    """The settings files Claude Code loads for this worktree (user, project, local)."""
    config = env.get("CLAUDE_CONFIG_DIR")
    home = env.get("HOME") or os.path.expanduser("~")
    user_dir = Path(config) if config else Path(home) / ".claude"
    return [
        user_dir / "settings.json",
        user_dir / "settings.local.json",
        worktree / ".claude" / "settings.json",
        worktree / ".claude" / "settings.local.json",
    ]


def preflight(ctx: WorkerSetup, extra_args: Sequence[str]) -> None:
    """Refuse, before spawning, configuration that would pre-authorize Bash.

    The headless worker passes `--setting-sources ""`, so no settings file is loaded and
    only arguments are checked; a transport that loads the user's and the worktree's
    settings files (option `loads_settings_files`) has those checked too."""
    check_arguments(list(ctx.argv[1:]) + list(extra_args))
    if ctx.options.loads_settings_files:
        for f, data in read_settings_files(loaded_settings_files(ctx.worktree, ctx.env)):
            check_settings(data, str(f))


def read_settings_files(paths: Iterable[Path]) -> Iterator[tuple[Path, Any]]:
    """(path, parsed JSON) of the settings files that exist and parse."""
    for f in paths:
        try:
            yield f, json.loads(f.read_text())
        except (OSError, ValueError):
            continue


class ClaudeWorker(PipedAgent):
    kind = "claude"
    capabilities = Capabilities(repairable=True, persistent=False)

    def __init__(self, ctx: WorkerSetup) -> None:
        super().__init__(ctx)
        self._pending: dict[str, Mapping[str, Any]] = {}
        self._last_total_cost = 0.0
        self._req_counter = 0
        self._turn_api_error: str | None = None

    # --- spawning -----------------------------------------------------------------

    def _argv(self) -> list[str]:
        spec = self.ctx.options.spec
        extra: list[str] = []
        model = None
        max_turns = None
        max_cost = None
        if spec is not None:
            extra = list(spec.worker.extra_args)
            model = spec.worker.model
            max_turns = spec.budget.max_turns
            max_cost = spec.budget.max_cost_usd
        preflight(self.ctx, extra)
        base = find_claude(self.ctx.argv, self.ctx.env)
        ask = list(ASK_TOOLS if self.ctx.options.ask_tools is None else self.ctx.options.ask_tools)
        settings = {"permissions": {"ask": ask}} if ask else {}
        # No settings file is loaded but gitsup's own: a worktree's .claude/settings*.json
        # could otherwise pre-allow tools or run hooks before any permission check.
        argv = [*base, *BASE_FLAGS, "--setting-sources", "", "--settings", json.dumps(settings)]
        tools = self.ctx.options.tools
        if tools is not None:
            argv += ["--tools", str(tools)]
        if model:
            argv += ["--model", model]
        # A second line behind the supervisor's own budget enforcement.
        if max_turns is not None:
            argv += ["--max-turns", str(max_turns)]
        if max_cost is not None:
            argv += ["--max-budget-usd", f"{max_cost:g}"]
        return argv + extra

    def start(self, goal: str) -> WorkerIdentity:
        argv = self._argv()
        env = {k: v for k, v in self.ctx.env.items() if k != "CLAUDECODE"}
        env[TASK_MARKER] = self.ctx.task_id
        env.setdefault("CLAUDE_CODE_ENTRYPOINT", "sdk-cli")
        identity = self._spawn(argv, env)
        self.send_turn(goal, key="goal")
        return identity

    def send_turn(self, message: str, *, key: str) -> bool:
        msg_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"gitsup:{self.ctx.task_id}:{key}"))
        return self._open_turn(key, lambda: self._input.write(sj.user_message(message, msg_uuid)))

    def answer(self, request_id: str, answer: PermissionAnswer) -> None:
        with self._state_lock:
            original = self._pending.pop(request_id, None)
        if original is None:
            return  # cancelled, or already answered: answer once
        self._input.write(sj.permission_response(request_id, answer, original))

    def interrupt(self) -> None:
        self._req_counter += 1
        with contextlib.suppress(WorkerError):
            self._input.write(
                sj.interrupt_request(f"gitsup_int_{self._req_counter}_{os.urandom(4).hex()}")
            )

    # --- stdout / stderr --------------------------------------------------------------

    def _on_line(self, line: str) -> None:
        ev = sj.parse_record(line, max_text=self.ctx.max_output_bytes)
        inbox = self.ctx.inbox
        if ev is None:
            return
        if isinstance(ev, PermissionRequest):
            if not self._first_ask(ev.request_id):
                inbox.put(
                    ProtocolNoise.of(line, "duplicate permission request ignored (already asked)")
                )
                return
            with self._state_lock:
                self._pending[ev.request_id] = ev.tool_input
            inbox.put(ev)
        elif isinstance(ev, PermissionCancelled):
            with self._state_lock:
                self._pending.pop(ev.request_id, None)
            inbox.put(ev)
        elif isinstance(ev, sj.ControlRequest):
            with contextlib.suppress(WorkerError):
                self._input.write(
                    sj.control_error(
                        ev.request_id, f"gitsup does not handle {ev.subtype or 'this'} requests"
                    )
                )
            inbox.put(
                WorkerOutput(
                    "control",
                    redact_text(f"refused control request {ev.subtype!r}"),
                    {"request_id": ev.request_id},
                )
            )
        elif isinstance(ev, sj.SessionInit):
            self._session_id = ev.session_id or self._session_id
        elif isinstance(ev, sj.ControlResponse):
            return
        elif isinstance(ev, TurnCompleted):
            running = self._close_turn()
            with self._state_lock:
                self._pending.clear()  # requests of a finished turn can no longer be answered
            if not running:
                # One turn, one completion: a result with no turn open is not a completion.
                inbox.put(
                    ProtocolNoise.of(line, "result record outside a turn (duplicate) ignored")
                )
                return
            inbox.put(self._per_turn(ev))
            self._turn_api_error = None
            self._result_seen.set()
        elif isinstance(ev, WorkerOutput | ProtocolNoise):
            if isinstance(ev, WorkerOutput) and isinstance(ev.data.get("error"), str):
                self._turn_api_error = str(ev.data["error"])  # a synthetic API-error message
            inbox.put(ev)

    def _per_turn(self, tc: TurnCompleted) -> TurnCompleted:
        """`total_cost_usd` in result records is per session (cumulative): report the
        per-turn delta. `num_turns` is already per turn (model calls in that turn)."""
        cost = tc.cost_usd
        if cost is not None:
            delta = cost - self._last_total_cost if cost >= self._last_total_cost else cost
            self._last_total_cost = cost
            cost = round(max(0.0, delta), 8)
        turns = tc.num_turns
        return TurnCompleted(
            subtype=tc.subtype,
            is_error=tc.is_error,
            result=tc.result,
            cost_usd=cost,
            num_turns=turns,
            session_id=tc.session_id or self._session_id,
            usage=tc.usage,
            data={
                **tc.data,
                **({"api_error": self._turn_api_error} if self._turn_api_error else {}),
                "session_total_cost_usd": tc.cost_usd,
                "session_num_turns": tc.num_turns,
            },
            models=tc.models,
        )
