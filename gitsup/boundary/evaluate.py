"""The one ref-update evaluator: (pusher, destination, policy, updates) -> verdict per ref.

Pure: everything it needs from Git comes through a `CandidateLookup`, so the
client `pre-push` hook and the server `pre-receive` gate call exactly this
function with their own lookup. Standard library only (it runs on every push).

Rules, in order, for each update:
1. nothing is pushed from inside a task, to any remote, any ref;
2. a protected branch only fast-forwards, and only when every commit it gains is a
   signed integration or inside the candidate range one names (see `trust.py`);
   never by deletion;
3. `refs/notes/sup` (evidence, not proof) goes to any remote, fast-forward only, never
   deleted; `refs/sup/*` goes only to the review remote, never deleted or rewritten;
4. tags and everything else follow the policy (default: allowed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple, Protocol

from gitsup.protected import DEFAULT_PROTECTED, is_protected

# NB: value types are NamedTuples, not dataclasses: `dataclasses` imports `inspect`,
# which alone would cost a push ~20 ms of interpreter time.

ZERO = "0" * 40
NOTES_REF = "refs/notes/sup"
SUP_PREFIX = "refs/sup/"

Allowance = Literal["allow", "deny"]


def is_zero(oid: str) -> bool:
    return not oid or oid.strip("0") == ""


class RefUpdate(NamedTuple):
    """One ref the push would change on the destination: `ref` from `old` to `new`.

    `old`/`new` are the all-zero id for "does not exist" (create / delete).
    `local_ref` is the pusher's ref name (pre-push only), for messages.
    """

    ref: str
    old: str
    new: str
    local_ref: str | None = None

    @property
    def is_delete(self) -> bool:
        return is_zero(self.new)

    @property
    def is_create(self) -> bool:
        return is_zero(self.old)


class Pusher(NamedTuple):
    """Who pushes: a task (its worktree, its worker, anything carrying its marker) or not."""

    task: str | None = None
    why: str = ""

    @property
    def in_task(self) -> bool:
        return self.task is not None


class PushPolicy(NamedTuple):
    protected: tuple[str, ...] = DEFAULT_PROTECTED
    tags: Allowance = "allow"
    other: Allowance = "allow"


class PushSetting(NamedTuple):
    pusher: Pusher
    destination: str  # remote name / URL, or "this repository" in pre-receive
    to_review_remote: bool
    policy: PushPolicy = PushPolicy()
    server: bool = False  # the pre-receive gate (messages name the server's configuration)


class RefVerdict(NamedTuple):
    ref: str
    accepted: bool
    reason: str


class Untrusted(NamedTuple):
    """Why a protected branch may not gain its new commits: `commit` is one of `total`."""

    commit: str
    why: str
    total: int


class CandidateLookup(Protocol):
    """What the evaluator asks Git. Implementations batch in `prefetch`."""

    def prefetch(
        self, ancestry: Iterable[tuple[str, str]], protected: Sequence[RefUpdate]
    ) -> None: ...

    def is_ancestor(self, ancestor: str, descendant: str) -> bool | None:
        """True/False, or None when it cannot be decided (an object is missing)."""
        ...

    def untrusted(self, update: RefUpdate) -> Untrusted | None:
        """None when every commit `update` adds is integrated; else why not."""
        ...


def protected_branch(ref: str, patterns: Sequence[str]) -> bool:
    return ref.startswith("refs/heads/") and is_protected(ref, patterns)


def _kind(ref: str, policy: PushPolicy) -> str:
    if protected_branch(ref, policy.protected):
        return "protected"
    if ref == NOTES_REF:
        return "notes"
    if ref.startswith(SUP_PREFIX):
        return "review"
    if ref.startswith("refs/tags/"):
        return "tag"
    return "other"


def evaluate(
    ctx: PushSetting, updates: Sequence[RefUpdate], lookup: CandidateLookup
) -> list[RefVerdict]:
    """Accept or reject every update, with a reason. Never raises for odd input."""
    if ctx.pusher.in_task:
        why = f" ({ctx.pusher.why})" if ctx.pusher.why else ""
        reason = (
            f"pushing from inside task {ctx.pusher.task}{why} is not allowed; "
            f"`git sup integrate {ctx.pusher.task} --into <branch>` from outside the task, "
            "then push from there"
        )
        return [RefVerdict(u.ref, False, reason) for u in updates]

    kinds = [_kind(u.ref, ctx.policy) for u in updates]
    protected: list[RefUpdate] = []
    ancestry: list[tuple[str, str]] = []
    for u, k in zip(updates, kinds, strict=True):
        if k == "review" and not ctx.to_review_remote:
            continue
        if k != "other" and k != "tag" and not u.is_delete and not u.is_create and u.old != u.new:
            ancestry.append((u.old, u.new))
        if k == "protected" and not u.is_delete and u.old != u.new:
            protected.append(u)
    if protected or ancestry:
        lookup.prefetch(ancestry, protected)
    return [_one(ctx, u, k, lookup) for u, k in zip(updates, kinds, strict=True)]


def _fast_forward(u: RefUpdate, lookup: CandidateLookup) -> str | None:
    """None if `u` is a fast-forward (or a no-op); else why not."""
    if u.is_create or u.old == u.new:
        return None
    ff = lookup.is_ancestor(u.old, u.new)
    if ff is None:
        return (
            f"cannot verify a fast-forward from {u.old[:12]} (not present here); "
            "fetch first, then push again"
        )
    if not ff:
        return f"non-fast-forward from {u.old[:12]} to {u.new[:12]} (force update)"
    return None


def own_commits_hint(branch: str, old: str, new: str) -> str:
    """How commits a person made on a protected branch reach it: as a task that picks them,
    then a signed integration (never by trusting them: that would be a bypass)."""

    def short(x: str) -> str:
        return x[:12] if all(c in "0123456789abcdef" for c in x) else x

    o, n = short(old), short(new)
    return (
        f"to integrate commits made on {branch} by hand: `git branch my-work {n}`, "
        f"`git branch -f {branch} {o}` (or `git reset --keep {o}` where {branch} is checked "
        f'out), `git sup start "my work" --base {branch} --worker '
        f'"git cherry-pick {o}..my-work" --review none`, then '
        f"`git sup integrate <id> --into {branch}`"
    )


def _not_integrated(ctx: PushSetting, u: RefUpdate, bad: Untrusted) -> str:
    branch = u.ref.removeprefix("refs/heads/")
    n = f"{bad.total} commit{'s' if bad.total != 1 else ''}"
    head = (
        f"protected branch: {n} not integrated; {bad.commit[:12]} {bad.why}. "
        f"Work reaches {branch} as a task: `git sup start ...`, then "
        f"`git sup integrate <id> --into {branch}`; "
    )
    if not u.is_create:
        # the branch grows: commits made after gitsup was set up, never a trust root
        return head + own_commits_hint(branch, u.old, u.new)
    trust = (
        f"`git config --add sup.trustRoot {u.new}` in this repository (its administrator)"
        if ctx.server
        else f"`git config --add sup.trustRoot {u.new}` (and on a gated remote: "
        f"`git sup gate install <path>` again)"
    )
    return head + f"to trust a branch's history from before gitsup: {trust}"


def _one(ctx: PushSetting, u: RefUpdate, kind: str, lookup: CandidateLookup) -> RefVerdict:
    if kind == "protected":
        if u.is_delete:
            return RefVerdict(u.ref, False, "protected branch: deletion is not allowed")
        problem = _fast_forward(u, lookup)
        if problem:
            return RefVerdict(u.ref, False, f"protected branch: {problem}")
        if u.old == u.new:
            return RefVerdict(u.ref, True, "unchanged")
        bad = lookup.untrusted(u)
        if bad is not None:
            return RefVerdict(u.ref, False, _not_integrated(ctx, u, bad))
        return RefVerdict(u.ref, True, "every new commit is integrated")
    if kind == "notes":
        if u.is_delete:
            return RefVerdict(u.ref, False, f"{NOTES_REF} is evidence: it is never deleted")
        problem = _fast_forward(u, lookup)
        if problem:
            return RefVerdict(u.ref, False, f"{NOTES_REF} is never rewritten: {problem}")
        return RefVerdict(u.ref, True, "notes fast-forward")
    if kind == "review":
        if not ctx.to_review_remote:
            return RefVerdict(
                u.ref,
                False,
                f"gitsup refs go only to the review remote, not to {ctx.destination} "
                "(set `git config sup.reviewRemote <remote>`)",
            )
        if u.is_delete:
            return RefVerdict(u.ref, False, "gitsup refs are never deleted on the review remote")
        problem = _fast_forward(u, lookup)
        if problem:
            return RefVerdict(u.ref, False, f"gitsup refs are never rewritten: {problem}")
        return RefVerdict(u.ref, True, "review ref")
    allowance = ctx.policy.tags if kind == "tag" else ctx.policy.other
    if allowance != "allow":
        what, key = ("tags", "sup.pushTags") if kind == "tag" else ("this ref", "sup.pushOther")
        return RefVerdict(u.ref, False, f"policy denies pushing {what} ({key} = {allowance})")
    return RefVerdict(u.ref, True, "allowed by policy")
