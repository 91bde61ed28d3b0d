"""The person's `git` in a task worktree runs nothing the worker wrote.

A hostile process worker tries every way Git has to run a program: settings written with
`git config` and straight into its Git dir's `config` (fsmonitor, filter/diff/merge
drivers, external diff, pagers, editors, hooksPath, aliases, includes, gpg, askpass,
credential helper, sshCommand, ext:: remotes, upload-pack hook), hooks in its Git dir,
`info/attributes`, a committed `.gitattributes`, a planted `commondir` that moves the
config elsewhere, legacy remote files, and its own global config. Each program writes a
marker into a directory outside the sandbox's view. Then, as the person (root, no
sandbox), the test runs the commands one runs to look at a candidate, on a terminal (so
pagers run) - while the worker still runs, and again after the task ended - and asserts
that no marker appeared.

Real `git sup start`, real git, a real pty."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import textwrap
import threading
from pathlib import Path

import pytest

from tests.conftest import git, run_sup
from tests.helpers.sup import (
    check_cmd,
    common_dir,
    kill_tree,
    popen_sup,
    read_record,
    task_ids,
    wait_for,
    write_worker,
)

NO_REVIEW = ("--review", "none")
QUICK_CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")

HOSTILE = r"""
import os, pathlib, subprocess, sys, time
MARK = {mark!r}
TMP = pathlib.Path({tmp!r})
def sh(*a, check=True):
    r = subprocess.run(list(a), capture_output=True, text=True)
    if check and r.returncode:
        raise SystemExit(f"{{a}} failed: {{r.stderr}}")
    return r.stdout.strip()
def attempt(*a):
    r = subprocess.run(list(a), capture_output=True, text=True)
    return r.returncode == 0
task = os.environ["GITSUP_TASK"]
wt = pathlib.Path.cwd()
PRIVATE = pathlib.Path(sh("git", "rev-parse", "--absolute-git-dir"))

# the work: a fix on the task branch, and a side branch for `git checkout -`
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
pathlib.Path(".gitattributes").write_text("*.txt filter=evil diff=evil merge=evil\n*.dat filter=evilp\n")
pathlib.Path("data.txt").write_text("data\n")
pathlib.Path("blob.dat").write_text("blob\n")
sh("git", "add", "-A")
sh("git", "commit", "-q", "-m", "fix add")
sh("git", "checkout", "-q", "-b", "side")
sh("git", "checkout", "-q", f"sup/{{task}}")

# programs: each leaves a marker (outside the sandbox's view) if it ever runs
evil = wt / ".evil"
evil.mkdir()
def prog(name, body="exit 0"):
    path = evil / name
    path.write_text(f"#!/bin/sh\nmkdir -p {{MARK}} 2>/dev/null; echo \"$0 $*\" >> {{MARK}}/{{name}} 2>/dev/null\n{{body}}\n")
    path.chmod(0o755)
    return str(path)
passthru = "exec cat"
settings = {{
    "core.fsmonitor": prog("fsmonitor"),
    "core.fsmonitorHookVersion": "1",
    "filter.evil.clean": prog("filter-clean", passthru),
    "filter.evil.smudge": prog("filter-smudge", passthru),
    "filter.evilp.process": prog("filter-process"),
    "filter.evilp.required": "false",
    "diff.evil.textconv": prog("textconv", 'exec cat "$1"'),
    "diff.evil.command": prog("diff-command"),
    "diff.external": prog("diff-external"),
    "merge.evil.driver": prog("merge-driver"),
    "core.pager": prog("core-pager", passthru),
    "pager.log": prog("pager-log", passthru),
    "pager.show": prog("pager-show", passthru),
    "pager.diff": prog("pager-diff", passthru),
    "pager.status": prog("pager-status", passthru),
    "core.editor": prog("core-editor"),
    "sequence.editor": prog("sequence-editor"),
    "gpg.program": prog("gpg-program"),
    "gpg.format": "openpgp",
    "commit.gpgSign": "true",
    "core.askPass": prog("askpass"),
    "credential.helper": "!" + prog("credential-helper"),
    "core.sshCommand": prog("ssh-command"),
    "remote.origin.url": "ssh://127.0.0.1:9/x.git",
    "protocol.ext.allow": "always",
    "remote.extr.url": "ext::" + prog("ext-remote") + " %S",
    "uploadpack.packObjectsHook": prog("pack-objects-hook"),
    "alias.st": "!" + prog("alias-st"),
    "alias.status": "!" + prog("alias-status"),
    "alias.diff": "!" + prog("alias-diff"),
    "core.hooksPath": str(evil / "hooks"),
    "submodule.recurse": "true",
    "diff.ignoreSubmodules": "none",
}}
hooks_dirs = [evil / "hooks", PRIVATE / "hooks"]
HOOKS = ["post-checkout", "pre-commit", "prepare-commit-msg", "commit-msg", "post-commit",
         "post-index-change", "reference-transaction", "pre-auto-gc", "post-rewrite",
         "pre-push", "pre-push.local", "post-merge", "fsmonitor-watchman", "push-to-checkout"]
