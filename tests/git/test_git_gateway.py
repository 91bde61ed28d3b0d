"""The Git gateway under concurrency: several tasks finishing or starting at once share
refs/notes/sup and .git/config. Also compare-and-swap ref updates and their reflog."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
from pathlib import Path

import pytest

from gitsup.git import GitRepo, RefConflict
from gitsup.ids import Oid
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import init_repo
from tests.conftest import git


def _commits(repo: Path, n: int) -> list[str]:
    for i in range(n):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
        git(repo, "add", f"f{i}.txt")
        git(repo, "commit", "-q", "-m", f"c{i}")
    return git(repo, "rev-list", f"-{n}", "HEAD").split()


def _note_writer(repo: str, commit: str, barrier, out) -> None:  # type: ignore[no-untyped-def]
    r = GitRepo.open(repo)
    barrier.wait()
    try:
        r.write_note(Oid(commit), f'{{"task": "{commit}"}}\n')
        out.put((commit, "ok"))
    except Exception as exc:
        out.put((commit, f"{type(exc).__name__}: {exc}"))


def test_notes_written_concurrently_are_all_kept(repo: Path) -> None:
    """Eight tasks finishing at once: every candidate keeps its note (libgit2's note
    creation is not compare-and-swap on its own: without serialization notes get lost)."""
    commits = _commits(repo, 8)
    for _round in range(2):
        git(repo, "update-ref", "-d", "refs/notes/sup", check=False)
        ctx = mp.get_context("fork")
        barrier, out = ctx.Barrier(8), ctx.Queue()
        procs = [
            ctx.Process(target=_note_writer, args=(str(repo), c, barrier, out)) for c in commits
        ]
        for p in procs:
            p.start()
        results = dict(out.get(timeout=30) for _ in procs)
        for p in procs:
            p.join(30)
        assert all(v == "ok" for v in results.values()), results
        listed = {line.split()[1] for line in git(repo, "notes", "--ref=sup", "list").splitlines()}
        assert listed == set(commits)
        for c in commits:
            assert git(repo, "notes", "--ref=sup", "show", c) == f'{{"task": "{c}"}}'


def _initer(repo: str, barrier, out) -> None:  # type: ignore[no-untyped-def]
    ctx = SupRepo.discover(repo)
    barrier.wait()
    try:
        init_repo(ctx)
        out.put("ok")
    except Exception as exc:
        out.put(f"{type(exc).__name__}: {exc}")


def test_concurrent_first_init_is_safe(repo: Path) -> None:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_initer, args=(str(repo), barrier, out)) for _ in range(8)]
    for p in procs:
        p.start()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(30)
    assert results == ["ok"] * 8, results
    assert git(repo, "config", "--get-all", "notes.displayRef").splitlines() == ["refs/notes/[s]up"]
    assert git(repo, "config", "--get-all", "sup.protected").splitlines() == [
        "main",
        "master",
        "trunk",
        "develop",
        "integration",
    ]


def test_update_ref_is_compare_and_swap(repo: Path) -> None:
    r = GitRepo.open(repo)
    a, b = (Oid(c) for c in _commits(repo, 2))
    name = "refs/sup/20260101-abcdef/candidate"
    r.update_ref(name, a, old=None, message="gitsup: first")
    with pytest.raises(RefConflict):
        r.update_ref(name, b, old=None, message="must not exist")
    with pytest.raises(RefConflict):
        r.update_ref(name, b, old=b, message="wrong expected value")
    assert r.ref_target(name) == a
    r.update_ref(name, b, old=a, message="gitsup: second")
    assert r.ref_target(name) == b
    with pytest.raises(RefConflict):
        r.update_ref("refs/sup/20260101-abcdef/missing", a, old=b, message="x")
    # the reflog keeps the messages (refs/sup/ is not logged by default)
    log = git(repo, "reflog", "show", "--format=%gs", name).splitlines()
    assert log == ["gitsup: second", "gitsup: first"]
    with pytest.raises(RefConflict):
        r.delete_ref(name, old=a)
    r.delete_ref(name, old=b)
    assert r.ref_target(name) is None


def _cas_racer(repo: str, name: str, old: str, new: str, barrier, out) -> None:  # type: ignore[no-untyped-def]
    r = GitRepo.open(repo)
    barrier.wait()
    try:
        r.update_ref(name, Oid(new), old=Oid(old), message=f"to {new}")
        out.put(new)
    except RefConflict:
        out.put(None)


def test_racing_compare_and_swap_has_one_winner(repo: Path) -> None:
    commits = _commits(repo, 7)
    base, others = commits[0], commits[1:]
    name = "refs/sup/20260101-abcdef/log"
    GitRepo.open(repo).update_ref(name, Oid(base), old=None, message="start")
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(len(others)), ctx.Queue()
    procs = [
        ctx.Process(target=_cas_racer, args=(str(repo), name, base, c, barrier, out))
        for c in others
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(30)
    winners = [w for w in results if w is not None]
    assert len(winners) == 1
    assert git(repo, "rev-parse", name) == winners[0]


def test_snapshot_tree_leaves_the_index_alone(repo: Path) -> None:
    r = GitRepo.open(repo)
    (repo / "calc.py").write_text("changed\n")
    (repo / "new.txt").write_text("new\n")
    index_before = (repo / ".git" / "index").read_bytes()
    tree = r.working_tree.snapshot_tree(include_untracked=True)
    assert (repo / ".git" / "index").read_bytes() == index_before
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", tree], cwd=repo, capture_output=True, text=True
    ).stdout.split()
    assert sorted(names) == ["calc.py", "new.txt", "test_calc.py"]
    assert git(repo, "cat-file", "blob", f"{tree}:calc.py") == "changed"
    tracked_only = r.working_tree.snapshot_tree(include_untracked=False)
    assert "new.txt" not in git(repo, "ls-tree", "--name-only", tracked_only)
