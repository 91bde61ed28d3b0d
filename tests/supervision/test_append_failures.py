"""An event that cannot be written is not the end of the task: an append that fails (here a
full disk, injected with `GITSUP_FAULT=append:<type>:<n>` at each append site of a task's
life) is kept pending, with everything after it, and written in order before the next
operation; a `recoverable_failure` says so. Through the real CLI with a process worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, check_cmd, write_worker

QUICK_CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")

# Every append site of an ordinary task that ends ready, in the order they come.
SITES = [
    "state_changed",
    "worker_started",
    "worker_output",
    "turn_completed",
    "work_imported",
    "decision",
    "acceptance_result",
    "candidate_ready",
    "task_finished",
]


def _run(repo: Path, tmp: Path, fault: str | None) -> tuple[int, dict[str, Any], str]:
    worker = write_worker(tmp, FIX_AND_COMMIT)
    env = {"GITSUP_FAULT": fault} if fault else {}
    args = ["start", "fix add", "--worker", worker, "--check", QUICK_CHECK, "--review", "none"]
    res = run_sup(repo, *args, "--json", env=env)
    rec = json.loads(res.stdout) if res.stdout.strip() else {}
    return res.returncode, rec, res.stderr


def _log(repo: Path, task: str) -> list[dict[str, Any]]:
    res = run_sup(repo, "log", task, "--json")
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def _sealed(repo: Path, task: str) -> list[int]:
    tip = git(repo, "rev-parse", f"refs/sup/{task}/log")
    seqs: list[int] = []
    for name in git(repo, "ls-tree", "--name-only", tip).splitlines():
        seqs += [json.loads(x)["seq"] for x in git(repo, "show", f"{tip}:{name}").splitlines()]
    return seqs


def _lifecycle(events: list[dict[str, Any]]) -> list[str]:
    """The task's own events in order (what the worker's exit races is left out)."""
    return [
        e["type"]
        for e in events
        if e["type"] not in ("recoverable_failure", "worker_stopped", "worker_output")
    ]


_CLEAN: list[list[str]] = []  # the life of the same task without a failure, once


def _clean(repo: Path, tmp: Path) -> list[str]:
    if not _CLEAN:
        rc, rec, err = _run(repo, tmp, None)
        assert rc == 0, err
        _CLEAN.append(_lifecycle(_log(repo, rec["id"])))
    return _CLEAN[0]


CASES = [(s, 1) for s in SITES] + [("state_changed", 3), ("worker_output", 2), ("task_finished", 3)]


@pytest.mark.parametrize(("site", "times"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_a_failed_append_is_kept_and_written_in_order(
    repo: Path, tmp: Path, site: str, times: int
) -> None:
    clean = _clean(repo, tmp)
    assert site in clean or site == "worker_output"

    rc, rec, err = _run(repo, tmp, f"append:{site}:{times}")
    assert rc == 0, err
    assert rec["status"] == "ready" and rec["state"] == "completed", rec["reasons"]
    events = _log(repo, rec["id"])
    types = [e["type"] for e in events]
    # nothing lost, nothing reordered: the same life as without the failure
    assert _lifecycle(events) == clean
    assert "worker_output" in types
    # said once, before the events it delayed
    failures = [e for e in events if e["type"] == "recoverable_failure"]
    assert [f["data"]["what"] for f in failures] == [f"append of {site}"], failures
    assert "No space left on device" in failures[0]["data"]["error"]
    assert types.index("recoverable_failure") < max(i for i, t in enumerate(types) if t == site)
    assert types[-1] == "task_finished"
    # one log: seq without gaps, everything sealed once, in order
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1))
    assert _sealed(repo, rec["id"]) == seqs
    record = json.loads(run_sup(repo, "show", rec["id"], "--json").stdout or "{}")
    assert record["status"] == "ready"