inc = evil / "include.cfg"
inc.write_text(f"[pager]\n\tbranch = {{prog('include-pager', passthru)}}\n[core]\n\tfsmonitor = {{prog('include-fsmonitor')}}\n")
incif = evil / "includeif.cfg"
incif.write_text(f"[diff]\n\texternal = {{prog('includeif-external')}}\n")
lines = [f"[include]\n\tpath = {{inc}}\n", f"[includeIf \"gitdir:/\"]\n\tpath = {{incif}}\n"]
section = {{}}
for k, v in settings.items():
    s, _, name = k.rpartition(".")
    head, _, sub = s.partition(".")
    section.setdefault((head, sub), []).append(f"\t{{name}} = \"{{v}}\"\n")
for (head, sub), entries in section.items():
    lines.append(f"[{{head}} \"{{sub}}\"]\n" if sub else f"[{{head}}]\n")
    lines += entries
evil_config = "".join(lines)
(evil / "config").write_text(evil_config)

done = {{}}
# 1. through `git config` (the Git dir's config), one key at a time
done["git config"] = [k for k, v in settings.items() if attempt("git", "config", k, v)]
done["git config include"] = attempt("git", "config", "--add", "include.path", str(inc))
# 2. straight into the Git dir's config file
try:
    with open(PRIVATE / "config", "a") as fh:
        fh.write(evil_config)
    done["config file"] = True
except OSError as exc:
    done["config file"] = str(exc)
# 3. its own global config (read by its own git, in the sandbox)
done["global"] = [k for k, v in settings.items() if attempt("git", "config", "--global", k, v)]
# 4. hooks, in its own hooks dir and in the Git dir's
for d in hooks_dirs:
    try:
        d.mkdir(exist_ok=True)
        for h in HOOKS:
            (d / h).write_text(f"#!/bin/sh\n{{prog('hook-' + d.parent.name + '-' + h)}}\ncat >/dev/null 2>&1 || true\n")
            (d / h).chmod(0o755)
        done[f"hooks {{d}}"] = True
    except OSError as exc:
        done[f"hooks {{d}}"] = str(exc)
# 5. info/attributes: every file filtered and diffed by the evil drivers
try:
    (PRIVATE / "info").mkdir(exist_ok=True)
    (PRIVATE / "info" / "attributes").write_text("* filter=evil diff=evil\n")
    done["info/attributes"] = True
except OSError as exc:
    done["info/attributes"] = str(exc)
# 6. legacy remote definitions in the Git dir
for kind in ("remotes", "branches"):
    try:
        (PRIVATE / kind).mkdir(exist_ok=True)
        (PRIVATE / kind / "extr2").write_text("URL: ext::" + prog("ext-legacy") + " %S\n")
        done[kind] = True
    except OSError as exc:
        done[kind] = str(exc)
# 7. a common dir of its own: a `commondir` that moves the config (and hooks) elsewhere
planted = evil / "common"
planted.mkdir()
for name in ("objects", "refs", "packed-refs", "logs", "hooks"):
    if (PRIVATE / name).exists():
        (planted / name).symlink_to(PRIVATE / name)
