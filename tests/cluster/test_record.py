"""Git is the record: tasks publish their refs and notes to the gated review remote, another
clone (own HOME, own worktree root) continues a task whose host died, a submitter's clone
reads a task that ran elsewhere. Real clones of a real gated bare remote, real `git sup`
processes, process workers."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.conftest import make_bare, refs_of
from tests.conftest import GIT_SUP, git, run_sup
from tests.helpers.sup import check_cmd, kill_tree, task_ids, wait_for, write_spec, write_worker

QUICK_CHECK = check_cmd("from calc import add; assert add(1, 2) == 3, 'add is wrong'")
FIX_AND_COMMIT = """
import pathlib, subprocess
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "commit", "-q", "-am", "fix add (MESSAGE)"], check=True)
"""
# First run: writes feature.txt and leaves it uncommitted. A later run (a new worker on
# another host, where the file came with the published wip): commits everything.
WRITE_THEN_COMMIT = """
import pathlib, subprocess
p = pathlib.Path("feature.txt")
if not p.exists():
    p.write_text("written on the first host\\n")
    print("wrote feature.txt", flush=True)
else:
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "feature"], check=True)
    print("committed feature.txt", flush=True)
"""
# A decider that holds the turn's verdict while a flag file exists (its pid in a file).
HOLDING_DECIDER = """
import os, pathlib, sys, time
pathlib.Path(sys.argv[2]).write_text(str(os.getpid()))
while pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.05)
print('{"verdict": "pass", "findings": [], "action": "verify"}')
"""
FEATURE_CHECK = check_cmd(
    "import pathlib; assert pathlib.Path('feature.txt').read_text() == "
    "'written on the first host\\n', 'feature.txt is missing'"
)


@dataclass
class Host:
    name: str
    clone: Path
    home: Path

    @property
    def env(self) -> dict[str, str]:
        return {"HOME": str(self.home)}

    def sup(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_sup(self.clone, *args, env=self.env, timeout=timeout)


@dataclass
class Cluster:
    origin: Path  # bare, gated, the review remote
    tmp: Path
    homes: pytest.TempPathFactory  # each host's HOME, outside tmp (as a person's is)

    def host(self, name: str, *, publish: bool = True) -> Host:
        clone = self.tmp / name
        git(self.tmp, "clone", "-q", str(self.origin), str(clone))
        home = self.homes.mktemp(f"home-{name}")
        (home / ".gitconfig").write_text(Path(os.environ["GIT_CONFIG_GLOBAL"]).read_text())
        git(clone, "config", "sup.reviewRemote", "origin")
        git(clone, "config", "sup.worktreeRoot", str(self.tmp / f"{name}-worktrees"))
        if publish:
            git(clone, "config", "sup.cluster.publish", "true")
        h = Host(name, clone, home)
        res = h.sup("init")
        assert res.returncode == 0, res.stderr
        return h


@pytest.fixture
def cluster(repo: Path, tmp: Path, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    init_repo(SupRepo.discover(repo), explicit=True)
    return Cluster(make_bare(tmp, "origin", repo, review=True), tmp, tmp_path_factory)


def remote_ref(origin: Path, ref: str) -> str | None:
    out = git(origin, "for-each-ref", "--format=%(objectname)", ref)
    return out or None


def is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    res = subprocess.run(
        ["git", "merge-base", "--is-ancestor", ancestor, descendant], cwd=repo, capture_output=True
    )
    assert res.returncode in (0, 1), res.stderr
    return res.returncode == 0


def remote_events(origin: Path, task: str) -> list[dict[str, Any]]:
    """The events sealed into the remote's refs/sup/<id>/log, in order."""
    log = f"refs/sup/{task}/log"
    names = git(origin, "ls-tree", "--name-only", log).split()
    out = []
    for name in sorted(names):
        text = git(origin, "cat-file", "blob", f"{log}:{name}")
        out += [json.loads(line) for line in text.splitlines() if line.strip()]
    return out


