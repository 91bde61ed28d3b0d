"""Talking to another repository: pushing and fetching refs (the `git` program, through the
one process spawner), and what the object store of this one does with what it fetched
(the notes of two repositories merged, a fetched snapshot checked out).

A push runs the repository's own `pre-push` hook and the remote's `pre-receive` gate: gitsup
never skips either (no `--no-verify`). Every ref update a push or fetch makes is a
fast-forward unless the caller names a scratch ref with `+`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gitsup.errors import GitsupError
from gitsup.ids import Oid

_TIMEOUT = 300.0


class TransportError(GitsupError):
    """A push or fetch failed (the remote, or a gate on either side, refused it)."""


@dataclass(frozen=True)
class RefResult:
    """One ref of a push: its destination name, whether it went through, Git's summary."""

    ref: str
    ok: bool
    summary: str


def _git(repo_dir: Path, args: Sequence[str], *, timeout: float) -> tuple[int, str]:
    """Run `git args` in `repo_dir`: (exit code, -1 when it timed out; its output)."""
    from gitsup.host import proc

    res = proc.run(["git", *args], cwd=repo_dir, env=proc.child_env(), timeout=timeout)
    out = res.output.strip()
    if res.timed_out:
        return -1, (out + "\n" if out else "") + f"timed out after {timeout:g}s"
    return -1 if res.returncode is None else res.returncode, out


def push(
    workdir: Path, remote: str, refspecs: Sequence[str], *, atomic: bool = True
) -> list[RefResult]:
    """`git push` the refspecs to `remote` (never forced, hooks and gates run). Atomic by
    default: all refs move or none. Raises TransportError, naming each refused ref and
    the reason the gate gave, when anything was refused."""
    if not refspecs:
        return []
    args = ["push", "--porcelain"] + (["--atomic"] if atomic else []) + [remote, *refspecs]
    rc, out = _git(workdir, args, timeout=_TIMEOUT)
    results = list(_porcelain(out))
    if rc != 0 or any(not r.ok for r in results):
        refused = [r for r in results if not r.ok]
        what = ", ".join(f"{r.ref} ({r.summary})" for r in refused) or "the push"
        raise TransportError(f"push to {remote} refused: {what}: {_tail(out)}")
    return results


def push_new(workdir: Path, remote: str, ref: str, commit: Oid) -> str:
    """Push `commit` as `ref` to `remote` only where the remote has no `ref` yet (a lease
    that expects no ref, so nothing there ever moves; hooks and gates run): "created" when
    this push made it, "same" when the remote's `ref` names `commit` already, "other" when
    it names another commit (nothing pushed). Raises TransportError when anything else
    refused it."""
    lease = f"--force-with-lease={ref}:"
    args = ["push", "--porcelain", "--atomic", lease, remote, f"{commit}:{ref}"]
    rc, out = _git(workdir, args, timeout=_TIMEOUT)
    mine = [r for r in _porcelain(out) if r.ref == ref]
    if mine and not mine[0].ok and "stale info" in mine[0].summary:
        return "other"  # the lease: the remote has the ref, at another commit
    if rc != 0 or not mine or not mine[0].ok:
        what = f"{ref} ({mine[0].summary})" if mine else "the push"
        raise TransportError(f"push to {remote} refused: {what}: {_tail(out)}")
    return "same" if "up to date" in mine[0].summary else "created"


def _porcelain(out: str) -> Iterator[RefResult]:
    """The per-ref lines of `git push --porcelain`: `<flag>\\t<from>:<to>\\t<summary>`."""
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or len(parts[0]) != 1 or ":" not in parts[1]:
            continue
        flag, spec, summary = parts[0], parts[1], parts[2]
        yield RefResult(spec.split(":", 1)[1], flag in (" ", "+", "-", "*", "="), summary)


def _tail(out: str, n: int = 12) -> str:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def fetch(workdir: Path, remote: str, refspecs: Sequence[str]) -> None:
    """`git fetch` the refspecs from `remote` (no tags, FETCH_HEAD not written). A refspec
    without `+` moves its local ref only forward: a local ref that is not an ancestor of
    the remote's is refused, and so is the fetch (TransportError)."""
    args = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote, *refspecs]
    rc, out = _git(workdir, args, timeout=_TIMEOUT)
    if rc != 0:
        raise TransportError(f"fetch from {remote} failed: {_tail(out)}")


