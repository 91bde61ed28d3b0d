"""`git sup ls` without libgit2: the repository found and its branches read from its files
exactly as the Git gateway finds and reads them, behind counts and changed paths from a
cache keyed by the commits they depend on (never stale, nothing lost when it is damaged),
who-needs-a-human from the record where the record decides it, overlaps through an index."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import GIT_SUP, git
from tests.helpers.sup import FIX_AND_COMMIT, common_dir, run_cli_inproc, write_worker


def _ls_json(repo: Path) -> tuple[list[dict[str, Any]], set[str]]:
    """`git sup ls --json` through the console script: its rows (age left out: it is the
    clock) and the top-level modules it imported."""
    res = subprocess.run(
        [GIT_SUP, "ls", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
        timeout=60,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    mods = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in res.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "typer" in mods  # the measurement works
    rows = json.loads(res.stdout)
    for r in rows:
        r.pop("age")
    return rows, mods


def _start(repo: Path, *args: str) -> dict[str, Any]:
    rc, out, err = run_cli_inproc(repo, "start", *args, "--json", "--quiet", "--review", "none")
    assert rc in (0, 3), err
    rec: dict[str, Any] = json.loads(out)
    return rec


def _commit(repo: Path, name: str) -> None:
    (repo / name).write_text(name + "\n")
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"add {name}")


def test_ls_loads_no_libgit2_once_its_commit_pairs_are_known(repo: Path, tmp: Path) -> None:
    fixer = write_worker(tmp, FIX_AND_COMMIT)
    a = _start(repo, "fix one", "--worker", fixer)
    b = _start(repo, "fix two", "--worker", fixer)
    assert a["status"] == b["status"] == "ready"
    _commit(repo, "one.txt")
    cache = common_dir(repo) / "sup" / "cache" / "graph.json"
    cache.unlink(missing_ok=True)

    first, _ = _ls_json(repo)  # computes what it does not know yet, and keeps it
    rows = {r["id"]: r for r in first}
    assert rows[a["id"]]["behind"] == 1 and rows[a["id"]]["overlaps"] == [b["id"]]
    assert rows[b["id"]]["overlaps"] == [a["id"]]
    kept = json.loads(cache.read_text())
    assert kept["behind"] and kept["paths"]

    second, mods = _ls_json(repo)
    assert second == first
    assert "pygit2" not in mods, "a listing whose pairs are known loaded libgit2"

    # the source branch moves: a new pair, computed and right (no stale count); the pair of
    # the old tip is no longer kept, the changed paths (still asked for) are
    _commit(repo, "two.txt")
    third, mods = _ls_json(repo)
    assert {r["id"]: r["behind"] for r in third} == {a["id"]: 2, b["id"]: 2}
    assert "pygit2" in mods
    now = json.loads(cache.read_text())
    assert len(now["behind"]) == len(kept["behind"]) and now["behind"] != kept["behind"]
    assert now["paths"] == kept["paths"]
    assert _ls_json(repo)[0] == third

    # a damaged cache, or one of another version, is no cache: the same rows, computed again
    for damaged in ("{not json", json.dumps({**kept, "version": 99}), "[]"):
        cache.write_text(damaged)
        rows_now, mods = _ls_json(repo)
        assert rows_now == third and "pygit2" in mods
    # a cache that cannot be written is no error either
    cache.unlink()
    cache.mkdir()
    try:
        assert _ls_json(repo)[0] == third
    finally:
        cache.rmdir()


def test_ls_through_a_linked_worktree_and_packed_refs(repo: Path, tmp: Path) -> None:
    fixer = write_worker(tmp, FIX_AND_COMMIT)
    a = _start(repo, "fix", "--worker", fixer)
    _commit(repo, "one.txt")
    before, _ = _ls_json(repo)
    git(repo, "pack-refs", "--all")  # branch tips now only in packed-refs
    assert not (common_dir(repo) / "refs" / "heads" / "main").exists()
    git(repo, "worktree", "add", "-q", str(tmp / "linked"), "-b", "side")
    (tmp / "linked" / "sub").mkdir()
    rows, mods = _ls_json(tmp / "linked" / "sub")
    assert rows == before and rows[0]["id"] == a["id"] and rows[0]["behind"] == 1
    assert "pygit2" not in mods


def test_locate_finds_what_the_git_gateway_finds(repo: Path, tmp: Path) -> None:
    from gitsup.git import GitRepo
    from gitsup.store.gitfiles import locate

    (repo / "deep" / "er").mkdir(parents=True)
    git(repo, "worktree", "add", "-q", str(tmp / "wt"), "-b", "wt")
    for where in (repo, repo / "deep" / "er", tmp / "wt"):
        assert locate(where) == str(GitRepo.discover(where).common_dir), where
    # what it cannot be sure of is left to the gateway: a bare repository, the Git dir
    # itself, a .git file that says something else, no repository at all
    git(tmp, "init", "-q", "--bare", "bare.git")
    assert locate(tmp / "bare.git") is None
    assert locate(repo / ".git") is None
    odd = tmp / "odd"
    odd.mkdir()
    (odd / ".git").write_text("not a gitdir line\n")
    assert locate(odd) is None
    (odd / ".git").write_text(f"gitdir: {tmp / 'nowhere'}\n")
    assert locate(odd) is None
    lonely = Path("/") / "proc" / "self"  # no .git above it on any file system
    assert locate(lonely) is None


def test_ls_outside_a_repository_and_in_a_bare_one_says_so(tmp: Path) -> None:
    plain = tmp / "plain"
    plain.mkdir()
    git(tmp, "init", "-q", "--bare", "bare.git")
    for where, says in ((plain, "not a Git repository"), (tmp / "bare.git", "bare")):
        res = subprocess.run([GIT_SUP, "ls"], cwd=where, capture_output=True, text=True)
        assert res.returncode != 0 and says in res.stderr and "Traceback" not in res.stderr


def test_branches_read_from_files_as_the_gateway_reads_them(repo: Path) -> None:
    from gitsup.git import GitRepo
    from gitsup.store.gitfiles import BranchReader, Unsure

    git(repo, "branch", "sup/20260101-abcdef")
    git(repo, "branch", "loose")
    git(repo, "branch", "packed")
    git(repo, "pack-refs", "--all")
    _commit(repo, "x.txt")
    git(repo, "branch", "-f", "loose")  # loose again, and newer than its packed entry
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    gw = GitRepo.discover(repo)
    reader = BranchReader(str(gw.common_dir))
    for name in ("main", "loose", "packed", "sup/20260101-abcdef", "missing", "sup/missing",
                 "sup", ""):  # fmt: skip
        assert reader.read_branch(name) == gw.branch_target(name), name
    # a symbolic branch and names the files alone cannot vouch for go to the gateway
    for name in ("alias", "../../HEAD", "a..b", ".hidden", "x.lock", "a//b", "/abs"):
        with pytest.raises(Unsure):
            reader.read_branch(name)


def test_attention_from_the_record_is_what_the_logs_would_say(tmp: Path) -> None:
    from gitsup.attention.fold import Board, attention_of
    from gitsup.layout import Layout

    layout = Layout(tmp / "common")
    layout.ensure()
    ev = {"seq": 1, "ts": 1.0, "type": "state_changed"}
    cases: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
        "parked-with-reason": (
            {"state": "blocked", "status": "parked", "reasons": ["checks failed"]},
            [{**ev, "data": {"to": "blocked", "reason": "from the log"}}],
        ),
        "parked-empty-reason": ({"state": "blocked", "status": "parked", "reasons": [""]}, []),
        "parked-no-reason": (
            {"state": "blocked", "status": "parked", "reasons": []},
            [{**ev, "data": {"to": "blocked", "reason": "the log says"}}],
        ),
        "ready": ({"state": "completed", "status": "ready"}, []),
        "failed-decider": (
            {"state": "failed", "status": "failed"},
            [{**ev, "type": "decision", "data": {"error": "x"}}],
        ),
        "running-dead-supervisor": (
            {"state": "running", "status": "pending", "supervisor": {"pid": 2**22 + 7}},
            [{**ev, "type": "decision", "data": {"error": "x"}}],
        ),
        "paused": ({"state": "paused", "status": "pending"}, []),
    }
    records = {}
    for i, (name, (rec, events)) in enumerate(cases.items()):
        tid = f"20260101-{i:06x}"
        d = layout.tasks / tid
        d.mkdir()
        records[tid] = {"id": tid, "goal": name, **rec}
        (d / "task.json").write_text(json.dumps(records[tid]))
        (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    got = attention_of(layout, records)
    board = Board(layout, tail_bytes=32 * 1024, records=records)  # every log read
    assert got == {r.id: r.attention for r in board.refresh() if r.attention}
    by_goal = {records[t]["goal"]: v for t, v in got.items()}
    assert by_goal["parked-with-reason"] == ["parked: checks failed"]
    assert by_goal["parked-empty-reason"] == ["parked"]
    assert by_goal["parked-no-reason"] == ["parked: the log says"]
    assert "ready" not in by_goal and "failed-decider" not in by_goal
    assert any("supervisor is not running" in x for x in by_goal["running-dead-supervisor"])
    assert attention_of(layout) == got  # reading the records itself


def test_overlaps_through_the_index_are_those_of_every_pair() -> None:
    from gitsup.tasks.overlap import meeting

    rnd = random.Random(18)
    for _ in range(300):
        changed = {
            f"t{i}": {f"p{rnd.randrange(12)}" for _ in range(rnd.randrange(4))}
            for i in range(rnd.randrange(8))
        }
        pairs: dict[str, list[str]] = {}
        ids = list(changed)
        for i, a in enumerate(ids):
            for b in ids[i + 1 :]:
                if changed[a] & changed[b]:
                    pairs.setdefault(a, []).append(b)
                    pairs.setdefault(b, []).append(a)
        assert meeting(changed) == {k: sorted(v) for k, v in pairs.items()}


_SCALARS = st.one_of(
    st.text(max_size=6), st.integers(), st.floats(), st.booleans(), st.none(),
    st.just(Path("/p")),  # not JSON: written as its str, like emit_json does
)  # fmt: skip
_KEYS = st.one_of(st.text(max_size=6), st.integers(), st.booleans(), st.none())
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(st.text(max_size=3), inner, max_size=2),
        st.dictionaries(_KEYS, inner, max_size=2),
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(st.one_of(st.dictionaries(_KEYS, _VALUES, max_size=5), _VALUES), max_size=4))
def test_ls_json_rows_are_written_as_the_indenting_encoder_writes_them(rows: list[Any]) -> None:
    from gitsup.cli.output import rows_json

    assert rows_json(rows) == json.dumps(rows, indent=2, default=str)
