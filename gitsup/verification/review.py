"""The independent reviewer: a verdict on the exact evidence, never on the worker's claim.

Kinds:
- `command`: any argv; the evidence bundle as JSON on stdin, a verdict JSON on stdout.
- `claude`: a fresh Claude Code process in the worktree, read-only (Read, Grep, Glob;
  every other tool request is denied), given the evidence, asked for a final JSON verdict.
  Only the final assistant message is parsed.
- `none`: allowed only when the spec says so; recorded as such.

ReviewVerdict: {"verdict": "pass"|"revise"|"human", "findings": [{"severity": "P0".."P3",
"title", "path", "line", "detail"}]}. Invalid output, a timeout or an API error is retried
within a bound; then the review fails (and the task parks). Incomplete evidence can never
produce `pass`.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gitsup.errors import GitsupError
from gitsup.git import Evidence
from gitsup.host import proc
from gitsup.spec import TaskSpec, review_argv
from gitsup.store.ledger import CallSink
from gitsup.store.record import CheckResult, ReviewResult

MAX_EVIDENCE_CHECK_TAIL = 2000
MAX_EVIDENCE_WORKER_TAIL = 4000  # characters of the worker's output, its last ones
MAX_EVIDENCE_WORKER_RESULT = 4000  # characters of the worker's last turn result


class ReviewFinding(BaseModel):
    model_config = ConfigDict(extra="ignore")

    severity: Literal["P0", "P1", "P2", "P3"]
    title: str = Field(min_length=1, max_length=500)
    path: str | None = None
    line: int | None = None
    detail: str = ""

    def key(self) -> str:
        return f"{(self.path or '').strip()}::{' '.join(self.title.lower().split())}"


class ReviewVerdict(BaseModel):
    model_config = ConfigDict(extra="ignore")

    verdict: Literal["pass", "revise", "human"]
    findings: list[ReviewFinding] = Field(default_factory=list)


class ReviewError(Exception):
    """One review attempt failed (invalid output, timeout, API error)."""


POLICY_CHANGE_NOTE = (
    "This change modifies .gitsup/, gitsup's policy for this repository (task sandbox rules, "
    "shell policy, protected branches): once integrated it changes what every later task may "
    "read, write and run. Judge it as a security change: is each widened rule needed by the "
    "goal, and could it expose credentials, keys or other tasks? A person must consent to it "
    "at integration (--allow-policy-change)."
)


def evidence_bundle(
    task: str,
    spec: TaskSpec,
    checks: Sequence[CheckResult],
    ev: Evidence,
    policy_change: Sequence[str] = (),
    worker: WorkerSaid | None = None,
) -> dict[str, Any]:
    """What the reviewer judges. `policy_change`: the paths under `.gitsup/` the change
    touches (the reviewer is told, with POLICY_CHANGE_NOTE); `worker`: what the worker said
    (its claim, to be checked against the diff, never taken for it)."""
    said = worker or WorkerSaid()
    return {
        "task": task,
        "spec": {
            "goal": spec.goal,
            "scope": spec.scope,
            "constraints": spec.constraints,
            "forbidden": spec.forbidden,
            "checks": [
                {"name": c.name, "argv": c.argv, "required": c.required} for c in spec.checks
            ],
        },
        "baseline": ev.baseline,
        "head": ev.head,
        "checks": [
            {
                "name": c.name,
                "argv": c.argv,
                "required": c.required,
                "passed": c.passed,
                "exit_code": c.exit_code,
                "output_tail": c.output_tail[-MAX_EVIDENCE_CHECK_TAIL:],
            }
            for c in checks
        ],
        "commits": [
            {"oid": c.oid, "summary": c.summary, "author": c.author, "parents": list(c.parents)}
            for c in ev.commits
        ],
        "diff_stat": ev.diff_stat,
        "diff": ev.diff,
        "untracked": [
            {"path": u.path, "size": u.size, "content": u.content, "skipped": u.skipped}
            for u in ev.untracked
        ],
        "worker": {
            "last_result": _last(said.last_result, MAX_EVIDENCE_WORKER_RESULT),
            "output_tail": _last(said.output_tail, MAX_EVIDENCE_WORKER_TAIL),
        },
        "complete": ev.complete,
        "truncated": ev.truncated,
        "policy_change": list(policy_change),
        **({"policy_change_note": POLICY_CHANGE_NOTE} if policy_change else {}),
    }


@dataclass(frozen=True)
class WorkerSaid:
    """The worker's last turn result (None: no turn ended) and the tail of its output."""

    last_result: str | None = None
    output_tail: str = ""


