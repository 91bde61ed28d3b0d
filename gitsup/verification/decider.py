"""The decider: what happens after a turn, and the answer to `ask` verdicts and questions.

The default `rules` decider is deterministic: a completed turn goes to
verification; an `ask` verdict is answered with a denial that names the rule
and what is allowed instead; a question (AskUserQuestion) is answered with a
denial whose message starts with `Supervisor answer:` and tells the worker to
decide by itself within the task's bounds. No human is ever waited for.

Every decision sees the time (`DecisionTime`): the deadline, the seconds left and
`close_out` (the deadline has come or its warning has: the task is wrapping up, and a
`continue` after the deadline verifies instead). An agent decider keeps its conversation
for the task (`DeciderMemory`: what it was asked and what it answered), in the task dir
(mode 0600), so a supervisor that continues the task (`recover`) restores it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from gitsup.store.ledger import CallSink

Action = Literal["verify", "continue", "park"]


@dataclass(frozen=True)
class TurnDecision:
    action: Action
    message: str = ""
    reason: str = ""
    source: str = "rules"
    noop: bool = False

    def as_dict(self) -> dict[str, str]:
        return {
            "action": self.action,
            "message": self.message,
            "reason": self.reason,
            "source": self.source,
        }


@dataclass(frozen=True)
class DecisionTime:
    """The time a decision is made in: the deadline (ISO 8601, UTC; None: no deadline), the
    seconds left until it, and `close_out` (the deadline or its warning has come)."""

    deadline: str | None = None
    remaining_seconds: float | None = None
    close_out: bool = False

    @classmethod
    def at(cls, deadline: float | None, now: float, *, close_out: bool) -> DecisionTime:
        """`deadline` and `now` in epoch seconds."""
        if deadline is None:
            return cls(None, None, close_out)
        from datetime import UTC, datetime

        iso = datetime.fromtimestamp(deadline, UTC).isoformat(timespec="seconds")
        left = max(0.0, deadline - now)
        return cls(iso, round(left, 1), close_out or left <= 0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "deadline": self.deadline,
            "remaining_seconds": self.remaining_seconds,
            "close_out": self.close_out,
        }


NO_DEADLINE = DecisionTime()


@dataclass(frozen=True)
class TurnOutcome:
    task: str
    goal: str
    turns: int
    last_result: str | None
    is_error: bool
    subtype: str
    worker_alive: bool
    deadline: str | None = None
    remaining_seconds: float | None = None
    close_out: bool = False


SUPERVISOR_ANSWER = "Supervisor answer:"
DECIDER_MEMORY = "decider.json"  # an agent decider's conversation, in the task dir


def question_text(tool_input: Mapping[str, Any]) -> str:
    qs = tool_input.get("questions")
    if isinstance(qs, list):
        parts = []
        for q in qs:
            if isinstance(q, Mapping):
                parts.append(str(q.get("question") or q.get("header") or ""))
        return " / ".join(p for p in parts if p)
    return str(tool_input.get("question") or "")


class RulesDecider:
    kind = "rules"

    def on_turn_completed(self, ctx: TurnOutcome) -> TurnDecision:
        return TurnDecision("verify", reason="turn completed; the supervisor verifies the work")

    def answer_question(
        self, tool_input: Mapping[str, Any], when: DecisionTime = NO_DEADLINE
    ) -> str:
        q = question_text(tool_input)
        about = f" to {q!r}" if q else ""
        return (
            f"{SUPERVISOR_ANSWER} nobody is available to answer{about}; this task runs unattended. "
            "Choose the option that keeps the change smallest and safest within the task's scope, "
            "state the assumption in your commit message, and continue."
        )

    def answer_ask(self, denial_message: str, when: DecisionTime = NO_DEADLINE) -> str:
        return denial_message


class DeciderError(Exception):
    """One decider call failed (invalid output, timeout, error)."""


_ACTIONS = ("verify", "continue", "park")


def _parse_turn_decision(text: str, source: str) -> TurnDecision:
    import json

    text = text.strip()
    if not text:
        return TurnDecision(
            "park", reason="the decider gave an empty answer", source=source, noop=True
        )
    try:
        obj = json.loads(text)
    except ValueError as exc:
        # a model may wrap its JSON in prose; take the last object with an action
        found = _embedded_object(text, "action")
        if found is None:
            raise DeciderError(f"decider output is not JSON: {exc}") from exc
        obj = found[0]
    if not isinstance(obj, dict):
        raise DeciderError("decider output is not a JSON object")
    action = obj.get("action")
    if action in (None, "", "noop"):
        return TurnDecision("park", reason="the decider answered noop", source=source, noop=True)
    if action not in _ACTIONS:
        raise DeciderError(f"unknown decider action {action!r}")
    message = str(obj.get("message") or "")
    if action == "continue" and not message:
        raise DeciderError("a `continue` decision needs a message")
    return TurnDecision(
        action, message=message[:8000], reason=str(obj.get("reason") or ""), source=source
    )


def _parse_answer(text: str) -> str:
    import json

    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise DeciderError(f"decider output is not JSON: {exc}") from exc
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("answer"), str)
        or not obj["answer"].strip()
    ):
        raise DeciderError('decider output needs {"answer": "..."}')
    return str(obj["answer"])


class CommandDecider(RulesDecider):
    """argv with JSON in (stdin) and JSON out (stdout)."""

    kind = "command"

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout: float,
        wrap: Callable[[list[str]], list[str]] | None = None,
        abort: threading.Event | None = None,
    ) -> None:
        self.argv, self.cwd, self.env, self.timeout = argv, cwd, dict(env), timeout
        self.wrap = wrap
        self.abort = abort

    def _call(self, payload: Mapping[str, Any]) -> str:
        import json

        from gitsup.errors import GitsupError
        from gitsup.host import proc

        try:
            res = proc.run(
                self.wrap(list(self.argv)) if self.wrap is not None else self.argv,
                cwd=self.cwd,
                env=self.env,
                timeout=self.timeout,
                input=json.dumps(payload).encode(),
                merge_stderr=False,
                redact=True,
                abort=self.abort,
            )
        except GitsupError as exc:
            raise DeciderError(exc.message) from exc
        why = res.failure("decider", timeout=self.timeout, abort=self.abort)
        if why is not None:
            raise DeciderError(why)
        return res.output

    def on_turn_completed(self, ctx: TurnOutcome) -> TurnDecision:
        out = self._call({"event": "turn_completed", **ctx.__dict__})
        return _parse_turn_decision(out, "command")

    def answer_question(
        self, tool_input: Mapping[str, Any], when: DecisionTime = NO_DEADLINE
    ) -> str:
        payload = {"event": "question", "input": dict(tool_input), **when.as_dict()}
        ans = _parse_answer(self._call(payload))
        return ans if ans.startswith(SUPERVISOR_ANSWER) else f"{SUPERVISOR_ANSWER} {ans}"

    def answer_ask(self, denial_message: str, when: DecisionTime = NO_DEADLINE) -> str:
        payload = {"event": "ask", "denial": denial_message, **when.as_dict()}
        return _parse_answer(self._call(payload))


class DeciderMemory:
    """An agent decider's conversation for one task: each decision's question and answer,
    oldest first, the last MAX_KEPT kept. Stored as JSON in the task dir, mode 0600, written
    whole and renamed into place; a file that cannot be read starts an empty memory."""

    MAX_KEPT = 50
    MAX_TEXT = 1500  # characters of one question or answer

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: list[dict[str, Any]] = self._load()

    def _load(self) -> list[dict[str, Any]]:
        import json

        if self.path is None:
            return []
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return []
        with os.fdopen(fd, "rb") as fh:
            try:
                data = json.loads(fh.read(4 * 1024 * 1024))
            except ValueError:
                return []
        entries = data.get("entries") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            return []
        return [e for e in entries if isinstance(e, dict)][-self.MAX_KEPT :]

    def add(self, on: str, asked: str, answered: str, when: DecisionTime) -> None:
        import time

        self.entries.append(
            {
                "at": round(time.time(), 3),
                "on": on,
                "asked": _cut(asked, self.MAX_TEXT),
                "answered": _cut(answered, self.MAX_TEXT),
                **when.as_dict(),
            }
        )
        del self.entries[: -self.MAX_KEPT]
        self._save()

    def _save(self) -> None:
        import json

        if self.path is None:
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        data = json.dumps({"entries": self.entries}, indent=1).encode()
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def prompt(self) -> str:
        """The earlier decisions, for the next prompt ("" when there are none)."""
        import json

        if not self.entries:
            return ""
        lines = [
            json.dumps({k: e.get(k) for k in ("on", "asked", "answered", "close_out")})
            for e in self.entries[-20:]
        ]
        return (
            "Your earlier decisions in this task, oldest first (stay consistent with them "
            "unless the situation changed):\n" + "\n".join(lines) + "\n"
        )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ClaudeDecider(RulesDecider):
    """A read-only agent call returning JSON: Claude Code (`kind` "claude"), the Codex CLI
    ("codex", every command and patch it asks for declined) or an ACP agent ("acp",
    offered only Read, Grep and Glob), in the read-only sandbox. Each call is a fresh
    process; what it decided before in this task is in its prompt (`DeciderMemory`)."""

    kind = "claude"

    PROMPT = (
        "You supervise an unattended coding worker. You cannot run tools that change anything. "
        "Answer with ONLY a JSON object.\n"
    )

    def __init__(
        self,
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout: float,
        argv: list[str],
        network: Any = None,
        wrap_for: Callable[[str | None], Callable[[list[str]], list[str]] | None] | None = None,
        abort: threading.Event | None = None,
        kind: str = "claude",
        memory: Path | None = None,
        on_call: CallSink | None = None,
    ) -> None:
        self.cwd, self.env, self.timeout, self.argv = cwd, dict(env), timeout, argv
        self.on_call = on_call
        self.network = network
        self.wrap_for = wrap_for
        self.abort = abort
        self.kind = kind
        self.memory = DeciderMemory(memory)

    def _ask(self, text: str, when: DecisionTime) -> str:
        import json

        from gitsup.verification.agent_call import ClaudeCallError, claude_call

        timing = (
            "Time: "
            + json.dumps(when.as_dict())
            + ' ("close_out": true means the task is out of time: prefer "verify", and ask the '
            "worker only to commit what it has)\n"
        )
        try:
            return claude_call(
                self.PROMPT + self.memory.prompt() + timing + text,
                label="decider",
                cwd=Path(self.cwd),
                env=self.env,
                timeout=self.timeout,
                argv=self.argv,
                network=self.network,
                wrap_for=self.wrap_for,
                abort=self.abort,
                kind=self.kind,
                on_call=self.on_call,
            )
        except ClaudeCallError as exc:
            raise DeciderError(f"{self.kind} decider: {exc}") from exc

    def on_turn_completed(self, ctx: TurnOutcome) -> TurnDecision:
        import json

        when = DecisionTime(ctx.deadline, ctx.remaining_seconds, ctx.close_out)
        out = self._ask(
            'The worker finished a turn. Decide {"action": "verify"|"continue"|"park", "message": '
            '"what to tell the worker if continue", "reason": "..."}.\nTurn: '
            + json.dumps(ctx.__dict__),
            when,
        )
        decision = _parse_turn_decision(out, self.kind)
        asked = f"turn {ctx.turns} ended: {ctx.last_result or ''}"
        self.memory.add("turn_completed", asked, json.dumps(decision.as_dict()), when)
        return decision

    def answer_question(
        self, tool_input: Mapping[str, Any], when: DecisionTime = NO_DEADLINE
    ) -> str:
        import json

        out = self._ask(
            'The worker asks a question; answer it within the task\'s scope as {"answer": "..."}.\n'
            + json.dumps(dict(tool_input)),
            when,
        )
        ans = _parse_answer(_last_object(out))
        ans = ans if ans.startswith(SUPERVISOR_ANSWER) else f"{SUPERVISOR_ANSWER} {ans}"
        self.memory.add("question", question_text(tool_input), ans, when)
        return ans

    def answer_ask(self, denial_message: str, when: DecisionTime = NO_DEADLINE) -> str:
        """The call stays denied; the agent only adds what the worker should do instead."""
        out = self._ask(
            "The permission gate denied a call of the worker (the denial stands). Tell the "
            'worker what to do instead, within the task\'s scope, as {"answer": "..."}.\n'
            "Denial: " + denial_message,
            when,
        )
        ans = _parse_answer(_last_object(out))
        if not ans.startswith(SUPERVISOR_ANSWER):
            ans = f"{SUPERVISOR_ANSWER} {ans}"
        self.memory.add("ask", denial_message, ans, when)
        return f"{denial_message}\n{ans}"


def _embedded_object(text: str, key: str) -> tuple[dict[str, Any], str] | None:
    """The last flat JSON object in `text` that has `key`, and its source text."""
    import json
    import re

    for m in reversed(list(re.finditer(r"\{[^{}]*\}", text))):
        try:
            cand = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(cand, dict) and key in cand:
            return cand, m.group(0)
    return None


def _last_object(text: str) -> str:
    """The text, or the last JSON object with an `answer` in it (a model may add prose)."""
    import json

    try:
        json.loads(text)
        return text
    except ValueError:
        pass
    found = _embedded_object(text, "answer")
    return text if found is None else found[1]


def make_decider(
    spec: Any,
    *,
    cwd: str,
    env: Mapping[str, str],
    network: Any = None,
    wrap: Callable[[list[str]], list[str]] | None = None,
    wrap_for: Callable[[str | None], Callable[[list[str]], list[str]] | None] | None = None,
    abort: threading.Event | None = None,
    memory: Path | None = None,
    on_call: CallSink | None = None,
) -> RulesDecider:
    """`network`: the gated namespace factory for an agent decider (claude, codex, acp);
    `wrap`: the sandbox prefix for a command decider; `wrap_for(netns)`: the same for an
    agent decider; `memory`: where an agent decider keeps its conversation for the task;
    `abort` (set on stop) ends a running call early; `on_call` is told each agent call's
    cost and usage (the cost ledger)."""
    d = spec.decider
    kind = d.machine_kind()  # a human decider's fallback answers what a person does not
    if kind == "command":
        if not d.argv:
            from gitsup.errors import GitsupError

            raise GitsupError('[decider] kind = "command" needs argv')
        return CommandDecider(
            list(d.argv), cwd=cwd, env=env, timeout=d.timeout, wrap=wrap, abort=abort
        )
    from gitsup.workers.kinds import agent_names

    if kind in agent_names():
        from gitsup.spec import decider_argv

        return ClaudeDecider(
            cwd=cwd,
            env=env,
            timeout=d.timeout,
            argv=decider_argv(spec),
            network=network,
            wrap_for=wrap_for,
            abort=abort,
            kind=kind,
            memory=memory,
            on_call=on_call,
        )
    return RulesDecider()
