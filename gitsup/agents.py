"""The coding agents gitsup can drive, for `git sup doctor`: each entry says which worker
kind runs it, which environment variable names its binary, and how to ask its version.

    (kind, binary-env, version-probe)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gitsup.errors import GitsupError


@dataclass(frozen=True)
class Agent:
    kind: str  # the [worker] kind that runs it
    name: str
    binary_env: str  # the environment variable that names its binary
    version_args: tuple[str, ...]  # argv after the binary that prints its version
    find: Callable[[Mapping[str, str]], str | None]  # the binary, when not named by the env


@dataclass(frozen=True)
class Found:
    kind: str
    name: str
    path: str | None
    version: str | None
    problem: str | None = None

    def describe(self) -> str:
        if self.path is None:
            return f"{self.kind}: {self.name} not found ({self.problem})"
        if self.version is None:
            return f"{self.kind}: {self.name} at {self.path}, version unknown ({self.problem})"
        return f"{self.kind}: {self.name} {self.version} ({self.path})"


def _find_acp(env: Mapping[str, str]) -> str | None:
    from gitsup.workers.acp import find_acp
    from gitsup.workers.base import WorkerError

    try:
        return find_acp([], env)[0]
    except WorkerError:
        return None


AGENTS: list[Agent] = [
    Agent("acp", "Claude Code ACP adapter", "GITSUP_ACP_BIN", ("--version",), _find_acp),
]


def probe(agent: Agent, env: Mapping[str, str], timeout: float = 20.0) -> Found:
    """Where the agent is and what version it says it is (never raises)."""
    from gitsup.proc import run

    path = env.get(agent.binary_env) or agent.find(env)
    if not path or not os.path.exists(path):
        return Found(
            agent.kind, agent.name, None, None, f"set {agent.binary_env} or put it on PATH"
        )
    try:
        res = run([path, *agent.version_args], env=env, timeout=timeout, input=b"", redact=True)
    except GitsupError as exc:
        return Found(agent.kind, agent.name, path, None, exc.message)
    text = res.output.strip().splitlines()
    if res.returncode != 0 or not text:
        return Found(agent.kind, agent.name, path, None, f"exit {res.returncode}")
    return Found(agent.kind, agent.name, path, text[0].split()[0] if text[0].split() else None)


def found_agents(
    env: Mapping[str, str] | None = None, agents: Sequence[Agent] = AGENTS
) -> list[Found]:
    e = dict(os.environ if env is None else env)
    return [probe(a, e) for a in agents]
