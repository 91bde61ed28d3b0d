"""The decider: what happens after a turn, and the answer to `ask` verdicts and questions.

The default `rules` decider is deterministic: a completed turn goes to
verification; an `ask` verdict is answered with a denial that names the rule
and what is allowed instead; a question (AskUserQuestion) is answered with a
denial whose message starts with `Supervisor answer:` and tells the worker to
decide by itself within the task's bounds. No human is ever waited for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Action = Literal["verify", "continue", "park"]


@dataclass(frozen=True)
class TurnDecision:
    action: Action
    message: str = ""
    reason: str = ""
    source: str = "rules"

    def as_dict(self) -> dict[str, str]:
        return {"action": self.action, "message": self.message, "reason": self.reason, "source": self.source}


@dataclass(frozen=True)
class TurnContext:
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

    def on_turn_completed(self, ctx: TurnContext) -> TurnDecision:
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
