"""A pool of ready worktrees, so that starting a task does not wait for a full checkout.

With `git config sup.poolSize N` (default 0: off), gitsup keeps up to N spare linked
worktrees, detached at the commit HEAD had when they were made, under
`<worktree root>/.pool/`. `git sup start` takes one (under a lock), moves it into place
with `git worktree move`, points it at the new `sup/<id>` branch (when the spare's commit
is the baseline: only HEAD changes; otherwise `git checkout` updates just the files that
differ), and starts a background refill. A spare is taken only when its ready marker
(outside the worktree) exists, so a half-made spare is never used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from gitsup.errors import GitsupError
from gitsup.ids import Oid
from gitsup.store.records import TaskLock
from gitsup.store.suprepo import SupRepo, worktree_root


@dataclass(frozen=True)
class Spare:
    path: Path
    commit: Oid


def pool_size(ctx: SupRepo) -> int:
    raw = ctx.repo.config_get("sup.poolSize")
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        raise GitsupError(f"sup.poolSize must be a whole number, not {raw!r}") from None


def pool_dir(ctx: SupRepo) -> Path:
    return worktree_root(ctx) / ".pool"


def _lock(ctx: SupRepo) -> TaskLock:
    ctx.layout.ensure()
    return TaskLock(ctx.layout.root / "pool.lock")


def spares(ctx: SupRepo) -> list[Spare]:
    d = pool_dir(ctx)
    out = []
    if d.is_dir():
        for marker in sorted(d.glob("*.ready")):
            path = d / marker.stem
            commit = marker.read_text().strip()
            if (path / ".git").is_file() and len(commit) == 40:
                out.append(Spare(path, Oid(commit)))
    return out


def take(ctx: SupRepo, baseline: Oid) -> Spare | None:
    """Claim a spare (one at the baseline if there is one). The claim removes its marker."""
    with _lock(ctx):
        ready = spares(ctx)
        if not ready:
            return None
        ready.sort(key=lambda s: s.commit != baseline)
        spare = ready[0]
        (spare.path.parent / f"{spare.path.name}.ready").unlink()
        return spare


def fill(ctx: SupRepo, size: int | None = None) -> list[Spare]:
    """Make spares at HEAD until the pool holds `size` (default sup.poolSize)."""
    want = pool_size(ctx) if size is None else size
    made: list[Spare] = []
    d = pool_dir(ctx)
    d.mkdir(parents=True, exist_ok=True)
    while True:
        with _lock(ctx):
            have = len(spares(ctx)) + len(list(d.glob("*.making")))
            if have >= want:
                return made
            name = f"pool-{os.urandom(4).hex()}"
            (d / f"{name}.making").write_text("")
        try:
            head = ctx.repo.head_commit()
            ctx.repo.add_detached_worktree(d / name, head)
            (d / f"{name}.ready").write_text(head + "\n")
            made.append(Spare(d / name, head))
        finally:
            (d / f"{name}.making").unlink(missing_ok=True)


def clear(ctx: SupRepo) -> int:
    """Remove every spare (and leftovers of interrupted fills)."""
    d = pool_dir(ctx)
    n = 0
    with _lock(ctx):
        if not d.is_dir():
            return 0
        for p in list(d.iterdir()):
            if p.is_dir():
                ctx.repo.remove_detached_worktree(p)
                n += 1
            else:
                p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        d.rmdir()
    return n


def refill_in_background(ctx: SupRepo) -> None:
    from gitsup.host.proc import gitsup_python, spawn_detached

    spawn_detached(
        gitsup_python("gitsup.tasks.pool", str(ctx.repo.main_workdir)),
        cwd=ctx.repo.main_workdir,
        log=ctx.layout.root / "pool.log",
    )


def install_spare(ctx: SupRepo, spare: Spare, dest: Path, branch: str, baseline: Oid) -> None:
    """Move a claimed spare to `dest` and check out `branch` (already at `baseline`)."""
    from gitsup.git import GitRepo
    from gitsup.host import proc

    env = proc.child_env()
    res = proc.run(
        ["git", "worktree", "move", str(spare.path), str(dest)],
        cwd=ctx.repo.common_dir,
        env=env,
        timeout=120,
    )
    if not res.ok:
        shutil.rmtree(spare.path, ignore_errors=True)
        raise GitsupError(f"cannot move a pooled worktree into place: {res.output.strip()}")
    if spare.commit == baseline:
        GitRepo.open(dest).set_head_branch(branch)  # files and index already match
        return
    res = proc.run(["git", "checkout", "-q", branch], cwd=dest, env=env, timeout=600)
    if not res.ok:
        raise GitsupError(f"cannot check out {branch} in {dest}: {res.output.strip()}")


if __name__ == "__main__":
    fill(SupRepo.discover(sys.argv[1] if len(sys.argv) > 1 else "."))
