"""A candidate's checks run confined outside its task too: `git sup integrate` and
`git sup queue run` run them as the task ran them (sandbox, loopback network, a cgroup that is
emptied before the command returns, the allowlisted environment).

The candidate is made by a real `git sup start`: its worker commits a check script
(tests/boundary/hostile_check.py) that passes quietly inside the task and attacks when it
runs anywhere else. Every attack is judged from outside: the signing key's chain ends at its
first step and the gated remote is unchanged, the user's hooks, config and `~/.gitconfig` are
byte for byte the same, the host listener saw no connection, the credentials in gitsup's
environment appear nowhere, and no process of the daemon is alive once the command returned.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.boundary.conftest import Setup, refs_of, start_task
from tests.conftest import PYTHON, git, run_sup
from tests.helpers.net import Listener
from tests.helpers.require import require
from tests.helpers.sup import PYTEST_CHECK

HOSTILE = (Path(__file__).parent / "hostile_check.py").read_text()
TOKEN = "sup-fake-token-" + "7f3a" * 8
API_KEY = "sk-ant-api03-" + "Zq9" * 30


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


def _daemons(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if marker in (p.info["cmdline"] or []):
            found.append(p)
    return found


def _digest(*paths: Path) -> dict[str, str]:
    out = {}
    for root in paths:
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for f in files:
            if f.is_file():
                out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
            elif not f.exists():
                out[str(f)] = "absent"
    return out


def _hostile_candidate(setup: Setup, cfg: dict[str, Any], marker: str) -> dict[str, Any]:
    """A real task whose worker fixes calc.py and commits the hostile check with it; its
    checks (the hostile one, pytest, a shell test) pass inside the task."""
    body = f"""
