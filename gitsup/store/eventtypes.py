# ruff: noqa: RUF009 - key(), opt() and spread() return dataclasses.field(...)
"""The event types: one frozen payload class per type, registered under its type string.

How a payload is written and read back (fields as JSON keys in declaration order, `UNSET`
fields left out, spread fields, `Untyped` for what does not fit) is gitsup/store/payload.py,
which is where its names are imported from. `python -m gitsup.store.eventtypes --schema` prints the
table of docs/events.md.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from gitsup.ids import Oid, TaskId
from gitsup.store.payload import (
    Payload,
    Unset,
    key,
    opt,
    schema_table,
    spread,
)

# --- the event types -----------------------------------------------------------------------
# Class names are the type strings in CamelCase; fields are in the order they are written.

JsonMap = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStarted(Payload):
    """The task exists: its goal, baseline, branch and worktree, and the checks it runs."""

    TYPE: ClassVar[str] = "task_started"
    goal: str
    baseline: Oid
    base: str
    branch: str
    worktree: str
    worker: str
    checks: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class StateChanged(Payload):
    """A transition of the task's state machine."""

    TYPE: ClassVar[str] = "state_changed"
    from_: str = key("from")
    to: str = key("to")
    reason: str = key("reason")


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentIncluded(Payload):
    """The main checkout's ignored paths the task's worktree got (`[environment] include`):
    per path its method (overlay, reflink, copy, missing), bytes and files copied, time; the
    entries refused, and why (docs/environments.md)."""

    TYPE: ClassVar[str] = "environment_included"
    include: list[JsonMap]
    refused: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStarted(Payload):
    """A worker was spawned: what runs, its persisted identity, its network and sandbox."""

    TYPE: ClassVar[str] = "worker_started"
    kind: str
    argv: list[str]
    pid: int
    start_time: float
    pgid: int
    cgroup: str | None
    cgroup_inode: int | None
    extra: JsonMap
    network: JsonMap | None
    sandbox: JsonMap | None
    # the agent executable (path, inode, sha256, version): gitsup/workers/agentbin.py
    binary: JsonMap | Unset = opt()
    # the cluster host running the task (`git sup host run --name`): docs/cluster.md
    host: str | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOutput(Payload):
    """A line the worker wrote (redacted where it was read), with its adapter's own keys."""

    TYPE: ClassVar[str] = "worker_output"
    PRE_REDACTED: ClassVar[bool] = True
    stream: str
    text: str
    more: Mapping[str, Any] = spread()


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnCompleted(Payload):
    """The worker ended a turn (`paused`: while a person drives it, nothing is decided)."""

    TYPE: ClassVar[str] = "turn_completed"
    subtype: str | None
    is_error: bool | Unset = opt()
    result: str = key("result")
    cost_usd: float | Unset | None = opt()
    num_turns: int | Unset | None = opt()
    session_id: str | Unset | None = opt()
    usage: JsonMap | Unset = opt()
    repair_round: int | Unset = opt("round")
    paused: bool | Unset = opt()
    models: list[str] | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionPending(Payload):
    """The worker asked for a tool; the permission gate is deciding."""

    TYPE: ClassVar[str] = "permission_pending"
    request_id: str
    tool: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionDecided(Payload):
    """The gate's answer (the policy decision and what the worker was told), or a request
    the worker `cancelled`."""

    TYPE: ClassVar[str] = "permission_decided"
    request_id: str
    tool: str | Unset = opt()
    input: JsonMap | Unset = opt()
    verdict: str | Unset = opt()
    rule: str | Unset = opt()
    reason: str | Unset = opt()
    part: str | Unset = opt()
    sandboxed: bool | Unset = opt()
    answer: Literal["allow", "deny"] | Unset = opt()
    message: str | Unset | None = opt()
    cancelled: bool | Unset = opt()
    phase: str | Unset = opt()  # the asking turn's: turn, prompt (a person's), takeover


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceStarted(Payload):
    """An acceptance check starts."""

    TYPE: ClassVar[str] = "acceptance_started"
    name: str
    argv: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceResult(Payload):
    """An acceptance check's result (the record's `checks` item)."""

    TYPE: ClassVar[str] = "acceptance_result"
    name: str
    argv: list[str]
    required: bool
    exit_code: int | None
    passed: bool
    timed_out: bool
    duration: float
    output_tail: str
    repair_round: int = key("round")


