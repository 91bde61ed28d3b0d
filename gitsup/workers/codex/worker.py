"""The `codex` worker: the Codex CLI's `app-server` over JSON lines on stdio.

    codex app-server -c model_provider=… (when OPENAI_BASE_URL is set) [checked extra -c]

The thread runs with approval policy `untrusted` (measured: every command and
every patch asks), approvals routed to the client (never Codex's own
reviewer) and Codex's own sandbox off (gitsup's task sandbox is the boundary).
What the server reports back for the thread is checked; a thread that would
not ask is refused and the worker stopped. Codex keeps its state in a private
CODEX_HOME inside the task's sandbox home, so no user config, exec-policy
rule or trusted-project entry can pre-approve anything; only `auth.json` is
copied from the user's CODEX_HOME (or ~/.codex).

Repairable (another turn in the same thread), not persistent. The transport
lifecycle (bounded writes, stop escalation: turn/interrupt -> close stdin ->
SIGTERM -> SIGKILL of the process group) is the piped agent's, as for the claude
and acp adapters.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gitsup.host import proc
from gitsup.names import TASK_MARKER
from gitsup.redact import redact_text
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
from gitsup.workers.codex import app_server as aps
from gitsup.workers.codex.app_server_protocol import DEFAULT_PRICE, ConfigRefused

PROVIDER_ID = "gitsup"
# `-c key=value` overrides a task may add; anything else could loosen approvals, the
# sandbox, exec-policy rules, project trust or where requests go.
ALLOWED_CONFIG_KEYS = frozenset(
    {
        "model",
        "model_reasoning_effort",
        "model_reasoning_summary",
        "model_verbosity",
        "model_context_window",
        "model_auto_compact_token_limit",
        "hide_agent_reasoning",
    }
)
# No web search (it runs at the model provider, outside the gate) and no sub-agents (threads
# of their own that gitsup does not drive).
FIXED_ARGS = ("-c", 'web_search="disabled"', "--disable", "multi_agent")
# model API retries inside Codex (it retries a failed stream 5 times by default)
MODEL_MAX_RETRIES = 2


def find_codex(
    argv: Sequence[str], env: Mapping[str, str], setting: str = "[worker] argv"
) -> list[str]:
    """The CLI: worker.argv, else GITSUP_CODEX_BIN, else `codex` on PATH, else the
    project's `.tools/codex` install."""
    return find_agent(
        argv,
        env,
        setting=setting,
        env_var="GITSUP_CODEX_BIN",
        name="codex",
        missing="the Codex CLI (`codex`) is not on PATH; install @openai/codex (.ci/install-codex), "
        f"set GITSUP_CODEX_BIN, or name it in {setting}",
        local=(Path(".tools/codex/node_modules/.bin/codex"),),
    )


def check_arguments(args: Sequence[str]) -> None:
    """Refuse worker arguments that could take a command or patch away from the gate."""
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, inline = a.partition("=")
        if name in ("-c", "--config"):
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            key = value.split("=", 1)[0].strip()
            if key not in ALLOWED_CONFIG_KEYS:
                raise WorkerError(
                    f"worker argument -c {value!r} is refused: gitsup sets Codex's approvals, "
                    f"sandbox and provider itself (allowed keys: {', '.join(sorted(ALLOWED_CONFIG_KEYS))})"
                )
            i += 1 if eq else 2
            continue
        raise WorkerError(
            f"worker argument {a!r} is refused: only -c with "
            f"{', '.join(sorted(ALLOWED_CONFIG_KEYS))} may be added to `codex app-server`"
        )


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def provider_args(env: Mapping[str, str]) -> list[str]:
    """`-c` overrides that point Codex at OPENAI_BASE_URL (with OPENAI_API_KEY), when set."""
    base = env.get("OPENAI_BASE_URL")
    if not base:
        return []
    table = (
        f"{{name={_toml_str('gitsup')},base_url={_toml_str(base)},env_key={_toml_str('OPENAI_API_KEY')},"
        f"wire_api={_toml_str('responses')},request_max_retries={MODEL_MAX_RETRIES},"
        f"stream_max_retries={MODEL_MAX_RETRIES}}}"
    )
    return [
        "-c",
        f"model_providers.{PROVIDER_ID}={table}",
        "-c",
        f"model_provider={_toml_str(PROVIDER_ID)}",
    ]


