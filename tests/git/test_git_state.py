"""A task's private Git dir: the worker commits there; the supervisor imports the work into
the user's `sup/<id>`, re-hashing every object, and nothing else the worker does to its Git
state (refs, notes, config, hooks, packed-refs, forged objects) reaches the user's repository.

Real `git sup start` runs with real process workers that attack from inside the task."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from gitsup.boundary.pusher import task_of_path
from gitsup.workers.claude.relay import locate
from tests.conftest import git, run_sup
from tests.helpers.sup import check_cmd, common_dir, run_cli_inproc, start_json, write_worker

NO_REVIEW = ("--review", "none")
QUICK_CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")

# Shared worker prelude: `out(key, value)` records what the worker saw into a JSON file
# outside the worktree; `sh(...)` runs git and returns its output.
PRELUDE = """
import json, os, pathlib, subprocess, zlib, hashlib
OUT = pathlib.Path({out!r})
USER = {user!r}
seen = {{}}
def out(k, v):
    seen[k] = v
    OUT.write_text(json.dumps(seen))
def sh(*a, check=True):
    r = subprocess.run(list(a), capture_output=True, text=True)
    if check and r.returncode:
        raise SystemExit(f"{{a}} failed: {{r.stderr}}")
    return r.stdout.strip()
def fix():
    p = pathlib.Path("calc.py")
    p.write_text(p.read_text().replace("a - b", "a + b"))
    sh("git", "commit", "-q", "-am", "fix add")
    return sh("git", "rev-parse", "HEAD")
PRIVATE = sh("git", "rev-parse", "--absolute-git-dir")
out("private", PRIVATE)
"""


def _worker(tmp: Path, repo: Path, body: str) -> tuple[str, Path]:
    out = tmp / "seen.json"
    user = str(common_dir(repo))
    script = textwrap.dedent(PRELUDE).format(out=str(out), user=user) + textwrap.dedent(body)
    return write_worker(tmp, script), out


def _events(repo: Path, task: str) -> list[dict[str, Any]]:
    rc, out, err = run_cli_inproc(repo, "log", task, "--json")
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


def _has_object(repo: Path, oid: str) -> bool:
    return (
        subprocess.run(["git", "cat-file", "-e", oid], cwd=repo, capture_output=True).returncode
        == 0
    )


def _object_files(common: Path) -> dict[str, str]:
    return {
        str(p.relative_to(common)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((common / "objects").rglob("*"))
        if p.is_file()
    }


def _tree_state(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _user_state(repo: Path, task: str | None = None) -> dict[str, Any]:
    """The user's refs (minus what the task legitimately writes), config, hooks, notes."""
    common = common_dir(repo)
    refs = [
        line
        for line in git(repo, "for-each-ref", "--format=%(objectname) %(refname)").splitlines()
        if not (
            task
            and (
                line.endswith(f" refs/heads/sup/{task}")
                or f" refs/sup/{task}/" in line
                or line.endswith(" refs/notes/sup")
            )
        )
    ]
    packed = common / "packed-refs"
    return {
        "refs": refs,
        "packed-refs": packed.read_bytes() if packed.exists() else None,
        "config": (common / "config").read_bytes(),
        "hooks": _tree_state(common / "hooks"),
        "HEAD": (common / "HEAD").read_bytes(),
    }


# --- the import -----------------------------------------------------------------------------


