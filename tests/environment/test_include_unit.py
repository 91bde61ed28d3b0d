"""What the main checkout says of each include entry, and how a worktree gets it (in-process,
real repositories and files; the overlay itself is tests/environment/test_include.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitsup.environment import include
from gitsup.environment.recipe import merge
from gitsup.git import GitRepo
from gitsup.host.bootstrap import open_beneath
from gitsup.spec import Environment
from tests.conftest import git


@pytest.fixture
def main(repo: Path, tmp: Path) -> Path:
    (repo / ".gitignore").write_text("node_modules/\n.env\nvendor/\nlinked\nout\nsecrets/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    (repo / "node_modules" / "a").mkdir(parents=True)
    (repo / "node_modules" / "a" / "index.js").write_text("x")
    (repo / "node_modules" / ".bin").mkdir()
    (repo / "node_modules" / ".bin" / "a").symlink_to("../a/index.js")
    (repo / ".env").write_text("LOCAL=1\n")
    (repo / "untracked_dir").mkdir()
    (repo / "untracked_dir" / "f").write_text("f")
    (tmp / "outside").mkdir()
    (repo / "linked").symlink_to(tmp / "outside")
    (repo / "secrets").mkdir()
    return repo


def _resolve(main: Path, *paths: str, deny: tuple[str, ...] = ()) -> include.Resolution:
    return include.resolve(GitRepo.open(main), merge(None, Environment(include=list(paths))), deny)


def test_only_ignored_paths_inside_the_checkout_are_given(main: Path) -> None:
    res = _resolve(
        main, "node_modules", ".env", "vendor", "calc.py", "untracked_dir", "linked", "secrets",
        deny=(str(main / "secrets"),),
    )  # fmt: skip
    kinds = {s.path: s.kind for s in res.sources}
    assert kinds == {"node_modules": "dir", ".env": "file", "vendor": "missing"}
    assert res.refused == [
        "include calc.py: tracked in the main checkout (a task's checkout has it); not applied",
        "include untracked_dir: not ignored by the main checkout (the task would commit it); "
        "not applied",
        "include linked: leads out of the main checkout through a link; not applied",
        "include secrets: a protected path (credentials, gitsup's keys); not applied",
    ]


def test_a_copy_is_a_copy(main: Path, tmp: Path) -> None:
    wt = tmp / "wt"
    wt.mkdir()
    res = _resolve(main, "node_modules", ".env")
    done = include.prepare(res, worktree=wt, state=tmp / "state", overlay=False)
    assert [(e["path"], e["method"]) for e in done.entries] == [
        ("node_modules", "copy"),
        (".env", "copy"),
    ]  # ext4 here: no block cloning
    assert done.overlays == []
    assert os.readlink(wt / "node_modules" / ".bin" / "a") == "../a/index.js"
    for rel in ("node_modules/a/index.js", ".env"):
        assert (wt / rel).read_bytes() == (main / rel).read_bytes()
        assert os.stat(wt / rel).st_ino != os.stat(main / rel).st_ino


def test_an_overlay_is_described_not_copied(main: Path, tmp: Path) -> None:
    wt = tmp / "wt"
    wt.mkdir()
    done = include.prepare(
        _resolve(main, "node_modules"), worktree=wt, state=tmp / "st", overlay=True
    )
    [ov] = done.overlays
    assert ov["lower"] == str(main / "node_modules") and ov["path"] == "node_modules"
    assert ov["root"] == str(wt) and Path(ov["upper"]).is_dir() and Path(ov["work"]).is_dir()
    assert list((wt / "node_modules").iterdir()) == []  # the mount point
    assert done.entries[0]["method"] == "overlay" and done.entries[0]["bytes"] == 0


def test_a_worktree_path_that_is_taken_or_leads_elsewhere_is_refused(main: Path, tmp: Path) -> None:
    (main / ".gitignore").write_text("pkgs/\n")
    (main / "pkgs" / "a" / "node_modules").mkdir(parents=True)
    wt, elsewhere = tmp / "wt", tmp / "elsewhere"
    wt.mkdir()
    elsewhere.mkdir()
    (wt / "pkgs").symlink_to(elsewhere)  # a link on the way: never followed
    res = _resolve(main, "pkgs/a/node_modules")
    done = include.prepare(res, worktree=wt, state=tmp / "st", overlay=True)
    assert done.overlays == [] and "cannot reach it in the worktree" in done.refused[0]
    assert list(elsewhere.iterdir()) == []
    (wt / "pkgs").unlink()
    (wt / "pkgs" / "a" / "node_modules").mkdir(parents=True)
    (wt / "pkgs" / "a" / "node_modules" / "own.js").write_text("x")
    done = include.prepare(res, worktree=wt, state=tmp / "st", overlay=False)
    assert done.refused == [
        "include pkgs/a/node_modules: the task's worktree has it already; not applied"
    ]


def test_open_beneath_follows_no_link(tmp: Path) -> None:
    (tmp / "real").mkdir()
    (tmp / "root").mkdir()
    (tmp / "root" / "link").symlink_to(tmp / "real")
    with pytest.raises(OSError):
        open_beneath(str(tmp / "root"), "link/x", create=True)
    assert not (tmp / "real" / "x").exists()
    with pytest.raises(OSError):
        open_beneath(str(tmp / "root"), "../real", create=True)
    fd = open_beneath(str(tmp / "root"), "a/b", create=True)
    os.close(fd)
    assert (tmp / "root" / "a" / "b").is_dir()
