"""Every verdict of the ref-update evaluator in full (ref, accepted, reason), and what it asks
Git for: the survivors of a mutation run of gitsup/boundary/evaluate.py, each now a test."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from gitsup.boundary.evaluate import (
    ZERO,
    Pusher,
    PushPolicy,
    PushSetting,
    RefUpdate,
    RefVerdict,
    Untrusted,
    evaluate,
    is_zero,
    protected_branch,
)

A, B, C = "a" * 40, "b" * 40, "c" * 40


class Lookup:
    """The evaluator's questions answered from tables: `bad` maps a new tip to why its
    commits are not integrated (absent: every new commit is integrated)."""

    def __init__(
        self,
        bad: dict[str, str] | None = None,
        ancestry: dict[tuple[str, str], bool | None] | None = None,
    ) -> None:
        self.bad = bad or {}
        self.ancestry = ancestry or {}
        self.prefetched: list[tuple[list[tuple[str, str]], list[RefUpdate]]] = []
        self.asked: list[tuple[str, str]] = []

    def prefetch(self, ancestry: Iterable[tuple[str, str]], protected: Sequence[RefUpdate]) -> None:
        self.prefetched.append((list(ancestry), list(protected)))

    def is_ancestor(self, ancestor: str, descendant: str) -> bool | None:
        self.asked.append((ancestor, descendant))
        return self.ancestry.get((ancestor, descendant), False)

    def untrusted(self, update: RefUpdate) -> Untrusted | None:
        why = self.bad.get(update.new)
        return Untrusted(update.new, why, 1) if why else None


def ctx(
    task: str | None = None, why: str = "", review: bool = False, **policy: object
) -> PushSetting:
    return PushSetting(Pusher(task, why), "backup", review, PushPolicy(**policy))  # type: ignore[arg-type]


def test_inside_a_task_every_ref_is_refused_by_name_with_the_way_out() -> None:
    updates = [RefUpdate("refs/heads/main", A, B), RefUpdate("refs/sup/x/log", ZERO, B)]
    want = (
        "pushing from inside task 20260101-abcdef (GITSUP_TASK is set) is not allowed; "
        "`git sup integrate 20260101-abcdef --into <branch>` from outside the task, "
        "then push from there"
    )
    assert evaluate(ctx("20260101-abcdef", "GITSUP_TASK is set"), updates, Lookup()) == [
        RefVerdict("refs/heads/main", False, want),
        RefVerdict("refs/sup/x/log", False, want),
    ]
    # without a `why`, no empty parentheses
    (v,) = evaluate(ctx("20260101-abcdef"), updates[:1], Lookup())
    assert v.reason.startswith("pushing from inside task 20260101-abcdef is not allowed; ")


def test_protected_branch_verdicts() -> None:
    lk = Lookup({C: "is not a signed integration"}, {(A, B): True, (A, C): True})
    main = "refs/heads/main"
    assert evaluate(ctx(), [RefUpdate(main, A, B)], lk) == [
        RefVerdict(main, True, "every new commit is integrated")
    ]
    assert evaluate(ctx(), [RefUpdate("refs/heads/master", ZERO, B)], lk) == [
        RefVerdict("refs/heads/master", True, "every new commit is integrated")
    ]
    assert evaluate(ctx(), [RefUpdate(main, A, ZERO)], lk) == [
        RefVerdict(main, False, "protected branch: deletion is not allowed")
    ]
    (v,) = evaluate(ctx(), [RefUpdate(main, A, C)], lk)
    assert not v.accepted
    assert v.reason.startswith(
        f"protected branch: 1 commit not integrated; {C[:12]} is not a signed integration. "
    )
    # commits made after gitsup was set up are integrated, never trusted
    assert "sup.trustRoot" not in v.reason and "git cherry-pick" in v.reason
    assert evaluate(ctx(), [RefUpdate(main, B, A)], lk) == [
        RefVerdict(
            main,
            False,
            f"protected branch: non-fast-forward from {B[:12]} to {A[:12]} (force update)",
        )
    ]
    # a protected pattern from the policy, not only the defaults
    rel = "refs/heads/release/1"
    lk.ancestry[(A, C)] = True
    assert not evaluate(ctx(protected=("release/*",)), [RefUpdate(rel, A, C)], lk)[0].accepted


def test_review_ref_verdicts() -> None:
    ref = "refs/sup/20260101-abcdef/candidate"
    lk = Lookup(ancestry={(A, B): True})
    assert evaluate(ctx(), [RefUpdate(ref, ZERO, B)], lk) == [
        RefVerdict(
            ref,
            False,
            "gitsup refs go only to the review remote, not to backup "
            "(set `git config sup.reviewRemote <remote>`)",
        )
    ]
    assert evaluate(ctx(review=True), [RefUpdate(ref, A, B)], lk) == [
        RefVerdict(ref, True, "review ref")
    ]
    assert evaluate(ctx(review=True), [RefUpdate(ref, A, ZERO)], lk) == [
        RefVerdict(ref, False, "gitsup refs are never deleted on the review remote")
    ]
    assert evaluate(ctx(review=True), [RefUpdate(ref, B, A)], lk) == [
        RefVerdict(
            ref,
            False,
            f"gitsup refs are never rewritten: non-fast-forward from {B[:12]} to {A[:12]} "
            "(force update)",
        )
    ]
    # a no-op update is no rewrite and asks nothing
    lk2 = Lookup()
    assert evaluate(ctx(review=True), [RefUpdate(ref, A, A)], lk2) == [
        RefVerdict(ref, True, "review ref")
    ]
    assert lk2.asked == [] and lk2.prefetched == []


def test_policy_verdicts() -> None:
    tag, other = "refs/tags/v1", "refs/heads/feature"
    assert evaluate(ctx(tags="deny"), [RefUpdate(tag, ZERO, B)], Lookup()) == [
        RefVerdict(tag, False, "policy denies pushing tags (sup.pushTags = deny)")
    ]
    assert evaluate(ctx(other="deny"), [RefUpdate(other, ZERO, B)], Lookup()) == [
        RefVerdict(other, False, "policy denies pushing this ref (sup.pushOther = deny)")
    ]
    assert evaluate(ctx(other="deny"), [RefUpdate(tag, ZERO, B)], Lookup()) == [
        RefVerdict(tag, True, "allowed by policy")
    ]
    assert evaluate(ctx(tags="deny"), [RefUpdate(other, ZERO, B)], Lookup()) == [
        RefVerdict(other, True, "allowed by policy")
    ]


def test_prefetch_asks_only_for_what_the_verdicts_need() -> None:
    lk = Lookup(ancestry={(A, B): True})
    updates = [
        RefUpdate("refs/heads/main", A, B),  # ancestry and integration
        RefUpdate("refs/heads/master", ZERO, B),  # create: integration only
        RefUpdate("refs/heads/trunk", A, ZERO),  # delete: nothing
        RefUpdate("refs/sup/t/log", A, C),  # review: ancestry
        RefUpdate("refs/sup/t/wip", ZERO, C),  # review create: nothing
        RefUpdate("refs/sup/t/candidate", C, C),  # no-op: nothing
        RefUpdate("refs/heads/feature", A, C),  # other: nothing
        RefUpdate("refs/tags/v1", A, C),  # tag: nothing
    ]
    verdicts = evaluate(ctx(review=True), updates, lk)
    assert [v.ref for v in verdicts] == [u.ref for u in updates]
    assert lk.prefetched == [([(A, B), (A, C)], updates[:2])]
    # nothing to look up: no prefetch at all
    lk2 = Lookup()
    evaluate(ctx(), [RefUpdate("refs/heads/feature", A, C)], lk2)
    assert lk2.prefetched == []
    # only a review-ref rewrite to check: prefetched all the same
    lk3 = Lookup()
    evaluate(ctx(review=True), [RefUpdate("refs/sup/t/log", A, C)], lk3)
    assert lk3.prefetched == [([(A, C)], [])]


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
