"""Every failure tells the truth: refusals at start leave nothing behind, bad input is a
one-line error (exit 2), what a snapshot cannot hold is said, and the first-hour surface
(--version, the manual, progress, stop, ls, prune) says what happened."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import GIT_SUP, REPO_ROOT, git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, run_cli_inproc, start_json, write_worker

NO_REVIEW = ("--review", "none")


def _common(repo: Path) -> Path:
    return repo / ".git"


def _nothing_left(repo: Path, config_before: bytes) -> None:
    """A refused start wrote nothing: no state dir, task, branch, worktree or config."""
    assert not (_common(repo) / "sup").exists()
    assert git(repo, "branch", "--list", "sup/*") == ""
    assert git(repo, "for-each-ref", "refs/sup/") == ""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert (_common(repo) / "config").read_bytes() == config_before
    assert not (repo.parent / f"{repo.name}.sup").exists()


def _config(repo: Path) -> bytes:
    return (_common(repo) / "config").read_bytes()


def _no_claude_env(tmp: Path) -> dict[str, str]:
    """PATH without any Claude Code, no GITSUP_CLAUDE_BIN, no credentials."""
    return {
        "GITSUP_CLAUDE_BIN": "",
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_AUTH_TOKEN": "",
        "ANTHROPIC_BASE_URL": "",
        "CLAUDE_CONFIG_DIR": str(tmp / "no-claude-config"),
    }


def _fake_claude(tmp: Path, *, version_rc: int = 0) -> Path:
    """A program called claude that answers --version (and nothing else)."""
    path = tmp / "bin" / "claude"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f"#!{sys.executable}\nimport sys\nprint('9.9.9 (Claude Code)')\nsys.exit({version_rc})\n"
    )
    path.chmod(0o755)
    return path


# --- checks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "what"),
    [
        ("pytest -q && echo ok", "'&&'"),
        ("pytest -q | tee log", "'|'"),
        ("pytest > out.txt", "'>'"),
        ("echo $(whoami)", "$("),
        ("echo `whoami`", "backtick"),
        ("pytest tests/*.py", "glob"),
        ("CI=1 pytest", "assignment"),
        ('test -n "$HOME"', "$H"),
    ],
)
def test_shell_syntax_in_check_is_refused_with_the_fix(repo: Path, check: str, what: str) -> None:
    before = _config(repo)
    rc, _out, err = run_cli_inproc(repo, "start", "g", "--check", check, "--worker", "true")
    assert rc == 2, err
    assert what in err and "--check-sh" in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.startswith("git sup: error")]) == 1
    _nothing_left(repo, before)


def test_quoted_operators_and_pytest_ids_are_not_shell_syntax(repo: Path, tmp: Path) -> None:
    # quoted '&&', a pytest id with brackets, an escaped '&': plain argv, accepted.
    from gitsup.spec import shell_syntax

    assert shell_syntax("python -c 'print(1) if 1 and 2 else 0; x=\"&&\"'") is None
    assert shell_syntax("pytest test_calc.py::test_add[1]") is None
    assert shell_syntax("grep -q a\\&b f") is None
    assert shell_syntax("grep -q 'end$' f") is None


def test_check_sh_runs_with_sh_and_is_recorded_as_such(repo: Path, tmp: Path) -> None:
    w = write_worker(tmp, FIX_AND_COMMIT)
    rc, rec, err = start_json(
        repo,
        "fix add",
        "--worker",
        w,
        "--check-sh",
        f"{sys.executable} -m pytest -q test_calc.py && echo all-green",
        *NO_REVIEW,
    )
    assert rc == 0, err
    (c,) = rec["checks"]
    assert c["argv"][:2] == ["sh", "-c"] and c["passed"], c
    assert "all-green" in c["output_tail"]
    spec = json.loads((_common(repo) / "sup" / "tasks" / rec["id"] / "spec.json").read_text())
    assert spec["checks"][0]["shell"] is True


def test_check_executables_must_resolve_before_the_worker_starts(repo: Path, tmp: Path) -> None:
    before = _config(repo)
    marker = tmp / "worker-ran"
    w = write_worker(tmp, f"open({str(marker)!r}, 'w').write('x')\n")
    rc, _out, err = run_cli_inproc(
        repo,
        "start",
        "g",
        "--worker",
        w,
        "--check",
        "no-such-checker -q",
        "--check",
        "./scripts/check.sh",
        *NO_REVIEW,
    )
    assert rc == 2, err
    assert "'no-such-checker -q'" in err and "not an executable on PATH" in err
    assert "./scripts/check.sh is not a file in the baseline" in err
    assert not marker.exists()
    _nothing_left(repo, before)
    # committed at the baseline, the same relative path is accepted and runs in the worktree
    (repo / "scripts").mkdir()
    (repo / "scripts" / "check.sh").write_text("#!/bin/sh\ntest -f calc.py\n")
    (repo / "scripts" / "check.sh").chmod(0o755)
    git(repo, "add", "scripts")
    git(repo, "commit", "-q", "-m", "check script")
    rc, rec, err = start_json(
        repo,
        "g",
        "--worker",
        write_worker(tmp, FIX_AND_COMMIT),
        "--check",
        "./scripts/check.sh",
        *NO_REVIEW,
    )
    assert rc == 0, err
    assert rec["checks"][0]["passed"]


def test_failing_check_output_is_shown_in_progress_and_show(repo: Path, tmp: Path) -> None:
    w = write_worker(tmp, FIX_AND_COMMIT)
    script = tmp / "failing_check.py"
    script.write_text(
        "import sys\nfor i in range(40):\n    print(f'line {i}')\n"
        "print('THE-REASON-IT-FAILED')\nsys.exit(3)\n"
    )
    res = run_sup(
        repo, "start", "g", "--worker", w, "--check", f"{sys.executable} {script}", *NO_REVIEW
    )
    assert res.returncode == 3, res.stderr
    assert "FAILED (exit 3" in res.stderr
    assert "THE-REASON-IT-FAILED" in res.stderr
    assert "earlier line(s) folded" in res.stderr
    tid = json.loads(run_sup(repo, "ls", "--json").stdout)[0]["id"]
    show = run_sup(repo, "show", tid)
    assert "THE-REASON-IT-FAILED" in show.stdout and "FAIL " in show.stdout


def test_default_check_catches_whitespace_errors_and_can_be_turned_off(
    repo: Path, tmp: Path
) -> None:
    w = write_worker(
        tmp,
        """
