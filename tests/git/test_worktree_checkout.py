"""How a task's worktree is made (`git worktree add` with parallel checkout): the files and
the index match the baseline, the user's checkout is untouched, no hook of the user's runs,
and a checkout that fails leaves nothing behind, not even at the expense of the user's own
worktree registrations."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gitsup.errors import GitsupError
from gitsup.spec import spec_from_mapping
from gitsup.store.suprepo import SupRepo, worktree_root
from gitsup.tasks.lifecycle import prepare_task
from tests.conftest import git

SPEC = {"goal": "g", "worker": {"kind": "process", "argv": ["true"]}, "review": {"kind": "none"}}


def _state(repo: Path) -> dict[str, object]:
    common = repo / ".git"
    return {
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "registrations": sorted(p.name for p in (common / "worktrees").glob("*")),
        "tasks": sorted(p.name for p in (common / "sup" / "tasks").glob("*")),
    }


def _hook(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "$@" >> {marker}\n')
    path.chmod(0o755)


def test_the_task_worktree_matches_the_baseline_and_the_user_checkout_is_untouched(
    repo: Path,
) -> None:
    (repo / "pkg").mkdir()
    for i in range(300):  # above git's threshold for a parallel checkout
        (repo / "pkg" / f"m{i}.py").write_text(f"X = {i}\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    os.symlink("calc.py", repo / "link")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "more")
    (repo / "calc.py").write_text("uncommitted work of the user\n")  # dirty user checkout
    index_before = (repo / ".git" / "index").read_bytes()
    head_before = (repo / ".git" / "HEAD").read_text()
    ctx = SupRepo.discover(repo)
    record, lease = prepare_task(ctx, spec_from_mapping(SPEC))
    ctx.leases.release(lease)
    wt = Path(record.worktree)
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "rev-parse", "HEAD") == git(repo, "rev-parse", "HEAD")
    assert (wt / "pkg" / "m299.py").read_text() == "X = 299\n"
    assert os.stat(wt / "run.sh").st_mode & stat.S_IXUSR
    assert os.readlink(wt / "link") == "calc.py"
    assert (wt / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    # the user's files, index and HEAD are as they were
    assert (repo / "calc.py").read_text() == "uncommitted work of the user\n"
    assert (repo / ".git" / "index").read_bytes() == index_before
    assert (repo / ".git" / "HEAD").read_text() == head_before
    # the registration is named after the task, the index lives in the private Git dir
    assert (repo / ".git" / "worktrees" / record.id).is_dir()
    assert not (repo / ".git" / "worktrees" / record.id / "index").exists()
    assert (repo / ".git" / "sup" / "tasks" / record.id / "git" / "index").is_file()


def test_no_hook_of_the_user_runs_when_a_task_worktree_is_made(repo: Path, tmp: Path) -> None:
    marker = tmp / "hook-ran"
    _hook(repo / ".git" / "hooks" / "post-checkout", marker)
    # the hook is real: a plain `git worktree add` runs it
    git(repo, "worktree", "add", "-q", "--detach", str(tmp / "plain"), "HEAD")
    assert marker.exists()
    marker.unlink()
    ctx = SupRepo.discover(repo)
    record, lease = prepare_task(ctx, spec_from_mapping(SPEC))
    ctx.leases.release(lease)
    assert (Path(record.worktree) / "calc.py").exists()
    assert not marker.exists()
    # nor one found through the user's core.hooksPath
    _hook(tmp / "myhooks" / "post-checkout", marker)
    git(repo, "config", "core.hooksPath", str(tmp / "myhooks"))
    record, lease = prepare_task(SupRepo.discover(repo), spec_from_mapping(SPEC))
    ctx.leases.release(lease)
    assert (Path(record.worktree) / "calc.py").exists()
    assert not marker.exists()


def _failing_git(bindir: Path, tmp: Path) -> None:
    """A `git` first on PATH that lets `worktree add` do its work (files, registration)
    and then fails, like a checkout that ran out of disk at the end."""
    real = next(
        str(Path(d) / "git")
        for d in os.environ["PATH"].split(os.pathsep)
        if (Path(d) / "git").is_file() and Path(d) != bindir
    )
    bindir.mkdir()
    script = bindir / "git"
    script.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" worktree add "*)\n'
        f'  {real} "$@"; echo "fatal: simulated failure after the checkout" >&2; exit 128;;\n'
        "esac\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)


def test_a_failed_checkout_leaves_nothing_and_keeps_the_users_registrations(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the user's own linked worktree, on a disk that is not mounted right now: a prune
    # would drop its registration
    git(repo, "worktree", "add", "-q", "-b", "usb", str(tmp / "usb-stick"))
    os.rename(tmp / "usb-stick", tmp / "unmounted")
    ctx = SupRepo.discover(repo)
    before = _state(repo)
    bindir = tmp / "bin"
    _failing_git(bindir, tmp)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(GitsupError, match="simulated failure after the checkout"):
        prepare_task(ctx, spec_from_mapping(SPEC))
    monkeypatch.undo()
    assert _state(repo) == before
    assert (repo / ".git" / "worktrees" / "usb-stick" / "gitdir").is_file()
    root = worktree_root(ctx)
    assert not root.exists() or list(root.iterdir()) == []
    # and the next start works
    record, lease = prepare_task(SupRepo.discover(repo), spec_from_mapping(SPEC))
    ctx.leases.release(lease)
    assert git(Path(record.worktree), "status", "--porcelain") == ""


def test_a_stale_registration_under_the_task_name_is_refused_and_left_alone(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gitsup.ids.os.urandom", lambda n: b"\x12\x34\x56")
    from gitsup.ids import new_task_id

    tid = new_task_id()
    stale = repo / ".git" / "worktrees" / tid
    stale.mkdir(parents=True)
    (stale / "gitdir").write_text(f"{tmp / 'gone' / '.git'}\n")
    (stale / "HEAD").write_text("ref: refs/heads/main\n")
    (stale / "commondir").write_text("../..\n")
    ctx = SupRepo.discover(repo)
    before = _state(repo)
    with pytest.raises(GitsupError, match=f"registration named {tid}"):
        prepare_task(ctx, spec_from_mapping(SPEC))
    assert _state(repo) == before
    assert (stale / "gitdir").read_text() == f"{tmp / 'gone' / '.git'}\n"
    assert not (worktree_root(ctx) / tid).exists()
