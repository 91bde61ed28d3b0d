"""The permission gate (the shell-policy classifier, then the decider for what it cannot
settle) and the decider's verdict on a finished turn. Both answer the task machine with
what came of it; neither changes the task's state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gitsup.store import eventtypes as et
from gitsup.supervision.context import TaskContext
from gitsup.supervision.taskio import Decided, Gated, PendingAsk
from gitsup.verification.decider import (
    SUPERVISOR_ANSWER,
    DeciderError,
    RulesDecider,
    TurnDecision,
    TurnOutcome,
)
from gitsup.workers.base import (
    PermissionAnswer,
    PermissionRequest,
    TurnCompleted,
    WorkerAdapter,
    WorkerError,
    WorkerInputStalled,
)

T = TypeVar("T")


class Gate:
    def __init__(self, ctx: TaskContext, *, sandboxed: Callable[[], bool]) -> None:
        self.repo, self.spec, self.task = ctx.repo, ctx.spec, ctx.task
        self.worktree = str(ctx.worktree)
        self.emit, self.abort = ctx.emit, ctx.abort
        self.sandboxed = sandboxed
        self.decider: RulesDecider = RulesDecider()
        self.clock = ctx.clock  # the time every decision is made in (the task machine's)
        self._policy: Any = None
        self._ecosystem: Any = None
        self._person_allowed: set[str] = set()  # calls a person allowed at PreToolUse

    def policy(self) -> Any:
        if self._policy is None:
            from gitsup.policy import load_policy

            self._policy = load_policy(
                self.repo.main_workdir, extra_protected=self.repo.config_get_all("sup.protected")
            )
        return self._policy

    def ecosystem(self) -> Any:
        """The project's ecosystem, for the denial hints (read once, from the worktree)."""
        if self._ecosystem is None:
            from gitsup.policy import detect_ecosystem

            self._ecosystem = detect_ecosystem(self.worktree)
        return self._ecosystem

    def with_retries(self, what: str, fn: Callable[[], T]) -> T | None:
        tries = 1 + self.spec.autonomy.max_decision_retries
        for n in range(1, tries + 1):
            if self.abort.is_set():
                return None
            try:
                return fn()
            except DeciderError as exc:
                self.emit(et.Decision(on=what, attempt=n, error=str(exc)[:500]))
        return None

    def answer(self, req: PermissionRequest, worker: WorkerAdapter | None) -> Gated:
        """Decide one permission request, answer the worker, record it."""
        from gitsup.policy import decide_tool, unattended_denial

        key = _call_key(req)
        if (
            req.phase == "prompt"
            and req.raw.get("gitsup_hook") == "PermissionRequest"
            and key in self._person_allowed
        ):
            # Claude Code asks again (its PermissionRequest) for the call a person just
            # allowed at PreToolUse: that answer stands, once.
            self._person_allowed.discard(key)
            answer = PermissionAnswer(True, updated_input=req.tool_input)
            stalled = self._send(req, answer, worker)
            self._decided(req, _PERSON_ALLOWED, answer)
            return Gated(stalled=stalled)
        decision = decide_tool(
            req.tool_name,
            req.tool_input,
            worktree=self.worktree,
            policy=self.policy(),
            git_common_dir=str(self.repo.common_dir),
            sandboxed=self.sandboxed(),
        )
        park: str | None = None
        if decision.verdict == "allow":
            answer = PermissionAnswer(True, updated_input=req.tool_input)
        elif decision.verdict == "deny":
            answer = PermissionAnswer(False, unattended_denial(decision, self.ecosystem()))
        else:
            is_question = req.tool_name == "AskUserQuestion"
            self.emit(et.PermissionPending(request_id=req.request_id, tool=req.tool_name))
            if (self.spec.decider.kind == "human" or req.phase == "prompt") and not is_question:
                # A person answers (`git sup answer`); the task machine waits for them. A
                # request from a turn a person started (a human takeover) is theirs to
                # answer, whatever the decider: nothing decides it automatically.
                return Gated(
                    ask=PendingAsk(
                        request=req,
                        decision=decision,
                        summary=ask_summary(req.tool_name, req.tool_input),
                        denial=unattended_denial(decision, self.ecosystem()),
                        rule=decision.rule,
                    )
                )
            when = self.clock()
            text = self.with_retries(
                "question" if is_question else "ask",
                (lambda: self.decider.answer_question(req.tool_input, when))
                if is_question
                else (
                    lambda: self.decider.answer_ask(
                        unattended_denial(decision, self.ecosystem()), when
                    )
                ),
            )
            if text is None:
                park = "decider failed to answer a permission request"
                text = (
                    RulesDecider().answer_question(req.tool_input)
                    if is_question
                    else unattended_denial(decision, self.ecosystem())
                )
            answer = PermissionAnswer(False, text)
        stalled = self._send(req, answer, worker)
        self._decided(req, decision, answer)
        return Gated(park=park, stalled=stalled)

    def resolve(
        self,
        ask: PendingAsk,
        allow: bool,
        message: str,
        worker: WorkerAdapter | None,
        *,
        fallback: bool = False,
    ) -> Gated:
        """Answer an ask that waited for a person: their `allow` (the call runs as asked) or
        denial (their `message`, else the policy's), or the fallback decider's answer."""
        req = ask.request
        park: str | None = None
        if allow:
            answer = PermissionAnswer(True, updated_input=req.tool_input)
            if req.phase == "prompt" and req.raw.get("gitsup_hook") == "PreToolUse":
                self._person_allowed.add(_call_key(req))
        elif fallback and self.spec.decider.fallback != "deny":
            when = self.clock()
            text = self.with_retries("ask", lambda: self.decider.answer_ask(ask.denial, when))
            if text is None:
                park = "decider failed to answer a permission request"
            answer = PermissionAnswer(False, text or ask.denial)
        elif message:
            answer = PermissionAnswer(False, f"{SUPERVISOR_ANSWER} denied by a person: {message}")
        else:
            answer = PermissionAnswer(False, ask.denial)
        stalled = self._send(req, answer, worker)
        self._decided(req, ask.decision, answer)
        return Gated(park=park, stalled=stalled)

    def _send(
        self, req: PermissionRequest, answer: PermissionAnswer, worker: WorkerAdapter | None
    ) -> str | None:
        if worker is not None:
            try:
                worker.answer(req.request_id, answer)
            except WorkerInputStalled as exc:
                return str(exc)
            except (WorkerError, OSError):
                pass
        return None

    def _decided(self, req: PermissionRequest, decision: Any, answer: PermissionAnswer) -> None:
        self.emit(
            et.PermissionDecided(
                request_id=req.request_id,
                tool=req.tool_name,
                input=summarize_input(req.tool_input),
                verdict=decision.verdict,
                rule=decision.rule,
                reason=decision.reason,
                part=decision.part,
                sandboxed=decision.sandboxed,
                answer="allow" if answer.allow else "deny",
                message=answer.message,
                phase=req.phase,
            )
        )

    def decide_turn(self, tc: TurnCompleted, *, turns: int, alive: Callable[[], bool]) -> Decided:
        when = self.clock()
        ctx = TurnOutcome(
            task=self.task,
            goal=self.spec.goal,
            turns=turns,
            last_result=tc.result,
            is_error=tc.is_error,
            subtype=tc.subtype,
            worker_alive=alive(),
            **when.as_dict(),
        )
        decision: TurnDecision | None = self.with_retries(
            "turn_completed", lambda: self.decider.on_turn_completed(ctx)
        )
        return Decided(decision, self.decider.kind, alive())


def ask_summary(tool: str, tool_input: Mapping[str, Any], limit: int = 200) -> str:
    """One line saying what a call asks for: a command, a path, else its input."""
    for k in ("command", "file_path", "path", "url", "pattern"):
        v = tool_input.get(k)
        if isinstance(v, str) and v.strip():
            text = " ".join(v.split())
            break
    else:
        import json

        text = json.dumps(dict(tool_input), sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summarize_input(tool_input: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tool_input.items():
        if isinstance(v, str) and len(v) > 2000:
            out[k] = v[:2000] + f"… [{len(v) - 2000} chars cut]"
        else:
            out[k] = v
    return out


def _call_key(req: PermissionRequest) -> str:
    import json

    return req.tool_name + "\0" + json.dumps(dict(req.tool_input), sort_keys=True, default=str)


@dataclass(frozen=True)
class _PersonAllowed:
    verdict: str = "allow"
    rule: str = "human"
    reason: str = "a person allowed this call at PreToolUse"
    part: str | None = None
    sandboxed: bool = False


_PERSON_ALLOWED = _PersonAllowed()
