"""Nothing is pushed from inside a task: every way of pushing from a task worktree (or
with the worker's marker) is rejected, by the pre-push hook and, with --no-verify, by the
server-side gate; the remote's refs never change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.boundary.conftest import Setup, push, refs_of, rejected
from tests.conftest import git

# How a worker could try to publish its work (argv after `git push`).
ATTEMPTS: dict[str, list[str]] = {
    "branch": ["origin", "HEAD"],
    "head_to_main": ["origin", "HEAD:refs/heads/main"],
    "short_main": ["origin", "HEAD:main"],
    "force_with_lease": ["--force-with-lease", "origin", "HEAD:main"],
    "force": ["--force", "origin", "HEAD:main"],
    "all": ["--all", "origin"],
    "mirror": ["--mirror", "origin"],
    "delete": ["origin", ":refs/heads/feature"],
    "delete_flag": ["--delete", "origin", "feature"],
    "tag": ["origin", "refs/tags/v1"],
    "tags": ["--tags", "origin"],
    "sup_refs": ["origin", "refs/sup/*:refs/sup/*"],
    "notes": ["origin", "refs/notes/sup"],
    "other_remote": ["other", "HEAD:refs/heads/work"],
    "by_url": ["<origin-url>", "HEAD:refs/heads/elsewhere"],
}


def _prepare(setup: Setup, rec: dict[str, Any]) -> Path:
    wt = Path(rec["worktree"])
    # Something on the remote to delete, and a tag to push.
    git(setup.repo, "push", "-q", "origin", "main:refs/heads/feature")
    git(wt, "tag", "v1")
    # The task's private Git dir has no gitsup refs or notes of its own: a worker that wants
    # to push them makes them up first.
    git(wt, "notes", "--ref=sup", "add", "-m", "forged", "HEAD")
    git(wt, "update-ref", "refs/sup/forged", "HEAD")
    return wt


def _argv(setup: Setup, attempt: list[str]) -> list[str]:
    # A task's private Git dir has no remotes: from inside a task, a remote is named by
    # its URL (what a worker can always do).
    urls = {
        "<origin-url>": str(setup.origin),
        "origin": str(setup.origin),
        "other": str(setup.other),
        # without a remote-tracking ref, a lease names the value it expects
        "--force-with-lease": "--force-with-lease=refs/heads/main:"
        + git(setup.origin, "rev-parse", "main"),
    }
    return [urls.get(a, a) for a in attempt]


def test_a_task_has_no_remotes(setup: Setup, ready: dict[str, Any]) -> None:
    wt = _prepare(setup, ready)
    assert git(wt, "remote") == ""
    res = push(wt, "origin", "HEAD:refs/heads/main")
    assert res.returncode != 0 and "does not appear to be a git repository" in res.stderr


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_client_hook_rejects_every_push_from_a_task_worktree(
    setup: Setup, ready: dict[str, Any], name: str
) -> None:
    wt = _prepare(setup, ready)
    before = {b: refs_of(b) for b in (setup.origin, setup.other)}
    res = push(wt, *_argv(setup, ATTEMPTS[name]))
    rejected(res, f"inside task {ready['id']}")
    assert {b: refs_of(b) for b in (setup.origin, setup.other)} == before


@pytest.mark.parametrize("marker", ["env", "cwd"])
@pytest.mark.parametrize(
    "name", ["branch", "head_to_main", "force", "all", "mirror", "tags", "delete", "by_url"]
)
def test_server_gate_rejects_no_verify_pushes_from_a_task(
    setup: Setup, ready: dict[str, Any], name: str, marker: str
) -> None:
    """`--no-verify` skips the client hook; the pre-receive gate still sees the task:
    through the inherited GITSUP_TASK, or (without it) through the cwd of the pushing git."""
    wt = _prepare(setup, ready)
    before = refs_of(setup.origin)
    env = {"GITSUP_TASK": ready["id"]} if marker == "env" else None
    res = push(wt, "--no-verify", *_argv(setup, ATTEMPTS[name]), env=env)
    rejected(res, "inside task", ready["id"])
    assert refs_of(setup.origin) == before


def test_worker_marker_rejects_pushes_from_anywhere(setup: Setup, ready: dict[str, Any]) -> None:
    """A process carrying GITSUP_TASK cannot push even from the main checkout."""
    before = refs_of(setup.origin)
    git(setup.repo, "switch", "-q", "-c", "side")
    res = push(setup.repo, "origin", "side", env={"GITSUP_TASK": ready["id"]})
    rejected(res, "GITSUP_TASK")
    res = push(setup.repo, "--no-verify", "origin", "side", env={"GITSUP_TASK": ready["id"]})
    rejected(res, "GITSUP_TASK")
    assert refs_of(setup.origin) == before


def test_push_from_the_worker_process_itself_is_rejected(setup: Setup) -> None:
    """A worker that commits and then tries `git push` (plain, and --no-verify with the
    marker removed): both refused while the task runs; the remote is unchanged."""
    from tests.boundary.conftest import start_task

    # The hook and the gate on their own: inside the sandbox the push cannot even write the
    # remote (tests/host/test_sandbox.py), and this test reports through a file next to it.
    git(setup.repo, "config", "sup.sandbox", "off")
    out = setup.tmp / "push-attempts.txt"
    body = f"""
import os, pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
env = dict(os.environ); env.pop("GITSUP_TASK")
a = subprocess.run(["git", "push", {str(setup.origin)!r}, "HEAD:refs/heads/main"], capture_output=True, text=True)
b = subprocess.run(["git", "push", "--no-verify", {str(setup.origin)!r}, "HEAD:refs/heads/x"], capture_output=True, text=True, env=env)
pathlib.Path({str(out)!r}).write_text(f"{{a.returncode}}\\n{{a.stderr}}\\n---\\n{{b.returncode}}\\n{{b.stderr}}")
"""
    before = refs_of(setup.origin)
    rec = start_task(setup, body)
    assert rec["status"] == "ready", rec
    text = out.read_text()
    first, second = text.split("---")
    assert not first.startswith("0") and "gitsup: rejected refs/heads/main" in first, first
    assert not second.strip().startswith("0") and "gitsup: rejected refs/heads/x" in second, second
    assert refs_of(setup.origin) == before