import pathlib, subprocess
pathlib.Path("calc.py").write_text("def add(a, b):   \\n    return a + b\\n")
subprocess.run(["git", "commit", "-q", "-am", "fix with trailing spaces"], check=True)
""",
    )
    rc, rec, err = start_json(repo, "g", "--worker", w, *NO_REVIEW)
    assert rc == 3, err
    (c,) = rec["checks"]
    assert c["name"] == "diff-check" and not c["passed"]
    assert c["argv"][:3] == ["git", "diff", "--check"] and c["argv"][3] == rec["baseline"]
    assert "trailing whitespace" in c["output_tail"]
    rc, rec, err = start_json(repo, "g", "--worker", w, "--no-default-check", *NO_REVIEW)
    assert rc == 0, err
    assert rec["checks"] == []


# --- Claude Code preflight ---------------------------------------------------------------------


def test_default_claude_reviewer_without_claude_is_refused_at_start(repo: Path, tmp: Path) -> None:
    before = _config(repo)
    marker = tmp / "worker-ran"
    w = write_worker(tmp, f"open({str(marker)!r}, 'w').write('x')\n")
    res = run_sup(repo, "start", "g", "--worker", w, env=_no_claude_env(tmp))
    assert res.returncode == 2, res.stderr
    assert "reviewer: Claude Code not found" in res.stderr
    for choice in ("--review none", '[review] kind = "command"', "GITSUP_CLAUDE_BIN", "install"):
        assert choice in res.stderr, choice
    # the hint names the reviewer's own setting, not the (process) worker's
    assert "[review] argv" in res.stderr and "[worker] argv" not in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not marker.exists()
    _nothing_left(repo, before)


def test_claude_worker_needs_credentials_and_a_runnable_binary(repo: Path, tmp: Path) -> None:
    before = _config(repo)
    env = _no_claude_env(tmp)
    env["GITSUP_CLAUDE_BIN"] = str(_fake_claude(tmp))
    res = run_sup(repo, "start", "g", "--worker-kind", "claude", *NO_REVIEW, env=env)
    assert res.returncode == 2, res.stderr
    assert "worker: no Claude Code credentials" in res.stderr
    assert "ANTHROPIC_API_KEY" in res.stderr and "log in" in res.stderr
    _nothing_left(repo, before)
    # a binary that does not run is named as such
    env["GITSUP_CLAUDE_BIN"] = str(_fake_claude(tmp, version_rc=1))
    env["ANTHROPIC_API_KEY"] = "sk-test"
    res = run_sup(repo, "start", "g", "--worker-kind", "claude", *NO_REVIEW, env=env)
    assert res.returncode == 2, res.stderr
    assert "does not run" in res.stderr and "exited 1" in res.stderr
    _nothing_left(repo, before)


def test_a_logged_in_config_counts_as_credentials() -> None:
    from gitsup.workers.preflight import missing_credentials

    home = Path(os.environ["HOME"])
    assert missing_credentials({"HOME": str(home)}) is not None
    (home / ".claude.json").write_text(json.dumps({"oauthAccount": {"emailAddress": "x"}}))
    assert missing_credentials({"HOME": str(home)}) is None
    (home / ".claude.json").write_text("{ broken")
    assert missing_credentials({"HOME": str(home)}) is not None
    (home / ".claude").mkdir()
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": {}}')
    assert missing_credentials({"HOME": str(home)}) is None
    assert (
        missing_credentials({"HOME": "/nonexistent", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
        is None
    )


def test_a_project_local_claude_is_found(repo: Path, tmp: Path) -> None:
    from gitsup.workers.claude.worker import find_claude

    local = repo / ".tools" / "claude" / "node_modules" / ".bin"
    local.mkdir(parents=True)
    shutil.copy(_fake_claude(tmp), local / "claude")
    env = {"PATH": "/usr/bin:/bin"}
    old = os.getcwd()
    try:
        os.chdir(repo)
        assert find_claude([], env) == [str(local / "claude")]
    finally:
        os.chdir(old)


# --- bad input -------------------------------------------------------------------------------


def test_bad_specs_are_one_line_errors(repo: Path, tmp: Path) -> None:
    before = _config(repo)
    cases = {
        "deep.toml": "a = " + "[" * 5000 + "]" * 5000 + "\n",
        "nul.toml": 'goal = "x\\u0000y"\n',
        "big.toml": 'goal = "' + "x" * 200_000 + '"\n',
        "deepkeys.toml": 'goal = "g"\n[worker.env]\n'
        + "".join(f'k{i} = "v"\n' for i in range(2000)),
        "notutf8.toml": b'goal = "\xff\xfe"\n',
    }
    for name, text in cases.items():
        p = tmp / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        rc, _out, err = run_cli_inproc(repo, "start", "--spec", str(p))
        assert rc == 2, (name, err)
        assert "Traceback" not in err and err.startswith("git sup: error"), (name, err)
    _nothing_left(repo, before)


def test_a_cost_budget_is_a_finite_number(repo: Path, tmp: Path) -> None:
    """An infinite or NaN budget is not a budget: refused as a spec key and as a flag."""
    before = _config(repo)
    for value in ("inf", "nan", "-inf"):
        p = tmp / "cost.toml"
        p.write_text(
            f'goal = "g"\n[worker]\nkind = "process"\nargv = "true"\n[budget]\nmax_cost_usd = {value}\n'
        )
        rc, _out, err = run_cli_inproc(repo, "start", "--spec", str(p))
        assert rc == 2 and "budget.max_cost_usd" in err, (value, err)
        rc, _out, err = run_cli_inproc(repo, "start", "g", "--worker", "true", "--max-cost", value)
        assert rc == 2 and "max_cost_usd" in err, (value, err)
        assert "Traceback" not in err
    _nothing_left(repo, before)


def test_unwritable_worktree_root_is_refused_before_anything_is_written(
    repo: Path, tmp: Path
) -> None:
    blocker = tmp / "a-file"
    blocker.write_text("")
    git(repo, "config", "sup.worktreeRoot", str(blocker / "trees"))
    before = _config(repo)
    res = run_sup(repo, "start", "g", "--worker", "true", *NO_REVIEW)
    assert res.returncode == 2, res.stderr
    assert "sup.worktreeRoot" in res.stderr and "not a directory" in res.stderr
    _nothing_left(repo, before)
    # permission bits do not stop root; /proc refuses a new directory even to root
    git(repo, "config", "sup.worktreeRoot", "/proc/gitsup-trees")
    before = _config(repo)
    res = run_sup(repo, "start", "g", "--worker", "true", *NO_REVIEW)
    assert res.returncode == 2, res.stderr
    assert "/proc/gitsup-trees (sup.worktreeRoot) is not writable" in res.stderr
    _nothing_left(repo, before)


_pieces = st.sampled_from(
    ["\x00", "\ud800", "\udfff", "&&", "$(", "`", "'", '"', "\\", "[", "{", " ", "a", "\n"]
)
_hostile = st.one_of(
    st.text(max_size=40),
    st.lists(_pieces, max_size=20).map("".join),
    st.just("x" * 70_000),
    st.just("(" * 3000),
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(goal=_hostile, check=_hostile)
def test_start_never_raises_on_hostile_flags(repo: Path, goal: str, check: str) -> None:
    # the worker does not exist: every start is refused (exit 2), never a traceback
    rc, _out, err = run_cli_inproc(
        repo, "start", goal, "--check", check, "--worker", "/nonexistent/worker", *NO_REVIEW
    )
    assert rc == 2, err
    assert "Traceback" not in err and "internal error" not in err
    assert not (_common(repo) / "sup" / "tasks").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_spec_files_never_raise(repo: Path, tmp_path_factory: Any, spec: str | bytes) -> None:
    p = tmp_path_factory.mktemp("spec") / "task.toml"
    p.write_bytes(spec.encode("utf-8", "surrogatepass") if isinstance(spec, str) else spec)
    rc, _out, err = run_cli_inproc(repo, "start", "--spec", str(p), "--worker", "/nonexistent/w")
    assert rc == 2, err
    assert "Traceback" not in err and "internal error" not in err


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(st.one_of(_hostile, st.from_type(int).map(str)), max_size=5))
def test_policy_check_json_lines_never_raise(repo: Path, lines: list[str]) -> None:
    payload = "\n".join(json.dumps(line) if i % 2 else line for i, line in enumerate(lines)).encode(
        "utf-8", "surrogatepass"
    )
    res = subprocess.run(
        [GIT_SUP, "policy", "check", "--json", "-"],
        cwd=repo,
        input=payload,
        capture_output=True,
        timeout=60,
    )
    # 0: every line was a command and got a verdict; 2: a line was not one (said so)
    assert res.returncode in (0, 2), res.stderr
    assert b"Traceback" not in res.stderr
    if res.returncode == 0:
        verdicts = [json.loads(x)["verdict"] for x in res.stdout.splitlines()]
        assert all(v in ("allow", "ask", "deny") for v in verdicts)
    else:
        assert res.stderr.startswith(b"git sup: error")


def test_deeply_nested_shell_is_asked_about_not_a_crash(repo: Path) -> None:
    cmd = "echo " + "$(echo " * 3000 + ")" * 3000
    res = run_sup(repo, "policy", "check", "--json", "--", cmd)
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["verdict"] == "ask" and d["rule"] == "ask.too-complex"


@pytest.mark.parametrize("args", [["show", "../../etc"], ["show", "\x00"], ["log", "x" * 5000]])
def test_task_ids_never_raise(repo: Path, args: list[str]) -> None:
    rc, _out, err = run_cli_inproc(repo, *args)
    assert rc == 2, err
    assert "Traceback" not in err


# --- nothing lost without saying so ----------------------------------------------------------

WORKER_LEAVES_HARD_THINGS = """
import os, pathlib, subprocess
# a .gitignore the worker added, and a file only it ignores
pathlib.Path("gen").mkdir()
pathlib.Path("gen/.gitignore").write_text("*.out\\n")
pathlib.Path("gen/result.out").write_text("worker output\\n")
# a file the baseline's own .gitignore ignores
pathlib.Path("app.log").write_text("log line\\n")
# a nested repository with a working file
pathlib.Path("vendor/lib").mkdir(parents=True)
subprocess.run(["git", "init", "-q", "vendor/lib"], check=True)
pathlib.Path("vendor/lib/code.py").write_text("x = 1\\n")
# an untracked file over the snapshot's size limit
with open("big.bin", "wb") as f:
    f.truncate(9 * 1024 * 1024)