@dataclass(frozen=True, slots=True, kw_only=True)
class SetupStarted(Payload):
    """The setup phase starts (`[environment] setup`): its commands, the endpoints only it
    may reach, the caches it gets (a copy of what `git sup env warm` filled) and their size.
    `who`: the task, or the `integrate`/`queue` run that checks a candidate."""

    TYPE: ClassVar[str] = "setup_started"
    commands: list[list[str]]
    egress: list[str]
    caches: list[str]
    cache_bytes: int
    who: str = "task"


@dataclass(frozen=True, slots=True, kw_only=True)
class SetupFinished(Payload):
    """The setup phase ended: `passed`, the command that failed (if any), its exit code,
    whether it timed out, the phase's duration and the end of its output."""

    TYPE: ClassVar[str] = "setup_finished"
    passed: bool
    command: list[str]
    exit_code: int | None
    timed_out: bool
    duration: float
    output_tail: str
    who: str = "task"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewStarted(Payload):
    """The independent review starts on `head` (`complete`: the evidence is whole)."""

    TYPE: ClassVar[str] = "review_started"
    kind: str
    repair_round: int = key("round")
    complete: bool = key("complete")
    head: Oid | None = key("head")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewResult(Payload):
    """The review's result (the record's `review`), or one failed `attempt` of it."""

    TYPE: ClassVar[str] = "review_result"
    kind: str | Unset = opt()
    verdict: str | Unset | None = opt()
    findings: list[JsonMap] | Unset = opt()
    attempts: int | Unset = opt()
    attempt: int | Unset = opt()
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RepairRequested(Payload):
    """A repair round starts: the problems and the message the worker gets."""

    TYPE: ClassVar[str] = "repair_requested"
    repair_round: int = key("round")
    problems: list[str] = key("problems")
    message: str = key("message")


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision(Payload):
    """The decider's answer after a turn (`action` …), or its failed `attempt`."""

    TYPE: ClassVar[str] = "decision"
    on: str | Unset = opt()
    attempt: int | Unset = opt()
    error: str | Unset = opt()
    action: str | Unset = opt()
    message: str | Unset = opt()
    reason: str | Unset = opt()
    source: str | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchdogTimeout(Payload):
    """No output for too long, or the deadline's close-out grace ran out."""

    TYPE: ClassVar[str] = "watchdog_timeout"
    kind: str  # no_output | deadline
    limit: float


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadlineApproaching(Payload):
    """The deadline is near (`[budget] deadline_warning`); an idle worker is told."""

    TYPE: ClassVar[str] = "deadline_approaching"
    seconds_left: float


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadlineReached(Payload):
    """The deadline fell; a busy worker gets `closeout_grace` seconds to finish its turn."""

    TYPE: ClassVar[str] = "deadline_reached"
    closeout_grace: float
    busy: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitReached(Payload):
    """The worker's cgroup ran into pids.max or its memory limit; the task parks."""

    TYPE: ClassVar[str] = "limit_reached"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerHeld(Payload):
    """Between a turn and the next: the worker's cgroup frozen, thawed, or what an exited
    worker left running killed, so that nothing of it runs while its work is verified."""

    TYPE: ClassVar[str] = "worker_held"
    how: str  # frozen | thawed | leftovers killed | not frozen, killed
    processes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetExceeded(Payload):
    """Turns or cost went over the budget; the task parks."""

    TYPE: ClassVar[str] = "budget_exceeded"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolNoise(Payload):
    """A worker line that is not the protocol (`line`), or something that went wrong
    on the way (`error` only)."""

    TYPE: ClassVar[str] = "protocol_noise"
    line: str | Unset = opt()
    error: str = key("error")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelError(Payload):
    """The model API failed a turn (classified: auth, unreachable, …)."""

    TYPE: ClassVar[str] = "model_error"
    kind: str
    message: str
    status: int | None
    error: str | None
    hint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateReady(Payload):
    """The task ended with a candidate that passed its checks and review."""

    TYPE: ClassVar[str] = "candidate_ready"
    candidate: Oid | None
    reasons: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateParked(Payload):
    """Parked by the task (`candidate`, `reasons`), or later by the integration queue
    (`by`, `into`, `reason`, `evidence`)."""

    TYPE: ClassVar[str] = "candidate_parked"
    candidate: Oid | Unset | None = opt()
    reasons: list[str] | Unset = opt()
    by: str | Unset = opt()
    into: str | Unset = opt()
    reason: str | Unset = opt()
    evidence: JsonMap | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateFailed(Payload):
    """The task failed (`candidate` is null unless one was written)."""

    TYPE: ClassVar[str] = "candidate_failed"
    candidate: Oid | None
    reasons: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class WipSaved(Payload):
    """The worktree's state saved as a wip commit (`ref`, `commit`; null when nothing was)."""

    TYPE: ClassVar[str] = "wip_saved"
    ref: str | None
    commit: Oid | None
    not_captured: list[JsonMap]