# What Codex reads from CODEX_HOME that could pre-approve a command or change where
# approvals go. The task can write its private CODEX_HOME (it is in its sandbox HOME), so
# these are removed before every spawn; a running app-server does not re-read them
# (measured: rules and config written by a command did not apply, not even to a later turn).
_CONFIG_SURFACES = ("config.toml", "managed_config.toml", "requirements.toml", "rules", "policy")


def private_codex_home(ctx: WorkerSetup) -> Path:
    """CODEX_HOME for this task, inside the sandbox's private HOME (writable there), or
    the directory the caller gives (option `codex_home`: a one-off reviewer call)."""
    given = ctx.options.codex_home
    home = Path(given) if given else ctx.task_dir / "sandbox" / "home" / ".codex"
    home.mkdir(parents=True, exist_ok=True)
    for name in _CONFIG_SURFACES:
        path = home / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    user_home = os.environ.get("CODEX_HOME") or os.path.expanduser("~/.codex")
    auth = Path(user_home) / "auth.json"
    if auth.is_file() and not (home / "auth.json").exists():
        with contextlib.suppress(OSError):
            shutil.copyfile(auth, home / "auth.json")
            os.chmod(home / "auth.json", 0o600)
    return home


def price_table(spec: Any) -> dict[str, float]:
    custom = getattr(getattr(spec, "worker", None), "price", None) if spec is not None else None
    return {**DEFAULT_PRICE, **(dict(custom) if custom else {})}


class CodexWorker(PipedAgent):
    kind = "codex"
    capabilities = Capabilities(repairable=True, persistent=False)

    def __init__(self, ctx: WorkerSetup) -> None:
        super().__init__(ctx)
        spec = ctx.options.spec
        self._session = aps.AppServerSession(
            cwd=str(ctx.worktree),
            model=spec.worker.model if spec is not None else None,
            max_text=ctx.max_output_bytes,
            price=price_table(spec),
        )
        self._session_lock = threading.Lock()
        self.refused: str | None = None

    def _argv(self) -> list[str]:
        spec = self.ctx.options.spec
        extra = list(spec.worker.extra_args) if spec is not None else []
        base = find_codex(self.ctx.argv, self.ctx.env)
        check_arguments([*base[1:], *extra])
        return [base[0], "app-server", *FIXED_ARGS, *provider_args(self.ctx.env), *base[1:], *extra]

    def start(self, goal: str) -> WorkerIdentity:
        argv = self._argv()
        env = dict(self.ctx.env)
        env[TASK_MARKER] = self.ctx.task_id
        env["CODEX_HOME"] = str(private_codex_home(self.ctx))
        identity = self._spawn(argv, env)
        with self._session_lock:
            opening = self._session.open()
        for data in opening:
            self._input.write(data)
        self.send_turn(goal, key="goal")
        return identity

    def send_turn(self, message: str, *, key: str) -> bool:
        def send() -> None:
            with self._session_lock:
                out = self._session.send_turn(message)
            for data in out:
                self._input.write(data)

        return self._open_turn(key, send)

    def answer(self, request_id: str, answer: PermissionAnswer) -> None:
        with self._session_lock:
            out = self._session.answer(request_id, answer)
        for data in out:
            self._input.write(data)

    def interrupt(self) -> None:
        with self._session_lock:
            out = self._session.interrupt()
        for data in out:
            with contextlib.suppress(WorkerError):
                self._input.write(data)

    def _on_line(self, line: str) -> None:
        inbox = self.ctx.inbox
        try:
            with self._session_lock:
                fed = self._session.feed(line)
        except ConfigRefused as exc:
            self.refused = str(exc)
            inbox.put(WorkerOutput("error", redact_text(f"refused: {exc}"), {"refused": True}))
            p = self._proc
            if p is not None:
                proc.signal_group(p.pid, signal.SIGKILL)
            return
        for data in fed.out:
            with contextlib.suppress(WorkerError):
                self._input.write(data)
        for ev in fed.events:
            if isinstance(ev, TurnCompleted):
                if not self._close_turn():
                    inbox.put(ProtocolNoise.of(line, "turn/completed outside a turn"))
                    continue
                inbox.put(ev)  # the session already reports per-turn usage and cost
                self._result_seen.set()
            elif isinstance(
                ev, PermissionRequest | PermissionCancelled | WorkerOutput | ProtocolNoise
            ):
                inbox.put(ev)
            if isinstance(ev, WorkerOutput) and ev.stream == "system":
                self._session_id = self._session.thread_id

    @property
    def session_id(self) -> str | None:
        return self._session.thread_id
