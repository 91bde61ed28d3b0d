"""The rule that says whether a later commit addressed a review comment
(gitsup/store/comments.py), on real commits: a change within 3 lines either side of the
comment's line addresses it, one further away does not; an insertion counts between the
lines it goes between; a removed file addresses every comment on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsup.git import GitRepo
from gitsup.store import comments as cm
from tests.conftest import git

LINES = [f"line {i}" for i in range(1, 21)]


def _commit(repo: Path, lines: list[str] | None, message: str) -> str:
    path = repo / "f.txt"
    if lines is None:
        git(repo, "rm", "-q", "f.txt")
    else:
        path.write_text("\n".join(lines) + "\n")
        git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def base(repo: Path) -> str:
    return _commit(repo, LINES, "twenty lines")


def _status(repo: Path, base: str, head: str, line: int) -> str:
    c = {"id": "c1", "commit": base, "path": "f.txt", "line": line}
    return cm.status(GitRepo.open(repo), c, head)[0]


def _after(repo: Path, base: str, lines: list[str] | None) -> str:
    git(repo, "checkout", "-q", base)
    return _commit(repo, lines, "change")


def test_a_changed_line_addresses_comments_within_three_lines(repo: Path, base: str) -> None:
    changed = [*LINES]
    changed[9] = "line 10, rewritten"
    head = _after(repo, base, changed)
    got = {n: _status(repo, base, head, n) for n in (6, 7, 10, 13, 14)}
    assert got == {
        6: "not addressed",
        7: "addressed",
        10: "addressed",
        13: "addressed",
        14: "not addressed",
    }


def test_an_insertion_counts_between_the_lines_around_it(repo: Path, base: str) -> None:
    head = _after(repo, base, [*LINES[:10], "new", "lines", *LINES[10:]])  # after line 10
    got = {n: _status(repo, base, head, n) for n in (6, 7, 14, 15)}
    assert got == {6: "not addressed", 7: "addressed", 14: "addressed", 15: "not addressed"}


def test_a_deletion_and_a_removed_file(repo: Path, base: str) -> None:
    head = _after(repo, base, [*LINES[:9], *LINES[11:]])  # lines 10 and 11 gone
    assert _status(repo, base, head, 14) == "addressed"
    assert _status(repo, base, head, 15) == "not addressed"
    gone = _after(repo, base, None)
    assert _status(repo, base, gone, 1) == "addressed"


def test_on_its_own_commit_a_comment_is_open_sent_or_left_as_it_was(repo: Path, base: str) -> None:
    r = GitRepo.open(repo)
    c = {"id": "c1", "commit": base, "path": "f.txt", "line": 3}
    assert cm.status(r, c, base)[0] == "open"
    assert cm.status(r, {**c, "revision": {"how": "turn"}}, base)[0] == "sent"
    assert cm.status(r, c, None)[0] == "open"
    # the task that revised it ended with that very commit as its candidate: not addressed
    sent = {**c, "revision": {"how": "task", "task": "20990101-aaaaaa"}}
    assert cm.status(r, sent, base, final_of="20990101-aaaaaa")[0] == "not addressed"
    assert cm.status(r, sent, base, final_of="20990101-bbbbbb")[0] == "sent"
