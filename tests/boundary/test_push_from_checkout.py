"""Pushes by a person or CI from the user's checkout: protected branches gain only signed
integrations and the candidates they name; refs/notes/sup goes anywhere, fast-forward only;
refs/sup/* goes only to the review remote and is never deleted or rewritten there. Each rule
is checked at the client hook and (with --no-verify) at the server gate."""

from __future__ import annotations

from typing import Any

import pytest

from tests.boundary.conftest import Setup, accepted, push, refs_of, rejected
from tests.conftest import git, run_sup


def _commit(setup: Setup, name: str = "direct.txt") -> str:
    (setup.repo / name).write_text("typed by hand\n")
    git(setup.repo, "add", name)
    git(setup.repo, "commit", "-q", "-m", f"add {name}")
    return git(setup.repo, "rev-parse", "HEAD")


@pytest.mark.parametrize("verify", [True, False], ids=["hook", "server"])
def test_non_integrated_commit_to_main_is_rejected(setup: Setup, verify: bool) -> None:
    _commit(setup)
    before = refs_of(setup.origin)
    res = push(setup.repo, *([] if verify else ["--no-verify"]), "origin", "main")
    rejected(res, "refs/heads/main", "1 commit not integrated", "git sup integrate")
    assert refs_of(setup.origin) == before


@pytest.mark.parametrize("verify", [True, False], ids=["hook", "server"])
def test_deleting_or_forcing_main_is_rejected(setup: Setup, verify: bool) -> None:
    before = refs_of(setup.origin)
    flag = [] if verify else ["--no-verify"]
    rejected(push(setup.repo, *flag, "origin", ":main"), "deletion is not allowed")
    # Even a commit the notes call integrated may not replace main by force.
    tree = git(setup.repo, "rev-parse", "HEAD^{tree}")
    orphan = git(setup.repo, "commit-tree", "-m", "unrelated", tree)
    note = '{"schema": "gitsup.candidate/1", "status": "integrated"}'
    git(setup.repo, "notes", "--ref=sup", "add", "-m", note, orphan)
    res = push(
        setup.repo, *flag, "--force", "origin", f"{orphan}:refs/heads/main", "refs/notes/sup"
    )
    rejected(res, "refs/heads/main", "non-fast-forward")
    assert refs_of(setup.origin) == before


def test_configured_protected_branches_and_patterns(setup: Setup) -> None:
    # Additions: release/* joins the defaults; main and develop stay protected.
    git(setup.repo, "config", "--replace-all", "sup.protected", "release/*")
    git(setup.repo, "switch", "-q", "-c", "release/1.0")
    _commit(setup)
    rejected(push(setup.repo, "origin", "release/1.0"), "protected branch")
    accepted(push(setup.repo, "origin", "release/1.0:refs/heads/topic"))
    res = push(setup.repo, "origin", "release/1.0:refs/heads/develop")
    rejected(res, "gitsup: rejected refs/heads/develop")
    assert "remote: gitsup" not in res.stderr  # the client hook refused it already
    # The server has its own list (the defaults): it lets release/1.0 in, not develop.
    accepted(push(setup.repo, "--no-verify", "origin", "release/1.0"))
    res = push(setup.repo, "--no-verify", "origin", "release/1.0:refs/heads/develop")
    rejected(res, "remote: gitsup: rejected refs/heads/develop")


def test_ordinary_branches_and_tags_are_allowed_outside_tasks(setup: Setup) -> None:
    git(setup.repo, "switch", "-q", "-c", "feature")
    _commit(setup)
    git(setup.repo, "tag", "v1")
    accepted(push(setup.repo, "origin", "feature", "v1"))
    accepted(push(setup.repo, "other", "feature", "v1"))
    accepted(push(setup.repo, "origin", ":feature"))  # deleting an ordinary branch
    assert "refs/heads/feature" not in refs_of(setup.origin)


def test_tag_and_other_policy_can_deny(setup: Setup) -> None:
    git(setup.repo, "config", "sup.pushTags", "deny")
    git(setup.repo, "config", "sup.pushOther", "nonsense")  # unknown values deny
    git(setup.repo, "tag", "v1")
    rejected(push(setup.repo, "origin", "v1"), "sup.pushTags")
    rejected(push(setup.repo, "origin", "main:refs/heads/feature"), "sup.pushOther")


def test_after_integrate_main_alone_is_accepted(setup: Setup, ready: dict[str, Any]) -> None:
    res = run_sup(setup.repo, "integrate", ready["id"], "--into", "main")
    assert res.returncode == 0, res.stderr
    assert "publish: git push origin main" in res.stdout
    main = git(setup.repo, "rev-parse", "main")
    assert git(setup.repo, "rev-parse", "main^2") == ready["candidate"]
    # The proof travels in the commit: no notes needed, on any gated remote.
    accepted(push(setup.repo, "origin", "main"))
    accepted(push(setup.repo, "--no-verify", "other", "main"))
    assert git(setup.origin, "rev-parse", "main") == main == git(setup.other, "rev-parse", "main")
    # The notes (evidence) may follow, to any gated remote.
    accepted(push(setup.repo, "other", "refs/notes/sup"))