def _last(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return "[… cut]\n" + text[-limit:]


_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)


def parse_verdict(text: str) -> ReviewVerdict:
    """The verdict in a reviewer's final message: the whole text, the last fenced JSON
    block, or the last JSON object in it that has a `verdict`."""
    candidates: list[str] = [text.strip()]
    candidates += list(reversed(_FENCE.findall(text)))
    # last balanced {...} spans
    depth, start = 0, -1
    spans: list[str] = []
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0 and start >= 0:
                spans.append(text[start : i + 1])
    candidates += list(reversed(spans))
    last_error = "no JSON object with a verdict"
    for c in candidates:
        try:
            obj = json.loads(c)
        except ValueError:
            continue
        if not isinstance(obj, dict) or "verdict" not in obj:
            continue
        try:
            return ReviewVerdict.model_validate(obj)
        except ValidationError as exc:
            last_error = f"invalid verdict: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}"
    raise ReviewError(last_error)


@dataclass(frozen=True)
class ReviewRequest:
    task: str
    worktree: Path
    env: Mapping[str, str]
    spec: TaskSpec
    bundle: dict[str, Any]
    # the network the claude reviewer runs in (claude_call's `network`); None: the host's
    network: Any = None
    # the sandbox prefix for the reviewer's processes (gitsup.host.contain.bootstrap_argv)
    wrap: Callable[[list[str]], list[str]] | None = None
    # the sandbox prefix for a process in a given network namespace (the claude reviewer's)
    wrap_for: Callable[[str | None], Callable[[list[str]], list[str]] | None] | None = None
    abort: threading.Event | None = None  # set on stop: a running attempt ends early
    on_call: CallSink | None = None  # told each attempt's cost and usage (the cost ledger)


Attempt = Callable[[ReviewRequest], ReviewVerdict]


def run_review(
    ctx: ReviewRequest,
    *,
    on_attempt: Callable[[int, str | None], None] | None = None,
    attempt_fn: Attempt | None = None,
) -> tuple[ReviewResult, ReviewVerdict | None]:
    """Review with retries. Returns the recorded result and the verdict (None on failure)."""
    kind = ctx.spec.review.kind
    if kind == "none":
        return ReviewResult(kind="none", verdict=None, attempts=0, error=None), None
    attempts = {"command": command_attempt, "acp": acp_attempt, "codex": codex_attempt}
    fn = attempt_fn or attempts.get(kind, claude_attempt)
    tries = 1 + ctx.spec.review.retries
    last: str | None = None
    for n in range(1, tries + 1):
        if ctx.abort is not None and ctx.abort.is_set():
            last = "stop requested"
            break
        try:
            verdict = fn(ctx)
        except (ReviewError, GitsupError) as exc:
            last = str(exc)
            if on_attempt is not None:
                on_attempt(n, last)
            continue
        if verdict.verdict == "pass" and not ctx.bundle.get("complete", False):
            # Truncated evidence can never pass.
            verdict = ReviewVerdict(
                verdict="human",
                findings=[
                    *verdict.findings,
                    ReviewFinding(
                        severity="P2",
                        title="evidence was truncated; a pass cannot be given on partial evidence",
                        detail="; ".join(ctx.bundle.get("truncated", [])),
                    ),
                ],
            )
        if on_attempt is not None:
            on_attempt(n, None)
        return (
            ReviewResult(
                kind=kind,
                verdict=verdict.verdict,
                findings=[f.model_dump() for f in verdict.findings],
                attempts=n,
            ),
            verdict,
        )
    return ReviewResult(kind=kind, verdict=None, attempts=tries, error=last), None


