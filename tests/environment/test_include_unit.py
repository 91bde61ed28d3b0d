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


def test_the_worktree_s_own_checkout_must_ignore_it_too(main: Path, tmp: Path) -> None:
    """A baseline whose rules do not ignore the path would have the task commit it."""
    res = _resolve(main, "node_modules")
    old, new = tmp / "old", tmp / "new"
    git(main, "worktree", "add", "-q", "--detach", str(old), "HEAD~1")  # before the .gitignore
    git(main, "worktree", "add", "-q", "--detach", str(new), "HEAD")
    done = include.prepare(res, worktree=old, state=tmp / "s1", overlay=False)
    assert done.entries == [] and done.refused == [
        "include node_modules: not ignored by the task's checkout (its baseline); not applied"
    ]
    assert not (old / "node_modules").exists()
    done = include.prepare(res, worktree=new, state=tmp / "s2", overlay=False)
    assert done.refused == [] and (new / "node_modules" / "a" / "index.js").is_file()


def test_a_venvs_scripts_are_rewritten_to_where_the_task_sees_it(tmp: Path) -> None:
    """Both forms pip writes (`#!<venv>/bin/python`, and the `exec` form for a path too long
    for `#!`), and the activate script; the source is never written; what does not name
    the venv is left out; a directory without `pyvenv.cfg` is not a venv."""
    venv = tmp / ("v" * 120) / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    long_form = f"#!/bin/sh\n'''exec' \"{venv}/bin/python3\" \"$0\" \"$@\"\n' '''\nimport x\n"
    files = {
        "pytest": f"#!{venv}/bin/python\nimport pytest\n",
        "long": long_form,
        "activate": f'VIRTUAL_ENV="{venv}"\nexport PATH="$VIRTUAL_ENV/bin:$PATH"\n',
        "other": "#!/usr/bin/env python3\nprint(1)\n",
        "sibling": f"#!{venv}2/bin/python\n",  # another venv's path, not this one's
    }
    for name, text in files.items():
        (venv / "bin" / name).write_text(text)
        (venv / "bin" / name).chmod(0o755)
    before = {p.name: p.read_bytes() for p in (venv / "bin").iterdir()}
    upper = tmp / "upper"
    upper.mkdir()
    assert include.relocate_scripts(str(venv), "/wt/.venv", upper) == 3
    assert (upper / "bin" / "pytest").read_text() == "#!/wt/.venv/bin/python\nimport pytest\n"
    assert '"/wt/.venv/bin/python3"' in (upper / "bin" / "long").read_text()
    assert (upper / "bin" / "activate").read_text().startswith('VIRTUAL_ENV="/wt/.venv"\n')
    assert os.stat(upper / "bin" / "pytest").st_mode & 0o777 == 0o755
    assert sorted(p.name for p in (upper / "bin").iterdir()) == ["activate", "long", "pytest"]
    assert {p.name: p.read_bytes() for p in (venv / "bin").iterdir()} == before
    # a `bin` that is a link (in the source, or where the rewrite would go) is left alone
    linked = tmp / "linked"
    (linked / "real").mkdir(parents=True)
    (linked / "pyvenv.cfg").write_text("")
    (linked / "real" / "pytest").write_text(f"#!{linked}/bin/python\n")
    (linked / "bin").symlink_to("real")
    assert include.relocate_scripts(str(linked), "/wt/.venv", tmp / "u2") == 0
    (tmp / "u3").mkdir()
    (tmp / "u3" / "bin").symlink_to(tmp / "outside")
    assert include.relocate_scripts(str(venv), "/wt/.venv", tmp / "u3") == 0
    assert not (tmp / "outside").exists()
    (venv / "pyvenv.cfg").unlink()
    assert include.relocate_scripts(str(venv), "/wt/.venv", tmp / "none") == 0


def test_an_included_trees_identity_changes_with_its_content(main: Path) -> None:
    src = include.Source("node_modules", str(main / "node_modules"), "dir")
    first = include.identity(src)
    assert include.identity(src) == first
    index = main / "node_modules" / "a" / "index.js"
    st = index.stat()
    index.write_text("y")  # same size, in place
    os.utime(index, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    changed = include.identity(src)
    assert changed != first
    (main / "node_modules" / "a" / "new.js").write_text("")
    assert include.identity(src) != changed
    env = include.Source(".env", str(main / ".env"), "file")
    was = include.identity(env)
    (main / ".env").write_text("LOCAL=2\n")
    assert include.identity(env) != was
    assert include.identity(include.Source("x", "", "missing")) == "missing"


def test_the_environment_digest_covers_the_recipe_and_the_included_trees(main: Path) -> None:
    """The queue's memo key: the same while nothing changed; another when the recipe's
    include, setup, setup_egress or cache change, when an included tree changes, or when a
    task's own include is added."""
    from gitsup.verification.confined import Confinement, environment_digest

    repo = GitRepo.open(main)
    (main / ".gitsup").mkdir()
    recipe = main / ".gitsup" / "environment.toml"

    def digest(conf: Confinement | None = None) -> str:
        return environment_digest(repo, conf or Confinement())

    recipe.write_text('[environment]\ninclude = ["node_modules"]\n')
    base = digest()
    assert digest() == base
    seen = {base}
    for text in (
        '[environment]\ninclude = ["node_modules", ".env"]\n',
        '[environment]\ninclude = ["node_modules"]\nsetup = ["npm ci"]\n',
        '[environment]\ninclude = ["node_modules"]\nsetup = ["npm ci"]\nsetup_egress = ["npm"]\n',
        '[environment]\ninclude = ["node_modules"]\nsetup = ["npm ci"]\ncache = ["npm"]\n',
    ):
        recipe.write_text(text)
        seen.add(digest())
    assert len(seen) == 5
    recipe.write_text('[environment]\ninclude = ["node_modules"]\n')
    assert digest() == base
    assert digest(Confinement(include=((".env",),))) != base  # a task's own include
    (main / "node_modules" / "b").mkdir()
    assert digest() != base