def test_the_commit_reaches_the_user_repo_only_through_the_import(repo: Path, tmp: Path) -> None:
    worker, seen_file = _worker(
        tmp,
        repo,
        """
        out("gitfile", pathlib.Path(".git").read_text())
        out("log_main", sh("git", "log", "--format=%H", "main"))
        out("diff_main", sh("git", "diff", "--stat", "main"))
        c = fix()
        out("commit", c)
        # the commit exists in the private repo only
        out("user_has_commit", subprocess.run(
            ["git", "--git-dir", USER, "cat-file", "-e", c]).returncode == 0)
        out("user_branch", sh("git", "--git-dir", USER, "rev-parse", f"sup/{os.environ['GITSUP_TASK']}"))
        out("private_objects", sorted(str(p) for p in (pathlib.Path(PRIVATE) / "objects").rglob("*")
                                      if p.is_file() and "info" not in p.parts))
        """,
    )
    rc, rec, err = start_json(repo, "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    assert rc == 0, (err, rec.get("reasons"))
    tid, baseline = rec["id"], rec["baseline"]
    seen = json.loads(seen_file.read_text())
    common = common_dir(repo)
    private = common / "sup" / "tasks" / tid / "git"
    # the worker's Git dir was the private one, and Git inside the task saw the user's main
    assert Path(seen["private"]) == private
    assert seen["gitfile"].strip() == f"gitdir: {private}"
    assert seen["log_main"].splitlines()[0] == git(repo, "rev-parse", "main")
    assert seen["diff_main"] == ""
    # while the worker ran, its commit was in its private store only
    assert seen["user_has_commit"] is False
    assert seen["user_branch"] == baseline
    assert seen["private_objects"], "the worker's objects landed in the private store"
    # after the import: on sup/<id>, a ready candidate with its note
    assert rec["status"] == "ready" and rec["candidate"] == seen["commit"]
    assert git(repo, "rev-parse", f"refs/heads/sup/{tid}") == seen["commit"]
    assert git(repo, "log", "--format=%s", "-1", f"sup/{tid}") == "fix add"
    assert json.loads(git(repo, "notes", "--ref=sup", "show", seen["commit"]))["status"] == "ready"
    imported = [e for e in _events(repo, tid) if e["type"] == "work_imported"]
    assert imported and imported[0]["data"]["to"] == seen["commit"]
    assert imported[0]["data"]["objects"] == 3  # commit, tree, blob of calc.py
    # the user's repository keeps the worktree's registration
    wt = Path(rec["worktree"])
    listing = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {wt}" in listing and f"branch refs/heads/sup/{tid}" in listing
    git(repo, "worktree", "prune")
    assert f"worktree {wt}" in git(repo, "worktree", "list", "--porcelain")
    # Git inside the worktree still works after the task
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "rev-parse", "HEAD") == seen["commit"]
    # the hook relay and the pusher detection find the task and the user's repository
    assert locate(str(wt)) == (os.path.realpath(common), os.path.realpath(wt))
    assert task_of_path(str(wt)) == tid
    # discard removes the worktree and the private dir; the refs stay
    res = run_sup(repo, "discard", tid)
    assert res.returncode == 0, res.stderr
    assert not wt.exists() and not private.exists()
    assert f"worktree {wt}" not in git(repo, "worktree", "list", "--porcelain")
    assert git(repo, "rev-parse", f"refs/heads/sup/{tid}") == seen["commit"]


ABUSE = """
c = fix()
out("commit", c)
# a commit of its own on a private `main`, a lightweight and an annotated tag
sh("git", "checkout", "-q", "-b", "scratch")
pathlib.Path("evil.txt").write_text("evil\\n")
sh("git", "add", "evil.txt")
sh("git", "commit", "-q", "-m", "evil")
evil = sh("git", "rev-parse", "HEAD")
out("evil", evil)
sh("git", "checkout", "-q", f"sup/{os.environ['GITSUP_TASK']}")
sh("git", "branch", "-f", "main", evil)
sh("git", "tag", "light", evil)
sh("git", "tag", "-a", "-m", "annotated", "v9", evil)
out("tag_object", sh("git", "rev-parse", "v9"))
# forged notes: on the user's main tip and on its own commit
sh("git", "notes", "--ref=sup", "add", "-f", "-m", '{"status": "ready", "forged": true}', "main")
sh("git", "notes", "--ref=sup", "add", "-f", "-m", '{"status": "ready", "forged": true}', c)
out("forged_notes", sh("git", "rev-parse", "refs/notes/sup"))
# config, hooks, remotes (refused: the Git dir's config and hooks are read-only), packed-refs
sh("git", "config", "core.hooksPath", ".githooks", check=False)
sh("git", "config", "remote.origin.url", USER, check=False)
sh("git", "config", "credential.helper", "!echo stolen", check=False)
hooks = pathlib.Path(PRIVATE) / "hooks"
try:
    (hooks / "post-commit").write_text("#!/bin/sh\\necho pwned > /tmp/pwned\\n")
    (hooks / "post-commit").chmod(0o755)
except OSError:
    pass
sh("git", "pack-refs", "--all")
packed = pathlib.Path(PRIVATE) / "packed-refs"
packed.write_text(packed.read_text() + f"{evil} refs/heads/integration\\n{evil} refs/sup/forged\\n")
out("done", True)
"""


