"""A commit a person made on a protected branch after gitsup was set up: the gate's refusal
says how to integrate it (never to trust it), and following the hint publishes it."""

from __future__ import annotations

import json
import re
import shlex

from tests.boundary.conftest import Setup, accepted, push, rejected
from tests.conftest import git, run_sup


def test_the_refusal_gives_a_recipe_that_publishes_the_commit(setup: Setup) -> None:
    repo = setup.repo
    accepted(push(repo, "origin", "main"))
    old = git(repo, "rev-parse", "main")
    (repo / "notes.txt").write_text("mine\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "my own work")
    new = git(repo, "rev-parse", "main")
    res = push(repo, "origin", "main")
    rejected(res, f"git branch my-work {new[:12]}", f"git reset --keep {old[:12]}")
    assert "sup.trustRoot" not in res.stderr
    commands = re.findall(r"`([^`]+)`", res.stderr.split("by hand:", 1)[1])
    start = next(c for c in commands if c.startswith("git sup start"))
    git(repo, "branch", "my-work", new[:12])
    git(repo, "reset", "-q", "--keep", old[:12])
    started = run_sup(repo, *shlex.split(start)[2:], "--json", timeout=180)
    assert started.returncode == 0, started.stderr
    rec = json.loads(started.stdout)
    assert rec["status"] == "ready", rec["reasons"]
    integrated = run_sup(repo, "integrate", rec["id"], "--into", "main")
    assert integrated.returncode == 0, integrated.stderr
    accepted(push(repo, "origin", "main"))
    assert git(setup.origin, "show", "main:notes.txt") == "mine"
