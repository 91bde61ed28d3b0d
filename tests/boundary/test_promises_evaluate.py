"""Every verdict of the ref-update evaluator in full (ref, accepted, reason), and what it asks
Git for: the survivors of a mutation run of gitsup/boundary/evaluate.py, each now a test."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from gitsup.boundary.evaluate import (
    ZERO,
    GateContext,
    Policy,
    Pusher,
    RefUpdate,
    Verdict,
    evaluate,
    is_zero,
    protected_branch,
)

A, B, C = "a" * 40, "b" * 40, "c" * 40


class Lookup:
    def __init__(
        self,
        notes: dict[str, str] | None = None,
        ancestry: dict[tuple[str, str], bool | None] | None = None,
    ) -> None:
        self.notes = notes or {}
        self.ancestry = ancestry or {}
        self.prefetched: list[tuple[list[str], list[tuple[str, str]]]] = []
        self.asked: list[tuple[str, str]] = []

    def prefetch(self, notes: Iterable[str], ancestry: Iterable[tuple[str, str]]) -> None:
        self.prefetched.append((list(notes), list(ancestry)))

    def note_status(self, oid: str) -> str | None:
        return self.notes.get(oid)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool | None:
        self.asked.append((ancestor, descendant))
        return self.ancestry.get((ancestor, descendant), False)


def ctx(
    task: str | None = None, why: str = "", review: bool = False, **policy: object
) -> GateContext:
    return GateContext(Pusher(task, why), "backup", review, Policy(**policy))  # type: ignore[arg-type]


def test_inside_a_task_every_ref_is_refused_by_name_with_the_way_out() -> None:
    updates = [RefUpdate("refs/heads/main", A, B), RefUpdate("refs/sup/x/log", ZERO, B)]
    want = (
        "pushing from inside task 20260101-abcdef (GITSUP_TASK is set) is not allowed; "
        "`git sup integrate 20260101-abcdef --into <branch>` from outside the task, "
        "then push from there"
    )
    assert evaluate(ctx("20260101-abcdef", "GITSUP_TASK is set"), updates, Lookup()) == [
        Verdict("refs/heads/main", False, want),
        Verdict("refs/sup/x/log", False, want),
    ]
    # without a `why`, no empty parentheses
    (v,) = evaluate(ctx("20260101-abcdef"), updates[:1], Lookup())
    assert v.reason.startswith("pushing from inside task 20260101-abcdef is not allowed; ")


def test_protected_branch_verdicts() -> None:
    lk = Lookup({B: "integrated", C: "ready"}, {(A, B): True})
    main = "refs/heads/main"
    assert evaluate(ctx(), [RefUpdate(main, A, B)], lk) == [
        Verdict(main, True, "integrated candidate")
    ]
    assert evaluate(ctx(), [RefUpdate(main, A, ZERO)], lk) == [
        Verdict(main, False, "protected branch: deletion is not allowed")
    ]
    hint = "use `git sup integrate <id> --into <branch>` and push refs/notes/sup with it"
    assert evaluate(ctx(), [RefUpdate(main, A, C)], lk) == [
        Verdict(
            main,
            False,
            f"protected branch: {C[:12]} is not an integrated candidate "
            f"(its candidate note says 'ready'); {hint}",
        )
    ]
    assert evaluate(ctx(), [RefUpdate(main, B, A)], lk) == [
        Verdict(
            main,
            False,
            f"protected branch: {A[:12]} is not an integrated candidate "
            f"(it has no candidate note); {hint}",
        )
    ]
    lk.notes[A] = "integrated"
    assert evaluate(ctx(), [RefUpdate(main, B, A)], lk) == [
        Verdict(
            main,
            False,
            f"protected branch: non-fast-forward from {B[:12]} to {A[:12]} (force update)",
        )
    ]
    lk.ancestry[(C, A)] = None
    assert evaluate(ctx(), [RefUpdate(main, C, A)], lk) == [
        Verdict(
            main,
            False,
            f"protected branch: cannot verify a fast-forward from {C[:12]} (not present "
            "here); fetch first, then push again",
        )
    ]


def test_review_ref_verdicts() -> None:
    ref = "refs/sup/20260101-abcdef/candidate"
    lk = Lookup(ancestry={(A, B): True})
    assert evaluate(ctx(), [RefUpdate(ref, ZERO, B)], lk) == [
        Verdict(
            ref,
            False,
            "gitsup refs go only to the review remote, not to backup "
            "(set `git config sup.reviewRemote <remote>`)",
        )
    ]
    assert evaluate(ctx(review=True), [RefUpdate(ref, A, B)], lk) == [
        Verdict(ref, True, "review ref")
    ]
    assert evaluate(ctx(review=True), [RefUpdate(ref, A, ZERO)], lk) == [
        Verdict(ref, False, "gitsup refs are never deleted on the review remote")
    ]
    assert evaluate(ctx(review=True), [RefUpdate(ref, B, A)], lk) == [
        Verdict(
            ref,
            False,
            f"gitsup refs are never rewritten: non-fast-forward from {B[:12]} to {A[:12]} "
            "(force update)",
        )
    ]
    # a no-op update is no rewrite and asks nothing
    lk2 = Lookup()
    assert evaluate(ctx(review=True), [RefUpdate(ref, A, A)], lk2) == [
        Verdict(ref, True, "review ref")
    ]
    assert lk2.asked == [] and lk2.prefetched == []


def test_policy_verdicts() -> None:
    tag, other = "refs/tags/v1", "refs/heads/feature"
    assert evaluate(ctx(tags="deny"), [RefUpdate(tag, ZERO, B)], Lookup()) == [
        Verdict(tag, False, "policy denies pushing tags (sup.pushTags = deny)")
    ]
    assert evaluate(ctx(other="deny"), [RefUpdate(other, ZERO, B)], Lookup()) == [
        Verdict(other, False, "policy denies pushing this ref (sup.pushOther = deny)")
    ]
    assert evaluate(ctx(other="deny"), [RefUpdate(tag, ZERO, B)], Lookup()) == [
        Verdict(tag, True, "allowed by policy")
    ]
    assert evaluate(ctx(tags="deny"), [RefUpdate(other, ZERO, B)], Lookup()) == [
        Verdict(other, True, "allowed by policy")
    ]


def test_prefetch_asks_only_for_what_the_verdicts_need() -> None:
    lk = Lookup({B: "integrated"}, {(A, B): True})
    updates = [
        RefUpdate("refs/heads/main", A, B),  # ancestry and note
        RefUpdate("refs/heads/master", ZERO, B),  # create: note only
        RefUpdate("refs/heads/trunk", A, ZERO),  # delete: nothing
        RefUpdate("refs/sup/t/log", A, C),  # review: ancestry
        RefUpdate("refs/sup/t/wip", ZERO, C),  # review create: nothing
        RefUpdate("refs/sup/t/candidate", C, C),  # no-op: nothing
        RefUpdate("refs/heads/feature", A, C),  # other: nothing
        RefUpdate("refs/tags/v1", A, C),  # tag: nothing
    ]
    verdicts = evaluate(ctx(review=True), updates, lk)
    assert [v.ref for v in verdicts] == [u.ref for u in updates]
    assert lk.prefetched == [([B, B], [(A, B), (A, C)])]
    # nothing to look up: no prefetch at all
    lk2 = Lookup()
    evaluate(ctx(), [RefUpdate("refs/heads/feature", A, C)], lk2)
    assert lk2.prefetched == []
    # only a review-ref rewrite to check: prefetched all the same
    lk3 = Lookup()
    evaluate(ctx(review=True), [RefUpdate("refs/sup/t/log", A, C)], lk3)
    assert lk3.prefetched == [([], [(A, C)])]


@pytest.mark.parametrize(
    ("patterns", "ref", "expected"),
    [
        (["", " ", "main"], "refs/heads/main", True),  # blank patterns are skipped, not the end
        (["dev", "main"], "refs/heads/main", True),
        (["refs/heads/main"], "refs/heads/main", True),
        (["refs/heads/main"], "refs/heads/refs/heads/main", False),
        (["rel?"], "refs/heads/rel1", True),
        (["rel[0-9]"], "refs/heads/rel1", True),
        (["rel[0-9]"], "refs/heads/relx", False),
        (["main"], "refs/remotes/origin/main", False),
        ([], "refs/heads/main", False),
    ],
)
def test_protected_branch_patterns(patterns: list[str], ref: str, expected: bool) -> None:
    assert protected_branch(ref, patterns) is expected


def test_is_zero() -> None:
    assert is_zero(ZERO) and is_zero("") and is_zero("0" * 64)
    assert not is_zero(A) and not is_zero("0" * 39 + "1")
