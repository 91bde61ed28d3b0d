"""The import of the worker's work is bounded: an object, the number and size of the new
objects, the parents of a commit, the new commits and the depth of trees are held to
limits before anything is copied, and a big blob is copied a chunk at a time (the
supervisor never holds it whole). Over a limit the task parks naming the object, its size
and the limit; nothing of it reaches the user's repository; the work stays in the task's
private Git dir until discard.

Real `git sup start` runs with real process workers."""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import check_cmd, common_dir, popen_sup, write_spec, write_worker

GiB = 1024 * 1024 * 1024
NO_REVIEW = ("--review", "none")

PRELUDE = """
import json, os, pathlib, subprocess
OUT = pathlib.Path({out!r})
seen = {{}}
def out(k, v):
    seen[k] = v
    OUT.write_text(json.dumps(seen))
def sh(*a, input=None):
    r = subprocess.run(list(a), capture_output=True, input=input)
    if r.returncode:
        raise SystemExit(f"{{a}} failed: {{r.stderr.decode()}}")
    return r.stdout.decode().strip()
PRIVATE = sh("git", "rev-parse", "--absolute-git-dir")
"""


def _worker(tmp: Path, body: str) -> tuple[str, Path]:
    out = tmp / "seen.json"
    script = textwrap.dedent(PRELUDE).format(out=str(out)) + textwrap.dedent(body)
    return write_worker(tmp, script), out


def _has_object(repo: Path, oid: str) -> bool:
    res = subprocess.run(["git", "cat-file", "-e", oid], cwd=repo, capture_output=True)
    return res.returncode == 0


def _start_measured(repo: Path, *args: str) -> tuple[int, dict[str, object], str, int]:
    """`git sup start ... --json`, and the supervisor's peak resident memory (VmHWM, bytes)
    read from /proc while it runs (the high-water mark: a spike between reads counts)."""
    p = popen_sup(repo, "start", *args, "--json")
    peak = [0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            try:
                status = Path(f"/proc/{p.pid}/status").read_text()
            except OSError:
                return
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    peak[0] = max(peak[0], int(line.split()[1]) * 1024)
            done.wait(0.05)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    out, err = p.communicate(timeout=600)
    done.set()
    t.join()
    rec = json.loads(out) if out.strip() else {}
    return p.returncode, rec, err, peak[0]


def _parked(rc: int, rec: dict[str, object], err: str) -> str:
    assert rc == 3, (err, rec.get("reasons"))
    assert rec["status"] == "parked" and rec["candidate"] is None
    reasons = " | ".join(rec["reasons"])  # type: ignore[arg-type]
    assert "import refused" in reasons and "over the import limit" in reasons, reasons
    return reasons


def _nothing_imported(repo: Path, rec: dict[str, object], *oids: str) -> None:
    tid = str(rec["id"])
    assert git(repo, "rev-parse", f"refs/heads/sup/{tid}") == rec["baseline"]
    for oid in oids:
        assert not _has_object(repo, oid), oid
    # the work stays in the task's private Git dir
    private = common_dir(repo) / "sup" / "tasks" / tid / "git"
    for oid in oids:
        found = subprocess.run(
            ["git", "--git-dir", str(private), "cat-file", "-e", oid], capture_output=True
        )
        assert found.returncode == 0, oid


BIG = """
subprocess.run(["truncate", "-s", str({size}), "big.bin"], check=True)
sh("git", "add", "big.bin")
sh("git", "commit", "-q", "-m", "a big file")
out("commit", sh("git", "rev-parse", "HEAD"))
out("blob", sh("git", "rev-parse", "HEAD:big.bin"))
"""


def test_a_1gib_blob_parks_naming_the_limit_and_the_supervisor_stays_small(
    repo: Path, tmp: Path
) -> None:
    worker, seen_file = _worker(tmp, BIG.format(size=GiB))
    rc, rec, err, peak = _start_measured(repo, "g", "--worker", worker, *NO_REVIEW)
    seen = json.loads(seen_file.read_text())
    reasons = _parked(rc, rec, err)
    assert f"blob {seen['blob']} ({GiB} bytes)" in reasons, reasons
    assert f"{GiB} > {100 * 1024 * 1024}" in reasons and "max_object_bytes" in reasons, reasons
    _nothing_imported(repo, rec, seen["blob"], seen["commit"])
    assert peak < 300 * 1024 * 1024, f"the supervisor peaked at {peak >> 20} MiB"
    # no wip snapshot holds it either; the record says where the work is, and discard
    # asks for --force before it would remove it
    tid = str(rec["id"])
    assert not _has_object(repo, seen["blob"])
    kept = [i for i in rec["not_captured"] if "not imported" in i["why"]]  # type: ignore[attr-defined]
    assert kept and kept[0]["blocks_discard"], rec["not_captured"]
    res = run_sup(repo, "discard", tid)
    assert res.returncode != 0, res.stdout
    assert (common_dir(repo) / "sup" / "tasks" / tid / "git").is_dir()


def test_a_5mib_file_is_imported_a_chunk_at_a_time_and_the_task_is_ready(
    repo: Path, tmp: Path
) -> None:
    worker, seen_file = _worker(
        tmp,
        """
        data = os.urandom(5 * 1024 * 1024)
        pathlib.Path("data.bin").write_bytes(data)
        p = pathlib.Path("calc.py")
        p.write_text(p.read_text().replace("a - b", "a + b"))
        sh("git", "add", "-A")
        sh("git", "commit", "-q", "-m", "fix add, with data")
        out("commit", sh("git", "rev-parse", "HEAD"))
        out("blob", sh("git", "rev-parse", "HEAD:data.bin"))
        """,
    )
    check = check_cmd("from calc import add; assert add(1, 2) == 3")
    rc, rec, err, _peak = _start_measured(
        repo, "g", "--check", check, "--worker", worker, *NO_REVIEW
    )
    assert rc == 0, (err, rec.get("reasons"))
    seen = json.loads(seen_file.read_text())
    assert rec["status"] == "ready" and rec["candidate"] == seen["commit"]
    wt = Path(str(rec["worktree"]))
    shown = subprocess.run(
        ["git", "cat-file", "blob", seen["blob"]], cwd=repo, capture_output=True, check=True
    ).stdout
    assert shown == (wt / "data.bin").read_bytes()
    fsck = subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True)
    assert fsck.returncode == 0, fsck.stderr


