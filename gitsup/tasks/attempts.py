"""Best-of-N: N tasks from the same baseline and spec, ranked by evidence.

`git sup start --attempts N` (or `[attempts] n`) starts N tasks (each its own worktree,
supervisor and candidate) on one baseline commit, waits for them, ranks them and records
the ranking and the choice. A group is `refs/sup/<group>/group`: a commit whose tree holds
`group.json` (goal, baseline, members); its note in `refs/notes/sup` holds the ranking
and the chosen task once every member has finished. Losers stay as tasks with their refs
until pruned. Group ids look like `g20261130-a1b2c3`.

Ranking, best first, by evidence only: a ready candidate before anything else; more
required checks passed; the reviewer's verdict (pass, none, revise, human, failed);
fewer review findings; a smaller diff; lower cost; less time.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from gitsup.errors import GitsupError
from gitsup.ids import Oid, TaskId, new_task_id
from gitsup.layout import task_refs
from gitsup.spec import Attempts, TaskSpec
from gitsup.state import TERMINAL, Status
from gitsup.store.record import CandidateNote
from gitsup.store.suprepo import SupRepo

GROUP_FILE = "group.json"
_GROUP_RE = re.compile(r"^g[0-9]{8}-[0-9a-f]{6}$")
_VERDICT_RANK = {"pass": 0, None: 1, "none": 1, "revise": 2, "human": 3}


def is_group_id(value: str) -> bool:
    return bool(_GROUP_RE.match(value))


def group_ref(group: str) -> str:
    return f"refs/sup/{group}/group"


@dataclass
class Ranked:
    task: str
    status: str
    candidate: str | None
    checks_passed: int
    checks_total: int
    verdict: str | None
    findings: int
    files: int
    lines: int
    cost_usd: float
    seconds: float | None
    worker: str = ""
    reasons: list[str] = field(default_factory=list)

    def key(self) -> tuple[Any, ...]:
        return (
            self.status not in (Status.READY.value, Status.INTEGRATED.value),
            -self.checks_passed,
            _VERDICT_RANK.get(self.verdict, 4),
            self.findings,
            self.lines,
            self.cost_usd,
            self.seconds if self.seconds is not None else float("inf"),
        )


def evidence(ctx: SupRepo, task: str, baseline: str) -> Ranked:
    rec = ctx.store.load(task)
    cand = ctx.repo.ref_target(task_refs(TaskId(task))["candidate"])
    note = None
    if cand is not None:
        text = ctx.repo.read_note(cand)
        if text:
            note = CandidateNote.parse(text)
    checks = note.checks if note else []
    last = max((c.repair_round for c in checks), default=0)
    required = [c for c in checks if c.required and c.repair_round == last]
    files = lines = 0
    if cand is not None:
        files, ins, dels = ctx.repo.diff_size(Oid(baseline), cand)
        lines = ins + dels
    review = note.review if note else None
    worker = ""
    try:
        spec = ctx.store.load_spec(TaskId(task))
        worker = spec.worker.kind + (f" {spec.worker.model}" if spec.worker.model else "")
    except (OSError, ValueError):
        pass
    finished = note.finished_at if note and note.finished_at else None
    return Ranked(
        task=task,
        status=(note.status.value if note else rec.status.value),
        candidate=cand,
        checks_passed=sum(1 for c in required if c.passed),
        checks_total=len(required),
        verdict=(review.verdict if review else None),
        findings=len(review.findings) if review else 0,
        files=files,
        lines=lines,
        cost_usd=float(note.cost_usd if note else rec.cost_usd or 0.0),
        seconds=round(finished - rec.created_at, 3) if finished else None,
        worker=worker,
        reasons=list((note.reasons if note else rec.reasons)[-2:]),
    )


# --- the group in Git --------------------------------------------------------------------


def read_group(ctx: SupRepo, group: str) -> tuple[dict[str, Any], Oid]:
    if not is_group_id(group):
        raise GitsupError(f"not a group id: {group!r}", hint="group ids look like g20261130-a1b2c3")
    tip = ctx.repo.ref_target(group_ref(group))
    if tip is None:
        raise GitsupError(f"no group {group}")
    for name, data in ctx.repo.read_tree_blobs(tip):
        if name == GROUP_FILE:
            return dict(json.loads(data)), tip
    raise GitsupError(f"{group_ref(group)} has no {GROUP_FILE}")


def _write_group(ctx: SupRepo, group: str, data: dict[str, Any]) -> Oid:
    old = ctx.repo.ref_target(group_ref(group))
    return ctx.repo.append_segment(
        group_ref(group),
        name=GROUP_FILE,
        data=(json.dumps(data, indent=1) + "\n").encode(),
        message=f"gitsup group {group}: {len(data['members'])} attempt(s)",
        expected_old=old,
    )


def compare(ctx: SupRepo, group: str) -> dict[str, Any]:
    """The members side by side, ranked; `chosen` once every member has finished (and then
    the ranking is recorded in the group's note, once)."""
    data, tip = read_group(ctx, group)
    ranked = sorted(
        (evidence(ctx, t, data["baseline"]) for t in data["members"]), key=lambda r: r.key()
    )
    done = all(ctx.store.load(t).state in TERMINAL for t in data["members"])
    chosen = None
    if done and ranked and ranked[0].key()[0] is False:
        chosen = ranked[0].task
    out = {
        "group": group,
        "goal": data.get("goal", ""),
        "baseline": data["baseline"],
        "members": data["members"],
        "finished": done,
        "ranking": [asdict(r) for r in ranked],
        "chosen": chosen,
        "ref": group_ref(group),
    }
    recorded = ctx.repo.read_note(tip)
    if recorded:
        out["recorded"] = json.loads(recorded)
        out["chosen"] = out["recorded"].get("chosen")
    elif done:
        note = {"group": group, "ranking": out["ranking"], "chosen": chosen, "at": time.time()}
        ctx.repo.write_note(tip, json.dumps(note, indent=1) + "\n")
        out["recorded"] = note
    return out


# --- starting and waiting ------------------------------------------------------------------


def _as_they_end(ctx: SupRepo, members: list[str]) -> Iterator[str]:
    """The members' ids in the order their tasks end; a member whose supervisor died
    raises as `wait_task` does (naming how to recover it)."""
    from gitsup.host.procid import ProcessId
    from gitsup.tasks.detach import wait_task

    left = list(members)
    delay = 0.05
    while left:
        for t in list(left):
            rec = ctx.store.load(t)
            owner = ProcessId.from_dict(rec.supervisor)
            if rec.state in TERMINAL or (owner is not None and not owner.alive()):
                wait_task(ctx, t)
                left.remove(t)
                yield t
        if left:
            time.sleep(delay)
            delay = min(0.5, delay * 1.5)


def start_group(
    ctx: SupRepo,
    spec: TaskSpec,
    n: int,
    *,
    wait: bool = True,
    queue_into: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    from gitsup.tasks.detach import start_detached

    if n < 2:
        raise GitsupError("best-of-N needs at least 2 attempts")
    from gitsup.tasks.lifecycle import source_branch_of

    baseline = ctx.repo.resolve_commit(spec.base)
    source = source_branch_of(ctx, spec.base)
    group = "g" + new_task_id()
    workers = list(spec.attempts.workers)
    members: list[str] = []
    for i in range(n):
        update: dict[str, Any] = {"base": baseline, "attempts": Attempts()}
        if workers:
            update["worker"] = workers[i % len(workers)]
        rec = start_detached(ctx, spec.model_copy(update=update), source=source)
        members.append(rec.id)
        if on_progress is not None:
            on_progress(f"attempt {i + 1}/{n}: task {rec.id} started ({rec.worker_kind})")
    _write_group(
        ctx,
        group,
        {
            "version": 1,
            "group": group,
            "goal": spec.goal,
            "base": spec.base,
            "baseline": baseline,
            "members": members,
            "created_at": time.time(),
        },
    )
    if not wait:
        return {"group": group, "members": members, "finished": False}
    for i, t in enumerate(_as_they_end(ctx, members)):
        if on_progress is not None:
            rec = ctx.store.load(t)
            on_progress(
                f"attempt {members.index(t) + 1}/{n}: task {t} ended {rec.status.value} "
                f"({i + 1} of {n} done)"
            )
    result = compare(ctx, group)
    if queue_into is not None and result["chosen"]:
        from gitsup.tasks.queue_state import add

        # into the given branch, else the branch the attempts started from, else HEAD's
        into = queue_into or (spec.base if ctx.repo.branch_target(spec.base) else None)
        state = add(ctx, [result["chosen"]], into)
        result["queued_into"] = state.into
    return result
