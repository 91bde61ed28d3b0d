"""The decider: what happens after a turn, and the answer to `ask` verdicts and questions.

The default `rules` decider is deterministic: a completed turn goes to
verification; an `ask` verdict is answered with a denial that names the rule
and what is allowed instead; a question (AskUserQuestion) is answered with a
denial whose message starts with `Supervisor answer:` and tells the worker to
decide by itself within the task's bounds. No human is ever waited for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

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
class TurnOutcome:
    task: str
    goal: str
    turns: int
    last_result: str | None
    is_error: bool
    subtype: str
    worker_alive: bool


SUPERVISOR_ANSWER = "Supervisor answer:"


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

    def answer_question(self, tool_input: Mapping[str, Any]) -> str:
        q = question_text(tool_input)
        about = f" to {q!r}" if q else ""
        return (
            f"{SUPERVISOR_ANSWER} nobody is available to answer{about}; this task runs unattended. "
            "Choose the option that keeps the change smallest and safest within the task's scope, "
            "state the assumption in your commit message, and continue."
        )

    def answer_ask(self, denial_message: str) -> str:
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

    def answer_question(self, tool_input: Mapping[str, Any]) -> str:
        ans = _parse_answer(self._call({"event": "question", "input": dict(tool_input)}))
        return ans if ans.startswith(SUPERVISOR_ANSWER) else f"{SUPERVISOR_ANSWER} {ans}"

    def answer_ask(self, denial_message: str) -> str:
        return _parse_answer(self._call({"event": "ask", "denial": denial_message}))


class ClaudeDecider(RulesDecider):
    """A read-only agent call returning JSON: Claude Code (`kind` "claude"), the Codex CLI
    ("codex", every command and patch it asks for declined) or an ACP agent ("acp",
    offered only Read, Grep and Glob), in the read-only sandbox."""

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
    ) -> None:
        self.cwd, self.env, self.timeout, self.argv = cwd, dict(env), timeout, argv
        self.network = network
        self.wrap_for = wrap_for
        self.abort = abort
        self.kind = kind

    def _ask(self, text: str) -> str:
        from pathlib import Path

        from gitsup.verification.agent_call import ClaudeCallError, claude_call

        try:
            return claude_call(
                self.PROMPT + text,
                label="decider",
                cwd=Path(self.cwd),
                env=self.env,
                timeout=self.timeout,
                argv=self.argv,
                network=self.network,
                wrap_for=self.wrap_for,
                abort=self.abort,
                kind=self.kind,
            )
        except ClaudeCallError as exc:
            raise DeciderError(f"{self.kind} decider: {exc}") from exc

    def on_turn_completed(self, ctx: TurnOutcome) -> TurnDecision:
        import json

        out = self._ask(
            'The worker finished a turn. Decide {"action": "verify"|"continue"|"park", "message": '
            '"what to tell the worker if continue", "reason": "..."}.\nTurn: '
            + json.dumps(ctx.__dict__)
        )
        return _parse_turn_decision(out, self.kind)

    def answer_question(self, tool_input: Mapping[str, Any]) -> str:
        import json

        out = self._ask(
            'The worker asks a question; answer it within the task\'s scope as {"answer": "..."}.\n'
            + json.dumps(dict(tool_input))
        )
        ans = _parse_answer(_last_object(out))
        return ans if ans.startswith(SUPERVISOR_ANSWER) else f"{SUPERVISOR_ANSWER} {ans}"

    def answer_ask(self, denial_message: str) -> str:
        """The call stays denied; the agent only adds what the worker should do instead."""
        out = self._ask(
            "The permission gate denied a call of the worker (the denial stands). Tell the "
            'worker what to do instead, within the task\'s scope, as {"answer": "..."}.\n'
            "Denial: " + denial_message
        )
        ans = _parse_answer(_last_object(out))
        if not ans.startswith(SUPERVISOR_ANSWER):
            ans = f"{SUPERVISOR_ANSWER} {ans}"
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
) -> RulesDecider:
    """`network`: the gated namespace factory for an agent decider (claude, codex, acp);
    `wrap`: the sandbox prefix for a command decider; `wrap_for(netns)`: the same for an
    agent decider;
    `abort` (set on stop) ends a running call early."""
    d = spec.decider
    kind = d.machine_kind()  # a human decider's fallback answers what a person does not
    if kind == "command":
        if not d.argv:
            from gitsup.errors import GitsupError

            raise GitsupError('[decider] kind = "command" needs argv')
        return CommandDecider(
            list(d.argv), cwd=cwd, env=env, timeout=d.timeout, wrap=wrap, abort=abort
        )
    if kind in ("claude", "codex", "acp"):
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
        )
    return RulesDecider()