import json, pathlib, subprocess
pathlib.Path("hostile_check.py").write_text({HOSTILE!r})
pathlib.Path("hostile_check.json").write_text(json.dumps({cfg!r}))
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "fix add, with a check"], check=True)
"""
    rec = start_task(
        setup,
        body,
        "--check",
        shlex.join([PYTHON, "hostile_check.py", marker]),
        "--check",
        PYTEST_CHECK,
        "--check-sh",
        "test -f calc.py && test -f hostile_check.json",
    )
    assert rec["_rc"] == 0 and rec["status"] == "ready", rec
    return rec


@pytest.mark.parametrize("via", ["integrate", "queue"])
def test_a_hostile_check_fails_at_every_step(
    setup: Setup, listener: Listener, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    for feature in ("landlock", "mountns", "cgroup"):
        require(feature, "a hostile check")
    repo, tmp = setup.repo, setup.tmp
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    home = Path(os.environ["HOME"])
    key = home / ".config/gitsup/signing/id_ed25519"
    assert key.exists()
    outbox = tmp / "outbox"
    outbox.mkdir()
    marker = f"hostile-{uuid.uuid4().hex}"
    cfg = {
        "repo": str(repo),
        "common": str(common),
        "home": str(home),
        "key": str(key),
        "remote": str(setup.origin),
        "port": listener.port,
        "outbox": str(outbox),
        "secrets": "SUP_FAKE_TOKEN,ANTHROPIC_API_KEY",
    }
    rec = _hostile_candidate(setup, cfg, marker)
    assert listener.reached == 0 and not (outbox / "results.json").exists()

    # From here on gitsup runs with credentials in its environment, and the only extra
    # place a check may write is the outbox the test reads (the sandbox's test knob).
    monkeypatch.setenv("GITSUP_SANDBOX_EXTRA_WRITE", str(outbox))
    monkeypatch.setenv("SUP_FAKE_TOKEN", TOKEN)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    guarded = _digest(common / "hooks", common / "config", home / ".gitconfig", key)
    remote_before = refs_of(setup.origin)
    main_before = git(repo, "rev-parse", "main")
    try:
        if via == "integrate":
            res = run_sup(repo, "integrate", rec["id"], "--into", "main", "--json", timeout=300)
            assert res.returncode == 0, res.stderr
            out = json.loads(res.stdout)
            checks = out["checks"]
        else:
            assert run_sup(repo, "queue", "add", rec["id"]).returncode == 0
            res = run_sup(repo, "queue", "run", "--json", timeout=300)
            assert res.returncode == 0, res.stderr
            out = json.loads(res.stdout)[0]
            assert out["integrated"] == [rec["id"]]
            state = json.loads(git(repo, "show", "refs/sup/queue/main/state:queue.json"))
            checks = list(state["results"].values())
        # The moment the command returned: nothing the checks started is alive.
        alive = [p.pid for p in _daemons(marker)]
        log = outbox / "daemon.log"
        size = log.stat().st_size if log.exists() else 0
        time.sleep(0.5)  # the daemon appends every 50 ms while it lives
        grew = (log.stat().st_size if log.exists() else 0) - size
    finally:
        for p in _daemons(marker):  # only ever needed when confinement failed
            p.kill()

    # Every attack failed, judged from outside (all of them listed when some did not).
    breaches = []
    if alive:
        breaches.append(f"the check's daemon outlived {via}: pids {alive}")
    if grew:
        breaches.append(f"the daemon's file grew by {grew} bytes after {via} returned")
    if refs_of(setup.origin) != remote_before:
        breaches.append("the gated remote changed")
    after = _digest(common / "hooks", common / "config", home / ".gitconfig", key)
    breaches += [f"{path} changed" for path in sorted(set(guarded) | set(after))
                 if guarded.get(path) != after.get(path)]  # fmt: skip
    if listener.reached:
        breaches.append(f"the host's 127.0.0.1:{listener.port} was reached")
    seen = "\n".join(c["output_tail"] for c in checks)
    seen += "".join(f.read_text(errors="replace") for f in outbox.glob("*.json"))
    for name, secret in (("SUP_FAKE_TOKEN", TOKEN), ("ANTHROPIC_API_KEY", API_KEY)):
        if secret in seen or secret.encode().hex() in seen:
            breaches.append(f"{name} from gitsup's environment reached the check")
    # ...and the check's own account agrees; the steal-forge-push chain ends at its
    # first step (reading the key). The daemon did start: it was killed with its cgroup.
    report = json.loads((outbox / "results.json").read_text())
    breaches += [f"{k}: {v}" for k, v in report.items()
                 if not v.startswith("blocked") and k != "leave a daemon"]  # fmt: skip
    assert breaches == [], "\n".join(breaches)

    # The ordinary checks passed: confined, not crippled; the hostile one "passed" too.
    assert len(checks) == 3 and all(c["passed"] for c in checks), checks
    assert git(repo, "rev-parse", "main^1") == main_before
    assert git(repo, "rev-parse", "main^2") == rec["candidate"]
    # What applied is recorded with the result (and in the queue's evidence).
    applied = out.get("confinement") or {}
    assert applied.get("sandbox", {}).get("enforced") is True, applied
    assert applied["network"] == "loopback" and applied["cgroup"] is True, applied
    assert "left_behind" not in applied
    if via == "queue":
        assert all(c["confinement"] == applied for c in checks)


@pytest.mark.parametrize("via", ["integrate", "queue"])
def test_sandbox_required_on_a_host_without_it_refuses(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    """`sup.sandbox required` where the host lacks Landlock: nothing of the candidate runs."""
    from tests.boundary.conftest import make_task

    ran = setup.tmp / "ran"
    rec = make_task(setup, checks=[{"name": "touch", "argv": ["touch", str(ran)]}])
    git(setup.repo, "config", "sup.sandbox", "required")
    monkeypatch.setenv("GITSUP_SANDBOX_REFUSE", "landlock")
    before = git(setup.repo, "rev-parse", "main")
    if via == "integrate":
        res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main")
    else:
        assert run_sup(setup.repo, "queue", "add", rec["id"]).returncode == 0
        res = run_sup(setup.repo, "queue", "run")
    assert res.returncode == 2, res.stderr
    assert "sandbox is required" in res.stderr and "landlock" in res.stderr
    assert "the checks of a candidate run only in the task sandbox" in res.stderr
    assert "Traceback" not in res.stderr
    assert not ran.exists()
    assert git(setup.repo, "rev-parse", "main") == before
    assert "gitsup-" not in git(setup.repo, "worktree", "list")
    if via == "queue":  # still queued: the next run on a host that has it integrates it
        listed = json.loads(run_sup(setup.repo, "queue", "--json").stdout)
        assert listed[0]["queued"] == [rec["id"]]


def test_egress_endpoints_are_the_only_way_out(setup: Setup, listener: Listener) -> None:
    """`sup.egress` lets a check reach exactly its endpoints, through the egress gate; the
    host's other loopback listeners stay out of reach."""
    from tests.boundary.conftest import make_task

    other = Listener()
    try:
        probe = (
            "import socket, sys\n"
            "def reach(port):\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.1', port), timeout=3).close()\n"
            "        return True\n"
            "    except OSError:\n"
            "        return False\n"
            f"sys.exit(0 if reach({listener.port}) and not reach({other.port}) else 1)\n"
        )
        rec = make_task(setup, checks=[{"name": "egress", "argv": [PYTHON, "-c", probe]}])
        git(setup.repo, "config", "sup.egress", f"127.0.0.1:{listener.port}")
        res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        out = json.loads(res.stdout)
        assert out["confinement"]["network"] == "gated", out["confinement"]
        assert listener.reached >= 1 and other.reached == 0
    finally:
        other.close()


