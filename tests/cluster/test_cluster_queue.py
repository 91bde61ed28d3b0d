"""The queue on the cluster: `git sup queue run --cluster` runs the branch's workflow, whose
signed integration runs on the integrator (`git sup host run --integrator`, the clone whose
user holds the signing key) and is pushed through the review remote's gate; task hosts never
hold the key, never get the integration, and never move the protected branch."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from tests.cluster.conftest import Cluster, Host
from tests.cluster.test_cluster import submit, wait_for
from tests.conftest import GIT_SUP, git, run_sup
from tests.helpers.sup import write_worker

# Fixes add (the same change in both: they compose) and adds a file of its own.
ADD_FILE = """
import os, pathlib, subprocess
task = os.environ["GITSUP_TASK"]
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
pathlib.Path(f"note-{task}.txt").write_text(task + "\\n")
subprocess.run(["git", "add", "calc.py", f"note-{task}.txt"], check=True)
subprocess.run(["git", "commit", "-q", "-m", f"note {task}"], check=True)
"""


def key_home(c: Cluster, home: Path) -> Path:
    """The integrator's HOME, holding the signing key and allowed signers of the
    repository's maintainer (the test's HOME)."""
    where = c.tmp / "home-integrator"
    where.mkdir(exist_ok=True)
    shutil.copytree(home / ".config" / "gitsup", where / ".config" / "gitsup")
    return where


def integrator(c: Cluster, home: Path) -> Host:
    """The integrator: its own clone, the key in its own HOME, the repository's trust roots
    (its operator's configuration, as the key is: the maintainer's)."""
    key_home(c, home)

    def trust(clone: Path) -> None:
        roots = git(c.submitter, "config", "--get-all", "sup.trustRoot", check=False)
        assert roots.split(), "the maintainer's clone has trust roots"
        for v in roots.splitlines():
            git(clone, "config", "--add", "sup.trustRoot", v)

    return c.host("integrator", "--integrator", "--slots", "1", setup=trust)


def test_an_integrator_without_the_trust_roots_refuses_to_serve(cluster: Cluster) -> None:
    # the key is there, the trust roots are not: nothing could verify the target's history
    # before a signature goes on it, so the integrator does not start (and never records
    # the branch's tips as trusted by itself)
    home = key_home(cluster, Path.home())
    clone = cluster.clone("clone-integrator")
    env = {**cluster.env, "HOME": str(home)}
    res = subprocess.run(
        [GIT_SUP, "host", "run", "--integrator", "--cluster", cluster.address],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "this clone has none (sup.trustRoot)" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert git(clone, "config", "--get-all", "sup.trustRoot", check=False) == ""


def test_the_queue_workflow_integrates_two_cluster_candidates(cluster: Cluster, tmp: Path) -> None:
    home = Path.home()
    alpha = cluster.host("alpha", "--slots", "2")
    worker = write_worker(tmp, ADD_FILE)
    ids = []
    for _ in range(2):
        res = submit(cluster, worker, "--detach")
        assert res.returncode == 0, res.stderr
        ids.append(res.stdout.strip())
    for task in ids:
        res = run_sup(cluster.submitter, "wait", task, "--json", timeout=300)
        assert res.returncode == 0, res.stdout
    res = run_sup(cluster.submitter, "queue", "add", *ids)
    assert res.returncode == 0, res.stderr
    before = git(cluster.origin, "rev-parse", "main")
    # no integrator yet: the branch's workflow waits (the task host never takes it) ...
    err = tmp / "queue-run.err"
    with open(err, "w") as fh:
        first = subprocess.Popen(
            [GIT_SUP, "queue", "run", "--cluster", cluster.address, "--json"],
            cwd=cluster.submitter,
            stdout=subprocess.PIPE,
            stderr=fh,
            text=True,
        )
    end = time.monotonic() + 120
    while "waiting for an integrator" not in err.read_text():
        assert first.poll() is None and time.monotonic() < end, err.read_text()
        time.sleep(0.1)
    # ... and a second runner of that branch is refused meanwhile
    second = run_sup(cluster.submitter, "queue", "run", "--cluster", cluster.address)
    assert second.returncode == 2, (second.stdout, second.stderr)
    assert "another queue runner is integrating into main" in second.stderr
    integ = integrator(cluster, home)
    stdout, _ = first.communicate(timeout=240)
    # the integrator serves on after its integration
    assert integ.proc is not None and integ.proc.poll() is None, integ.log.read_text()
    assert first.returncode == 0, (stdout, err.read_text(), integ.log.read_text())
    out = json.loads(stdout)
    assert out["integrator"] == "integrator"
    assert {t: o["status"] for t, o in out["outcomes"].items()} == dict.fromkeys(ids, "integrated")
    # the gate accepted the protected branch: two signed merges on top of the old main
    main = git(cluster.origin, "rev-parse", "main")
    assert main == out["target"] != before
    merges = git(cluster.origin, "rev-list", "--merges", f"{before}..{main}").split()
    assert len(merges) == 2
    for m in merges:
        assert git(cluster.origin, "cat-file", "-p", m).count("gpgsig") == 1
    for task in ids:
        assert git(cluster.origin, "show", f"{main}:note-{task}.txt") == task
    # the submitter's checked-out main (clean) followed, as `git pull --ff-only` would
    assert out["local_branch"] == "moved"
    assert git(cluster.submitter, "rev-parse", "main") == main
    assert git(cluster.submitter, "status", "--porcelain") == ""
    for task in ids:
        assert (cluster.submitter / f"note-{task}.txt").read_text() == task + "\n"
    # the submitter's queue says so too
    res = run_sup(cluster.submitter, "queue", "--json")
    assert res.returncode == 0, res.stderr
    assert "integrated" in res.stdout
    # the task host never ran an integration (no queue in its clone)
    assert not git(alpha.clone, "for-each-ref", "refs/sup/queue/")
    assert git(integ.clone, "for-each-ref", "refs/sup/queue/")


HOSTILE = """
import os, pathlib, subprocess
out = pathlib.Path({shared!r})
key = pathlib.Path({key!r})
try:
    data = key.read_bytes()
    (out / "stolen").write_bytes(data)
    (out / "key-read").write_text("read")