def test_private_refs_notes_config_hooks_never_reach_the_user_repo(repo: Path, tmp: Path) -> None:
    assert run_sup(repo, "init").returncode == 0
    # the task's own writes (sup/<id>, refs/sup/<id>/*, the note) are excluded below
    before = _user_state(repo)
    objects_before = _object_files(common_dir(repo))
    worker, seen_file = _worker(tmp, repo, ABUSE)
    rc, rec, err = start_json(repo, "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    tid = rec["id"]
    seen = json.loads(seen_file.read_text())
    assert seen.get("done"), seen  # the whole attack ran
    assert _user_state(repo, tid) == before
    # every object file that existed is still there, byte for byte
    objects_after = _object_files(common_dir(repo))
    assert {k: objects_after.get(k) for k in objects_before} == objects_before
    # the evil commit (a private main) and the tag object were never imported by gitsup
    assert not _has_object(repo, seen["evil"])
    assert not _has_object(repo, seen["tag_object"])
    assert not _has_object(repo, seen["forged_notes"])
    # the notes the user's repo has: only the candidate's, written by the supervisor
    notes = git(repo, "notes", "--ref=sup", "list").splitlines()
    assert [n.split()[1] for n in notes] == [seen["commit"]]
    assert "forged" not in git(repo, "notes", "--ref=sup", "show", seen["commit"])
    # the task's own commit landed and is ready
    assert rc == 0, (err, rec.get("reasons"))
    assert rec["status"] == "ready" and rec["candidate"] == seen["commit"]
    assert git(repo, "rev-parse", f"refs/heads/sup/{tid}") == seen["commit"]
    assert not Path("/tmp/pwned").exists()


# --- forged and missing objects ----------------------------------------------------------------

PLANT = """
BIG = 5 * 1024 * 1024  # over the size from which the import streams a blob through git
if {mode!r} == "forge-big":
    pathlib.Path("secret.txt").write_bytes(b"r" * BIG)
else:
    pathlib.Path("secret.txt").write_text("the real content\\n")
sh("git", "add", "secret.txt")
c = fix()
blob = sh("git", "rev-parse", "HEAD:secret.txt")
out("commit", c)
out("blob", blob)
loose = pathlib.Path(PRIVATE) / "objects" / blob[:2] / blob[2:]
loose.chmod(0o644)
if {mode!r} == "forge":
    fake = b"forged content\\n"
    loose.write_bytes(zlib.compress(b"blob %d\\0" % len(fake) + fake))
    out("fake", hashlib.sha1(b"blob %d\\0" % len(fake) + fake).hexdigest())
elif {mode!r} == "forge-big":
    # as big as the real one, so its header agrees; only a re-hash of the content finds
    # it (libgit2 reads no more than the header, `git cat-file` streams without a check)
    fake = b"f" * BIG
    loose.write_bytes(zlib.compress(b"blob %d\\0" % len(fake) + fake))
    out("fake", hashlib.sha1(b"blob %d\\0" % len(fake) + fake).hexdigest())
elif {mode!r} == "wrong-type":
    # a well-framed object of another type under the name: hashes differently
    loose.write_bytes(zlib.compress(b"commit 5\\0hello"))
    out("fake", hashlib.sha1(b"commit 5\\0hello").hexdigest())
elif {mode!r} == "alternate":
    # the object moved to a store of its own that the private dir lists as an alternate:
    # Git in the task still finds it, the import (which reads only the private store) not
    other = pathlib.Path({other!r})
    (other / blob[:2]).mkdir(parents=True)
    import shutil  # the private store and `other` may be different mounts (the sandbox)

    shutil.move(str(loose), str(other / blob[:2] / blob[2:]))
    alternates = pathlib.Path(PRIVATE) / "objects" / "info" / "alternates"
    alternates.write_text(alternates.read_text() + str(other) + "\\n")
    sh("git", "cat-file", "-e", blob)
    out("fake", None)
else:
    loose.unlink()
    out("fake", None)
"""


def _planted_run(repo: Path, tmp: Path, mode: str) -> dict[str, Any]:
    objects_before = _object_files(common_dir(repo))
    worker, seen_file = _worker(
        tmp, repo, PLANT.format(mode=mode, other=str(tmp / "other-objects"))
    )
    rc, rec, err = start_json(repo, "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    assert rc == 3, (err, rec.get("reasons"))
    seen = json.loads(seen_file.read_text())
    tid, baseline = rec["id"], rec["baseline"]
    assert rec["status"] == "parked" and rec["candidate"] is None
    reasons = " | ".join(rec["reasons"])
    assert "import refused" in reasons, reasons
    if mode in ("missing", "alternate"):
        assert f"object {seen['blob']} is missing" in reasons
    else:
        assert seen["blob"] in reasons
    # nothing of the worker's reached the user's object store or its task branch
    assert git(repo, "rev-parse", f"refs/heads/sup/{tid}") == baseline
    for oid in (seen["commit"], seen["blob"], seen["fake"]):
        if oid:
            assert not _has_object(repo, oid), oid
    objects_after = _object_files(common_dir(repo))
    assert {k: objects_after.get(k) for k in objects_before} == objects_before
    refused = [e for e in _events(repo, tid) if e["type"] == "import_refused"]
    assert len(refused) == 1 and seen["blob"] in refused[0]["data"]["reason"]
    assert not any(e["type"] == "work_imported" for e in _events(repo, tid))
    return rec


def test_a_forged_loose_object_is_refused_and_the_task_parks(repo: Path, tmp: Path) -> None:
    _planted_run(repo, tmp, "forge")


def test_a_forged_big_blob_is_refused_by_gitsups_own_rehash(repo: Path, tmp: Path) -> None:
    """A blob the import streams (over 4 MiB) is read by tools that never check its name:
    the re-hash as it is copied is what refuses it."""
    rec = _planted_run(repo, tmp, "forge-big")
    reasons = " | ".join(rec["reasons"])
    assert "forged object in the task's Git dir" in reasons, reasons


def test_an_object_of_another_type_under_the_name_is_refused(repo: Path, tmp: Path) -> None:
    _planted_run(repo, tmp, "wrong-type")


def test_a_missing_object_is_refused_and_the_task_parks(repo: Path, tmp: Path) -> None:
    _planted_run(repo, tmp, "missing")


def test_an_object_only_in_a_planted_alternate_is_refused(repo: Path, tmp: Path) -> None:
    _planted_run(repo, tmp, "alternate")


def test_packed_objects_are_imported(repo: Path, tmp: Path) -> None:
    """The worker packs its store (`git gc`): the import reads packs as well."""
    worker, seen_file = _worker(
        tmp,
        repo,
        """
        for i in range(3):
            pathlib.Path(f"notes{i}.txt").write_text(f"{i}\\n")
            sh("git", "add", f"notes{i}.txt")
            sh("git", "commit", "-q", "-m", f"notes {i}")
        out("commit", fix())
        sh("git", "gc", "-q", "--prune=now")
        out("loose", [str(p) for p in (pathlib.Path(PRIVATE) / "objects").glob("??/*")])
        """,
    )
    rc, rec, err = start_json(repo, "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    assert rc == 0, (err, rec.get("reasons"))
    seen = json.loads(seen_file.read_text())
    # the worker's commits went into a pack (gc keeps loose only what an alternate has)
    assert not [p for p in seen["loose"] if p.replace("/", "").endswith(seen["commit"])]
    assert rec["candidate"] == seen["commit"]
    assert len(git(repo, "rev-list", f"{rec['baseline']}..sup/{rec['id']}").split()) == 4
    fsck = subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True)
    assert fsck.returncode == 0, fsck.stderr


# --- the worker's HEAD -----------------------------------------------------------------------


def test_a_branch_switch_is_followed_and_recorded(repo: Path, tmp: Path) -> None:
    worker, seen_file = _worker(
        tmp,
        repo,
        """
        sh("git", "checkout", "-q", "-b", "other")
        out("commit", fix())
        """,
    )
    rc, rec, err = start_json(repo, "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    assert rc == 0, (err, rec.get("reasons"))
    tid = rec["id"]
    seen = json.loads(seen_file.read_text())
    assert rec["status"] == "ready" and rec["candidate"] == seen["commit"]
    assert git(repo, "rev-parse", f"refs/heads/sup/{tid}") == seen["commit"]
    # the private branch name never reaches the user's repository
    assert git(repo, "for-each-ref", "refs/heads/other") == ""
    changed = [e["data"] for e in _events(repo, tid) if e["type"] == "worker_branch_changed"]
    assert changed == [
        {"from": f"refs/heads/sup/{tid}", "to": "refs/heads/other", "tip": seen["commit"]}
    ]


def test_a_branch_not_descending_from_the_baseline_parks_with_a_wip(repo: Path, tmp: Path) -> None:
    worker, seen_file = _worker(
        tmp,
        repo,
        """
        sh("git", "checkout", "-q", "--orphan", "lonely")
        pathlib.Path("calc.py").write_text("def add(a, b):\\n    return a + b\\n")
        sh("git", "add", "-A")
        sh("git", "commit", "-q", "-m", "unrelated history")
        out("commit", sh("git", "rev-parse", "HEAD"))
        pathlib.Path("scratch.txt").write_text("not committed\\n")
        """,
    )
    rc, rec, err = start_json(repo, "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    assert rc == 3, (err, rec.get("reasons"))
    tid, baseline = rec["id"], rec["baseline"]
    seen = json.loads(seen_file.read_text())
    reasons = " | ".join(rec["reasons"])
    assert "lonely" in reasons and "does not descend from the baseline" in reasons, reasons
    assert rec["status"] == "parked" and rec["candidate"] is None
    assert git(repo, "rev-parse", f"refs/heads/sup/{tid}") == baseline
    assert not _has_object(repo, seen["commit"])
    # the worker's state is kept as a wip snapshot on top of the baseline
    wip = git(repo, "rev-parse", f"refs/sup/{tid}/wip")
    assert rec["wip"] == wip and git(repo, "rev-parse", f"{wip}^") == baseline
    wt = Path(rec["worktree"])
    for name in ("calc.py", "test_calc.py", "scratch.txt"):
        shown = subprocess.run(
            ["git", "cat-file", "blob", f"{wip}:{name}"], cwd=repo, capture_output=True, check=True
        ).stdout
        assert shown == (wt / name).read_bytes(), name
    types = [e["type"] for e in _events(repo, tid)]
    assert "worker_branch_changed" not in types  # refused before it was followed
    assert types.count("import_refused") == 1 and "wip_saved" in types


def test_a_rewritten_gitfile_does_not_redirect_the_supervisor(repo: Path, tmp: Path) -> None:
    """The worker points its `.git` file at another repository it made: the supervisor
    still reads the private dir it knows, and the worker's commit there is what counts."""
    worker, seen_file = _worker(
        tmp,
        repo,
        """
        out("commit", fix())
        decoy = pathlib.Path({decoy!r})
        sh("git", "init", "-q", str(decoy))
        sh("git", "-C", str(decoy), "commit", "-q", "--allow-empty", "-m", "decoy")
        pathlib.Path(".git").write_text(f"gitdir: {decoy / '.git'}\\n")
        """.replace("{decoy!r}", repr(str(tmp / "decoy"))),
    )
    rc, rec, err = start_json(repo, "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    seen = json.loads(seen_file.read_text())
    assert rc == 0, (err, rec.get("reasons"))
    assert rec["candidate"] == seen["commit"]
    assert git(repo, "rev-parse", f"refs/heads/sup/{rec['id']}") == seen["commit"]


def test_a_worker_that_deletes_its_git_dir_is_refused(repo: Path, tmp: Path) -> None:
    """Not taken for a task made before private dirs existed: the import is refused."""
    worker, seen_file = _worker(
        tmp,
        repo,
        """
        out("commit", fix())
        import shutil
        # all it can: its config, commondir, hooks and info are read-only mounts
        shutil.rmtree(PRIVATE, ignore_errors=True)
        """,
    )
    rc, rec, err = start_json(repo, "g", "--check", QUICK_CHECK, "--worker", worker, *NO_REVIEW)
    assert rc == 3, (err, rec.get("reasons"))
    reasons = " | ".join(rec["reasons"])
    assert "import refused" in reasons and "has no HEAD" in reasons, reasons
    assert git(repo, "rev-parse", f"refs/heads/sup/{rec['id']}") == rec["baseline"]
    assert rec["candidate"] is None
    assert not _has_object(repo, json.loads(seen_file.read_text())["commit"])