def test_integrate_refuses_a_target_moved_by_hand(setup: Setup, ready: dict[str, Any]) -> None:
    git(setup.repo, "commit", "-q", "--allow-empty", "-m", "main moved on by hand")
    moved = git(setup.repo, "rev-parse", "main")
    res = run_sup(setup.repo, "integrate", ready["id"], "--into", "main")
    assert res.returncode == 2 and "moved outside integrations" in res.stderr, res.stderr
    assert moved[:12] in res.stderr and "sup.trustRoot" not in res.stderr
    assert "git cherry-pick" in res.stderr and "git sup integrate" in res.stderr
    assert git(setup.repo, "rev-parse", "main") == moved


@pytest.mark.parametrize("verify", [True, False], ids=["hook", "server"])
def test_sup_refs_go_only_to_the_review_remote(
    setup: Setup, ready: dict[str, Any], verify: bool
) -> None:
    flag = [] if verify else ["--no-verify"]
    before = refs_of(setup.other)
    rejected(push(setup.repo, *flag, "other", "refs/sup/*:refs/sup/*"), "review remote")
    assert refs_of(setup.other) == before
    accepted(push(setup.repo, *flag, "origin", "refs/sup/*:refs/sup/*", "refs/notes/sup"))
    assert f"refs/sup/{ready['id']}/candidate {ready['candidate']}" in refs_of(setup.origin)


@pytest.mark.parametrize("verify", [True, False], ids=["hook", "server"])
def test_notes_go_anywhere_fast_forward_only(
    setup: Setup, ready: dict[str, Any], verify: bool
) -> None:
    flag = [] if verify else ["--no-verify"]
    accepted(push(setup.repo, *flag, "other", "refs/notes/sup"))
    notes = git(setup.repo, "rev-parse", "refs/notes/sup")
    assert git(setup.other, "rev-parse", "refs/notes/sup") == notes
    rejected(push(setup.repo, *flag, "other", ":refs/notes/sup"), "never deleted")
    # A rewritten notes history (another root) is refused, even forced.
    tree = git(setup.repo, "rev-parse", "refs/notes/sup^{tree}")
    rewritten = git(setup.repo, "commit-tree", "-m", "rewritten notes", tree)
    res = push(setup.repo, *flag, "--force", "other", f"{rewritten}:refs/notes/sup")
    rejected(res, "never rewritten")
    assert git(setup.other, "rev-parse", "refs/notes/sup") == notes
    git(setup.repo, "notes", "--ref=sup", "add", "-m", "{}", "main")
    accepted(push(setup.repo, *flag, "other", "refs/notes/sup"))


def test_review_remote_by_url(setup: Setup, ready: dict[str, Any]) -> None:
    git(setup.repo, "config", "sup.reviewRemote", str(setup.origin))
    accepted(push(setup.repo, "origin", "refs/sup/*:refs/sup/*"))
    git(setup.repo, "config", "--unset", "sup.reviewRemote")
    cand = f"refs/sup/{ready['id']}/candidate"
    rejected(push(setup.repo, "origin", f"main:{cand}-copy"), "sup.reviewRemote")


@pytest.mark.parametrize("verify", [True, False], ids=["hook", "server"])
def test_sup_refs_are_never_deleted_or_rewritten_on_the_review_remote(
    setup: Setup, ready: dict[str, Any], verify: bool
) -> None:
    accepted(push(setup.repo, "origin", "refs/sup/*:refs/sup/*", "refs/notes/sup"))
    before = refs_of(setup.origin)
    flag = [] if verify else ["--no-verify"]
    cand = f"refs/sup/{ready['id']}/candidate"
    rejected(push(setup.repo, *flag, "origin", f":{cand}"), "never deleted")
    rejected(push(setup.repo, *flag, "--force", "origin", f"main:{cand}"), "never rewritten")
    # --mirror from a checkout that lacks a gitsup ref the remote has would delete it.
    git(setup.repo, "update-ref", "-d", cand)
    rejected(push(setup.repo, *flag, "--mirror", "origin"), "never deleted")
    git(setup.repo, "update-ref", cand, ready["candidate"])
    assert refs_of(setup.origin) == before
    # A fast-forward of a gitsup ref is fine (e.g. the notes after another candidate).
    git(setup.repo, "notes", "--ref=sup", "add", "-m", "{}", "main")
    accepted(push(setup.repo, *flag, "origin", "refs/notes/sup"))