def remote_refs(workdir: Path, remote: str, refs: Sequence[str]) -> dict[str, Oid]:
    """What each of `refs` names on `remote` (those it has), with one `ls-remote`, nothing
    fetched."""
    rc, out = _git(workdir, ["ls-remote", remote, *refs], timeout=_TIMEOUT)
    if rc != 0:
        raise TransportError(f"cannot list {', '.join(refs)} on {remote}: {_tail(out)}")
    found = {}
    for line in out.splitlines():
        oid, _, name = line.partition("\t")
        if name.strip() in refs:
            found[name.strip()] = Oid(oid.strip())
    return found


def _scratch_ref() -> str:
    """A ref of this fetch's own to fetch into: callers running at the same time neither
    see nor move each other's (removed again after the fetch)."""
    return f"refs/gitsup-fetch/{os.getpid()}-{secrets.token_hex(4)}"


def fetch_listed(workdir: Path, common_dir: Path, remote: str, ref: str) -> Oid | None:
    """`fetch_one` for a ref known to be on `remote` (no `ls-remote` first): its commit,
    its objects fetched here; None when the remote has no such ref after all."""
    from gitsup.git import GitRepo

    scratch = _scratch_ref()
    fetch(workdir, remote, [f"+{ref}:{scratch}"])
    repo = GitRepo.open(common_dir)
    try:
        return repo.ref_target(scratch)
    finally:
        repo.delete_ref(scratch)


def fetch_one(workdir: Path, common_dir: Path, remote: str, ref: str) -> Oid | None:
    """The commit `ref` names on `remote`, its objects fetched here (None: no such ref there).
    Fetched into a scratch ref of its own (removed again), so that callers running at the
    same time neither see nor move each other's."""
    rc, out = _git(workdir, ["ls-remote", "--exit-code", remote, ref], timeout=_TIMEOUT)
    if rc == 2:  # --exit-code: the remote has no such ref
        return None
    if rc != 0:
        raise TransportError(f"cannot list {ref} on {remote}: {_tail(out)}")
    return fetch_listed(workdir, common_dir, remote, ref)


def fetch_and_one(
    workdir: Path, common_dir: Path, remote: str, refspecs: Sequence[str], ref: str
) -> Oid | None:
    """`fetch` the refspecs and, in the same `git fetch`, what `fetch_one` gives of `ref`:
    the commit it names on `remote`, its objects fetched here, None when the remote has no
    such ref. One process and one connection where the two would take three (the
    `ls-remote` is not needed: `ref` is fetched by a pattern that matches nothing when it
    is absent)."""
    from gitsup.git import GitRepo

    scratch = _scratch_ref()
    # the pattern `ref*` also matches longer names (`refs/notes/supx` for `refs/notes/sup`):
    # each lands under the scratch prefix, only `ref`'s own is read, all are removed
    try:
        fetch(workdir, remote, [*refspecs, f"+{ref}*:{scratch}/ref*"])
    finally:
        repo = GitRepo.open(common_dir)
        found = dict(repo.direct_refs([f"{scratch}/"]))
        for name in found:
            repo.delete_ref(name)
    return found.get(f"{scratch}/ref")


def read_tree_onto(git_dir: Path, worktree: Path, head: Oid, snapshot: Oid) -> None:
    """Make the files of `worktree` (checked out at `head`, index at `head`) those of the
    commit `snapshot`, leaving the index at `head`: the snapshot's changes are the
    worktree's uncommitted changes, as they were where it was taken."""
    for args in (["read-tree", "-m", "-u", head, snapshot], ["read-tree", head]):
        rc, out = _git(
            worktree,
            ["--git-dir", os.fspath(git_dir), "--work-tree", os.fspath(worktree), *args],
            timeout=_TIMEOUT,
        )
        if rc != 0:
            raise GitsupError(f"cannot check out {snapshot[:12]} in {worktree}: {_tail(out)}")
