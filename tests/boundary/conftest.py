"""Fixtures for the boundary: a user repository with a gated origin (the review remote),
a second gated remote that is not the review remote, and real tasks made by `git sup start`.

Every remote is a real local bare repository with the `pre-receive` gate installed by
`git sup gate install`; every push is a real `git push`.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, PYTEST_CHECK, write_worker


def refs_of(bare: Path) -> str:
    """Everything a remote has: compared before/after a refused push."""
    return git(bare, "for-each-ref", "--format=%(refname) %(objectname)")


def push(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        ["git", "push", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def rejected(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode != 0, (res.stdout, res.stderr)
    assert "gitsup: rejected" in res.stderr, res.stderr
    for n in needles:
        assert n in res.stderr, f"{n!r} not in:\n{res.stderr}"


def accepted(res: subprocess.CompletedProcess[str]) -> None:
    assert res.returncode == 0, res.stderr
    assert "gitsup: rejected" not in res.stderr, res.stderr


@dataclass
class Setup:
    repo: Path  # the user's checkout
    origin: Path  # bare, gated, the review remote
    other: Path  # bare, gated, not the review remote
    tmp: Path


def make_bare(tmp: Path, name: str, source: Path, *, review: bool) -> Path:
    """An empty bare repository, gated from the start (allowed signers and trust root
    taken from `source`, an initialised repository); main then pushed through both gates."""
    from gitsup.git import GitRepo
    from gitsup.integration.setup import install_gate

    bare = tmp / f"{name}.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    install_gate(bare, review_remote=review, source=GitRepo.open(source))
    git(source, "push", "-q", str(bare), "main")
    return bare


@pytest.fixture
def setup(repo: Path, tmp: Path) -> Setup:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    init_repo(SupRepo.discover(repo), explicit=True)
    origin = make_bare(tmp, "origin", repo, review=True)
    other = make_bare(tmp, "other", repo, review=False)
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "remote", "add", "other", str(other))
    git(repo, "fetch", "-q", "origin")
    git(repo, "config", "sup.reviewRemote", "origin")
    return Setup(repo, origin, other, tmp)


FIX = ("calc.py", "def add(a, b):\n    return a + b\n")


def make_task(
    setup: Setup,
    *,
    status: str = "ready",
    files: tuple[tuple[str, str], ...] = (FIX,),
    checks: list[dict[str, Any]] | None = None,
    base: str = "HEAD",
) -> dict[str, Any]:
    """A finished task made in-process (what `git sup start` leaves behind, without
    running a supervisor): worktree, branch, baseline, one commit, candidate ref + note,
    record. Returns the record as a dict."""
    import time

    from gitsup.ids import Oid, TaskId
    from gitsup.layout import task_refs
    from gitsup.spec import spec_from_mapping
    from gitsup.state import State, Status
    from gitsup.store.record import CandidateNote
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import prepare_task

    ctx = SupRepo.discover(setup.repo)
    spec = spec_from_mapping(
        {
            "goal": "fix add",
            "base": base,
            "checks": checks if checks is not None else [{"name": "pytest", "argv": PYTEST_CHECK}],
            "worker": {"kind": "process", "argv": "true"},
            "review": {"kind": "none"},
        },
        "test",
    )
    record, lease = prepare_task(ctx, spec)
    ctx.leases.release(lease)
    wt = Path(record.worktree)
    for rel, text in files:
        (wt / rel).write_text(text)
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "worker change")
    head = Oid(git(wt, "rev-parse", "HEAD"))
    tid = TaskId(record.id)
    # what the supervisor does after a turn: import the worker's commit into sup/<id>
    from gitsup.store.taskgit import import_work

    import_work(ctx.repo, ctx.layout, tid, Oid(record.baseline), record.branch)
    ctx.repo.update_ref(task_refs(tid)["candidate"], head, old=None, message="test candidate")
    note = CandidateNote(
        task=record.id,
        status=Status(status),
        baseline=record.baseline,
        candidate=head,
        branch=record.branch,
        goal=record.goal,
        checks=[],
        review=None,
        turns=1,
        cost_usd=0.0,
        reasons=[] if status == "ready" else [f"made {status} by the test"],
        created_at=record.created_at,
        finished_at=time.time(),
    )
    ctx.repo.write_note(head, note.to_text())
    record.state = {"ready": State.COMPLETED, "parked": State.BLOCKED}.get(status, State.FAILED)
    record.status = Status(status)
    record.candidate = head
    record.head = head
    ctx.store.save(record)
    return record.model_dump(mode="json")


def start_task(
    setup: Setup, body: str = FIX_AND_COMMIT, *args: str, name: str = "worker.py"
) -> dict[str, Any]:
    """A real `git sup start` with a process worker script."""
    worker = write_worker(setup.tmp, body, name)
    res = run_sup(
        setup.repo,
        "start",
        "fix add",
        "--worker",
        worker,
        "--review",
        "none",
        *args,
        "--json",
        "--quiet",
    )
    rec: dict[str, Any] = json.loads(res.stdout)
    rec["_rc"] = res.returncode
    return rec


@pytest.fixture
def ready(setup: Setup) -> dict[str, Any]:
    """A ready task: calc.py fixed and committed on the task branch; pytest passes."""
    return make_task(setup)
