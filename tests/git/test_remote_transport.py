"""Pushing a ref only where the remote has none, and fetching refs with another one in the
same `git fetch`: real repositories, the review remote gated (`git sup gate install`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.boundary.conftest import make_bare, refs_of
from tests.conftest import git

REF = "refs/sup/20260101-0a0b0c/baseline"


@pytest.fixture
def origin(repo: Path, tmp: Path) -> Path:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    init_repo(SupRepo.discover(repo), explicit=True)
    bare = make_bare(tmp, "origin", repo, review=True)
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "config", "sup.reviewRemote", "origin")
    return bare


def commit(repo: Path, name: str) -> str:
    (repo / name).write_text(name + "\n")
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD")


def test_push_new_creates_a_ref_once_and_never_moves_it(repo: Path, origin: Path) -> None:
    from gitsup.git import remote as transport
    from gitsup.ids import Oid

    first = Oid(git(repo, "rev-parse", "HEAD"))
    assert transport.push_new(repo, "origin", REF, first) == "created"
    assert git(origin, "rev-parse", REF) == first
    # the same commit again: there already, nothing pushed
    before = refs_of(origin)
    assert transport.push_new(repo, "origin", REF, first) == "same"
    # a descendant (a push the gate would let through as a fast-forward): refused by the
    # lease, the remote unchanged
    later = Oid(commit(repo, "later.txt"))
    assert transport.push_new(repo, "origin", REF, later) == "other"
    assert refs_of(origin) == before
    assert git(origin, "rev-parse", REF) == first


def test_push_new_says_what_the_gate_refused(repo: Path, origin: Path) -> None:
    from gitsup.git import remote as transport
    from gitsup.ids import Oid

    head = Oid(git(repo, "rev-parse", "HEAD"))
    # a hook of the remote refuses the push: an error naming the ref, not a ref "there"
    hook = origin / "hooks" / "pre-receive.local"
    hook.write_text("#!/bin/sh\necho 'not today' >&2\nexit 1\n")
    hook.chmod(0o755)
    with pytest.raises(transport.TransportError, match=f"{REF}.*not today"):
        transport.push_new(repo, "origin", REF, head)
    assert git(origin, "for-each-ref", "refs/sup/") == ""
    with pytest.raises(transport.TransportError):
        transport.push_new(repo, "nowhere", REF, head)


def test_fetch_and_one_brings_the_refs_and_the_one_ref_and_leaves_no_scratch(
    repo: Path, origin: Path, tmp: Path
) -> None:
    from gitsup.git import remote as transport

    other = tmp / "other"
    git(tmp, "clone", "-q", str(origin), str(other))
    head = git(other, "rev-parse", "HEAD")
    git(other, "push", "-q", "origin", f"{head}:{REF}")
    common = Path(git(repo, "rev-parse", "--absolute-git-dir"))

    def fetch() -> str | None:
        return transport.fetch_and_one(
            repo, common, "origin", ["refs/sup/20260101-0a0b0c/*:refs/sup/20260101-0a0b0c/*"],
            "refs/notes/sup",
        )  # fmt: skip

    # no notes on the remote: None, the task's refs fetched all the same
    assert fetch() is None
    assert git(repo, "rev-parse", REF) == head
    # notes there, and a ref whose name starts like theirs: exactly the notes' commit
    git(other, "notes", "--ref=sup", "add", "-m", "{}", head)
    git(other, "notes", "--ref=supplement", "add", "-m", "other", head)
    notes = git(other, "rev-parse", "refs/notes/sup")
    git(other, "push", "-q", "origin", "refs/notes/sup", "refs/notes/supplement")
    assert git(origin, "rev-parse", "refs/notes/supplement")
    assert fetch() == notes
    assert git(repo, "cat-file", "-t", notes) == "commit"  # its objects are here
    # the scratch refs are gone, and the fetch moved no notes ref here (the caller merges)
    assert git(repo, "for-each-ref", "refs/gitsup-fetch/") == ""
    assert git(repo, "for-each-ref", "refs/notes/") == ""
