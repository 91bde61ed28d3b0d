"""The Codex `app-server` protocol's vocabulary: the approval settings gitsup requires, the
notifications it reads past, token usage and its price, the line encoding, the shell wrapper
Codex puts around a command, and how a model error is classified. The session that speaks it
is gitsup.workers.codex.app_server."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

APPROVAL_POLICY = "untrusted"  # measured: every command and every patch asks
SANDBOX_MODE = "danger-full-access"  # gitsup's kernel sandbox is the boundary, not Codex's
APPROVALS_REVIEWER = "user"  # never `auto_review`: the gate answers, not a model
MAX_TOOL_TEXT = 2000
_SHELLS = {"bash", "sh", "zsh", "dash"}
IGNORED_NOTIFICATIONS = frozenset(
    {
        "item/agentMessage/delta",
        "item/fileChange/outputDelta",
        "item/fileChange/patchUpdated",
        "item/reasoning/summaryTextDelta",
        "item/reasoning/summaryPartAdded",
        "item/reasoning/textDelta",
        "item/plan/delta",
        "command/exec/outputDelta",
        "thread/status/changed",
        "account/rateLimits/updated",
        "remoteControl/status/changed",
        "thread/started",
        "mcpServer/startupStatus/updated",
        "skills/changed",
        "thread/settings/updated",
        "turn/diff/updated",
        "hook/started",
        "hook/completed",
    }
)


class ConfigRefused(Exception):
    """The server runs the thread with settings that would bypass the gate."""


@dataclass(frozen=True)
class Usage:
    """Cumulative token counts of a thread (`thread/tokenUsage/updated` `total`)."""

    input: int = 0
    cached_input: int = 0
    output: int = 0
    reasoning_output: int = 0

    @classmethod
    def of(cls, raw: Any) -> Usage:
        if not isinstance(raw, Mapping):
            return cls()

        def n(key: str) -> int:
            v = raw.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

        return cls(
            n("inputTokens"), n("cachedInputTokens"), n("outputTokens"), n("reasoningOutputTokens")
        )

    def minus(self, other: Usage) -> Usage:
        return Usage(
            max(0, self.input - other.input),
            max(0, self.cached_input - other.cached_input),
            max(0, self.output - other.output),
            max(0, self.reasoning_output - other.reasoning_output),
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input,
            "cached_input_tokens": self.cached_input,
            "output_tokens": self.output,
            "reasoning_output_tokens": self.reasoning_output,
        }


USAGE_FIELDS = ("input", "cached_input", "output", "reasoning_output")

# USD per million tokens: input (not cached), cached input, output (reasoning included).
DEFAULT_PRICE: Mapping[str, float] = {"input": 1.25, "cached_input": 0.125, "output": 10.0}


def cost_usd(usage: Usage, price: Mapping[str, float]) -> float:
    fresh = max(0, usage.input - usage.cached_input)
    total = (
        fresh * float(price.get("input", 0.0))
        + usage.cached_input * float(price.get("cached_input", price.get("input", 0.0)))
        + usage.output * float(price.get("output", 0.0))
    )
    return round(total / 1_000_000, 8)


def encode(message: Mapping[str, Any]) -> bytes:
    return (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


_SHELL_PREFIX = re.compile(r"^(?:/[\w./-]*/)?(?:bash|sh|zsh|dash) -(?:c|lc|cl) ")


def unwrap_shell(command: str) -> str:
    """The script of `<shell> -c|-lc <script>`, else the command as it is."""
    head = _SHELL_PREFIX.match(command)
    if head is None:
        return command
    rest = command[head.end() :]
    # the common shapes without a full shell-word parse: 'script' with no quote inside,
    # or one bare word
    if len(rest) >= 2 and rest[0] == "'" and rest[-1] == "'" and "'" not in rest[1:-1]:
        return rest[1:-1]
    if rest and not any(c in rest for c in " \t\n'\"\\$`"):
        return rest
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    if len(argv) == 3 and os.path.basename(argv[0]) in _SHELLS and argv[1] in ("-c", "-lc", "-cl"):
        return argv[2]
    return command


def http_status(info: Any) -> int | None:
    if isinstance(info, Mapping):
        for v in info.values():
            if isinstance(v, Mapping):
                code = v.get("httpStatusCode")
                if isinstance(code, int) and not isinstance(code, bool):
                    return code
    return None


_ERROR_CLASSES = {
    "unauthorized": "authentication_failed",
    "usageLimitExceeded": "billing_error",
    "serverOverloaded": "overloaded",
    "rateLimitExceeded": "rate_limit",
    "internalServerError": "server_error",
    "modelNotFound": "model_not_found",
    "badRequest": "bad_request",
    "contextWindowExceeded": "context_window_exceeded",
}


def error_class(info: Any) -> str:
    if isinstance(info, str):
        return _ERROR_CLASSES.get(info, info)
    if isinstance(info, Mapping):
        if "httpConnectionFailed" in info or "responseStreamConnectionFailed" in info:
            return "unknown"
        if "responseStreamDisconnected" in info:
            return "malformed"
        return next(iter(info), "other")
    return "other"