def test_a_check_has_a_loopback_of_its_own_and_no_other_interface(
    setup: Setup, listener: Listener
) -> None:
    """A confined check's network is loopback only, its own: a server it starts on
    127.0.0.1 answers it, the host's listener on 127.0.0.1 does not, and loopback is the
    only interface it sees."""
    from tests.boundary.conftest import make_task

    probe = (
        "import socket, sys\n"
        "def reach(port):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=3).close()\n"
        "        return True\n"
        "    except OSError:\n"
        "        return False\n"
        "own = socket.socket(); own.bind(('127.0.0.1', 0)); own.listen(1)\n"
        f"seen = (reach(own.getsockname()[1]), reach({listener.port}), "
        "sorted(n for _, n in socket.if_nameindex()))\n"
        "print('seen', seen)\n"
        "sys.exit(0 if seen == (True, False, ['lo']) else 1)\n"
    )
    rec = make_task(setup, checks=[{"name": "net", "argv": [PYTHON, "-c", probe]}])
    res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["confinement"]["network"] == "loopback", out["confinement"]
    assert listener.reached == 0


def test_sandbox_off_still_gives_checks_only_the_allowlist(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `sup.sandbox off` the checks lose the kernel sandbox (recorded) but still get
    the allowlisted environment with a private HOME, a loopback network and a cgroup."""
    from tests.boundary.conftest import make_task

    seen = setup.tmp / "env.json"
    dump = f"import json, os; open({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))"
    rec = make_task(setup, checks=[{"name": "env", "argv": [PYTHON, "-c", dump]}])
    git(setup.repo, "config", "sup.sandbox", "off")
    monkeypatch.setenv("SUP_FAKE_TOKEN", TOKEN)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main", "--json")
    assert res.returncode == 0, res.stderr
    applied = json.loads(res.stdout)["confinement"]
    assert applied["sandbox"]["mode"] == "off" and applied["sandbox"]["enforced"] is False
    env = json.loads(seen.read_text())
    assert "SUP_FAKE_TOKEN" not in env and "ANTHROPIC_API_KEY" not in env
    assert env["HOME"] != os.environ["HOME"] and env["GITSUP_INTEGRATION"] == rec["id"]


def test_the_users_hooks_do_not_run_on_the_candidates_tree(setup: Setup) -> None:
    """The throw-away worktree of the checks is made without the user's hooks: a
    `post-checkout` hook that builds whatever it checked out would otherwise run the
    candidate's code with the user's authority before any check is confined."""
    from tests.boundary.conftest import make_task

    ran = setup.tmp / "hook-ran"
    rec = make_task(
        setup,
        files=(
            ("calc.py", "def add(a, b):\n    return a + b\n"),
            ("setup.sh", f"echo candidate > {ran}\n"),
        ),
    )
    hook = setup.repo / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\n[ -f setup.sh ] && sh setup.sh\nexit 0\n")
    hook.chmod(0o755)
    res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main")
    assert res.returncode == 0, res.stderr
    assert not ran.exists()


def test_doctor_finds_and_removes_what_a_killed_integrate_left(setup: Setup) -> None:
    """integrate killed (SIGKILL) while a check runs leaves that check's cgroup, with the
    check still running in it: doctor reports it and --fix kills and removes it. The check's
    loopback-only network namespace is its own, unnamed: nothing of it is left to remove."""
    import signal
    import subprocess

    from gitsup.host.contain import list_gitsup_cgroups, list_gitsup_netns
    from tests.boundary.conftest import make_task
    from tests.conftest import GIT_SUP
    from tests.helpers.sup import wait_for

    require("cgroup", "holding a check's processes")
    started = setup.tmp / "started"
    marker = f"held-{uuid.uuid4().hex}"
    hold = f"import pathlib, time; pathlib.Path({str(started)!r}).write_text('x'); time.sleep(600)"
    rec = make_task(setup, checks=[{"name": "hold", "argv": [PYTHON, "-c", hold, marker]}])
    runner = subprocess.Popen([GIT_SUP, "integrate", rec["id"], "--into", "main"], cwd=setup.repo)
    try:
        assert wait_for(started.exists, timeout=120)
        runner.send_signal(signal.SIGKILL)
    finally:
        runner.wait(timeout=30)
    try:
        assert _daemons(marker), "the check runs on in its cgroup"
        mine = [c for c in list_gitsup_cgroups() if c.name.startswith(f"integrate-{runner.pid}-")]
        nets = [n for n in list_gitsup_netns() if n.label == "integrate" and n.pid == runner.pid]
        assert len(mine) == 1 and nets == []
        # the check is in a network namespace of its own all the same
        host_net = os.readlink("/proc/self/ns/net")
        assert all(os.readlink(f"/proc/{p.pid}/ns/net") != host_net for p in _daemons(marker))
        res = run_sup(setup.repo, "doctor", "--json")
        kinds = {(f["kind"], f["detail"].split(" ")[0]) for f in json.loads(res.stdout)}
        assert ("orphan-cgroup", str(mine[0].path)) in kinds, kinds
        fixed = run_sup(setup.repo, "doctor", "--fix", "--json")
        done = {f["detail"].split(" ")[0]: f["fixed"] for f in json.loads(fixed.stdout)}
        assert done[str(mine[0].path)] == "killed and removed"
        assert _daemons(marker) == [] and not mine[0].path.exists()
    finally:
        for p in _daemons(marker):
            p.kill()


def test_without_cgroups_the_runs_marked_processes_are_killed(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a host without a writable cgroup tree (forced here) a check's setsid() daemon is
    still found, by the run's marker in its environment, and killed; the result says the
    guarantee was weaker."""
    from tests.boundary.conftest import make_task

    marker = f"daemon-{uuid.uuid4().hex}"
    started = setup.tmp / "daemon-started"
    code = (
        "import os, pathlib, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        null = os.open(os.devnull, os.O_RDWR)\n"
        "        for fd in (0, 1, 2): os.dup2(null, fd)\n"
        f"        pathlib.Path({str(started)!r}).write_text('x')\n"
        "        time.sleep(300)\n"
        "    os._exit(0)\n"
        f"while not pathlib.Path({str(started)!r}).exists(): time.sleep(0.02)\n"
    )
    rec = make_task(setup, checks=[{"name": "daemon", "argv": [PYTHON, "-c", code, marker]}])
    monkeypatch.setenv("GITSUP_CGROUP_ROOT", "none")
    try:
        res = run_sup(setup.repo, "integrate", rec["id"], "--into", "main", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        alive = [p.pid for p in _daemons(marker)]
    finally:
        for p in _daemons(marker):
            p.kill()
    assert started.exists() and alive == []
    applied = json.loads(res.stdout)["confinement"]
    assert applied["cgroup"] is False and "cgroup v2" in applied["cgroup_reason"], applied
