"""Bad task specs and bad repositories are refused with exit 2 and a message that names
the problem, never a traceback; nothing is left behind by a refused start."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gitsup.errors import GitsupError
from gitsup.spec import load_spec, spec_from_mapping
from tests.conftest import git, run_sup
from tests.helpers.sup import common_dir, run_cli_inproc, write_spec

WORKER = ["--worker", "true", "--review", "none"]


def _refused(res: subprocess.CompletedProcess[str] | tuple[int, str, str], *needles: str) -> None:
    if isinstance(res, tuple):
        rc, stdout, stderr = res
    else:
        rc, stdout, stderr = res.returncode, res.stdout, res.stderr
    assert rc == 2, (rc, stdout, stderr)
    assert "Traceback" not in stderr, stderr
    assert "Traceback" not in stdout, stdout
    assert stderr.startswith("git sup: error:"), stderr
    for n in needles:
        assert n in stderr, f"{n!r} not in stderr:\n{stderr}"


def _nothing_created(repo: Path) -> None:
    assert git(repo, "for-each-ref", "refs/sup/", "refs/heads/sup/") == ""
    tasks = common_dir(repo) / "sup" / "tasks"
    assert not tasks.exists() or list(tasks.iterdir()) == []
    assert not (repo.parent / f"{repo.name}.sup").exists() or not any(
        (repo.parent / f"{repo.name}.sup").iterdir()
    )


# --- spec files -------------------------------------------------------------------------

BAD_SPECS = {
    "unknown_top": ('goal = "x"\nbogus = 1\n', ["bogus", "unknown key"]),
    "unknown_nested": (
        'goal = "x"\n[budget]\ndeadlines = "1h"\n',
        ["budget.deadlines", "unknown key"],
    ),
    "unknown_in_check": (
        'goal = "x"\n[[checks]]\nname = "t"\nargv = ["true"]\ntimout = 5\n',
        ["checks.0.timout", "unknown key"],
    ),
    "bad_duration": ('goal = "x"\n[budget]\ndeadline = "10x"\n', ["budget.deadline", "10x"]),
    "negative_duration": (
        'goal = "x"\n[budget]\nno_output_timeout = -5\n',
        ["budget.no_output_timeout"],
    ),
    "nan_duration": ('goal = "x"\n[budget]\ndeadline = nan\n', ["budget.deadline"]),
    "inf_duration": (
        'goal = "x"\n[budget]\nno_output_timeout = inf\n',
        ["budget.no_output_timeout"],
    ),
    "empty_check_argv": (
        'goal = "x"\n[[checks]]\nname = "t"\nargv = []\n',
        ["checks.0.argv", "empty"],
    ),
    "empty_check_string": ('goal = "x"\n[[checks]]\nname = "t"\nargv = ""\n', ["checks.0.argv"]),
    "check_argv_not_strings": (
        'goal = "x"\n[[checks]]\nname = "t"\nargv = [1, 2]\n',
        ["checks.0.argv"],
    ),
    "duplicate_check_names": (
        'goal = "x"\n[[checks]]\nname = "t"\nargv = "true"\n[[checks]]\nname = "t"\nargv = "false"\n',
        ["checks", "unique", "t"],
    ),
    "missing_goal": ('[budget]\ndeadline = "1h"\n', ["goal"]),
    "empty_goal": ('goal = ""\n', ["goal"]),
    "bad_worker_kind": ('goal = "x"\n[worker]\nkind = "robot"\n', ["worker.kind"]),
    "bad_review_kind": ('goal = "x"\n[review]\nkind = "maybe"\n', ["review.kind"]),
    "max_turns_zero": ('goal = "x"\n[budget]\nmax_turns = 0\n', ["budget.max_turns"]),
    "newer_version": ('version = 99\ngoal = "x"\n', ["version", "newer"]),
    "not_toml": ('goal = "x\n', ["not valid TOML"]),
    "not_toml_at_all": ("this is { not toml\n", ["not valid TOML"]),
    "too_large": ('goal = "x"\n' + "#" * 1024 * 1024 + "\n", ["the limit is 1 MiB"]),
    "too_deep": ("goal = " + "[" * 5000 + "]" * 5000 + "\n", ["nested too deeply to read"]),
    "limits_bad_size": ('goal = "x"\n[limits]\nmemory = "12x"\n', ["limits.memory", "size"]),
    "limits_too_small": (
        'goal = "x"\n[limits]\npids = 3\nmemory = "1M"\n',
        ["limits.pids", "at least 8", "limits.memory", "at least 16M"],
    ),
    "limits_negative": ('goal = "x"\n[limits]\npids = -1\n', ["limits.pids"]),
    "unclosed_quote_argv": (
        'goal = "x"\n[worker]\nkind = "process"\nargv = "a \'b"\n',
        ["worker.argv"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_spec_file_is_refused_with_the_key_named(repo: Path, tmp: Path, case: str) -> None:
    text, needles = BAD_SPECS[case]
    spec = write_spec(tmp, text)
    _refused(run_cli_inproc(repo, "start", "--spec", str(spec)), *needles)
    _nothing_created(repo)


@pytest.mark.parametrize(
    "case",
    [
        "unknown_top",
        "unknown_nested",
        "bad_duration",
        "empty_check_argv",
        "not_toml",
        "missing_goal",
    ],
)
def test_bad_spec_file_through_the_console_script(repo: Path, tmp: Path, case: str) -> None:
    """The same refusals through the installed `git-sup` script (the contract)."""
    text, needles = BAD_SPECS[case]
    spec = write_spec(tmp, text)
    _refused(run_sup(repo, "start", "--spec", str(spec)), *needles)
    _nothing_created(repo)


def test_unreadable_spec_path(repo: Path, tmp: Path) -> None:
    res = run_cli_inproc(repo, "start", "--spec", str(tmp / "missing.toml"))
    _refused(res, "missing.toml")


def test_binary_spec_file(repo: Path, tmp: Path) -> None:
    p = tmp / "bin.toml"
    p.write_bytes(b'goal = "\xff\xfe"\n')
    res = run_cli_inproc(repo, "start", "--spec", str(p))
    _refused(res, "not valid TOML")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["x", "--deadline", "5q"], ["budget.deadline", "5q"]),
        (["x", "--no-output-timeout", "soon"], ["budget.no_output_timeout", "soon"]),
        (["x", "--check", ""], ["checks.0.argv"]),
        (["x", "--check", "   "], ["checks.0.argv"]),
        (["x", "--worker", "a 'b"], ["worker.argv"]),
        (["x", "--review", "sometimes"], ["review.kind"]),
        (["x", "--worker-kind", "robot"], ["worker.kind"]),
        (["x", "--max-turns", "0"], ["budget.max_turns"]),
        (["x", "--max-cost", "-1"], ["budget.max_cost_usd"]),
        ([], ["goal"]),
        (["--check", "true"], ["goal"]),
        (["x", "--no-such-flag"], ["--no-such-flag"]),
    ],
)
def test_bad_flags_are_refused(repo: Path, args: list[str], needles: list[str]) -> None:
    rc, _out, err = run_cli_inproc(repo, "start", *args)
    assert rc == 2, (rc, err)
    assert "Traceback" not in err
    for n in needles:
        assert n in err, f"{n!r} not in {err!r}"
    _nothing_created(repo)


def test_flags_override_spec_file_values(tmp: Path) -> None:
    spec = write_spec(
        tmp,
        """
        goal = "from file"
        [budget]
        deadline = "1h"
        closeout_grace = 0
        [worker]
        kind = "process"
        argv = ["true"]
        """,
    )
    s = load_spec(spec, {"budget": {"deadline": "90s"}, "goal": "from flag"})
    assert s.goal == "from flag"
    assert s.budget.deadline == 90.0
    assert s.budget.closeout_grace == 0.0  # nested keys not given on the command line stay
    assert s.worker.argv == ["true"]


def test_spec_defaults_match_design() -> None:
    s = spec_from_mapping({"goal": "g"})
    assert s.budget.max_turns == 100
    assert s.budget.deadline == 4 * 3600
    assert s.budget.deadline_warning == 15 * 60
    # not given: 30m, at most a quarter of the deadline
    assert s.budget.closeout_grace is None and s.budget.closeout() == 30 * 60
    assert s.budget.no_output_timeout == 20 * 60
    assert s.autonomy.max_repair_rounds == 3
    assert s.autonomy.max_decision_retries == 2
    assert s.review.timeout == 600
    assert s.checks == [] and s.base == "HEAD"
    assert s.events.rotate_bytes == 64 * 1024 * 1024 and s.events.keep_files == 5


def test_check_string_is_split_like_a_shell_without_running_one() -> None:
    s = spec_from_mapping(
        {"goal": "g", "checks": [{"name": "t", "argv": "python -c 'print(1); print(2)' \"a b\""}]}
    )
    assert s.checks[0].argv == ["python", "-c", "print(1); print(2)", "a b"]
    assert s.checks[0].timeout == 120.0


def test_spec_error_is_a_gitsup_error_naming_every_bad_key() -> None:
    with pytest.raises(GitsupError) as ei:
        spec_from_mapping({"goal": "g", "nope": 1, "budget": {"deadline": "x", "also": 2}})
    msg = ei.value.message
    for key in ("nope", "budget.deadline", "budget.also"):
        assert key in msg


# --- repository validation ----------------------------------------------------------------


def test_bare_repository_is_refused(tmp: Path, repo: Path) -> None:
    bare = tmp / "bare.git"
    git(tmp, "clone", "-q", "--bare", str(repo), str(bare))
    res = run_sup(bare, "start", "x", *WORKER)
    _refused(res, "bare")
    assert not (bare / "sup").exists()


def test_unborn_head_is_refused(tmp: Path) -> None:
    r = tmp / "empty"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    res = run_sup(r, "start", "x", *WORKER)
    _refused(res, "unborn")
    assert git(r, "for-each-ref") == ""
    assert not (r.parent / "empty.sup").exists()


@pytest.mark.parametrize(
    "base", ["no-such-branch", "0123456789abcdef0123456789abcdef01234567", "HEAD~5", "main:calc.py"]
)
def test_unresolvable_base_is_refused(repo: Path, base: str) -> None:
    res = run_cli_inproc(repo, "start", "x", "--base", base, *WORKER)
    _refused(res, "cannot resolve", base)
    _nothing_created(repo)


def test_not_a_repository(tmp: Path) -> None:
    d = tmp / "plain"
    d.mkdir()
    res = run_sup(d, "start", "x", *WORKER)
    _refused(res, "not a Git repository")
    for cmd in (["ls"], ["show", "20260101-abcdef"], ["init"]):
        r = run_cli_inproc(d, *cmd)
        _refused(r, "not a Git repository")


def test_bad_task_id_is_refused(repo: Path) -> None:
    for cmd in ("show", "log", "stop", "discard"):
        res = run_cli_inproc(repo, cmd, "../../etc")
        _refused(res, "not a task id")
        res = run_cli_inproc(repo, cmd, "20260101-abcdef")
        _refused(res, "no task 20260101-abcdef")


def test_an_unforeseen_error_is_exit_1_and_says_it_is_a_bug(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("gitsup.tasks.listing.list_tasks", broken)
    rc, _out, err = run_cli_inproc(repo, "ls")
    assert rc == 1
    assert "internal error" in err and "boom" in err


def test_help_and_unknown_command(repo: Path) -> None:
    rc, out, _ = run_cli_inproc(repo, "--help")
    assert rc == 0
    for cmd in ("init", "start", "show", "ls", "log", "stop", "discard"):
        assert cmd in out
    rc, _, err = run_cli_inproc(repo, "no-such-command")
    assert rc == 2 and "Traceback" not in err
