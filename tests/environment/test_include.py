"""`[environment] include`: a JavaScript project's `node_modules` (ignored, never committed)
reaches a task's worker, its checks and the checks of `integrate` and the queue, and what any
of them write there never reaches the main checkout's copy or another task's.

Real `git sup` processes, real process workers, the real kernel (overlayfs in the sandbox's
mount namespace). The project is built here without a network: `node_modules/.bin/xo` is a
shell script and `npm test` (the real npm) runs it. Every attack is judged from outside: a
digest of the main checkout's `node_modules` (types, modes, contents, link targets) taken
before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.conftest import Setup, setup  # noqa: F401 - the fixture
from tests.conftest import PYTHON, git, run_sup
from tests.helpers.require import require
from tests.helpers.sup import FIX_AND_COMMIT, write_worker

XO = '#!/bin/sh\necho "xo: $(cat node_modules/xo/rules.txt)"\n'
NPM_TEST = "npm test --silent"
ENV_FILE = '[environment]\ninclude = ["node_modules"]\n'

# A worker that attacks the included tree every way it can (modify, delete, add, a directory
# replaced by a link, a write through a link to the main checkout's copy, the upper layer
# named directly), then fixes calc.py and commits; it reports what it saw.
HOSTILE = """
import json, os, pathlib, shutil, subprocess, sys
report = {}
nm = pathlib.Path("node_modules")
main_nm = sys.argv[1]
report["saw_xo"] = (nm / ".bin" / "xo").exists()
def attempt(name, fn):
    try:
        fn()
        report[name] = "done"
    except OSError as exc:
        report[name] = f"refused: {exc.strerror}"
attempt("modify", lambda: (nm / "xo" / "rules.txt").write_text("hacked\\n"))
attempt("delete", lambda: (nm / "xo" / "extra.txt").unlink())
attempt("add", lambda: (nm / "evil.txt").write_text("evil\\n"))
def relink():
    shutil.rmtree(nm / "lib")
    (nm / "lib").symlink_to(main_nm + "/xo")
attempt("dir_to_link", relink)
attempt("through_link", lambda: (nm / "lib" / "rules.txt").write_text("through\\n"))
attempt("main_direct", lambda: pathlib.Path(main_nm, "xo", "rules.txt").write_text("direct\\n"))
attempt("chmod", lambda: os.chmod(nm / "xo" / "cli.sh", 0o777))
attempt("remove_mount", lambda: os.rename(nm, "elsewhere"))
upper = pathlib.Path(sys.argv[3], "sup", "tasks", os.environ["GITSUP_TASK"], "env", "0", "upper")
attempt("upper_direct", lambda: (upper / "planted.txt").write_text("x\\n"))
report["after"] = sorted(os.listdir(nm)) if nm.is_dir() else None
pathlib.Path(sys.argv[2]).write_text(json.dumps(report))
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
"""

# What a second task must see: the main checkout's tree, untouched.
PRISTINE = (
    'test "$(cat node_modules/xo/rules.txt)" = rule1 && test -f node_modules/xo/extra.txt'
    " && test ! -e node_modules/evil.txt && test -d node_modules/lib"
    " && test ! -L node_modules/lib && test -f node_modules/lib/util.js"
)


def _needs_overlay() -> None:
    require("landlock", "the include overlay")
    require("mountns", "the include overlay")


def _node_project(repo: Path) -> None:
    """package.json whose `npm test` runs xo, node_modules ignored; the tree made by hand."""
    (repo / "package.json").write_text(
        json.dumps({"name": "p", "version": "1.0.0", "private": True, "scripts": {"test": "xo"}})
    )
    (repo / ".gitignore").write_text("node_modules/\n")
    git(repo, "add", "package.json", ".gitignore")
    git(repo, "commit", "-q", "-m", "a node project")
    nm = repo / "node_modules"
    (nm / ".bin").mkdir(parents=True)
    (nm / "xo").mkdir()
    (nm / "lib").mkdir()
    (nm / "xo" / "cli.sh").write_text(XO)
    (nm / "xo" / "cli.sh").chmod(0o755)
    (nm / ".bin" / "xo").symlink_to("../xo/cli.sh")
    (nm / "xo" / "rules.txt").write_text("rule1\n")
    (nm / "xo" / "extra.txt").write_text("extra\n")
    (nm / "lib" / "util.js").write_text("module.exports = 1\n")


def digest(root: Path) -> dict[str, str]:
    """Every entry below `root`: type, mode, and content or link target."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath, name)
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = f"link {os.readlink(p)}"
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = f"dir {stat.S_IMODE(st.st_mode):o}"
            else:
                h = hashlib.sha256(p.read_bytes()).hexdigest()
                out[rel] = f"file {stat.S_IMODE(st.st_mode):o} {h}"
    return out


