"""Task ids as prefixes, commands run in a task's worktree, and durations that need a unit,
through the real CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, start_json, write_worker

NO_REVIEW = ("--review", "none")


def _task(repo: Path, tmp: Path) -> dict[str, object]:
    worker = write_worker(tmp, FIX_AND_COMMIT)
    rc, rec, err = start_json(repo, "fix add", "--worker", worker, *NO_REVIEW)
    assert rc == 0, err
    return rec


def test_a_unique_prefix_names_a_task(repo: Path, tmp: Path) -> None:
    rec = _task(repo, tmp)
    tid = str(rec["id"])
    random_part = tid.split("-")[1]
    for name in (tid, tid[:11], random_part, random_part[:4]):
        res = run_sup(repo, "show", name, "--json")
        assert res.returncode == 0, (name, res.stderr)
        assert json.loads(res.stdout)["id"] == tid
    log = run_sup(repo, "log", random_part)
    assert log.returncode == 0 and "task_finished" in log.stdout, log.stderr
    for bad, words in (("abc", "at least 4"), ("ffff-ffff", "no task"), ("zz!z", "not a task id")):
        res = run_sup(repo, "show", bad)
        assert res.returncode == 2, (bad, res.stdout, res.stderr)
        assert words in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_an_ambiguous_prefix_is_refused_naming_the_tasks(repo: Path, tmp: Path) -> None:
    first = str(_task(repo, tmp)["id"])
    git(repo, "reset", "-q", "--hard")
    second = str(_task(repo, tmp)["id"])
    day = first[:8]
    assert second.startswith(day)
    res = run_sup(repo, "show", day)
    assert res.returncode == 2, res.stderr
    assert "ambiguous" in res.stderr and first in res.stderr and second in res.stderr


def test_commands_in_a_task_worktree_answer_for_the_owning_repository(
    repo: Path, tmp: Path
) -> None:
    rec = _task(repo, tmp)
    tid = str(rec["id"])
    wt = Path(str(rec["worktree"]))
    assert wt.is_dir()
    ls = run_sup(wt, "ls", "--json")
    assert ls.returncode == 0, ls.stderr
    assert [r["id"] for r in json.loads(ls.stdout)] == [tid]
    show = run_sup(wt, "show", tid[9:], "--json")
    assert show.returncode == 0 and json.loads(show.stdout)["id"] == tid, show.stderr
    qa = run_sup(wt, "queue", "add", tid)
    assert qa.returncode == 0, qa.stderr
    private = repo / ".git" / "sup" / "tasks" / tid / "git"
    assert private.is_dir()
    for args in (("start", "nested", "--worker", "true", *NO_REVIEW), ("init",)):
        res = run_sup(wt, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert f"task {tid}" in res.stderr and str(repo) in res.stderr, res.stderr
    # nothing was set up in the task's private Git dir
    assert not (private / "sup").exists()
    assert git(private.parent / "git", "config", "--get", "notes.displayRef", check=False) == ""


def test_a_duration_on_the_command_line_needs_a_unit(repo: Path, tmp: Path) -> None:
    for option in ("--deadline", "--no-output-timeout", "--closeout-grace"):
        res = run_sup(repo, "start", "x", "--worker", "true", option, "4", *NO_REVIEW)
        assert res.returncode == 2, (option, res.stdout, res.stderr)
        assert "needs a unit" in res.stderr and "4m" in res.stderr, res.stderr
    assert not (repo / ".git" / "sup" / "tasks").exists() or not any(
        (repo / ".git" / "sup" / "tasks").iterdir()
    )
    cost = run_sup(repo, "cost", "--since", "7")
    assert cost.returncode == 2 and "duration (7d)" in cost.stderr, cost.stderr
    worker = write_worker(tmp, FIX_AND_COMMIT)
    rc, rec, err = start_json(
        repo, "fix", "--worker", worker, "--deadline", "5m", "--closeout-grace", "0", *NO_REVIEW
    )
    assert rc == 0, err
    assert rec["status"] == "ready"


def test_completion_lists_ids(repo: Path, tmp: Path) -> None:
    tid = str(_task(repo, tmp)["id"])
    git_sup = shutil.which("git-sup")
    assert git_sup
    res = run_sup(
        repo,
        "show",
        "",
        env={
            "_GIT_SUP_COMPLETE": "complete_bash",
            "COMP_WORDS": "git-sup show ",
            "COMP_CWORD": "2",
        },
    )
    assert tid in res.stdout, (res.stdout, res.stderr)


def test_start_help_names_every_kind_the_spec_takes() -> None:
    import typing

    from gitsup.spec import Review, Worker
    from tests.conftest import run_sup as sup

    res = sup(".", "start", "-h")
    text = " ".join(res.stdout.split())
    for model in (Worker, Review):
        kinds = typing.get_args(model.model_fields["kind"].annotation)
        for kind in kinds:
            assert kind in text, (model.__name__, kind)
