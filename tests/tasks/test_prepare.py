"""prepare_task (in-process): what a task gets before its worker runs, and that a failed
preparation undoes every step it took."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gitsup.errors import GitsupError
from gitsup.host.procid import ProcessId
from gitsup.spec import spec_from_mapping
from gitsup.store.lease import LeaseConflict
from gitsup.store.suprepo import SupRepo, worktree_root
from gitsup.tasks.lifecycle import prepare_task
from tests.conftest import git

SPEC = {"goal": "g", "worker": {"kind": "process", "argv": ["true"]}, "review": {"kind": "none"}}


def _leftovers(repo: Path) -> dict[str, object]:
    common = repo / ".git"
    tasks = common / "sup" / "tasks"
    return {
        "refs": git(repo, "for-each-ref", "--format=%(refname)", "refs/sup/", "refs/heads/sup/"),
        "tasks": sorted(p.name for p in tasks.iterdir()) if tasks.exists() else [],
        "leases": sorted(p.name for p in (common / "sup" / "leases").glob("*.json")),
        "worktrees": git(repo, "worktree", "list", "--porcelain").count("worktree "),
    }


def test_prepare_creates_branch_worktree_baseline_lease_and_first_event(repo: Path) -> None:
    ctx = SupRepo.discover(repo)
    base = git(repo, "rev-parse", "HEAD")
    record, lease = prepare_task(ctx, spec_from_mapping(SPEC))
    try:
        tid = record.id
        assert record.state.value == "idle" and record.baseline == base
        assert record.source_branch == "main" and record.branch == f"sup/{tid}"
        wt = Path(record.worktree)
        assert wt == worktree_root(ctx) / tid == repo.parent / "repo.sup" / tid
        assert git(wt, "rev-parse", "HEAD") == base
        assert git(wt, "symbolic-ref", "HEAD") == f"refs/heads/sup/{tid}"
        assert git(wt, "status", "--porcelain") == ""
        assert (wt / "calc.py").read_bytes() == (repo / "calc.py").read_bytes()
        assert git(repo, "rev-parse", f"refs/sup/{tid}/baseline") == base
        assert lease.task == tid and lease.owner == ProcessId.current()
        task_dir = repo / ".git" / "sup" / "tasks" / tid
        assert json.loads((task_dir / "spec.json").read_text())["goal"] == "g"
        ev = json.loads((task_dir / "events.jsonl").read_text().splitlines()[0])
        assert ev["seq"] == 1 and ev["type"] == "task_started" and ev["data"]["baseline"] == base
        # the reflog of the baseline ref says who wrote it
        assert "gitsup: baseline of" in git(repo, "reflog", "show", f"refs/sup/{tid}/baseline")
    finally:
        ctx.leases.release(lease)


def test_worktree_root_is_configurable(repo: Path, tmp: Path) -> None:
    git(repo, "config", "sup.worktreeRoot", str(tmp / "elsewhere"))
    ctx = SupRepo.discover(repo)
    record, lease = prepare_task(ctx, spec_from_mapping(SPEC))
    ctx.leases.release(lease)
    assert Path(record.worktree) == tmp / "elsewhere" / record.id
    assert (tmp / "elsewhere" / record.id / "calc.py").exists()


def test_prepare_from_a_linked_worktree_keeps_state_in_the_common_dir(
    repo: Path, tmp: Path
) -> None:
    git(repo, "worktree", "add", "-q", str(tmp / "linked"), "-b", "other")
    ctx = SupRepo.discover(tmp / "linked")
    record, lease = prepare_task(ctx, spec_from_mapping(SPEC))
    ctx.leases.release(lease)
    assert (repo / ".git" / "sup" / "tasks" / record.id / "task.json").exists()
    assert record.source_branch == "other"
    assert Path(record.worktree).parent == repo.parent / "repo.sup"


def test_existing_worktree_path_is_refused_and_everything_undone(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gitsup.ids.os.urandom", lambda n: b"\x12\x34\x56")
    ctx = SupRepo.discover(repo)
    from gitsup.ids import new_task_id

    squatter = worktree_root(ctx) / new_task_id()
    squatter.mkdir(parents=True)
    (squatter / "precious.txt").write_text("not gitsup's\n")
    before = _leftovers(repo)
    with pytest.raises(GitsupError, match="already exists"):
        prepare_task(ctx, spec_from_mapping(SPEC))
    assert _leftovers(repo) == before
    assert (squatter / "precious.txt").read_text() == "not gitsup's\n"


def test_lease_conflict_is_refused_and_everything_undone(repo: Path) -> None:
    ctx = SupRepo.discover(repo)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ctx.leases.acquire(worktree_root(ctx), "someone-else", owner=ProcessId.of(other.pid))
        before = _leftovers(repo)
        with pytest.raises(LeaseConflict, match="someone-else"):
            prepare_task(ctx, spec_from_mapping(SPEC))
        assert _leftovers(repo) == before
    finally:
        other.kill()
        other.wait()


def test_failure_after_the_worktree_exists_removes_it(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = SupRepo.discover(repo)
    before = _leftovers(repo)

    def boom(*a: object, **k: object) -> None:
        raise GitsupError("simulated failure writing the baseline ref")

    monkeypatch.setattr(type(ctx.repo), "update_ref", boom)
    with pytest.raises(GitsupError, match="simulated"):
        prepare_task(ctx, spec_from_mapping(SPEC))
    monkeypatch.undo()
    assert _leftovers(repo) == before
    root = worktree_root(ctx)
    assert not root.exists() or list(root.iterdir()) == []