def test_more_new_objects_than_the_count_limit_park(repo: Path, tmp: Path) -> None:
    """A commit adding 100,000 tiny files and one taking them away again (so the worktree
    stays small), with `git config sup.limits.maxObjects 10000`."""
    git(repo, "config", "sup.limits.maxObjects", "10000")
    worker, seen_file = _worker(
        tmp,
        """
        n = 100_000
        parts = []
        for i in range(n):
            body = f"{i}\\n".encode()
            parts.append(b"blob\\nmark :%d\\ndata %d\\n%s\\n" % (i + 1, len(body), body))
        head = sh("git", "rev-parse", "HEAD")
        parts.append(b"commit refs/heads/many\\ncommitter W <w@example.invalid> 0 +0000\\n")
        parts.append(b"data 5\\nmany\\nfrom %s\\n" % head.encode())
        for i in range(n):
            # 1,000 a directory: fast-import searches a directory's entries one by one
            parts.append(b"M 100644 :%d many/d%03d/f%06d\\n" % (i + 1, i // 1000, i))
        sh("git", "fast-import", "--quiet", input=b"".join(parts) + b"\\n")
        many = sh("git", "rev-parse", "many")
        back = sh("git", "commit-tree", sh("git", "rev-parse", "HEAD^{tree}"), "-p", many, "-m", "back")
        sh("git", "reset", "-q", "--soft", back)
        out("commit", back)
        out("many", many)
        out("blob", sh("git", "rev-parse", "many:many/d000/f000000"))
        """,
    )
    rc, rec, err, _ = _start_measured(repo, "g", "--worker", worker, *NO_REVIEW)
    seen = json.loads(seen_file.read_text())
    reasons = _parked(rc, rec, err)
    assert "10001 > 10000" in reasons and "sup.limits.maxObjects" in reasons, reasons
    _nothing_imported(repo, rec, seen["commit"], seen["many"], seen["blob"])