@pytest.fixture
def node(repo: Path, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> Path:
    """The Node project, committed before the boundary's setup pushes main; the sandbox
    gets one writable directory for reports, not the test's whole tmp dir (which holds the
    main checkout)."""
    _node_project(repo)
    reports = tmp / "reports"
    reports.mkdir()
    monkeypatch.setenv("GITSUP_SANDBOX_EXTRA_WRITE", str(reports))
    return reports


def _start(repo: Path, tmp: Path, body: str, *args: str, worker_args: str = "") -> dict[str, Any]:
    worker = write_worker(tmp, body, f"w{len(list(tmp.glob('w*.py')))}.py") + worker_args
    res = run_sup(
        repo, "start", "fix add", "--worker", worker, "--review", "none", *args, "--json",
        "--quiet", timeout=300,
    )  # fmt: skip
    rec: dict[str, Any] = json.loads(res.stdout)
    rec["_rc"] = res.returncode
    rec["_stderr"] = res.stderr
    return rec


def _show(repo: Path, task: str) -> dict[str, Any]:
    res = run_sup(repo, "show", task, "--json")
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def test_npm_test_passes_with_the_include_and_fails_clearly_without(
    node: Path, repo: Path, tmp: Path
) -> None:
    _needs_overlay()
    assert run_sup(repo, "init").returncode == 0
    bare = _start(repo, tmp, FIX_AND_COMMIT, "--check", NPM_TEST)
    assert bare["status"] != "ready", bare
    out = bare["checks"][0]["output_tail"]
    assert "xo: not found" in out, out
    assert bare["environment"] is None

    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(ENV_FILE)
    rec = _start(repo, tmp, FIX_AND_COMMIT, "--check", NPM_TEST)
    assert rec["status"] == "ready", (rec["reasons"], rec["checks"])
    assert "xo: rule1" in rec["checks"][0]["output_tail"]
    shown = _show(repo, rec["id"])["environment"]
    assert shown["refused"] == []
    [entry] = shown["include"]
    assert entry["path"] == "node_modules" and entry["method"] == "overlay"
    assert entry["bytes"] == 0  # nothing copied
    log = run_sup(repo, "log", rec["id"], "--json")
    assert "environment_included" in log.stdout


def test_writes_through_the_include_never_reach_the_main_checkout_or_the_next_task(
    node: Path, repo: Path, tmp: Path
) -> None:
    _needs_overlay()
    assert run_sup(repo, "init").returncode == 0
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(ENV_FILE)
    main_nm = repo / "node_modules"
    before = digest(main_nm)
    report = node / "hostile.json"
    # the check attacks too, after seeing the worker's changes: the task's own processes
    # share one copy-on-write layer
    check_attack = (
        'test "$(cat node_modules/xo/rules.txt)" = hacked && test -f node_modules/evil.txt'
        " && echo again > node_modules/xo/rules.txt && rm -f node_modules/.bin/xo"
        f" && (echo x > {shlex.quote(str(main_nm))}/check.txt || true)"
    )
    rec = _start(
        repo, tmp, HOSTILE, "--check-sh", check_attack,
        worker_args=" " + shlex.join([str(main_nm), str(report), str(repo / ".git")]),
    )  # fmt: skip
    assert rec["status"] == "ready", (rec["reasons"], rec["checks"], rec["_stderr"])
    seen = json.loads(report.read_text())
    assert seen["saw_xo"] is True
    # inside the task the changes happened (copy-on-write), except what would reach the host
    for what in ("modify", "delete", "add", "dir_to_link", "chmod"):
        assert seen[what] == "done", seen
    assert seen["through_link"].startswith("refused"), seen
    assert seen["main_direct"].startswith("refused"), seen
    assert seen["upper_direct"].startswith("refused"), seen
    assert seen["remove_mount"].startswith("refused"), seen  # the mount point stays
    # outside: the main checkout's tree is byte for byte what it was
    assert digest(main_nm) == before
    upper = repo / ".git" / "sup" / "tasks" / rec["id"] / "env" / "0" / "upper"
    assert upper.is_dir() and not (upper / "planted.txt").exists()
    assert (upper / "evil.txt").is_file()  # where the task's writes went
    # the task's worktree on the host holds no copy (an empty mount point)
    assert list((Path(rec["worktree"]) / "node_modules").iterdir()) == []
    # a second task gets the main checkout's tree, not the first task's changes
    second = _start(repo, tmp, FIX_AND_COMMIT, "--check-sh", PRISTINE, "--check", NPM_TEST)
    assert second["status"] == "ready", (second["reasons"], second["checks"])
    assert digest(main_nm) == before
    # discarding the task removes its layer with its worktree (and nothing of the main one)
    res = run_sup(repo, "discard", rec["id"])
    assert res.returncode == 0, res.stderr
    assert not upper.parent.parent.exists()
    assert digest(main_nm) == before


@pytest.mark.parametrize("without", ["sandbox off", "mount namespace"])
def test_without_a_mount_namespace_the_include_is_a_copy(
    node: Path, repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch, without: str
) -> None:
    """`sup.sandbox off`, or `auto` on a host without mount namespaces: a copy (never a link
    to the main checkout); the task's writes stay in its copy."""
    assert run_sup(repo, "init").returncode == 0
    if without == "sandbox off":
        git(repo, "config", "sup.sandbox", "off")
    else:
        monkeypatch.setenv("GITSUP_SANDBOX_REFUSE", "mountns,pidns")
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(ENV_FILE)
    main_nm = repo / "node_modules"
    before = digest(main_nm)
    body = """
import pathlib, subprocess
nm = pathlib.Path("node_modules")
(nm / "xo" / "rules.txt").write_text("hacked\\n")
with open(nm / "lib" / "util.js", "r+") as f:  # in place: a hard link would carry it over
    f.write("changed")
(nm / "xo" / "extra.txt").unlink()
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
"""
    rec = _start(repo, tmp, body, "--check", NPM_TEST)
    assert rec["status"] == "ready", (rec["reasons"], rec["checks"])
    assert "xo: hacked" in rec["checks"][0]["output_tail"]
    [entry] = rec["environment"]["include"]
    assert entry["method"] in ("copy", "reflink") and entry["files"] == 4
    assert digest(main_nm) == before
    wt_nm = Path(rec["worktree"]) / "node_modules"
    for f in ("xo/rules.txt", "lib/util.js"):
        assert os.stat(wt_nm / f).st_ino != os.stat(main_nm / f).st_ino
    second = _start(repo, tmp, FIX_AND_COMMIT, "--check-sh", PRISTINE)
    assert second["status"] == "ready", (second["reasons"], second["checks"])


@pytest.fixture
def committed_recipe(node: Path, repo: Path) -> Path:
    """The recipe committed to main before the boundary's setup takes its trust root."""
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(ENV_FILE)
    git(repo, "add", ".gitsup")
    git(repo, "commit", "-q", "-m", "environment")
    return repo


@pytest.mark.parametrize("via", ["integrate", "queue"])
def test_integrate_and_the_queue_see_the_include(
    committed_recipe: Path,
    setup: Setup,  # noqa: F811 - the fixture imported above
    via: str,
) -> None:
    """The good candidate is integrated, not blamed: its checks get the main checkout's
    node_modules in the throw-away worktree too; with the main checkout's copy moved away
    (it is ignored: the checkout stays clean) the same checks fail."""
    _needs_overlay()
    repo = setup.repo
    main_nm = repo / "node_modules"
    before = digest(main_nm)
    check = NPM_TEST + " && echo x > node_modules/xo/rules.txt"  # a check that writes there
    rec = _start(repo, setup.tmp, FIX_AND_COMMIT, "--check-sh", check)
    assert rec["status"] == "ready", (rec["reasons"], rec["checks"])
    if via == "integrate":
        main_nm.rename(setup.tmp / "away")
        res = run_sup(repo, "integrate", rec["id"], "--into", "main", "--json", timeout=300)
        assert res.returncode != 0 and "xo: not found" in res.stdout + res.stderr, res
        (setup.tmp / "away").rename(main_nm)
        res = run_sup(repo, "integrate", rec["id"], "--into", "main", "--json", timeout=300)
    else:
        assert run_sup(repo, "queue", "add", rec["id"]).returncode == 0
        res = run_sup(repo, "queue", "run", "--json", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(res.stdout)
    if via == "queue":
        data = data[0]
        assert data["integrated"] == [rec["id"]], data
        state = json.loads(git(repo, "show", "refs/sup/queue/main/state:queue.json"))
        conf = next(iter(state["results"].values()))["confinement"]
    else:
        conf = data["confinement"]
    assert conf["environment"]["include"][0]["method"] == "overlay", conf
    assert "Sup-Task: " + rec["id"] in git(repo, "log", "-1", "--format=%B", "main")
    assert digest(main_nm) == before


def test_a_recipe_change_is_a_policy_change(node: Path, repo: Path, tmp: Path) -> None:
    assert run_sup(repo, "init").returncode == 0
    body = """
import pathlib, subprocess
pathlib.Path(".gitsup").mkdir()
pathlib.Path(".gitsup/environment.toml").write_text('[environment]\\ninclude = ["node_modules"]\\n')
subprocess.run(["git", "add", ".gitsup"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "include node_modules"], check=True)
"""
    rec = _start(repo, tmp, body)
    assert _show(repo, rec["id"])["policy_change"] == [".gitsup/environment.toml"]


def test_best_of_n_attempts_each_get_the_include(node: Path, repo: Path, tmp: Path) -> None:
    _needs_overlay()
    assert run_sup(repo, "init").returncode == 0
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(ENV_FILE)
    body = FIX_AND_COMMIT.replace(
        'print("fixed and committed")',
        'pathlib.Path("node_modules/mine.txt").write_text("x")\nprint("fixed and committed")',
    )
    check = "test -x node_modules/.bin/xo && test -f node_modules/mine.txt"
    rec = _start(repo, tmp, body, "--attempts", "2", "--check-sh", check)
    assert len(rec["members"]) == 2, rec
    for tid in rec["members"]:
        shown = _show(repo, tid)
        assert shown["status"] == "ready", shown["reasons"]
        assert shown["environment"]["include"][0]["method"] == "overlay"
    assert not (repo / "node_modules" / "mine.txt").exists()


def test_env_show(node: Path, repo: Path) -> None:
    assert run_sup(repo, "init").returncode == 0
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(
        '[environment]\ninclude = ["node_modules", ".venv", "package.json", ".git"]\n'
    )
    res = run_sup(repo, "env", "show", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    by = {e["path"]: e for e in data["include"]}
    assert by["node_modules"]["present"] and by["node_modules"]["files"] == 4
    assert by["node_modules"]["method"] in ("overlay", "copy", "reflink")
    assert by[".venv"] == {"path": ".venv", "present": False, "method": "missing"}
    assert any(r.startswith("include package.json: tracked") for r in data["refused"])
    assert any(r.startswith("include .git: a Git directory") for r in data["refused"])
    text = run_sup(repo, "env", "show")
    assert "include   node_modules: dir" in text.stdout and "refused   include .git" in text.stdout
    spec = repo / "t.toml"
    spec.write_text('goal = "g"\n[environment]\ninclude = []\n')
    data = json.loads(run_sup(repo, "env", "show", "--spec", str(spec), "--json").stdout)
    assert data["include"] == [] and data["recipe"]["sources"]["include"] == "spec"
    # bad input: exit 2, one line
    (repo / ".gitsup" / "environment.toml").write_text('[environment]\ninclude = ["../x"]\n')
    bad = run_sup(repo, "env", "show")
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[0].startswith("git sup: error: invalid environment file")
    assert "Traceback" not in bad.stderr
    missing = run_sup(repo, "env", "show", "--spec", str(repo / "nope.toml"))
    assert missing.returncode == 2 and "cannot read spec" in missing.stderr
    # and `start` refuses before it makes anything
    start = run_sup(repo, "start", "g", "--worker", "true", "--review", "none", "--quiet")
    assert start.returncode == 2 and "invalid environment file" in start.stderr
    assert run_sup(repo, "ls", "--json").stdout.strip() in ("", "[]")


def test_the_reviewer_reads_the_include_and_cannot_write_it(
    node: Path, repo: Path, tmp: Path
) -> None:
    """A command reviewer runs with the worktree read-only: the overlay in it is read-only
    too (it sees the worker's changes, writes nothing)."""
    _needs_overlay()
    assert run_sup(repo, "init").returncode == 0
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(ENV_FILE)
    report = node / "reviewer.json"
    reviewer = tmp / "reviewer.py"
    reviewer.write_text(
        "import json, pathlib, sys\n"
        "sys.stdin.read()\n"
        "said = {'saw': pathlib.Path('node_modules/mine.txt').read_text()}\n"
        "for name, path in (('write', 'node_modules/rev.txt'), ('modify', 'node_modules/xo/rules.txt')):\n"
        "    try:\n"
        "        pathlib.Path(path).write_text('reviewer')\n"
        "        said[name] = 'done'\n"
        "    except OSError as exc:\n"
        "        said[name] = 'refused: ' + exc.strerror\n"
        f"pathlib.Path({str(report)!r}).write_text(json.dumps(said))\n"
        "print(json.dumps({'verdict': 'pass', 'findings': []}))\n"
    )
    worker = write_worker(
        tmp,
        FIX_AND_COMMIT.replace(
            'print("fixed and committed")', 'pathlib.Path("node_modules/mine.txt").write_text("w")'
        ),
    )
    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "fix add"\n'
        f'[worker]\nkind = "process"\nargv = {json.dumps(shlex.split(worker))}\n'
        f'[review]\nkind = "command"\nargv = {json.dumps([PYTHON, str(reviewer)])}\n'
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "--quiet", timeout=300)
    rec = json.loads(res.stdout)
    assert rec["review"]["verdict"] == "pass", (rec["reasons"], res.stderr)
    said = json.loads(report.read_text())
    assert said["saw"] == "w"
    assert said["write"].startswith("refused") and said["modify"].startswith("refused"), said
    upper = repo / ".git" / "sup" / "tasks" / rec["id"] / "env" / "0" / "upper"
    assert (upper / "mine.txt").read_text() == "w" and not (upper / "rev.txt").exists()
    assert (repo / "node_modules" / "xo" / "rules.txt").read_text() == "rule1\n"


CONCURRENT = """
import pathlib, subprocess, sys, time
me, reports = sys.argv[1], pathlib.Path(sys.argv[2])
rules = pathlib.Path("node_modules/xo/rules.txt")
rules.write_text(me)
(reports / f"{me}.ready").write_text("")
while not (reports / "go").exists():
    time.sleep(0.05)
(reports / f"{me}.saw").write_text(rules.read_text())
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
"""


def test_two_tasks_at_once_each_see_only_their_own_writes(
    node: Path, repo: Path, tmp: Path
) -> None:
    _needs_overlay()
    from tests.helpers.sup import wait_for

    assert run_sup(repo, "init").returncode == 0
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(ENV_FILE)
    before = digest(repo / "node_modules")
    ids = []
    for me in ("A", "B"):
        worker = write_worker(tmp, CONCURRENT, f"c{me}.py") + " " + shlex.join([me, str(node)])
        res = run_sup(repo, "start", "fix add", "--worker", worker, "--review", "none",
                      "--detach", "--quiet", "--json")  # fmt: skip
        assert res.returncode == 0, res.stderr
        ids.append(json.loads(res.stdout)["id"])
    # both workers wrote the same file of the included tree and are still running
    wait_for(lambda: (node / "A.ready").exists() and (node / "B.ready").exists(), timeout=120)
    (node / "go").write_text("")
    wait_for(lambda: (node / "A.saw").exists() and (node / "B.saw").exists(), timeout=60)
    assert (node / "A.saw").read_text() == "A" and (node / "B.saw").read_text() == "B"
    for tid in ids:
        assert run_sup(repo, "wait", tid, timeout=300).returncode == 0
    assert digest(repo / "node_modules") == before


def test_the_queue_reuses_a_result_only_in_the_same_environment(
    committed_recipe: Path,
    setup: Setup,  # noqa: F811 - the fixture imported above
) -> None:
    """Three tasks make the same change, so each composition is the same tree: the second
    reuses the first's memoised pass (nothing changed); after the main checkout's
    `node_modules` changed (its xo now fails) the third is tested again, and fails."""
    _needs_overlay()
    repo = setup.repo
    # the same fix under three commit messages: three candidates, one tree
    fix = FIX_AND_COMMIT.replace('"fix add"', "sys.argv[1]").replace("import ", "import sys, ", 1)
    recs = [
        _start(repo, setup.tmp, fix, "--check", NPM_TEST, worker_args=f" fix-{n}") for n in range(3)
    ]
    for rec in recs:
        assert rec["status"] == "ready", (rec["reasons"], rec["checks"])

    def queue(task: str) -> tuple[int, dict[str, Any]]:
        assert run_sup(repo, "queue", "add", task).returncode == 0
        res = run_sup(repo, "queue", "run", "--json", timeout=300)
        out: dict[str, Any] = json.loads(res.stdout)[0]
        return res.returncode, out

    rc, first = queue(recs[0]["id"])
    assert rc == 0 and first["integrated"] == [recs[0]["id"]], first
    assert first["check_commands"] == 1
    rc, second = queue(recs[1]["id"])
    assert rc == 0 and second["integrated"] == [recs[1]["id"]], second
    assert second["check_commands"] == 0  # the same tree and environment: reused

    xo = repo / "node_modules" / "xo" / "cli.sh"
    xo.write_text('#!/bin/sh\necho "xo: broken rules"; exit 1\n')  # in place, same inode
    rc, third = queue(recs[2]["id"])
    assert third["integrated"] == [] and rc != 0, third
    assert third["check_commands"] == 1, third  # not the memoised pass: run again
    [back] = third["sent_back"]
    assert back["task"] == recs[2]["id"], back