except OSError as exc:
    (out / "key-read").write_text("refused: " + type(exc).__name__)
pathlib.Path("calc.py").write_text("def add(a, b):\\n    return a + b\\n")
subprocess.run(["git", "commit", "-q", "-am", "straight to main"], check=True)
res = subprocess.run(["git", "push", {origin!r}, "HEAD:main"], capture_output=True, text=True)
(out / "push").write_text(str(res.returncode) + "\\n" + res.stdout + res.stderr)
"""


def test_a_hostile_worker_on_a_task_host_cannot_read_the_key_or_push_main(
    cluster: Cluster, tmp: Path
) -> None:
    # the integrator's key, where its config says (on this machine: a real attack surface)
    key = str(key_home(cluster, Path.home()) / ".config" / "gitsup" / "signing" / "id_ed25519")
    assert Path(key).is_file()
    cluster.host("alpha", "--slots", "1")
    before = git(cluster.origin, "rev-parse", "main")
    worker = write_worker(
        tmp, HOSTILE.format(shared=str(cluster.shared), key=key, origin=str(cluster.origin))
    )
    res = submit(cluster, worker, "--detach")
    assert res.returncode == 0, res.stderr
    task = res.stdout.strip()
    run_sup(cluster.submitter, "wait", task, timeout=300)
    wait_for(cluster.shared / "push")
    assert (cluster.shared / "key-read").read_text().startswith("refused"), (
        cluster.shared / "key-read"
    ).read_text()
    assert not (cluster.shared / "stolen").exists()
    assert git(cluster.origin, "rev-parse", "main") == before
    assert not (cluster.shared / "push").read_text().startswith("0\n")