print("left things behind")
"""


def test_snapshot_captures_worker_ignored_and_nested_and_says_what_it_left_out(
    repo: Path, tmp: Path
) -> None:
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore logs")
    w = write_worker(tmp, WORKER_LEAVES_HARD_THINGS)
    res = run_sup(repo, "start", "g", "--worker", w, *NO_REVIEW, "--json")
    assert res.returncode == 3, res.stderr
    rec = json.loads(res.stdout)
    wip = rec["wip"]
    files = set(git(repo, "ls-tree", "-r", "--name-only", wip).splitlines())
    assert {"gen/.gitignore", "gen/result.out", "vendor/lib/code.py"} <= files
    assert "big.bin" not in files and "app.log" not in files
    assert not any(f.startswith("vendor/lib/.git/") for f in files)
    lost = {i["path"]: i for i in rec["not_captured"]}
    assert lost["big.bin"]["bytes"] == 9 * 1024 * 1024 and lost["big.bin"]["blocks_discard"]
    assert "vendor/lib/.git" in lost and lost["vendor/lib/.git"]["blocks_discard"]
    assert (
        lost["app.log"]["why"].startswith("ignored by the baseline")
        and not lost["app.log"]["blocks_discard"]
    )
    assert "NOT saved: big.bin" in res.stderr or "NOT captured: big.bin" in res.stderr
    show = run_sup(repo, "show", rec["id"]).stdout
    assert "NOT saved big.bin (9437184 bytes" in show
    # discard refuses: the big file and the nested history are in no ref
    refused = run_sup(repo, "discard", rec["id"])
    assert refused.returncode == 2 and "big.bin" in refused.stderr
    assert Path(rec["worktree"]).exists()
    forced = run_sup(repo, "discard", rec["id"], "--force")
    assert forced.returncode == 0, forced.stderr
    assert not Path(rec["worktree"]).exists()


def test_discard_needs_no_force_when_only_baseline_ignored_files_remain(
    repo: Path, tmp: Path
) -> None:
    (repo / ".gitignore").write_text("__pycache__/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore caches")
    w = write_worker(tmp, FIX_AND_COMMIT)
    rc, rec, err = start_json(
        repo,
        "g",
        "--worker",
        w,
        "--check",
        f"{sys.executable} -m pytest -q -p no:cacheprovider",
        *NO_REVIEW,
    )
    assert rc == 0, err
    # what checks leave behind (bytecode caches), ignored by the baseline's own rules
    cache = Path(rec["worktree"]) / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "calc.cpython-311.pyc").write_bytes(b"\0" * 100)
    res = run_sup(repo, "discard", rec["id"])
    assert res.returncode == 0, res.stderr


# --- the first hour ------------------------------------------------------------------------------


def test_version(repo: Path) -> None:
    from gitsup import __version__

    res = run_sup(repo, "--version")
    assert res.returncode == 0 and res.stdout.strip() == f"git-sup {__version__}"


def test_man_page_is_up_to_date_and_installed_with_the_package() -> None:
    from gitsup.manpage import render

    committed = (REPO_ROOT / "man" / "git-sup.1").read_text()
    assert committed == render(), "run: python -m gitsup.manpage > man/git-sup.1"
    for cmd in ("start", "prune", "policy check", "--check-sh", "--no-default-check"):
        assert cmd.replace("-", "\\-") in committed, cmd
    data_files = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "data-files"
    ]
    assert data_files["share/man/man1"] == ["man/git-sup.1"]


@pytest.mark.skipif(shutil.which("man") is None, reason="no man program")
def test_git_sup_help_opens_the_manual_found_from_path(repo: Path, tmp: Path) -> None:
    # An environment laid out like an installed venv: bin/git-sup and share/man/man1.
    prefix = tmp / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "share" / "man" / "man1").mkdir(parents=True)
    os.symlink(GIT_SUP, prefix / "bin" / "git-sup")
    shutil.copy(REPO_ROOT / "man" / "git-sup.1", prefix / "share" / "man" / "man1")
    env = {
        "PATH": f"{prefix / 'bin'}:/usr/bin:/bin",
        "MANPAGER": "cat",
        "PAGER": "cat",
        "MANWIDTH": "100",
        "MANPATH": "",
    }
    res = subprocess.run(
        ["git", "sup", "--help"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert res.returncode == 0, res.stderr
    assert "GIT-SUP(1)" in res.stdout and "git sup start" in res.stdout
    usage = subprocess.run(
        ["git", "sup", "-h"], cwd=repo, capture_output=True, text=True, env={**os.environ, **env}
    )
    assert usage.returncode == 0 and "Usage" in usage.stdout


def _run_on_a_terminal(repo: Path, args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run git sup with stdout and stderr on a pseudo-terminal; return (rc, what it printed)."""
    main, secondary = pty.openpty()
    proc = subprocess.Popen(
        [GIT_SUP, *args],
        cwd=repo,
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=secondary,
        env={**os.environ, **env},
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    rc = proc.wait(timeout=120)
    os.close(main)
    return rc, b"".join(chunks).decode("utf-8", "replace")


def test_progress_on_a_terminal_has_colour_elapsed_time_and_no_duplicates(
    repo: Path, tmp: Path
) -> None:
    w = write_worker(
        tmp,
        "import pathlib, subprocess\n"
        "print('\\n'.join(f'out {i}' for i in range(10)))\n"
        "print('y' * 400)\n"
        "pathlib.Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')\n"
        "subprocess.run(['git', 'commit', '-q', '-am', 'fix'], check=True)\n",
    )
    env = {"NO_COLOR": "", "TERM": "xterm"}
    rc, text = _run_on_a_terminal(repo, ["start", "g", "--worker", w, *NO_REVIEW], env)
    assert rc == 0, text
    assert "\x1b[32m" in text  # green: check passed / candidate ready
    assert "[running took " in text
    assert "earlier line(s) folded" in text and "[+240 chars]" in text
    assert text.count("candidate ready") == 1
    assert text.count("worker stopped") == 1, text
    tid = json.loads(run_sup(repo, "ls", "--json").stdout)[-1]["id"]
    events = [json.loads(x) for x in run_sup(repo, "log", tid, "--json").stdout.splitlines()]
    if any(e["type"] == "worker_stopped" and e["data"].get("cgroup") for e in events):
        # the cgroup was used and proven empty: no "weaker guarantee" line, no sweep event
        assert "weaker" not in text
        assert not any(e["data"].get("guarantee") for e in events if e["type"] == "worker_stopped")
    rc, text = _run_on_a_terminal(
        repo, ["start", "g", "--worker", w, *NO_REVIEW], {"NO_COLOR": "1"}
    )
    assert "\x1b[" not in text
    # not a terminal: no colour either
    res = run_sup(repo, "start", "g", "--worker", w, *NO_REVIEW, env={"NO_COLOR": ""})
    assert "\x1b[" not in res.stderr


def test_stop_says_it_was_git_sup_stop(repo: Path, tmp: Path) -> None:
    w = write_worker(tmp, "import time\nprint('working', flush=True)\ntime.sleep(120)\n")
    res = run_sup(repo, "start", "g", "--worker", w, "--detach", *NO_REVIEW)
    assert res.returncode == 0, res.stderr
    tid = res.stdout.strip()
    stop = run_sup(repo, "stop", tid, "--json")
    assert stop.returncode == 0, stop.stderr
    rec = json.loads(stop.stdout)
    assert rec["status"] == "stopped"
    assert any("`git sup stop`" in r for r in rec["reasons"]), rec["reasons"]
    assert not any("SIGTERM" in r for r in rec["reasons"]), rec["reasons"]


def test_ls_marks_discarded_and_prune_removes_ended_worktrees_and_branches(
    repo: Path, tmp: Path
) -> None:
    w = write_worker(tmp, FIX_AND_COMMIT)
    ids = []
    for _ in range(3):
        rc, rec, err = start_json(repo, "g", "--worker", w, *NO_REVIEW)
        assert rc == 0, err
        ids.append(rec["id"])
    a, b, c = ids
    assert run_sup(repo, "discard", a).returncode == 0
    ls = run_sup(repo, "ls")
    line_a = next(ln for ln in ls.stdout.splitlines() if ln.startswith(a))
    assert "ready*" in line_a and "* discarded" in ls.stdout
    assert json.loads(run_sup(repo, "ls", "--json").stdout)[0]["discarded"] is True
    # c's branch gets a commit that no other ref holds: prune keeps it (and says why)
    tip = git(repo, "rev-parse", f"sup/{c}")
    after = git(repo, "commit-tree", f"{tip}^{{tree}}", "-p", tip, "-m", "after the task")
    git(repo, "update-ref", f"refs/heads/sup/{c}", after, tip)
    dry = json.loads(run_sup(repo, "prune", "--dry-run", "--json").stdout)
    assert dry["dry_run"] is True
    assert git(repo, "branch", "--list", "sup/*").count("sup/") == 3  # nothing removed
    res = run_sup(repo, "prune", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    removed = {(r["task"], r["what"].split()[0]) for r in out["removed"]}
    assert {(a, "branch"), (b, "worktree"), (b, "branch"), (c, "worktree")} <= removed
    assert [k["task"] for k in out["kept"]] == [c] and "no other branch" in out["kept"][0]["why"]
    branches = git(repo, "branch", "--list", "sup/*")
    assert f"sup/{c}" in branches and f"sup/{a}" not in branches and f"sup/{b}" not in branches
    for t in ids:  # the task refs stay
        assert git(repo, "rev-parse", f"refs/sup/{t}/candidate")
    forced = json.loads(run_sup(repo, "prune", "--force", "--json").stdout)
    assert (c, "branch") in {(r["task"], r["what"].split()[0]) for r in forced["removed"]}
    assert git(repo, "branch", "--list", "sup/*") == ""
    for t in (a, b):
        assert not (repo / ".git" / "sup" / "tasks" / t / "git").exists()


def test_a_long_not_captured_list_is_bounded_and_says_how_much_it_cut() -> None:
    from gitsup.supervision.finaliser import NOT_CAPTURED_LIST_LIMIT, bound_not_captured

    items = [
        {
            "path": f"log{i}.log",
            "bytes": 10,
            "why": "ignored by the baseline's ignore rules",
            "blocks_discard": False,
        }
        for i in range(500)
    ] + [{"path": "big.bin", "bytes": 1 << 30, "why": "larger", "blocks_discard": True}]
    out = bound_not_captured(items)
    assert len(out) == NOT_CAPTURED_LIST_LIMIT
    assert out[0]["path"] == "big.bin"  # what blocks a discard is never cut
    summary = out[-1]
    n_rest = 501 - (NOT_CAPTURED_LIST_LIMIT - 1)
    assert summary["path"] == f"({n_rest} more paths)" and summary["bytes"] == 10 * n_rest


@pytest.mark.parametrize("value", ["relative/claude", "/", "/nonexistent/claude", "\t"])
def test_a_bad_gitsup_claude_bin_is_a_one_line_refusal(repo: Path, tmp: Path, value: str) -> None:
    before = _config(repo)
    env = _no_claude_env(tmp)
    env["GITSUP_CLAUDE_BIN"] = value
    env["ANTHROPIC_API_KEY"] = "sk-test"
    res = run_sup(repo, "start", "g", "--worker-kind", "claude", *NO_REVIEW, env=env)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("git sup: error: cannot start the task")
    assert "Traceback" not in res.stderr
    _nothing_left(repo, before)


def test_a_start_that_fails_after_setting_up_takes_the_set_up_back(repo: Path) -> None:
    # `init` refuses to chain a pre-push hook when pre-push.local exists too: the first start
    # fails inside the set-up, after the state directory and config were written.
    hooks = _common(repo) / "hooks"
    (hooks / "pre-push").write_text("#!/bin/sh\nexit 0\n")
    (hooks / "pre-push.local").write_text("#!/bin/sh\nexit 0\n")
    before = _config(repo)
    res = run_sup(repo, "start", "g", "--worker", "true", *NO_REVIEW)
    assert res.returncode == 2, res.stderr
    assert "pre-push" in res.stderr and "Traceback" not in res.stderr
    _nothing_left(repo, before)
    assert (hooks / "pre-push").read_text() == "#!/bin/sh\nexit 0\n"


def test_prune_keeps_a_worktree_whose_commits_were_never_imported(repo: Path, tmp: Path) -> None:
    w = write_worker(tmp, FIX_AND_COMMIT)
    rc, rec, err = start_json(repo, "g", "--worker", w, *NO_REVIEW)
    assert rc == 0, err
    wt = Path(rec["worktree"])
    (wt / "extra.txt").write_text("more\n")
    git(wt, "add", "extra.txt")
    git(wt, "commit", "-q", "-m", "after the task, in the task's own Git dir")
    res = run_sup(repo, "prune", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert [k["task"] for k in out["kept"]] == [rec["id"]]
    assert "never imported" in out["kept"][0]["why"]
    assert wt.exists()