@dataclass(frozen=True, slots=True, kw_only=True)
class NestedGitMoved(Payload):
    """The nested repositories the task left in its worktree (`.git` entries below its top)
    moved into the task dir before a person looks at it: each `path` now at `to`."""

    TYPE: ClassVar[str] = "nested_git_moved"
    moved: list[JsonMap]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkImported(Payload):
    """The worker's commits, verified and imported into the task branch."""

    TYPE: ClassVar[str] = "work_imported"
    branch: str
    from_: Oid | None = key("from")
    to: Oid = key("to")
    objects: int = key("objects")
    size: int = key("bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportRefused(Payload):
    """The worker's commits were not imported into the task branch, and why."""

    TYPE: ClassVar[str] = "import_refused"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerBranchChanged(Payload):
    """The worker moved to another branch of its worktree."""

    TYPE: ClassVar[str] = "worker_branch_changed"
    from_: str | None = key("from")
    to: str | None = key("to")
    tip: Oid = key("tip")


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStopped(Payload):
    """The worker was stopped (`reason`, `how`), its process group swept (`containment`,
    `guarantee`, `swept`), its cgroup emptied (`cgroup`, `verified_empty`, `removed`), or it
    exited (`returncode`, `signal`, `classification`)."""

    TYPE: ClassVar[str] = "worker_stopped"
    reason: str | Unset = opt()
    how: str | Unset = opt()
    containment: str | Unset = opt()
    guarantee: str | Unset = opt()
    swept: list[int] | Unset = opt()  # the pids the sweep killed
    cgroup: str | Unset = opt()
    verified_empty: bool | Unset = opt()
    removed: bool | Unset = opt()
    returncode: int | Unset | None = opt()
    signal: int | Unset | None = opt()
    classification: str | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerLeftBehind(Payload):
    """Cleanup could not prove the worker gone; the worktree lease stays held."""

    TYPE: ClassVar[str] = "worker_left_behind"
    what: list[str]
    lease: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInputStalled(Payload):
    """The worker stopped reading its input (an answer or a turn could not be sent)."""

    TYPE: ClassVar[str] = "worker_input_stalled"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceTrustAccepted(Payload):
    """The tmux worker's trust dialog was answered for the worktree."""

    TYPE: ClassVar[str] = "workspace_trust_accepted"
    path: str
    how: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StopRequested(Payload):
    """Someone asked the task to stop (`git sup stop`, a signal, a stop after a check)."""

    TYPE: ClassVar[str] = "stop_requested"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFinished(Payload):
    """The last event of a task: its final state, status and exit code."""

    TYPE: ClassVar[str] = "task_finished"
    state: str
    status: str
    exit_code: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Integrated(Payload):
    """The candidate was integrated into `into` (`result` is the commit the branch got)."""

    TYPE: ClassVar[str] = "integrated"
    candidate: Oid
    into: str
    strategy: str
    target_before: Oid
    result: Oid
    checks: list[JsonMap]
    confinement: JsonMap | Unset = opt()  # what confined the checks (sandbox, network, cgroup)


@dataclass(frozen=True, slots=True, kw_only=True)
class HumanInput(Payload):
    """A person typed into a tmux worker (redacted)."""

    TYPE: ClassVar[str] = "human_input"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HumanTakeover(Payload):
    """A person took the worker over; automatic turns pause until `resume_with`."""

    TYPE: ClassVar[str] = "human_takeover"
    resume_with: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeAuto(Payload):
    """Automatic turns resume (`turn_active`), or a resume that was `ignored` in `state`."""

    TYPE: ClassVar[str] = "resume_auto"
    ignored: bool | Unset = opt()
    state: str | Unset = opt()
    turn_active: bool | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class HumanAsk(Payload):
    """A call the policy sent to `ask` waits for a person (`[decider] kind = "human"`, or
    `phase` prompt: a turn a person started in a human takeover):
    `git sup answer TASK REQUEST_ID allow|deny` answers it; after `timeout` seconds the
    `fallback` does."""

    TYPE: ClassVar[str] = "human_ask"
    request_id: str
    tool: str
    summary: str
    rule: str
    timeout: float
    fallback: str
    phase: str | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class HumanAnswer(Payload):
    """A person answered an open ask: `decision` allow or deny, `message` (a denial's text
    for the worker), `by` who (user.email or $USER) and `via` how (cli). `ref` names the
    control request that carried it."""

    TYPE: ClassVar[str] = "human_answer"
    request_id: str
    decision: str
    message: str
    by: str
    via: str
    ref: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HumanTimeout(Payload):
    """Nobody answered an ask within `[decider] human_timeout`: the `fallback` answers it."""

    TYPE: ClassVar[str] = "human_timeout"
    request_id: str
    waited: float
    fallback: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerMessageSent(Payload):
    """`git sup send`: a person's message to the worker, `queued` until the worker's turn
    ends and then `delivered` as its next turn (or `dropped` with why)."""

    TYPE: ClassVar[str] = "worker_message_sent"
    text: str
    by: str
    via: str
    ref: str
    status: str  # queued, delivered or dropped
    why: str | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetPaused(Payload):
    """A budget ran out with `[budget] on_exhausted = "pause"`: the task waits for
    `resume_with` (`git sup continue`), its deadline clock held."""

    TYPE: ClassVar[str] = "budget_paused"
    reason: str
    resume_with: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetContinued(Payload):
    """`git sup continue`: the budget raised by a person (the limits now in force), and
    `still_exceeded` when that was not enough (the task stays paused)."""

    TYPE: ClassVar[str] = "budget_continued"
    max_turns: int
    max_cost_usd: float | None
    deadline: float
    add_turns: int
    add_cost_usd: float
    extend: float
    by: str
    via: str
    ref: str
    still_exceeded: str | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRefused(Payload):
    """A control request (`git sup answer`, `send`, `continue`) the supervisor did not take,
    and why; `ref` names the request."""

    TYPE: ClassVar[str] = "control_refused"
    ref: str
    command: str
    reason: str
    by: str | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewCommentAdded(Payload):
    """`git sup comment`: a person's review comment on `line` of `path` in `commit` (the
    candidate, or a running task's branch tip); `line_text` is that line as it was. A
    person's words: shown escaped, never read by the policy (docs/human.md)."""

    TYPE: ClassVar[str] = "review_comment_added"
    id: str
    commit: Oid
    path: str
    line: int
    message: str
    by: str
    via: str
    at: float
    line_text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RevisionRequested(Payload):
    """`git sup revise`: `comments` (as they were added) of `task` sent back to an agent,
    `how`: `turn` (the running worker's next turn, `ref` the control request) or `task` (a
    revision task, `revision_task`). Recorded in the task's log and in the revision task's."""

    TYPE: ClassVar[str] = "revision_requested"
    task: str
    how: str
    comments: list[JsonMap]
    message: str
    by: str
    via: str
    revision_task: str | Unset = opt()
    ref: str | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPaused(Payload):
    """`git sup pause`: a person froze the whole task (its worker's cgroup, else its
    process group stopped); its deadline and no-output clocks stop until `task_resumed`."""

    TYPE: ClassVar[str] = "task_paused"
    by: str
    via: str
    ref: str
    how: str  # cgroup frozen | SIGSTOP
    processes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskResumed(Payload):
    """`git sup resume`: a paused task runs again; `paused` the seconds it was paused (its
    deadline moved later by as much). `how` says whether the worker was thawed or stays held
    because its work is being verified."""

    TYPE: ClassVar[str] = "task_resumed"
    by: str
    via: str
    ref: str
    how: str  # cgroup thawed | SIGCONT | still held between turns | worker gone
    paused: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovered(Payload):
    """A supervisor took the task over after its predecessor died: the worker re-adopted
    (with its identity) or a new worker turn, a verification or a park."""

    TYPE: ClassVar[str] = "recovered"
    previous: JsonMap
    state: str
    turns_before: int | Unset = opt()
    action: str = key("action")
    pid: int | Unset = opt()
    start_time: float | Unset = opt()
    pgid: int | Unset = opt()
    cgroup: str | Unset | None = opt()
    cgroup_inode: int | Unset | None = opt()
    extra: JsonMap | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class HostChanged(Payload):
    """The task goes on in another clone (another host) from what the review remote holds:
    `from` the host it ran on (null: not recorded), `to` this one, `continued_from`
    (wip, candidate or baseline) and its `commit`, the task branch's new `head`, and the
    `last_seq` of the log the other host sealed (events after it were never published)."""

    TYPE: ClassVar[str] = "host_changed"
    from_: str | None = key("from")
    to: str = key("to")
    continued_from: str
    commit: Oid
    head: Oid
    last_seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HandedOver(Payload):
    """The host running the task was shutting down (SIGTERM) and handed the task over: its
    supervisor and worker were stopped (`killed`: the pids), its state saved in `wip` (the
    task branch's `head` and the worktree's files) and published; another host continues
    it (`host_changed` there). `host`: the host that handed it over."""

    TYPE: ClassVar[str] = "handed_over"
    host: str
    reason: str
    wip: Oid | None
    head: Oid
    killed: list[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishFailed(Payload):
    """Pushing the task's refs and notes to the review remote failed (`stage`: turn or end);
    the task goes on, and the next publication pushes everything again."""

    TYPE: ClassVar[str] = "publish_failed"
    remote: str
    stage: str
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskReopened(Payload):
    """A parked task goes on as the same task (same id, log, worktree, wip and candidate):
    `how` is `extend` (`git sup recover --extend`: more time), `close_out` (`--extend 0`:
    what it left is verified now) or `repair` (`git sup repair`: a new repair round)."""

    TYPE: ClassVar[str] = "task_reopened"
    how: str
    by: str
    status_before: str
    extend: float | Unset = opt()
    rounds: int | Unset = opt()
    message: str | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionOverridden(Payload):
    """A decision was set aside by what outranks it: `decision` (the one given, by
    `source`) replaced by `by` with `action`, and why."""

    TYPE: ClassVar[str] = "decision_overridden"
    decision: str
    source: str
    action: str
    by: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoverableFailure(Payload):
    """Something failed that the supervisor goes on from: `what` (an event append, the
    handling of a worker event), the error, and what it does about it (`retry`:
    kept and tried again before the next operation)."""

    TYPE: ClassVar[str] = "recoverable_failure"
    what: str
    error: str
    action: str
    pending: int | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCall(Payload):
    """A model call of the supervisor's own (reviewer, decider) and what it cost."""

    TYPE: ClassVar[str] = "model_call"
    role: str
    cost_usd: float | None
    usage: JsonMap
    models: list[str] | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class Notification(Payload):
    """One delivery of a notification, with its channel's own keys (`channel`, `ok` …)."""

    TYPE: ClassVar[str] = "notification"
    event: str
    result: Mapping[str, Any] = spread()


@dataclass(frozen=True, slots=True, kw_only=True)
class EgressRefused(Payload):
    """The egress gate refused a connection (`repeats`: this many more of the same were
    refused since the last one written, folded into this record)."""

    TYPE: ClassVar[str] = "egress_refused"
    who: str
    host: str
    port: int
    reason: str
    repeats: int | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class EgressSummary(Payload):
    """What the egress gate forwarded and refused, when it closes."""

    TYPE: ClassVar[str] = "egress_summary"
    who: str
    connections: int
    refused: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EventsDropped(Payload):
    """Events a worker can cause at will were not written past their cap
    (gitsup/store/flood.py): counts per type (`events`, and `bytes` of worker output).
    Written when dropping starts (`final` false) and once more when the task ends."""

    TYPE: ClassVar[str] = "events_dropped"
    dropped: JsonMap
    limits: JsonMap
    final: bool


# --- the integration queue's log (refs/sup/queue/<branch>/log) ---------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueAdded(Payload):
    """A ready candidate joined the queue."""

    TYPE: ClassVar[str] = "queue_added"
    task: TaskId
    candidate: Oid


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRemoved(Payload):
    """A person took a queued candidate out."""

    TYPE: ClassVar[str] = "queue_removed"
    task: TaskId


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRunStarted(Payload):
    """A queue run started (its process id)."""

    TYPE: ClassVar[str] = "queue_run_started"
    pid: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRunFinished(Payload):
    """What a run of the queue did (`integrated`, check counts and times, `target` …)."""

    TYPE: ClassVar[str] = "queue_run_finished"
    into: str
    result: Mapping[str, Any] = spread()


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueResumed(Payload):
    """A run found integrations an interrupted run made and recorded them."""

    TYPE: ClassVar[str] = "queue_resumed"
    integrated: dict[str, str]  # task -> its integration commit


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueTested(Payload):
    """The checks ran on the composition of `tasks` (`tree`)."""

    TYPE: ClassVar[str] = "queue_tested"
    tasks: list[str]
    tree: str
    passed: bool
    checks: list[JsonMap]
    confinement: JsonMap | Unset = opt()  # what confined the checks (sandbox, network, cgroup)
    # checks that failed, then passed when run again in a fresh confined run (blamed on nobody)
    flaky: list[str] | Unset = opt()


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueEnvironmentFailed(Payload):
    """The setup phase (`[environment] setup`) failed on a composition: an environment
    failure of the queue, no candidate blamed; the run ends with the queue unchanged."""

    TYPE: ClassVar[str] = "queue_environment_failed"
    commit: Oid
    command: list[str]
    exit_code: int | None
    timed_out: bool
    output_tail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueIntegrated(Payload):
    """A candidate was integrated by the queue (`commit`: its integration commit)."""

    TYPE: ClassVar[str] = "queue_integrated"
    task: TaskId
    commit: Oid


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueTargetMoved(Payload):
    """The queue advanced its target branch from `from` to `to`."""

    TYPE: ClassVar[str] = "queue_target_moved"
    from_: Oid = key("from")
    to: Oid = key("to")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueParked(Payload):
    """A candidate sent back without being integrated, with the evidence why."""

    TYPE: ClassVar[str] = "queue_parked"
    task: TaskId
    kind: str
    reason: str
    evidence: JsonMap


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRepair(Payload):
    """A repair task was started for a parked candidate."""

    TYPE: ClassVar[str] = "queue_repair"
    task: TaskId
    repair_task: str


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRepairFinished(Payload):
    """A repair task the queue started ended."""

    TYPE: ClassVar[str] = "queue_repair_finished"
    task: TaskId
    outcome: str


def _main(argv: list[str]) -> int:
    if argv != ["--schema"]:
        sys.stderr.write("usage: python -m gitsup.store.eventtypes --schema\n")
        return 2
    sys.stdout.write(schema_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
