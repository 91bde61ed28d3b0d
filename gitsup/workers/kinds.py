"""The worker kinds: one entry per `[worker] kind`, and the only place that lists them.

Each entry says where the kind's adapter lives (imported only when a task of that kind
runs), which agent it runs (the name of the agent's lookup and of its binary's pin
`sup.<agent>.sha256`; None: a plain process), and the adapter's capabilities, readable
without importing the adapter (`repairable`: takes another turn, a repair or a person's
message; `persistent`: outlives its supervisor and is re-adopted; `claude_config`: runs
Claude Code, directly or behind ACP, and gets a private copy of the user's Claude Code
config in the sandbox, gitsup/host/claude_config.py). Everything else that
depends on the kind asks this registry; a new kind adds its entry here (and its name to
the spec's `[worker] kind`, which tests/test_architecture.py holds to this table).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gitsup.errors import GitsupError

if TYPE_CHECKING:
    from gitsup.workers.base import WorkerAdapter


@dataclass(frozen=True)
class WorkerKind:
    name: str
    module: str  # the adapter's module
    adapter: str  # the adapter's class in `module`
    agent: str | None  # the agent it runs (claude, codex, acp); None: not an agent worker
    repairable: bool
    persistent: bool
    claude_config: bool  # runs Claude Code: the sandbox gives it a copy of the user's config

    def adapter_class(self) -> type[WorkerAdapter]:
        """The adapter class (imports its module)."""
        cls: type[WorkerAdapter] = getattr(importlib.import_module(self.module), self.adapter)
        return cls


KINDS: Mapping[str, WorkerKind] = {
    k.name: k
    for k in (
        WorkerKind("process", "gitsup.workers.process", "ProcessWorker", None, False, False, False),
        WorkerKind(
            "claude", "gitsup.workers.claude.worker", "ClaudeWorker", "claude", True, False, True
        ),
        WorkerKind(
            "codex", "gitsup.workers.codex.worker", "CodexWorker", "codex", True, False, False
        ),
        WorkerKind("acp", "gitsup.workers.acp.worker", "AcpWorker", "acp", True, False, True),
        WorkerKind("tmux", "gitsup.workers.claude.tmux", "TmuxWorker", "claude", True, True, True),
    )
}


def worker_kind(name: str) -> WorkerKind:
    """The entry of kind `name`; a GitsupError (exit 2) for a kind gitsup does not know."""
    try:
        return KINDS[name]
    except KeyError:
        raise GitsupError(
            f"unknown worker kind {name!r}", hint="one of: " + ", ".join(KINDS)
        ) from None


def agent_names() -> tuple[str, ...]:
    """The agents the worker kinds run (claude, codex, acp): what a reviewer or decider
    `kind` may also name."""
    return tuple(dict.fromkeys(k.agent for k in KINDS.values() if k.agent is not None))


def repairable_kinds() -> tuple[str, ...]:
    """The kinds whose worker takes another turn (a person's message, a repair)."""
    return tuple(k.name for k in KINDS.values() if k.repairable)


def claude_config_agents() -> tuple[str, ...]:
    """The agents that run Claude Code (claude, acp): a reviewer or decider of one of these
    kinds needs the user's Claude Code config in the sandbox, as its worker kinds do."""
    return tuple(
        dict.fromkeys(k.agent for k in KINDS.values() if k.agent is not None and k.claude_config)
    )


def one_shot_kind(agent: str) -> WorkerKind:
    """The kind that runs `agent` as a process of its own that ends with the task (not a
    persistent one): what a reviewer's or decider's single call to that agent runs."""
    for k in KINDS.values():
        if k.agent == agent and not k.persistent:
            return k
    raise GitsupError(f"unknown agent {agent!r}", hint="one of: " + ", ".join(agent_names()))
