"""File requests are judged on the path the kernel resolves, and a path that changes while it
is judged is a denial: never an error that ends the task.

A real filesystem race: another process swaps a directory of the worktree with a symlink to
/etc (renameat2 RENAME_EXCHANGE, so the name is always one or the other) as fast as it can,
while the supervisor's gate answers Read and Write requests for paths under it."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitsup.git import GitRepo
from gitsup.ids import TaskId
from gitsup.layout import Layout
from gitsup.policy import decide_tool, load_policy
from gitsup.spec import spec_from_mapping
from gitsup.store import eventtypes as et
from gitsup.store.payload import Payload
from gitsup.store.record import TaskRecord
from gitsup.supervision.context import TaskContext
from gitsup.supervision.gate import Gate
from gitsup.supervision.journal import Journal
from gitsup.verification.decider import NO_DEADLINE
from gitsup.workers.base import PermissionRequest

SWAPPER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
print("swapping", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
"""


@pytest.fixture
def swapped(repo: Path) -> Iterator[Path]:
    """`repo/sub` is a directory one moment and a symlink to /etc the next."""
    (repo / "sub").mkdir()
    (repo / "sub" / "passwd").write_text("mine\n")
    (repo / "alt").symlink_to("/etc")
    p = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(repo / "sub"), str(repo / "alt")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().startswith("swapping")
    try:
        yield repo / "sub"
    finally:
        p.kill()
        p.wait()


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("Read", {"file_path": "sub/passwd"}),
    ("Write", {"file_path": "sub/new.txt", "content": "x"}),
    ("Edit", {"file_path": "sub/passwd", "old_string": "a", "new_string": "b"}),
    ("Write", {"file_path": "sub/deeper/still/new.txt", "content": "x"}),
]

ROUNDS = 6000


def test_the_policy_answers_every_request_while_a_directory_is_swapped(
    repo: Path, swapped: Path
) -> None:
    policy = load_policy(repo)
    seen: dict[str, int] = {}
    for i in range(ROUNDS):
        tool, tool_input = REQUESTS[i % len(REQUESTS)]
        d = decide_tool(tool, tool_input, worktree=str(repo), policy=policy)
        seen[d.verdict] = seen.get(d.verdict, 0) + 1
        if d.verdict == "allow":
            # allowed only as a path inside the worktree
            assert "outside" not in d.reason, d
    # both sides of the swap were seen: the race really ran
    assert seen.get("allow") and seen.get("ask"), seen


def test_the_gate_denies_a_path_that_changes_under_it(repo: Path, swapped: Path) -> None:
    """The supervisor's gate (what answers a worker's permission request): a denial with a
    reason, never an exception (an exception there ends the task as an internal error)."""
    emitted: list[Payload] = []
    git, spec = GitRepo.open(repo), spec_from_mapping({"goal": "x"})
    layout = Layout(git.common_dir)
    journal = Journal(git, layout, TaskRecord(id=TaskId("t"), worktree=str(repo)), spec)
    ctx = TaskContext(
        git,
        layout,
        spec,
        journal,
        emit=emitted.append,
        save=lambda: None,
        abort=threading.Event(),
        abort_reason=lambda: "",
        clock=lambda: NO_DEADLINE,
        on_call=None,
    )
    gate = Gate(ctx, sandboxed=lambda: False)
    for i in range(ROUNDS):
        tool, tool_input = REQUESTS[i % len(REQUESTS)]
        gate.answer(PermissionRequest(str(i), tool, tool_input), None)
    answers = [p.answer for p in emitted if isinstance(p, et.PermissionDecided)]
    assert len(answers) == ROUNDS and set(answers) <= {"allow", "deny"}
    denied = sum(1 for a in answers if a == "deny")
    assert denied and "allow" in answers


@pytest.mark.parametrize(
    "raw",
    ["sub\x00/passwd", "loop/x", "loop"],
)
def test_an_unresolvable_path_is_a_denial_with_its_reason(repo: Path, raw: str) -> None:
    (repo / "loop").symlink_to(repo / "loop")
    for tool in ("Read", "Write", "Edit", "Grep"):
        key = "path" if tool == "Grep" else "file_path"
        d = decide_tool(tool, {key: raw}, worktree=str(repo), policy=load_policy(repo))
        assert d.verdict == "deny", d
        assert d.rule == "tool.unresolved-path" and "cannot be resolved" in d.reason, d