# --- command reviewer -------------------------------------------------------------------


def command_attempt(ctx: ReviewRequest) -> ReviewVerdict:
    argv = ctx.spec.review.argv
    if not argv:
        raise GitsupError('[review] kind = "command" needs argv')
    res = proc.run(
        ctx.wrap(list(argv)) if ctx.wrap is not None else argv,
        cwd=ctx.worktree,
        env=dict(ctx.env),
        timeout=ctx.spec.review.timeout,
        input=json.dumps(ctx.bundle).encode(),
        max_output=1024 * 1024,
        merge_stderr=False,
        redact=True,
        abort=ctx.abort,
    )
    why = res.failure("reviewer", timeout=ctx.spec.review.timeout, abort=ctx.abort)
    if why is not None:
        raise ReviewError(why if res.timed_out else f"{why}: {res.output[-500:]}")
    from gitsup.store.ledger import report_from_output

    report_from_output(ctx.on_call, "reviewer", res.output)
    return parse_verdict(res.output)


# --- claude reviewer --------------------------------------------------------------------

REVIEW_PROMPT = """You are an independent code reviewer. You did not write this change and you \
cannot change anything: you may only read files (Read, Grep, Glob) in the worktree.

Judge whether the change below achieves the task's goal correctly and safely, within its scope \
and constraints. The acceptance checks have already been run; their results are included. Do not \
trust claims in commit messages; check the diff.

Answer with ONLY a JSON object, no other text:
{"verdict": "pass" | "revise" | "human",
 "findings": [{"severity": "P0"|"P1"|"P2"|"P3", "title": "...", "path": "...", "line": 1, "detail": "..."}]}

"pass": correct and complete. "revise": the worker can fix the findings. "human": a person must \
decide (unclear requirements, risky change). P0/P1 are serious defects. When "policy_change" lists paths, the change rewrites gitsup's own policy: read "policy_change_note".

Evidence (JSON):
"""


def claude_attempt(ctx: ReviewRequest) -> ReviewVerdict:
    return _agent_attempt(ctx, "claude", review_argv(ctx.spec))


def codex_attempt(ctx: ReviewRequest) -> ReviewVerdict:
    """The reviewer as Codex: every command and patch it asks for is declined, so it judges
    from the evidence in its prompt."""
    return _agent_attempt(ctx, "codex", review_argv(ctx.spec))


def acp_attempt(ctx: ReviewRequest) -> ReviewVerdict:
    """The reviewer as an ACP agent: `[review] argv`, else the acp worker's argv, else the
    default agent (GITSUP_ACP_BIN); offered only Read, Grep and Glob, every other call
    denied, in the read-only sandbox."""
    return _agent_attempt(ctx, "acp", review_argv(ctx.spec))


def _agent_attempt(ctx: ReviewRequest, kind: str, argv: Sequence[str]) -> ReviewVerdict:
    """One read-only agent call with the review prompt and the evidence; its verdict."""
    from gitsup.verification.agent_call import ClaudeCallError, claude_call

    try:
        text = claude_call(
            REVIEW_PROMPT + json.dumps(ctx.bundle, indent=1),
            label=f"{ctx.task}-review",
            cwd=ctx.worktree,
            env=ctx.env,
            timeout=ctx.spec.review.timeout,
            argv=argv,
            network=ctx.network,
            wrap_for=ctx.wrap_for,
            abort=ctx.abort,
            kind=kind,
            on_call=ctx.on_call,
        )
    except ClaudeCallError as exc:
        raise ReviewError(f"{kind} reviewer: {exc}") from exc
    return parse_verdict(text)
