"""Task records (`tasks/<id>/task.json`) and candidate notes (`refs/notes/sup`).

Both are versioned; a newer version than this gitsup knows is a clear error.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gitsup import jsonio
from gitsup.errors import GitsupError
from gitsup.ids import Oid, TaskId
from gitsup.state import State, Status

RECORD_VERSION = 1
NOTE_SCHEMA = "gitsup.candidate/1"


class CheckResult(BaseModel):
    # `repair_round` is "round" in JSON (the name Python's builtin has)
    model_config = ConfigDict(
        extra="ignore", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    name: str
    argv: list[str]
    required: bool = True
    exit_code: int | None = None
    passed: bool = False
    timed_out: bool = False
    duration: float = 0.0
    output_tail: str = ""
    repair_round: int = Field(default=0, validation_alias="round", serialization_alias="round")


class ReviewResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: str
    verdict: str | None = None  # pass | revise | human | None (not run / failed)
    findings: list[dict[str, Any]] = Field(default_factory=list)
    attempts: int = 0
    error: str | None = None


class TaskRecord(BaseModel):
    """The durable state of one task. `git sup show --json` prints this (plus `events`)."""

    model_config = ConfigDict(extra="ignore")

    version: int = RECORD_VERSION
    id: TaskId
    state: State = State.IDLE
    status: Status = Status.PENDING
    goal: str = ""
    baseline: Oid = Oid("")
    base_rev: str = "HEAD"
    source_branch: str | None = None
    branch: str = ""
    worktree: str = ""
    candidate: Oid | None = None
    head: Oid | None = None
    wip: Oid | None = None
    checks: list[CheckResult] = Field(default_factory=list)
    review: ReviewResult | None = None
    turns: int = 0
    cost_usd: float = 0.0
    repair_rounds: int = 0
    reasons: list[str] = Field(default_factory=list)
    decisions: list[dict[str, Any]] = Field(default_factory=list)
    worker_kind: str = ""
    supervisor: dict[str, Any] | None = None
    worker: dict[str, Any] | None = None
    spawn_pending: bool = False
    sandbox: dict[str, Any] | None = None  # gitsup.host.sandbox.SandboxPlan.report()
    # what `[environment] include` gave the worktree (gitsup.environment.include.Included.report())
    environment: dict[str, Any] | None = None
    detached: bool = False
    # the cluster host that runs the task (`git sup host run --name`), None for a local task
    host: str | None = None
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    finished_at: float | None = None
    discarded_at: float | None = None
    # What the wip snapshot could not hold: [{"path", "bytes", "why"}] (see docs/cli.md).
    not_captured: list[dict[str, Any]] = Field(default_factory=list)
    # What cleanup could not prove gone (worker pid, cgroup): the lease stays held.
    left_behind: list[str] = Field(default_factory=list)
    # The task the integration queue started to repair this (parked) candidate: the person
    # is needed there, not here.
    queue_repair: str | None = None
    # the setup phase (`[environment] setup`): passed, command, exit_code, timed_out,
    # duration, output_tail, caches, cache_bytes (docs/environments.md)
    setup: dict[str, Any] | None = None
    exit_code: int | None = None
    # The signal that stopped the task (`SIGINT`, `SIGTERM`, `SIGHUP`); None when it was not
    # stopped by a signal. A foreground `start` stopped by SIGINT exits 130.
    stop_signal: str | None = None
    # `git sup pause`: {"since": Unix time, "by": who} while a person holds the task paused
    paused_by_user: dict[str, Any] | None = None
    # The agent executable the worker runs: path, inode, sha256, version
    # (gitsup/workers/agentbin.py); None for a process worker.
    agent_binary: dict[str, Any] | None = None
    # Workers spawned so far (every supervisor of the task counts on): the number of the
    # last is the `worker` of each event record written since (0 before the first).
    spawns: int = 0

    def touch(self) -> None:
        self.updated_at = time.time()


class CandidateNote(BaseModel):
    """The JSON note on a candidate commit in `refs/notes/sup`."""

    schema_: str = Field(default=NOTE_SCHEMA, alias="schema")
    task: TaskId
    status: Status
    baseline: Oid
    candidate: Oid
    branch: str
    goal: str
    checks: list[CheckResult]
    review: ReviewResult | None
    turns: int
    cost_usd: float
    repair_rounds: int = 0
    reasons: list[str] = Field(default_factory=list)
    decisions: list[dict[str, Any]] = Field(default_factory=list)
    created_at: float
    finished_at: float | None
    integrated_into: str | None = None
    integrated_at: float | None = None
    # The cost ledger of the task (gitsup/store/ledger.py): per turn, repair round and model call.
    cost: dict[str, Any] | None = None
    # Paths under .gitsup/ the candidate changes (baseline..candidate): integrating it changes
    # gitsup's policy for every later task, so integrate and the queue ask for consent.
    policy_change: list[str] = Field(default_factory=list)
    # The agent executable that did the work (path, inode, sha256, version), if an agent did.
    agent_binary: dict[str, Any] | None = None

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    def to_text(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"

    @classmethod
    def parse(cls, text: str) -> CandidateNote:
        try:
            raw = jsonio.loads(text)
        except ValueError as exc:
            raise GitsupError(f"candidate note is not JSON: {exc}") from None
        schema = str(raw.get("schema", "")) if isinstance(raw, dict) else ""
        if not schema.startswith("gitsup.candidate/"):
            raise GitsupError("not a gitsup candidate note")
        if int(schema.rsplit("/", 1)[1] or 0) > 1:
            raise GitsupError(
                f"candidate note schema {schema} is newer than this gitsup understands",
                hint="upgrade gitsup",
            )
        return cls.model_validate(raw)


# The store (TaskStore, TaskLock) lives in gitsup.store.records, which imports this module only when
# a record is loaded or saved (no pydantic import for listings).
__all__ = ["CandidateNote", "CheckResult", "ReviewResult", "TaskRecord"]