def quick_spec(tmp: Path, name: str) -> Path:
    return write_spec(
        tmp,
        f"""
        goal = "fix add"
        [[checks]]
        name = "quick"
        argv = {json.dumps(shlex.split(QUICK_CHECK))}
        [worker]
        kind = "process"
        argv = {json.dumps(shlex.split(write_worker(tmp, FIX_AND_COMMIT.replace("MESSAGE", name), f"{name}.py")))}
        [review]
        kind = "none"
        """,
        f"{name}.toml",
    )


def run_ready(h: Host, spec: Path) -> dict[str, Any]:
    res = h.sup("start", "--spec", str(spec), "--json", "-q")
    assert res.returncode == 0, res.stderr
    rec: dict[str, Any] = json.loads(res.stdout)
    assert rec["status"] == "ready", rec
    return rec


def test_a_task_publishes_its_refs_and_notes_and_never_a_branch(cluster: Cluster) -> None:
    a = cluster.host("a")
    heads_before = git(cluster.origin, "for-each-ref", "refs/heads/")
    rec = run_ready(a, quick_spec(cluster.tmp, "fix"))
    tid, cand = rec["id"], rec["candidate"]
    origin = cluster.origin
    assert remote_ref(origin, f"refs/sup/{tid}/candidate") == cand
    assert remote_ref(origin, f"refs/sup/{tid}/baseline") == rec["baseline"]
    # The log as sealed at the end (task_finished is in it) and the record as it ended.
    assert remote_ref(origin, f"refs/sup/{tid}/log") == git(
        a.clone, "rev-parse", f"refs/sup/{tid}/log"
    )
    assert [e["type"] for e in remote_events(origin, tid)][-1] == "task_finished"
    published = json.loads(git(origin, "cat-file", "blob", f"refs/sup/{tid}/record:task.json"))
    assert published["status"] == "ready" and published["candidate"] == cand
    # The turn's state: the wip's first parent is the commit the worker made.
    assert git(origin, "rev-parse", f"refs/sup/{tid}/wip^1") == cand
    note = json.loads(git(origin, "notes", "--ref=sup", "show", cand))
    assert note["task"] == tid and note["status"] == "ready"
    # Nothing but gitsup refs and the notes: no branch (the task branch stays local).
    assert git(origin, "for-each-ref", "refs/heads/") == heads_before
    assert "publish_failed" not in {e["type"] for e in remote_events(origin, tid)}


