"""The coding agents gitsup can drive, and how to find them and ask their version.

`AGENTS` is a list of (kind, name, binary env variable, finder, version probe) entries;
`git sup doctor` lists what `probe_agents` finds. A new worker kind adds its entry.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gitsup.errors import GitsupError

VERSION_TIMEOUT = 20.0
_VERSION_RE = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-+.][0-9A-Za-z.]+)?")


@dataclass(frozen=True)
class Agent:
    kind: str  # the [worker] kind that runs it
    binary_env: str  # the environment variable that names its binary
    find: Callable[[Mapping[str, str]], list[str]]  # its argv; raises WorkerError if absent
    version_args: tuple[str, ...] = ("--version",)
    # environment for the version probe (keeps the agent from writing to the user's config)
    probe_env: Callable[[str], Mapping[str, str]] = lambda tmp: {}
    name: str = ""  # what people call it


@dataclass(frozen=True)
class AgentInfo:
    kind: str
    binary_env: str
    path: str | None
    version: str | None
    problem: str | None = None
    name: str = ""

    def describe(self) -> str:
        """`<kind>: [<name> ]<version> (<path>)`, or what is missing (doctor's agent lines)."""
        who = f"{self.kind}: {self.name + ' ' if self.name else ''}"
        if self.path is None:
            return f"{who}not found ({self.problem})"
        if self.version is None:
            return f"{who}at {self.path}, version unknown ({self.problem})"
        return f"{who}{self.version} ({self.path})"

    def as_dict(self) -> dict[str, str | None]:
        return {
            "kind": self.kind,
            "name": self.name,
            "binary_env": self.binary_env,
            "path": self.path,
            "version": self.version,
            "problem": self.problem,
        }


def _find_claude(env: Mapping[str, str]) -> list[str]:
    from gitsup.workers.claude.worker import find_claude

    return find_claude([], env)


def _find_codex(env: Mapping[str, str]) -> list[str]:
    from gitsup.workers.codex.worker import find_codex

    return find_codex([], env)


def _find_acp(env: Mapping[str, str]) -> list[str]:
    from gitsup.workers.acp.worker import find_acp

    return find_acp([], env)


AGENTS: list[Agent] = [
    Agent(
        "claude",
        "GITSUP_CLAUDE_BIN",
        _find_claude,
        probe_env=lambda tmp: {
            "CLAUDE_CONFIG_DIR": tmp,
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
        },
        name="Claude Code",
    ),
    Agent(
        "codex",
        "GITSUP_CODEX_BIN",
        _find_codex,
        probe_env=lambda tmp: {"CODEX_HOME": tmp},
        name="Codex CLI",
    ),
    Agent(
        "acp",
        "GITSUP_ACP_BIN",
        _find_acp,
        probe_env=lambda tmp: {"CLAUDE_CONFIG_DIR": tmp},
        name="Claude Code ACP adapter",
    ),
]


def parse_version(output: str) -> str | None:
    """The first version-looking token of a `--version` output."""
    for line in output.splitlines():
        found = _VERSION_RE.search(line)
        if found:
            return found.group(0)
    return None


def probe_agents(env: Mapping[str, str], agents: Sequence[Agent] | None = None) -> list[AgentInfo]:
    """Every known agent: where it is and its version, or why it is not usable."""
    out: list[AgentInfo] = []
    for agent in AGENTS if agents is None else agents:
        out.append(_probe(agent, env))
    return out


def _probe(agent: Agent, env: Mapping[str, str]) -> AgentInfo:
    from gitsup.host import proc
    from gitsup.workers.base import WorkerError

    def info(path: str | None, version: str | None, problem: str | None) -> AgentInfo:
        return AgentInfo(agent.kind, agent.binary_env, path, version, problem, agent.name)

    try:
        argv = agent.find(env)
    except WorkerError as exc:
        return info(None, None, str(exc))
    with tempfile.TemporaryDirectory(prefix="gitsup-agent-") as tmp:
        try:
            res = proc.run(
                [*argv, *agent.version_args],
                env={**env, **agent.probe_env(tmp)},
                timeout=VERSION_TIMEOUT,
                merge_stderr=False,
                input=b"",
            )
        except GitsupError as exc:
            return info(argv[0], None, exc.message)
    if not res.ok:
        return info(
            argv[0],
            None,
            "--version " + ("timed out" if res.timed_out else f"exited {res.returncode}"),
        )
    version = parse_version(res.output)
    return info(argv[0], version, None if version else "no version in its --version output")
