"""The evaluator as a pure function (fake lookup), hook input parsing, pusher detection."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from gitsup.boundary.evaluate import (
    ZERO,
    Pusher,
    PushPolicy,
    PushSetting,
    RefUpdate,
    Untrusted,
    evaluate,
    protected_branch,
)
from gitsup.boundary.hookio import HookInputError, parse_pre_push, parse_pre_receive
from gitsup.boundary.lookup import RepoConfig, is_review_remote
from gitsup.boundary.pusher import client_pusher, task_of_path

A, B, C = "a" * 40, "b" * 40, "c" * 40


class FakeLookup:
    """`untrusted`: the new tips whose history is not integrated (commit -> why)."""

    def __init__(
        self, untrusted: dict[str, str], ancestry: dict[tuple[str, str], bool | None]
    ) -> None:
        self.bad = untrusted
        self.ancestry = ancestry
        self.prefetched: list[tuple[list[tuple[str, str]], list[RefUpdate]]] = []

    def prefetch(self, ancestry: Iterable[tuple[str, str]], protected: Sequence[RefUpdate]) -> None:
        self.prefetched.append((list(ancestry), list(protected)))

    def is_ancestor(self, ancestor: str, descendant: str) -> bool | None:
        return self.ancestry.get((ancestor, descendant), False)

    def untrusted(self, update: RefUpdate) -> Untrusted | None:
        why = self.bad.get(update.new)
        return Untrusted(update.new, why, 1) if why else None


def _ctx(task: str | None = None, review: bool = False, **policy: object) -> PushSetting:
    return PushSetting(Pusher(task, "test"), "origin", review, PushPolicy(**policy))  # type: ignore[arg-type]


def _one(ctx: PushSetting, u: RefUpdate, lookup: FakeLookup | None = None) -> tuple[bool, str]:
    (v,) = evaluate(ctx, [u], lookup or FakeLookup({}, {}))
    return v.accepted, v.reason


def test_task_pushes_nothing_and_asks_git_nothing() -> None:
    lookup = FakeLookup({}, {(A, B): True})
    updates = [
        RefUpdate("refs/heads/main", A, B),
        RefUpdate("refs/heads/feature", ZERO, B),
        RefUpdate("refs/tags/v1", ZERO, B),
    ]
    verdicts = evaluate(_ctx("20260101-abcdef", review=True), updates, lookup)
    assert [v.accepted for v in verdicts] == [False, False, False]
    assert all("inside task 20260101-abcdef" in v.reason for v in verdicts)
    assert lookup.prefetched == []


def test_protected_rules() -> None:
    lk = FakeLookup({C: "is not signed"}, {(A, B): True, (B, A): False, (A, C): True})
    assert _one(_ctx(), RefUpdate("refs/heads/main", A, B), lk)[0]
    assert _one(_ctx(), RefUpdate("refs/heads/main", ZERO, B), lk)[0]
    ok, why = _one(_ctx(), RefUpdate("refs/heads/main", A, C), lk)
    assert not ok and "1 commit not integrated" in why and "is not signed" in why
    assert "git sup integrate <id> --into main" in why and "sup.trustRoot" not in why
    assert f"git branch my-work {C[:12]}" in why and f"git cherry-pick {A[:12]}..my-work" in why
    ok, why = _one(_ctx(), RefUpdate("refs/heads/main", B, A), lk)
    assert not ok and "non-fast-forward" in why
    ok, why = _one(_ctx(), RefUpdate("refs/heads/main", A, ZERO), lk)
    assert not ok and "deletion" in why
    unknown = FakeLookup({}, {(A, B): None})
    ok, why = _one(_ctx(), RefUpdate("refs/heads/main", A, B), unknown)
    assert not ok and "fetch first" in why
    # The server names its own configuration.
    server = _ctx()._replace(server=True)
    ok, why = _one(server, RefUpdate("refs/heads/main", ZERO, C), lk)
    assert not ok and "in this repository (its administrator)" in why


def test_review_refs() -> None:
    lk = FakeLookup({}, {(A, B): True})
    ref = "refs/sup/20260101-abcdef/candidate"
    assert not _one(_ctx(review=False), RefUpdate(ref, ZERO, B))[0]
    assert _one(_ctx(review=True), RefUpdate(ref, ZERO, B))[0]
    assert _one(_ctx(review=True), RefUpdate(ref, A, B), lk)[0]
    assert not _one(_ctx(review=True), RefUpdate(ref, B, A), lk)[0]
    assert not _one(_ctx(review=True), RefUpdate(ref, A, ZERO))[0]
    # refs/notes/sup is evidence: any remote, fast-forward only, never deleted.
    for review in (False, True):
        notes = "refs/notes/sup"
        assert _one(_ctx(review=review), RefUpdate(notes, ZERO, B))[0]
        assert _one(_ctx(review=review), RefUpdate(notes, A, B), lk)[0]
        assert not _one(_ctx(review=review), RefUpdate(notes, B, A), lk)[0]
        assert not _one(_ctx(review=review), RefUpdate(notes, A, ZERO))[0]
    # other notes refs are "other"
    assert _one(_ctx(), RefUpdate("refs/notes/commits", ZERO, B))[0]


def test_policy_for_tags_and_other() -> None:
    assert _one(_ctx(), RefUpdate("refs/tags/v1", ZERO, B))[0]
    assert not _one(_ctx(tags="deny"), RefUpdate("refs/tags/v1", ZERO, B))[0]
    assert _one(_ctx(tags="deny"), RefUpdate("refs/heads/x", ZERO, B))[0]
    assert not _one(_ctx(other="deny"), RefUpdate("refs/heads/x", ZERO, B))[0]


def test_lookups_are_batched() -> None:
    lk = FakeLookup({}, {(A, B): True})
    updates = [RefUpdate(f"refs/sup/t{i}/log", A, B) for i in range(5)] + [
        RefUpdate("refs/heads/main", A, B),
        RefUpdate("refs/heads/develop", ZERO, B),
    ]
    evaluate(_ctx(review=True), updates, lk)
    assert len(lk.prefetched) == 1
    pairs, protected = lk.prefetched[0]
    assert len(pairs) == 6 and [u.ref for u in protected] == [
        "refs/heads/main",
        "refs/heads/develop",
    ]


def test_one_definition_of_protected() -> None:
    """Configured values add to the defaults, in the boundary and in the policy alike."""
    from gitsup.policy import load_policy
    from gitsup.protected import effective

    cfg = RepoConfig({"sup.protected": ["release/*"]})
    assert cfg.policy().protected == effective(["release/*"])
    assert protected_branch("refs/heads/main", cfg.policy().protected)
    assert protected_branch("refs/heads/release/1", cfg.policy().protected)
    shell = load_policy(None, extra_protected=["release/*"])
    assert shell.is_protected("main") and shell.is_protected("refs/heads/release/1")
    assert not shell.is_protected("mainline") and not shell.is_protected("refs/tags/main")


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("refs/heads/main", True),
        ("refs/heads/release/2.0", True),
        ("refs/heads/mainline", False),
        ("refs/tags/main", False),
        ("refs/heads/hotfix", True),
    ],
)
def test_protected_patterns(ref: str, expected: bool) -> None:
    assert protected_branch(ref, ["main", "release/*", "refs/heads/hot*"]) is expected


def test_parse_hook_input() -> None:
    ups = parse_pre_push([f"refs/heads/x {A} refs/heads/main {ZERO}\n", "\n"])
    assert ups == [RefUpdate("refs/heads/main", ZERO, A, "refs/heads/x")]
    (d,) = parse_pre_push([f"(delete) {ZERO} refs/heads/gone {B}"])
    assert d.is_delete and not d.is_create
    assert parse_pre_receive([f"{A} {B} refs/heads/main"]) == [RefUpdate("refs/heads/main", A, B)]
    with pytest.raises(HookInputError):
        parse_pre_push(["garbage"])
    with pytest.raises(HookInputError):
        parse_pre_receive([f"{A} nothex refs/heads/main"])


def test_review_remote_matching(tmp_path: Path) -> None:
    bare = tmp_path / "r.git"
    bare.mkdir()
    cfg = RepoConfig({"sup.reviewremote": ["origin"], "remote.origin.url": [str(bare)]})
    assert is_review_remote(cfg, "origin", str(bare))
    assert is_review_remote(cfg, str(bare), str(bare))  # pushing to the URL directly
    assert is_review_remote(cfg, str(bare), f"file://{bare}/")
    assert not is_review_remote(cfg, "other", "/elsewhere.git")
    assert not is_review_remote(RepoConfig({}), "origin", str(bare))


def test_pusher_detection(tmp_path: Path) -> None:
    common = tmp_path / "repo" / ".git"
    (common / "sup" / "tasks" / "20260101-abcdef").mkdir(parents=True)
    wt = tmp_path / "wt"
    wt.mkdir()
    (common / "sup" / "tasks" / "20260101-abcdef" / "task.json").write_text(
        f'{{"id": "20260101-abcdef", "worktree": "{wt}"}}'
    )
    gd = common / "worktrees" / "20260101-abcdef"
    gd.mkdir(parents=True)
    (gd / "commondir").write_text("../..\n")
    (wt / ".git").write_text(f"gitdir: {gd}\n")
    base = {"git_dir": str(common), "common_dir": str(common), "walk": False}
    assert client_pusher(env={"GITSUP_TASK": "t"}, cwd="/", **base).task == "t"  # type: ignore[arg-type]
    assert client_pusher(env={}, cwd=str(wt), **base).task == "20260101-abcdef"  # type: ignore[arg-type]
    assert client_pusher(env={"PWD": str(wt / "sub")}, cwd="/", **base).in_task  # type: ignore[arg-type]
    assert not client_pusher(env={}, cwd=str(tmp_path), **base).in_task  # type: ignore[arg-type]
    linked = {"git_dir": str(gd), "common_dir": str(common), "walk": False}
    assert client_pusher(env={}, cwd="/", **linked).task == "20260101-abcdef"  # type: ignore[arg-type]
    assert task_of_path(str(wt)) == "20260101-abcdef"
    assert task_of_path(str(tmp_path)) is None


def test_git_is_asked_once_and_only_when_an_answer_is_needed() -> None:
    """One prefetch for what the verdicts need: ancestry alone (a notes fast-forward),
    protected branches alone (a new one), both; none for updates that need neither."""
    cases: list[tuple[list[RefUpdate], list[tuple[list[tuple[str, str]], list[str]]]]] = [
        ([RefUpdate("refs/tags/v1", ZERO, B), RefUpdate("refs/heads/topic", A, B)], []),
        ([RefUpdate("refs/notes/sup", ZERO, B), RefUpdate("refs/heads/main", B, B)], []),
        ([RefUpdate("refs/notes/sup", A, B)], [([(A, B)], [])]),
        ([RefUpdate("refs/heads/main", ZERO, B)], [([], ["refs/heads/main"])]),
        (
            [RefUpdate("refs/heads/main", A, B), RefUpdate("refs/notes/sup", B, C)],
            [([(A, B), (B, C)], ["refs/heads/main"])],
        ),
    ]
    for updates, expected in cases:
        lk = FakeLookup({}, {(A, B): True, (B, C): True})
        evaluate(_ctx(), updates, lk)
        got = [(pairs, [u.ref for u in protected]) for pairs, protected in lk.prefetched]
        assert got == expected, updates