def test_a_commit_with_100_parents_is_refused(repo: Path, tmp: Path) -> None:
    worker, seen_file = _worker(
        tmp,
        """
        base = sh("git", "rev-parse", "HEAD")
        tree = sh("git", "rev-parse", "HEAD^{tree}")
        parents = [
            sh("git", "commit-tree", tree, "-p", base, "-m", f"side {i}") for i in range(100)
        ]
        args = [a for p in parents for a in ("-p", p)]
        octopus = sh("git", "commit-tree", tree, *args, "-m", "octopus")
        sh("git", "reset", "-q", "--hard", octopus)
        out("commit", octopus)
        out("side", parents[0])
        """,
    )
    rc, rec, err, _ = _start_measured(repo, "g", "--worker", worker, *NO_REVIEW)
    seen = json.loads(seen_file.read_text())
    reasons = _parked(rc, rec, err)
    assert f"commit {seen['commit']}'s parents" in reasons and "100 > 16" in reasons, reasons
    _nothing_imported(repo, rec, seen["commit"], seen["side"])


def test_a_history_deeper_than_the_limit_parks(repo: Path, tmp: Path) -> None:
    """60 new commits with `[limits] max_commits = 50` in the spec."""
    worker, seen_file = _worker(
        tmp,
        """
        c = sh("git", "rev-parse", "HEAD")
        tree = sh("git", "rev-parse", "HEAD^{tree}")
        first = None
        for i in range(60):
            c = sh("git", "commit-tree", tree, "-p", c, "-m", f"step {i}")
            first = first or c
        sh("git", "reset", "-q", "--hard", c)
        out("commit", c)
        out("first", first)
        """,
    )
    spec = write_spec(
        tmp,
        f"""
        goal = "g"
        [worker]
        kind = "process"
        argv = {json.dumps(worker)}
        [review]
        kind = "none"
        [limits]
        max_commits = 50
        """,
    )
    rc, rec, err, _ = _start_measured(repo, "--spec", str(spec))
    seen = json.loads(seen_file.read_text())
    reasons = _parked(rc, rec, err)
    assert "new commits" in reasons and "51 > 50" in reasons and "max_commits" in reasons, reasons
    _nothing_imported(repo, rec, seen["commit"], seen["first"])


def test_a_bad_limit_in_git_config_is_refused_at_start(repo: Path, tmp: Path) -> None:
    git(repo, "config", "sup.limits.maxBytes", "lots")
    res = run_sup(repo, "start", "g", "--worker", "true", *NO_REVIEW)
    assert res.returncode == 2, res.stderr
    assert "sup.limits.maxBytes is 'lots'" in res.stderr and "Traceback" not in res.stderr
    assert not (common_dir(repo) / "sup" / "tasks").exists() or not any(
        (common_dir(repo) / "sup" / "tasks").iterdir()
    )


def test_new_bytes_and_tree_depth_over_their_limits_park(repo: Path, tmp: Path) -> None:
    """Two 600 KiB files with `[limits] max_bytes = 1 MiB`; in a second task, a file eight
    directories deep with `max_tree_depth = 5`."""
    worker, seen_file = _worker(
        tmp,
        """
        if os.environ["GITSUP_GOAL"].startswith("bytes"):
            for name in ("a.bin", "b.bin"):
                pathlib.Path(name).write_bytes(os.urandom(600 * 1024))
        else:
            d = pathlib.Path("d1/d2/d3/d4/d5/d6/d7/d8")
            d.mkdir(parents=True)
            (d / "deep.txt").write_text("deep\\n")
        sh("git", "add", "-A")
        sh("git", "commit", "-q", "-m", "more")
        out("commit", sh("git", "rev-parse", "HEAD"))
        """,
    )
    for goal, limits, expect in (
        ("bytes", "max_bytes = 1048576", "> 1048576 ([limits] max_bytes / sup.limits.maxBytes)"),
        ("depth", "max_tree_depth = 5", "depth is over the import limit: 6 > 5"),
    ):
        spec = write_spec(
            tmp,
            f"""
            goal = "{goal}"
            [worker]
            kind = "process"
            argv = {json.dumps(worker)}
            [review]
            kind = "none"
            [limits]
            {limits}
            """,
            name=f"{goal}.toml",
        )
        rc, rec, err, _ = _start_measured(repo, "--spec", str(spec))
        seen = json.loads(seen_file.read_text())
        reasons = _parked(rc, rec, err)
        assert expect in reasons, reasons
        _nothing_imported(repo, rec, seen["commit"])