def test_notes_of_two_clones_for_two_tasks_both_survive(cluster: Cluster) -> None:
    # Each task ends with its note in its own clone's notes only (two histories of
    # refs/notes/sup); both clones then publish at the same time: each must merge the
    # other's notes, none may replace them (the gate refuses a rewrite; the loser fetches,
    # merges and pushes again).
    a, b = cluster.host("a", publish=False), cluster.host("b", publish=False)
    rb = run_ready(b, quick_spec(cluster.tmp, "fix-b"))
    ra = run_ready(a, quick_spec(cluster.tmp, "fix-a"))
    assert ra["candidate"] != rb["candidate"]
    procs = [
        subprocess.Popen(
            [GIT_SUP, "publish", rec["id"]],
            cwd=h.clone,
            env={**os.environ, **h.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for h, rec in ((a, ra), (b, rb))
    ]
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    for rec in (ra, rb):
        note = json.loads(git(cluster.origin, "notes", "--ref=sup", "show", rec["candidate"]))
        assert note["task"] == rec["id"]
    # The remote's notes moved forward only: what each clone pushed is in their history,
    # whose tip merges the two.
    parents = git(cluster.origin, "rev-list", "--parents", "-n", "1", "refs/notes/sup").split()
    assert len(parents) == 3, parents
    for h in (a, b):
        assert is_ancestor(
            cluster.origin, git(h.clone, "rev-parse", "refs/notes/sup"), "refs/notes/sup"
        )
    # Each clone, publishing again, gets the other's note as well.
    for h, rec, other in ((a, ra, rb), (b, rb, ra)):
        res = h.sup("publish", rec["id"])
        assert res.returncode == 0, res.stderr
        note = json.loads(git(h.clone, "notes", "--ref=sup", "show", other["candidate"]))
        assert note["task"] == other["id"]


def test_a_host_cannot_push_a_protected_branch(cluster: Cluster) -> None:
    from gitsup.git import remote as transport

    a = cluster.host("a")
    main = git(cluster.origin, "rev-parse", "main")
    (a.clone / "direct.txt").write_text("not integrated\n")
    git(a.clone, "add", "direct.txt")
    git(a.clone, "commit", "-q", "-m", "typed on a host")
    before = refs_of(cluster.origin)
    with pytest.raises(transport.TransportError) as exc:
        transport.push(a.clone, "origin", ["refs/heads/main:refs/heads/main"])
    assert "refs/heads/main" in exc.value.message and "not integrated" in exc.value.message
    assert refs_of(cluster.origin) == before
    assert git(cluster.origin, "rev-parse", "main") == main


def _start(h: Host, spec: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [GIT_SUP, "start", "--spec", str(spec), "--json", "-q"],
        cwd=h.clone,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **h.env},
    )


def test_a_host_dies_mid_task_and_another_continues_it(cluster: Cluster) -> None:
    tmp = cluster.tmp
    a, b, submitter = cluster.host("a"), cluster.host("b"), cluster.host("s", publish=False)
    flag, pidfile = tmp / "hold-verdict", tmp / "decider.pid"
    flag.write_text("")
    decider = [
        *shlex.split(write_worker(tmp, HOLDING_DECIDER, "decider.py")),
        str(flag),
        str(pidfile),
    ]
    spec = write_spec(
        tmp,
        f"""
        goal = "add feature.txt"
        [[checks]]
        name = "feature"
        argv = {json.dumps(shlex.split(FEATURE_CHECK))}
        [worker]
        kind = "process"
        argv = {json.dumps(shlex.split(write_worker(tmp, WRITE_THEN_COMMIT)))}
        [review]
        kind = "none"
        [decider]
        kind = "command"
        argv = {json.dumps(decider)}
        """,
    )
    proc = _start(a, spec)
    try:
        tid = wait_for(lambda: task_ids(a.clone), 60, what="the task")[0]
        wip = f"refs/sup/{tid}/wip"
        # The turn ended (feature.txt written, not committed) and was published; the
        # decider holds the verdict: the supervisor is killed there, mid-task.
        wait_for(lambda: remote_ref(cluster.origin, wip), 60, what="the published wip")
        wait_for(pidfile.exists, 60, what="the decider")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        kill_tree(proc.pid)
        flag.unlink(missing_ok=True)  # the dead host's decider returns, to nobody
    origin = cluster.origin
    assert git(origin, "show", f"{wip}:feature.txt") == "written on the first host"
    log_of_a = remote_ref(origin, f"refs/sup/{tid}/log")
    assert log_of_a is not None
    assert remote_ref(origin, f"refs/sup/{tid}/candidate") is None

    # The submitter's clone reads the task from the remote while it is orphaned.
    res = submitter.sup("fetch-task", tid, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["local"] is False
    shown = json.loads(submitter.sup("show", tid, "--json").stdout)
    assert shown["state"] not in ("completed", "blocked", "failed", "stopped")
    res = submitter.sup("wait", tid)
    assert res.returncode == 2 and "runs in another clone" in res.stderr, res.stderr

    # Another host adopts it: a new worker continues from the published wip.
    res = b.sup("adopt-remote", tid, "--host", "host-b", "--json", "-q", timeout=180)
    assert res.returncode == 0, res.stderr
    done = json.loads(res.stdout)
    assert done["status"] == "ready", done
    cand = done["candidate"]
    assert git(b.clone, "show", f"{cand}:feature.txt") == "written on the first host"
    assert done["worktree"].startswith(str(tmp / "b-worktrees"))
    # One candidate: B's, on the remote too; A never wrote one.
    assert remote_ref(origin, f"refs/sup/{tid}/candidate") == cand
    assert git(a.clone, "for-each-ref", f"refs/sup/{tid}/candidate") == ""
    # The log continues A's sealed chain: one history, no event twice, host_changed in it.
    assert is_ancestor(origin, log_of_a, f"refs/sup/{tid}/log")
    assert log_of_a != remote_ref(origin, f"refs/sup/{tid}/log")
    events = remote_events(origin, tid)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1, seqs
    types = [e["type"] for e in events]
    assert types.count("task_started") == 1 and types.count("candidate_ready") == 1
    changed = [e["data"] for e in events if e["type"] == "host_changed"]
    assert len(changed) == 1 and changed[0]["to"] == "host-b"
    assert changed[0]["continued_from"] == "wip"
    recovered = [e["data"] for e in events if e["type"] == "recovered"]
    assert recovered and recovered[-1]["action"] == "new worker turn"
    assert types.index("host_changed") < types.index("recovered") < types.index("task_finished")

    # The submitter fetches again: show and log read the ended task.
    assert submitter.sup("fetch-task", tid).returncode == 0
    shown = json.loads(submitter.sup("show", tid, "--json").stdout)
    assert shown["status"] == "ready" and shown["candidate"] == cand
    assert submitter.sup("wait", tid).returncode == 0
    listed = json.loads(submitter.sup("ls", "--json").stdout)
    assert [(r["id"], r["status"]) for r in listed] == [(tid, "ready")], listed
    page = submitter.sup("report", tid)
    assert page.returncode == 0 and "feature.txt" in page.stdout, page.stderr
    log = submitter.sup("log", tid, "--json")
    assert log.returncode == 0, log.stderr
    assert [json.loads(line)["type"] for line in log.stdout.splitlines()] == types
    # The copy is not this clone's to recover.
    res = submitter.sup("recover", tid, "--takeover")
    assert res.returncode == 2 and "fetched from the review remote" in res.stderr
    # The first host, were it only taken for dead, cannot publish over what the other did:
    # its refs are behind the remote's, and the gate refuses them as rewrites.
    res = a.sup("adopt-remote", tid)
    assert res.returncode == 2 and "went on in another clone" in res.stderr, res.stderr
    before = refs_of(origin)
    res = a.sup("publish", tid)
    assert res.returncode == 2 and "never rewritten" in res.stderr, res.stderr
    assert refs_of(origin) == before


def test_a_failed_publication_is_an_event_never_a_lost_task(cluster: Cluster) -> None:
    a = cluster.host("a")
    git(a.clone, "remote", "add", "nowhere", str(cluster.tmp / "no-such-remote.git"))
    git(a.clone, "config", "sup.reviewRemote", "nowhere")
    rec = run_ready(a, quick_spec(cluster.tmp, "fix"))
    log = a.sup("log", rec["id"], "--json")
    failed = [
        json.loads(line)["data"] for line in log.stdout.splitlines() if '"publish_failed"' in line
    ]
    assert [f["stage"] for f in failed] == ["turn", "end"], failed
    assert all(f["remote"] == "nowhere" for f in failed)
    assert git(a.clone, "rev-parse", f"refs/sup/{rec['id']}/candidate") == rec["candidate"]


def test_notes_pushed_without_a_fetch_never_lose_another_clone_s(cluster: Cluster) -> None:
    # A clone's supervisors push notes that only grew since the clone last pushed them
    # without fetching the remote's first. Another clone pushed notes in between: that push
    # is refused, the notes are merged and pushed, and every task's note is on the remote.
    a, b = cluster.host("a"), cluster.host("b")
    first = run_ready(a, quick_spec(cluster.tmp, "first"))
    assert (a.clone / ".git" / "sup" / "notes-pushed.json").is_file()
    other = run_ready(b, quick_spec(cluster.tmp, "other"))
    last = run_ready(a, quick_spec(cluster.tmp, "last"))
    origin = cluster.origin
    for rec in (first, other, last):
        note = json.loads(git(origin, "notes", "--ref=sup", "show", rec["candidate"]))
        assert note["task"] == rec["id"], note
        types = {e["type"] for e in remote_events(origin, rec["id"])}
        assert "publish_failed" not in types, (rec["id"], types)


# Runs on the review remote before its gate (`pre-receive.local`): logs each push's ref
# updates, and holds the first push after the flag file is made until the task has ended
# in its clone (its record says so; a minute at most), then until another push came (3 s
# at most): one that does not wait for it would come then.
HOLD_ONCE = """#!/bin/sh
input=$(cat)
printf '%s\\n--\\n' "$input" >> {log}
if [ -e {flag} ]; then
    rm -f {flag}
    n=0
    until grep -qs '"state": *"completed"' {records} || [ $n -ge 600 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    n=0
    until [ "$(grep -c '^--$' {log})" -ge 2 ] || [ $n -ge 30 ]; do
        sleep 0.1
        n=$((n + 1))
    done
fi
"""


def test_a_slow_turn_publication_is_never_overtaken_by_the_task_s_end(cluster: Cluster) -> None:
    # A turn's publication is pushed in the background while the task goes on (verifies,
    # ends). The remote holds that push until the task has ended: the task's last
    # publication comes after it, not at the same time (one of two racing pushes would be
    # refused) and not before (the remote would end with the turn's refs): both go
    # through, in order, and the remote ends with the task's end.
    a = cluster.host("a")
    hooks, flag, pushes = (
        cluster.origin / "hooks",
        cluster.tmp / "slow-once",
        cluster.tmp / "pushes",
    )
    hook = hooks / "pre-receive.local"
    records = shlex.quote(str(a.clone / ".git" / "sup" / "tasks")) + "/*/task.json"
    hook.write_text(
        HOLD_ONCE.format(log=shlex.quote(str(pushes)), flag=shlex.quote(str(flag)), records=records)
    )
    hook.chmod(0o755)
    flag.write_text("")
    rec = run_ready(a, quick_spec(cluster.tmp, "fix"))
    tid, origin = rec["id"], cluster.origin
    # The held push was the turn's (it brought the first wip), and it went through.
    first = pushes.read_text().split("\n--\n")[0]
    assert f"refs/sup/{tid}/wip" in first and not flag.exists(), pushes.read_text()
    # The remote ends with the end: the record, the candidate, the last sealed log.
    published = json.loads(git(origin, "cat-file", "blob", f"refs/sup/{tid}/record:task.json"))
    assert published["status"] == "ready" and published["candidate"] == rec["candidate"]
    assert remote_ref(origin, f"refs/sup/{tid}/candidate") == rec["candidate"]
    assert remote_ref(origin, f"refs/sup/{tid}/log") == git(
        a.clone, "rev-parse", f"refs/sup/{tid}/log"
    )
    types = [e["type"] for e in remote_events(origin, tid)]
    assert types[-1] == "task_finished" and "publish_failed" not in types, types
    local = a.sup("log", tid, "--json").stdout
    assert '"publish_failed"' not in local, local


def test_a_published_record_naming_another_branch_is_refused(cluster: Cluster) -> None:
    # A host that publishes can write any record: one that names this clone's main as the
    # task's branch must not make a worker's commits land on main here.
    a, b = cluster.host("a"), cluster.host("b")
    rec = run_ready(a, quick_spec(cluster.tmp, "fix"))
    tid = rec["id"]
    forged = dict(rec, state="running", status="pending", branch="main")
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        cwd=a.clone,
        input=json.dumps(forged),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    spec_blob = git(a.clone, "rev-parse", f"refs/sup/{tid}/record:spec.json")
    tree = subprocess.run(
        ["git", "mktree"],
        cwd=a.clone,
        input=f"100644 blob {spec_blob}\tspec.json\n100644 blob {blob}\ttask.json\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    record_ref = f"refs/sup/{tid}/record"
    commit = git(a.clone, "commit-tree", "-p", record_ref, "-m", "forged", tree)
    git(a.clone, "push", "-q", "origin", f"{commit}:{record_ref}")
    main = git(b.clone, "rev-parse", "main")
    res = b.sup("adopt-remote", tid)
    assert res.returncode == 2 and "names another task or branch" in res.stderr, res.stderr
    assert git(b.clone, "rev-parse", "main") == main
    assert not (cluster.tmp / "b-worktrees" / tid).exists()
    assert git(b.clone, "for-each-ref", f"refs/heads/sup/{tid}") == ""
