"""A task's lease is released only after its worker's cgroup is removed: a cgroup that is
empty but cannot be removed (here a directory inside it the test bind-mounts over, which
the kernel refuses to rmdir) keeps the lease held, the record says what was left, and
`git sup doctor --fix` releases it once the cgroup is gone. The lease records the cgroup by
device and inode. Through the real CLI with a process worker."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import run_sup
from tests.helpers.require import requires
from tests.helpers.sup import FIX_AND_COMMIT, check_cmd, common_dir, write_worker

SLOW_FIX = "import time\ntime.sleep(4)\n" + FIX_AND_COMMIT


def _record(repo: Path, task: str) -> dict[str, Any]:
    return dict(json.loads(run_sup(repo, "show", task, "--json").stdout or "{}"))


def _wait(pred: Any, timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("condition not reached")


@requires("root", "cgroup")
def test_the_lease_waits_for_the_cgroup_to_be_removed(repo: Path, tmp: Path) -> None:
    worker = write_worker(tmp, SLOW_FIX)
    check = check_cmd("from calc import add; assert add(1, 2) == 3")
    args = ["start", "fix add", "--worker", worker, "--check", check, "--review", "none"]
    p = subprocess.Popen(
        [sys.executable, "-m", "gitsup", *args, "--json", "-q"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    leases = common_dir(repo) / "sup" / "leases"
    pin = tmp / "pin"
    pin.mkdir()
    child: Path | None = None
    try:
        ls = lambda: json.loads(run_sup(repo, "ls", "--json").stdout or "[]")  # noqa: E731
        task = _wait(lambda: (ls() or [{}])[0].get("id"))
        cg = Path(_wait(lambda: (_record(repo, task).get("worker") or {}).get("cgroup")))
        lease = _wait(lambda: [json.loads(f.read_text()) for f in leases.glob("*.json")])[0]
        held = _wait(
            lambda: json.loads(next(leases.glob("*.json")).read_text())["extra"].get("cgroup")
        )
        assert held["path"] == str(cg) and held["inode"] == cg.stat().st_ino
        assert held["dev"] == cg.stat().st_dev and lease["task"] == task
        child = cg / "pinned"
        child.mkdir()
        subprocess.run(["mount", "--bind", str(pin), str(child)], check=True)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        rec = json.loads(out)
        assert rec["status"] == "ready"
        assert any("could not be removed" in x for x in rec["left_behind"]), rec["left_behind"]
        assert cg.exists() and [f.name for f in leases.glob("*.json")], "the lease was released"
        res = run_sup(repo, "doctor", "--json")
        kinds = [f["kind"] for f in json.loads(res.stdout)]
        assert "worker-left-behind" in kinds
    finally:
        if child is not None:
            subprocess.run(["umount", str(child)], check=False)
        p.kill()
        p.wait(timeout=30)
    res = run_sup(repo, "doctor", "--fix", "--json")
    fixed = [f for f in json.loads(res.stdout) if f["kind"] == "worker-left-behind"]
    assert fixed and "lease released" in (fixed[0]["fixed"] or ""), fixed
    assert not cg.exists() and not list(leases.glob("*.json"))