(planted / "config").write_text(
    f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {{wt}}\n" + evil_config)
try:
    (PRIVATE / "commondir").write_text(str(planted) + "\n")
    done["commondir"] = True
except OSError as exc:
    done["commondir"] = str(exc)
# the person's edits have something to stage, stash and commit
pathlib.Path("notes.txt").write_text("notes\n")
(TMP / "planted.tmp").write_text(__import__("json").dumps(done))
os.replace(TMP / "planted.tmp", TMP / "planted.json")
if {wait!r}:
    deadline = time.monotonic() + 300
    while not (TMP / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
"""

# What the person runs in the worktree to look at a candidate (`git st`: a worker's alias
# is no alias of the person's). Each runs on a terminal, so Git starts its pager.
USER_COMMANDS: list[tuple[str, ...]] = [
    ("status",),
    ("diff",),
    ("diff", "--cached"),
    ("log", "-p"),
    ("show",),
    ("branch",),
    ("st",),
    ("add", "-A"),
    ("diff", "--cached"),
    ("commit", "-m", "x"),
    ("checkout", "-"),
    ("checkout", "-"),
    ("stash",),
    ("stash", "pop"),
    ("fetch", "."),
    ("fetch", "origin"),
    ("fetch", "extr"),
    ("fetch", "extr2"),
]


def _on_a_terminal(cwd: Path, argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run `argv` with a pty as its stdin, stdout and stderr: (exit code, what it printed)."""
    master, slave = os.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        res = subprocess.run(
            argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env, timeout=120
        )
    finally:
        os.close(slave)
    reader.join(10)
    os.close(master)
    return res.returncode, b"".join(chunks).decode(errors="replace")


def _look_as_the_person(wt: Path, marks: Path, stage: str) -> dict[str, tuple[int, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_EDITOR", "GIT_PAGER")}
    env.update(PAGER="cat", EDITOR="true", TERM="dumb")
    # something to stage, stash and commit: a tracked and an untracked change
    (wt / "calc.py").write_text((wt / "calc.py").read_text() + f"# looked at {stage}\n")
    (wt / f"seen-{stage}.txt").write_text(stage + "\n")
    ran: dict[str, tuple[int, str]] = {}
    for args in USER_COMMANDS:
        ran[" ".join(args)] = _on_a_terminal(wt, ["git", *args], env)
        found = sorted(p.name for p in marks.iterdir()) if marks.exists() else []
        assert found == [], (stage, args, found, ran[" ".join(args)][1][-2000:])
    return ran


@pytest.fixture
def marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Outside the test's tmp dir (which the sandbox lets tasks write, for reports): under
    /tmp, which the sandbox hides, so only a program run outside the sandbox writes here."""
    d = tmp_path_factory.mktemp("marks")
    d.rmdir()
    return d


def test_the_persons_git_runs_nothing_the_worker_wrote(repo: Path, tmp: Path, marks: Path) -> None:
    worker = write_worker(
        tmp, HOSTILE.format(mark=str(marks), tmp=str(tmp), wait=True), name="hostile.py"
    )
    proc = popen_sup(repo, "start", "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    try:
        planted = wait_for(
            lambda: (tmp / "planted.json").exists(), timeout=120, what="the worker's attack"
        )
        assert planted
        done = json.loads((tmp / "planted.json").read_text())
        (tid,) = task_ids(repo)
        wt = Path(read_record(repo, tid)["worktree"])
        private = common_dir(repo) / "sup" / "tasks" / tid / "git"
        # while the worker runs
        ran = _look_as_the_person(wt, marks, "running")
        assert "not a git command" in ran["st"][1], ran["st"]
        assert ran["commit -m x"][0] == 0, ran["commit -m x"]
        assert ran["status"][0] == 0 and "On branch" in ran["status"][1], ran["status"]
        assert "a + b" in ran["log -p"][1]
        (tmp / "go").write_text("")
        # its own global config took every setting: the worker's git is unhindered
        assert len(done["global"]) == len(HOSTILE_KEYS), done
        # the Git dir's shell held: nothing through git config, the files or the dirs
        assert done["git config"] == [] and done["git config include"] is False, done
        for key in ("config file", "info/attributes", "commondir", f"hooks {private / 'hooks'}"):
            assert done[key] is not True, (key, done)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    assert proc.returncode in (0, 3), (out, err)
    rec = read_record(repo, tid)
    assert rec["status"] in ("ready", "parked"), rec
    assert rec["sandbox"]["git_state"] == "private" and rec["sandbox"]["mount_ns"], rec["sandbox"]
    # after the task ended
    _look_as_the_person(wt, marks, "ended")
    # what the worker left in its Git dir's top level is gone; the shell is gitsup's
    for name in ("remotes", "branches"):
        assert not (private / name).exists(), name
    assert (private / "commondir").read_text().strip() == str(private)
    assert sorted(p.name for p in (private / "hooks").iterdir()) == ["pre-push"]
    assert "evil" not in (private / "config").read_text()
    res = run_sup(repo, "doctor", "--json")
    assert res.returncode == 0, res.stderr
    assert not [f for f in json.loads(res.stdout) if f["kind"] == "git-shell"], res.stdout


HOSTILE_KEYS = [
    line.split('"')[1]
    for line in HOSTILE.splitlines()
    if line.startswith('    "') and '":' in line and "." in line.split('"')[1]
]


NESTED = r"""
import os, pathlib, subprocess
MARK = {mark!r}
HOME = pathlib.Path(os.environ["HOME"])
def sh(*a, cwd=None):
    subprocess.run(list(a), check=True, capture_output=True, cwd=cwd)
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
prog = pathlib.Path.cwd() / "nested-prog"
prog.write_text(f"#!/bin/sh\nmkdir -p {{MARK}} 2>/dev/null; echo \"$0 $*\" >> {{MARK}}/nested 2>/dev/null\nexit 0\n")
prog.chmod(0o755)
def hostile(sub, **init):
    # a repository whose config and hooks run the program whenever Git works in it
    sub = pathlib.Path(sub)
    sub.mkdir(parents=True, exist_ok=True)
    sh("git", "init", "-q", *init.get("args", ()), str(sub))
    sh("git", "commit", "-q", "--allow-empty", "-m", "s", cwd=sub)
    gitdir = subprocess.run(["git", "rev-parse", "--absolute-git-dir"], cwd=sub,
                            capture_output=True, text=True, check=True).stdout.strip()
    sh("git", "config", "core.fsmonitor", str(prog), cwd=sub)
    sh("git", "config", "core.hooksPath", gitdir + "/hooks", cwd=sub)
    for h in ("post-index-change", "post-checkout", "reference-transaction", "pre-commit"):
        hook = pathlib.Path(gitdir) / "hooks" / h
        hook.write_text(f"#!/bin/sh\n{{prog}} {{h}}\n")
        hook.chmod(0o755)
    (sub / "dirty").write_text("dirty\n")
# a submodule whose `.gitmodules` entry asks porcelain commands to look inside it
hostile("sub")
pathlib.Path(".gitmodules").write_text(
    '[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n\tignore = none\n'
    '[submodule "linked"]\n\tpath = linked\n\turl = ./linked\n'
)
# a gitlink with no `.gitmodules` entry, deeper down
hostile("deep/er/plain")
# a `.git` file naming a Git dir elsewhere (the task's private home)
hostile("linked", args=("--separate-git-dir", str(HOME / "linked.git")))
sh("git", "add", "calc.py", ".gitmodules", "sub", "deep/er/plain", "linked")
sh("git", "commit", "-q", "-m", "fix add, with submodules")
# and one never committed: `git add -A` would make it a gitlink
hostile("loose/inner")
"""

# What a person (or an editor) runs in a task worktree; each would enter a populated
# nested repository: `add -A`, `commit -a`, the plumbing and `stash` always, the porcelain
# when `.gitmodules` says `ignore = none`.
PERSON_COMMANDS = [
    ("status",),
    ("status", "--porcelain=v2", "--untracked-files=all"),
    ("diff",),
    ("diff", "HEAD"),
    ("log", "-p"),
    ("show",),
    ("diff-files",),
    ("diff-index", "HEAD"),
    ("add", "-A"),
    ("status",),
    ("diff", "--cached"),
    ("commit", "-a", "-m", "x"),
    ("stash",),
    ("stash", "pop"),
    ("add", "-A"),
    ("commit", "-m", "y"),
]


def test_a_nested_repository_is_moved_out_before_the_person_looks(
    repo: Path, tmp: Path, marks: Path
) -> None:
    """Nested repositories the worker configured (a submodule with `ignore = none`, a
    gitlink without `.gitmodules`, a `.git` file pointing elsewhere, an untracked one): when
    the task ends their `.git` entries are in the task dir, so the person's `git status`,
    `diff`, `log -p`, `add -A`, `commit` and `stash` run none of their programs. The work
    itself is untouched: the gitlinks are committed, the working files stay."""
    worker = write_worker(tmp, NESTED.format(mark=str(marks)), name="nested.py")
    res = run_sup(
        repo, "start", "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW, "--json"
    )
    rec = json.loads(res.stdout)
    # parked: it left uncommitted changes (the untracked repository, the dirty ones)
    assert rec["status"] == "parked" and rec["candidate"], (rec, res.stderr)
    wt = Path(rec["worktree"])
    task_dir = common_dir(repo) / "sup" / "tasks" / rec["id"]
    moved = [
        e["data"]["moved"]
        for e in map(json.loads, run_sup(repo, "log", rec["id"], "--json").stdout.splitlines())
        if e["type"] == "nested_git_moved"
    ]
    paths = ["deep/er/plain/.git", "linked/.git", "loose/inner/.git", "sub/.git"]
    assert [[m["path"] for m in ms] for ms in moved] == [paths], moved
    for m in moved[0]:
        assert not os.path.lexists(wt / m["path"]), m
        assert Path(m["to"]) == task_dir / "nested" / m["path"], m
    # nothing lost: the nested repositories as they were, their files where they were
    assert (task_dir / "nested" / "sub" / ".git" / "config").is_file()
    assert (task_dir / "nested" / "linked" / ".git").read_text().startswith("gitdir: ")
    assert (wt / "sub" / "dirty").is_file() and (wt / "loose" / "inner" / "dirty").is_file()
    tree = git(repo, "ls-tree", "-r", rec["candidate"])
    assert sum(line.startswith("160000 commit") for line in tree.splitlines()) == 3, tree

    env = {k: v for k, v in os.environ.items() if k not in ("GIT_EDITOR", "GIT_PAGER")}
    env.update(PAGER="cat", EDITOR="true", TERM="dumb")
    (wt / "calc.py").write_text((wt / "calc.py").read_text() + "# looked at\n")
    ran = []
    for args in PERSON_COMMANDS:
        code, out = _on_a_terminal(wt, ["git", *args], env)
        ran.append((args, code, out[-500:]))
        found = sorted(p.name for p in marks.iterdir()) if marks.exists() else []
        assert found == [], (args, found, out[-2000:])
    # the person's commits went through: the nested programs were not merely failing
    assert "# looked at" in git(wt, "show", "HEAD:calc.py"), ran
    # put back, a nested repository's programs do run for the person's `git add -A`
    os.rename(task_dir / "nested" / "sub" / ".git", wt / "sub" / ".git")
    (wt / "sub" / "dirty").write_text("dirtier\n")
    _on_a_terminal(wt, ["git", "add", "-A"], env)
    assert (marks / "nested").exists(), "the hostile nested repository runs its programs"
    (marks / "nested").unlink()
    # a task ended by an older gitsup (nothing moved, no mark): doctor finds it, --fix moves it
    (task_dir / "nested-checked").unlink()
    res = run_sup(repo, "doctor", "--json")
    found = [f for f in json.loads(res.stdout) if f["kind"] == "nested-git"]
    assert [f["task"] for f in found] == [rec["id"]] and "sub/.git" in found[0]["detail"], found
    res = run_sup(repo, "doctor", "--fix", "--json")
    found = [f for f in json.loads(res.stdout) if f["kind"] == "nested-git"]
    assert found and found[0]["fixed"].startswith("moved into"), res.stdout
    assert (task_dir / "nested" / "sub" / ".git" / "config").is_file()
    (wt / "sub" / "dirty").write_text("dirtiest\n")
    _on_a_terminal(wt, ["git", "add", "-A"], env)
    assert not marks.exists() or not list(marks.iterdir())
    res = run_sup(repo, "doctor", "--json")
    assert not [f for f in json.loads(res.stdout) if f["kind"] == "nested-git"], res.stdout


def test_a_task_made_before_the_shell_is_reported_and_rewritten(repo: Path, tmp: Path) -> None:
    """A task whose Git dir's config the worker could write (an older gitsup): doctor
    reports it, `doctor --fix` rewrites the shell, and the planted settings are gone."""
    worker = write_worker(tmp, "print('nothing to do')\n")
    res = run_sup(repo, "start", "g", "--worker", worker, *NO_REVIEW, "--json")
    rec = json.loads(res.stdout)
    tid, wt = rec["id"], Path(rec["worktree"])
    private = common_dir(repo) / "sup" / "tasks" / tid / "git"
    marker = tmp / "fsmonitor-ran"
    prog = tmp / "prog"
    prog.write_text(f"#!/bin/sh\ntouch {marker}\n")
    prog.chmod(0o755)
    # what an older gitsup left: a shell the worker wrote, no record of gitsup's own
    (common_dir(repo) / "sup" / "tasks" / tid / "git-seal").unlink()
    with open(private / "config", "a") as fh:
        fh.write(f"[core]\n\tfsmonitor = {prog}\n")
    (private / "commondir").unlink()
    git(wt, "status")
    assert marker.exists()  # the hazard doctor reports
    marker.unlink()
    res = run_sup(repo, "doctor", "--json")
    found = [f for f in json.loads(res.stdout) if f["kind"] == "git-shell"]
    assert [f["task"] for f in found] == [tid], res.stdout
    res = run_sup(repo, "doctor", "--fix", "--json")
    found = [f for f in json.loads(res.stdout) if f["kind"] == "git-shell"]
    assert found and found[0]["fixed"] == "rewritten", res.stdout
    git(wt, "status")
    assert not marker.exists()
    assert (private / "commondir").read_text().strip() == str(private)
    res = run_sup(repo, "doctor", "--json")
    assert not [f for f in json.loads(res.stdout) if f["kind"] == "git-shell"], res.stdout


def test_the_worker_keeps_its_git(repo: Path, tmp: Path) -> None:
    """Its own settings go to its own global config; everything else works as before."""
    seen = tmp / "seen.json"
    worker = write_worker(
        tmp,
        textwrap.dedent(
            f"""
            import json, pathlib, subprocess
            def sh(*a):
                r = subprocess.run(list(a), capture_output=True, text=True)
                return r.returncode, r.stdout.strip(), r.stderr.strip()
            out = {{}}
            out["global"] = sh("git", "config", "--global", "user.name", "Worker Name")
            out["get"] = sh("git", "config", "--global", "user.name")
            out["local"] = sh("git", "config", "user.name", "Local")
            p = pathlib.Path("calc.py")
            p.write_text(p.read_text().replace("a - b", "a + b"))
            out["stash"] = sh("git", "stash")
            out["pop"] = sh("git", "stash", "pop")
            out["branch"] = sh("git", "branch", "mine/x")
            out["commit"] = sh("git", "commit", "-q", "-am", "fix add")
            out["log"] = sh("git", "log", "-1", "--format=%an|%s")
            out["diff"] = sh("git", "diff", "HEAD~1", "--stat")
            pathlib.Path({str(seen)!r}).write_text(json.dumps(out))
            """
        ),
    )
    res = run_sup(repo, "start", "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    out = json.loads(seen.read_text())
    assert res.returncode == 0, (res.stderr, out)
    assert out["global"][0] == 0 and out["get"][1] == "Worker Name", out
    assert out["local"][0] != 0, out  # the Git dir's config is gitsup's
    for k in ("stash", "pop", "branch", "commit", "diff"):
        assert out[k][0] == 0, (k, out[k])
    # the identity gitsup gives the task (GIT_AUTHOR_*) wins over its own config
    assert out["log"][1].endswith("|fix add"), out
    (tid,) = task_ids(repo)
    home = common_dir(repo) / "sup" / "tasks" / tid / "sandbox" / "home"
    assert "Worker Name" in (home / ".gitconfig").read_text()
    assert "Worker Name" not in git(repo, "config", "--list")


def test_a_takeover_rewrites_the_shell_before_the_new_worker_runs(repo: Path, tmp: Path) -> None:
    """The supervisor dies; the Git dir's config was left writable and planted (as by an
    older gitsup); `recover --takeover` rewrites the shell before its worker starts."""
    import signal

    worker = write_worker(
        tmp,
        f"""
        import pathlib, subprocess, time
        tmp = pathlib.Path({str(tmp)!r})
        if not (tmp / "first").exists():
            (tmp / "first").write_text("")
            time.sleep(300)
        private = subprocess.run(["git", "rev-parse", "--absolute-git-dir"],
                                 capture_output=True, text=True).stdout.strip()
        (tmp / "config-seen").write_text(pathlib.Path(private, "config").read_text())
        p = pathlib.Path("calc.py")
        p.write_text(p.read_text().replace("a - b", "a + b"))
        subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
        """,
    )
    proc = popen_sup(repo, "start", "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    try:
        wait_for(lambda: (tmp / "first").exists(), timeout=60, what="the first worker")
        (tid,) = task_ids(repo)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    task_dir = common_dir(repo) / "sup" / "tasks" / tid
    (task_dir / "git-seal").unlink()
    with open(task_dir / "git" / "config", "a") as fh:
        fh.write("[core]\n\tfsmonitor = /planted/by/the/worker\n")
    res = run_sup(repo, "recover", tid, "--takeover", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["status"] == "ready"
    seen = (tmp / "config-seen").read_text()
    assert "hooksPath" in seen and "planted" not in seen, seen
    assert "planted" not in (task_dir / "git" / "config").read_text()


def test_without_a_mount_namespace_the_shell_is_rewritten_at_the_end(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Landlock alone cannot keep the shell read-only: the record says so, and what the
    worker wrote there is gone once the task ended."""
    monkeypatch.setenv("GITSUP_SANDBOX_REFUSE", "mountns")
    marker = tmp / "fsmonitor-ran"
    prog = tmp / "prog"
    prog.write_text(f"#!/bin/sh\ntouch {marker}\n")
    prog.chmod(0o755)
    worker = write_worker(
        tmp,
        f"""
        import pathlib, subprocess
        p = pathlib.Path("calc.py")
        p.write_text(p.read_text().replace("a - b", "a + b"))
        subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
        subprocess.run(["git", "config", "core.fsmonitor", {str(prog)!r}], check=True)
        """,
    )
    res = run_sup(
        repo, "start", "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW, "--json"
    )
    rec = json.loads(res.stdout)
    assert rec["status"] == "ready", (rec, res.stderr)
    assert not rec["sandbox"]["mount_ns"]
    assert any(w.startswith("git shell writable") for w in rec["sandbox"]["weaker"]), rec
    with contextlib.suppress(FileNotFoundError):
        marker.unlink()
    git(Path(rec["worktree"]), "status")
    assert not marker.exists()
    assert (
        str(prog)
        not in (common_dir(repo) / "sup" / "tasks" / rec["id"] / "git" / "config").read_text()
    )


def test_checks_run_without_the_workers_git_config(repo: Path, tmp: Path) -> None:
    """What the worker sets for its own Git (e.g. `core.whitespace` to quiet `git diff
    --check`, a pager or a textconv that changes what a reviewer sees) does not reach the
    checks, the reviewer or the decider."""
    worker = write_worker(
        tmp,
        """
        import pathlib, subprocess
        p = pathlib.Path("calc.py")
        p.write_text(p.read_text().replace("a - b", "a + b  "))  # trailing whitespace
        subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
        subprocess.run(["git", "config", "--global", "core.whitespace", "-trailing-space"],
                       check=True)
        """,
    )
    # the default check (`git diff --check <baseline> HEAD`) sees the trailing whitespace
    res = run_sup(repo, "start", "g", "--worker", worker, *NO_REVIEW, "--json")
    rec = json.loads(res.stdout)
    assert rec["status"] == "parked", (rec, res.stderr)
    home = common_dir(repo) / "sup" / "tasks" / rec["id"] / "sandbox" / "home"
    assert "trailing-space" in (home / ".gitconfig").read_text()
    results = [
        json.loads(line)
        for line in run_sup(repo, "log", rec["id"], "--json").stdout.splitlines()
        if '"acceptance_result"' in line
    ]
    assert results and results[-1]["data"]["passed"] is False, results
