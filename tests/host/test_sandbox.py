"""The task sandbox against a hostile task, on the real kernel, as root.

A process worker, an acceptance check and a double-forked grandchild each run
tests/host/sandbox_attack.py: writes to the user's checkout, home, repository config, hooks,
refs, notes and objects, a push to a remote, reading SSH and integration keys, leaving the
cgroup, entering other namespaces, mounting, writing /proc/sys and cgroupfs, signalling
the supervisor, connecting to host UNIX sockets. Every attempt must fail, the user's
repository and home must be byte-identical, and the task's own commit must still land.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitsup.host.bootstrap import env_digest
from gitsup.host.contain import _cgroup2_mounts
from gitsup.host.seccomp import program as seccomp_program
from tests.conftest import PYTHON, git, run_sup
from tests.helpers.net import Listener
from tests.helpers.require import require, requires
from tests.helpers.sup import start_json, write_worker

ATTACK = str(Path(__file__).with_name("sandbox_attack.py"))
NO_REVIEW = ("--review", "none")
# the task's goal: on the supervisor's command line, which the task must not see
GOAL = "make add() add"
# the worker's own commit makes this pass; the attacks do not touch it
CHECK_FIXED = shlex.join([PYTHON, "-c", "from calc import add; assert add(1, 2) == 3"])

pytestmark = requires("root", "landlock", "mountns", "pidns", "seccomp")


def common_dir(repo: Path) -> Path:
    return repo / ".git"


def snapshot(repo: Path, remote: Path, home: Path) -> dict[str, Any]:
    """What must not change: checkout files, config, hooks, refs other than the task's,
    every object file that exists now, the remote's refs and the planted home files."""
    gd = common_dir(repo)

    def digest(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    checkout = {
        str(p.relative_to(repo)): digest(p)
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    refs = [
        line
        for line in git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
        if not line.startswith(("refs/sup/", "refs/heads/sup/", "refs/notes/sup "))
    ]
    return {
        "checkout": checkout,
        "config": digest(gd / "config"),
        "hooks": {p.name: digest(p) for p in (gd / "hooks").iterdir() if p.is_file()},
        "packed-refs": digest(gd / "packed-refs"),
        "refs": refs,
        "objects": {
            str(p.relative_to(gd)): digest(p) for p in (gd / "objects").rglob("*") if p.is_file()
        },
        "remote": git(remote, "for-each-ref", "--format=%(refname) %(objectname)"),
        "home": {str(p.relative_to(home)): digest(p) for p in home.rglob("*") if p.is_file()},
    }


@pytest.fixture
def hostile(
    repo: Path, tmp: Path, hermetic_env: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    """A repository, a gated-looking bare remote, planted secrets, host sockets, and the
    attack targets file."""
    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)
    home = hermetic_env
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    keydir = home / ".config" / "gitsup"
    keydir.mkdir(parents=True)
    (keydir / "integration-key").write_text("integration signing key\n")
    init = run_sup(repo, "init")
    assert init.returncode == 0, init.stderr
    git(repo, "tag", "v0")
    git(repo, "pack-refs")  # packs the tag; main stays a loose ref
    remote = tmp / "remote.git"
    git(tmp, "init", "-q", "--bare", str(remote))
    git(repo, "push", "-q", "--no-verify", str(remote), "main")
    evil = git(repo, "commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "evil")
    head = git(repo, "rev-parse", "HEAD")
    obj = common_dir(repo) / "objects" / head[:2] / head[2:]
    assert obj.is_file()
    suffix = os.urandom(4).hex()
    listeners = [
        Listener(str(tmp / "host.sock")),
        Listener(f"/run/gitsup-test-{suffix}.sock"),
        # in the repository's Git dir, which the mount namespace does not hide
        Listener(str(common_dir(repo) / f"h-{suffix}.sock")),
        Listener(f"\0gitsup-test-{suffix}"),
    ]
    # a host process outside the task, named by a marker the task looks for in /proc
    marker = f"gitsup-outside-{suffix}"
    outside = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(600)", marker])
    cgroup_root = next(
        (m for m in _cgroup2_mounts() if Path(m, "cgroup.procs").exists()), "/sys/fs/cgroup"
    )
    targets = {
        "checkout": str(repo),
        "common_dir": str(common_dir(repo)),
        "home": str(home),
        "integration_key": str(keydir / "integration-key"),
        "evil_commit": evil,
        "remote": str(remote),
        "object": str(obj),
        "replace_object": True,  # the user's objects are read-only to a task with a private Git dir
        "cgroup_root": cgroup_root,
        "sockets": [li.address for li in listeners[:3]],
        "goal": GOAL,
        "outside_marker": marker,
        "abstract": f"gitsup-test-{suffix}",
        "block_device": next(
            (str(p) for p in sorted(Path("/dev").iterdir()) if p.is_block_device()), None
        ),
    }
    targets_file = tmp / "targets.json"
    targets_file.write_text(json.dumps(targets))
    try:
        yield {
            "repo": repo,
            "remote": remote,
            "home": home,
            "targets": targets_file,
            "listeners": listeners,
            "before": snapshot(repo, remote, home),
        }
    finally:
        outside.kill()
        outside.wait()
        for li in listeners:
            li.close()


# Every task this gitsup makes has a Git dir of its own ("shared" is only what a task made
# before private dirs existed gets): the hostile tests expect it and run every attack in it.
EXPECTED_GIT_STATE = "private"


def results_of(repo: Path, task: str, label: str) -> dict[str, str]:
    path = common_dir(repo) / "sup" / "tasks" / task / "sandbox" / "tmp" / f"attack-{label}.json"
    assert path.is_file(), (
        f"the {label} attack left no report at {path}; the attacks it recorded as they ran: "
        f"{outcomes(repo, task, label)}"
    )
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def outcomes(repo: Path, task: str, label: str) -> dict[str, str]:
    """Each attack's result as the script recorded it the moment it was known
    ($TMPDIR/attack-LABEL.jsonl), however far it got."""
    path = common_dir(repo) / "sup" / "tasks" / task / "sandbox" / "tmp" / f"attack-{label}.jsonl"
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            out[str(rec["attack"])] = str(rec["result"])
    return out


def assert_each_attack_blocked(repo: Path, task: str, label: str) -> None:
    """Attack by attack, before anything else about the task is asserted: whatever fails
    later (the task, a check, the snapshot), an attack that worked is named first."""
    for name, result in outcomes(repo, task, label).items():
        assert result.startswith("blocked"), f"{label}: attack {name}: {result}"


def assert_all_blocked(results: dict[str, str], label: str, *, git_state: str) -> None:
    expected = {
        "write_checkout", "write_home_gitconfig", "write_repo_config", "write_hook",
        "write_packed_refs", "write_main_ref", "git_update_ref_main", "write_notes_ref",
        "git_notes_forge", "push_remote_main", "overwrite_object", "rewrite_dotgit_file",
        "remove_dotgit_file", "read_ssh_key", "read_integration_key", "read_etc_shadow",
        "read_supervisor_environ", "signal_supervisor", "move_cgroup", "write_cgroupfs",
        "write_proc_sys", "setns_init_net", "setns_init_mnt", "nsenter_init", "unshare_user",
        "mount_tmpfs", "connect_host_socket_0", "connect_host_socket_1",
        "connect_host_socket_2", "read_supervisor_cmdline", "see_outside_process",
        "weak_privileges", "unshare_ns_ns", "unshare_cgroup_ns", "unshare_uts_ns",
        "unshare_ipc_ns", "unshare_user_ns", "unshare_pid_ns", "unshare_net_ns",
        "unshare_time_ns", "unshare_user_then_all", "clone_newuser", "io_uring_setup",
        "bpf_prog_load", "perf_event_open", "userfaultfd", "keyctl_add_key", "ptrace_sibling",
        "connect_abstract_socket", "write_supervisor_record", "hardlink_repo_config",
        "symlink_repo_config", "read_kernel_log",
    }  # fmt: skip
    if any(p.is_block_device() for p in Path("/dev").iterdir()):
        expected.add("read_block_device")
    # no silent fallback to shared Git state, which would skip the object-replacement attack
    assert git_state == EXPECTED_GIT_STATE, git_state
    expected.add("replace_object")
    assert set(results) == expected, set(results) ^ expected
    escaped = {k: v for k, v in results.items() if not v.startswith("blocked")}
    assert not escaped, f"{label} escaped: {escaped}"


def test_hostile_worker_check_and_grandchild_stay_inside(hostile: dict[str, Any]) -> None:
    repo: Path = hostile["repo"]
    worker = shlex.join(
        [PYTHON, ATTACK, "worker", str(hostile["targets"]), "--grandchild", "--then-commit"]
    )
    check = shlex.join([PYTHON, ATTACK, "check", str(hostile["targets"])])
    rc, rec, err = start_json(
        repo,
        GOAL,
        "--worker",
        worker,
        "--check",
        check,
        "--check",
        CHECK_FIXED,
        *NO_REVIEW,
        timeout=180,
    )
    assert rec.get("id"), ("no task was made", rc, err)
    for label in ("worker", "grandchild", "check"):
        assert_each_attack_blocked(repo, rec["id"], label)
    assert rc == 0, (rec.get("reasons"), err)
    assert rec["status"] == "ready" and rec["candidate"], rec
    sb = rec["sandbox"]
    assert sb["enforced"] is True and sb["mount_ns"] is True and sb["landlock_abi"] >= 1, sb
    assert sb["caps_dropped"] and sb["no_new_privs"] and sb["env_allowlist"], sb
    assert sb["seccomp"] is True and sb["pid_ns"] is True, sb
    git_state = sb["git_state"]
    assert git_state == EXPECTED_GIT_STATE, sb
    for label in ("worker", "grandchild", "check"):
        assert_all_blocked(results_of(repo, rec["id"], label), label, git_state=git_state)
    assert [li.reached for li in hostile["listeners"]] == [0, 0, 0, 0]
    after = snapshot(repo, hostile["remote"], hostile["home"])
    before = hostile["before"]
    # none of the objects that existed changed
    new_objects = set(after["objects"]) - set(before["objects"])
    assert {k: after["objects"].get(k) for k in before["objects"]} == before["objects"]
    # what is new came from the supervisor (the verified import, the sealed log, notes):
    # every new object is reachable from a ref; none of the worker's own objects is loose
    reachable = set(git(repo, "rev-list", "--objects", "--all").split())
    stray = {k for k in new_objects if k.replace("objects/", "").replace("/", "") not in reachable}
    assert not stray, stray
    after["objects"] = before["objects"]
    assert after == before
    notes = git(repo, "log", "-p", "refs/notes/sup", check=False)
    assert "forged" not in notes
    # the task's own commit landed
    cand = rec["candidate"]
    assert git(repo, "show", f"{cand}:calc.py").count("a + b") == 1
    started = [
        json.loads(line)
        for line in (common_dir(repo) / "sup" / "tasks" / rec["id"] / "events.jsonl")
        .read_text()
        .splitlines()
        if '"worker_started"' in line
    ]
    assert started and started[0]["data"]["sandbox"] == sb


def _sandbox_env_worker(tmp: Path) -> str:
    return write_worker(
        tmp,
        f"""
        import json, os, pathlib, subprocess
        keys = sorted(os.environ)
        tmpdir = os.environ.get("TMPDIR") or {str(tmp)!r}
        pathlib.Path(tmpdir, "env.json").write_text(json.dumps(
            {{"keys": keys, "home": os.environ["HOME"], "tmpdir": tmpdir}}))
        p = pathlib.Path("calc.py")
        p.write_text(p.read_text().replace("a - b", "a + b"))
        subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
        """,
    )


# What ordinary programs do with pipes, semaphores and event loops, each as a check.
IPC_CHECKS = {
    "pool": "import multiprocessing as m; assert m.Pool(2).map(abs, [-1, -2]) == [1, 2]",
    "socketpair": (
        "import socket; a, b = socket.socketpair(); a.sendall(b'x'); assert b.recv(1) == b'x'"
    ),
    "asyncio": (
        "import asyncio\n"
        "async def main():\n"
        "    p = await asyncio.create_subprocess_exec('echo', 'hi', stdout=-1)\n"
        "    out, _ = await p.communicate()\n"
        "    assert out == b'hi\\n' and p.returncode == 0\n"
        "asyncio.run(main())"
    ),
    # the task's own /dev/shm, not the host's: the file appears in neither afterwards
    "shm": "import os, sys; open(f'/dev/shm/{sys.argv[1]}', 'w').write('x')",
}


def test_ordinary_ipc_works_in_the_sandbox(repo: Path, tmp: Path) -> None:
    """multiprocessing's Pool (POSIX semaphores in /dev/shm), socketpair and asyncio's
    subprocesses work in a task's checks; /dev/shm is the task's own (a private tmpfs)."""
    assert run_sup(repo, "init").returncode == 0
    probe_name = f"gitsup-shm-probe-{os.getpid()}"
    checks = []
    for name, code in IPC_CHECKS.items():
        argv = [PYTHON, "-c", code] + ([probe_name] if name == "shm" else [])
        checks += ["--check", shlex.join(argv)]
    worker = write_worker(
        tmp,
        """
        import pathlib, subprocess
        p = pathlib.Path("calc.py")
        p.write_text(p.read_text().replace("a - b", "a + b"))
        subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
        """,
    )
    rc, rec, err = start_json(repo, "fix", "--worker", worker, *checks, *NO_REVIEW, timeout=180)
    assert rec["sandbox"]["enforced"] and rec["sandbox"]["mount_ns"], rec["sandbox"]
    results = [
        json.loads(line)["data"]
        for line in run_sup(repo, "log", rec["id"], "--json").stdout.splitlines()
        if '"acceptance_result"' in line
    ]
    failed = [(r["name"], r.get("output_tail", "")[-600:]) for r in results if not r["passed"]]
    assert rc == 0 and rec["status"] == "ready" and not failed, (failed, err)
    assert not os.path.exists(f"/dev/shm/{probe_name}")


def test_environment_is_an_allowlist(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp / "agent.sock"))
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_not_for_tasks")
    monkeypatch.setenv("GIT_ASKPASS", "/usr/bin/true")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nope")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-agent-setting")
    assert run_sup(repo, "init").returncode == 0
    rc, rec, err = start_json(
        repo, "fix", "--worker", _sandbox_env_worker(tmp), "--check", CHECK_FIXED, *NO_REVIEW
    )
    assert rc == 0, (rec.get("reasons"), err)
    box = common_dir(repo) / "sup" / "tasks" / rec["id"] / "sandbox"
    seen = json.loads((box / "tmp" / "env.json").read_text())
    keys = set(seen["keys"])
    assert not keys & {"SSH_AUTH_SOCK", "GITHUB_TOKEN", "GIT_ASKPASS", "AWS_SECRET_ACCESS_KEY"}
    assert {"ANTHROPIC_API_KEY", "GITSUP_TASK", "PATH", "GIT_CONFIG_NOSYSTEM"} <= keys
    assert seen["home"] == str(box / "home") and seen["tmpdir"] == str(box / "tmp")


def test_auto_without_landlock_records_the_weaker_guarantee(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITSUP_SANDBOX_REFUSE", "landlock")
    assert run_sup(repo, "init").returncode == 0
    rc, rec, err = start_json(
        repo, "fix", "--worker", _sandbox_env_worker(tmp), "--check", CHECK_FIXED, *NO_REVIEW
    )
    assert rc == 0, (rec.get("reasons"), err)
    sb = rec["sandbox"]
    assert sb["mode"] == "auto" and sb["enforced"] is False and sb["landlock_abi"] == 0
    assert any(w.startswith("landlock not enforced") for w in sb["weaker"]), sb["weaker"]
    assert sb["mount_ns"] is True and sb["caps_dropped"] is True


def test_required_without_landlock_fails_before_anything_runs(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITSUP_SANDBOX_REFUSE", "landlock")
    assert run_sup(repo, "init").returncode == 0
    ran = tmp / "ran"
    worker = write_worker(tmp, f"open({str(ran)!r}, 'w').write('ran')\n")
    check = shlex.join([PYTHON, "-c", f"open({str(ran)!r}, 'w').write('check ran')"])
    head = git(repo, "rev-parse", "main")
    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "fix"\n[sandbox]\nmode = "required"\n[review]\nkind = "none"\n'
        f'[worker]\nkind = "process"\nargv = {json.dumps(shlex.split(worker))}\n'
        f'[[checks]]\nname = "c"\nargv = {json.dumps(shlex.split(check))}\n'
    )
    rc, rec, err = start_json(repo, "--spec", str(spec))
    assert rc == 4, (rec, err)
    assert rec["state"] == "failed"
    assert any("Landlock" in r and "required" in r for r in rec["reasons"]), rec["reasons"]
    assert not ran.exists()
    assert rec["worker"] is None or rec["worker"].get("pid") is None
    assert git(repo, "rev-parse", "main") == head


def test_git_config_selects_the_mode(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITSUP_SANDBOX_REFUSE", "mountns")
    assert run_sup(repo, "init").returncode == 0
    git(repo, "config", "sup.sandbox", "required")
    rc, rec, _ = start_json(repo, "fix", "--worker", _sandbox_env_worker(tmp), *NO_REVIEW)
    assert rc == 4 and any("mountns" in r for r in rec["reasons"]), rec
    git(repo, "config", "sup.sandbox", "off")
    rc, rec, err = start_json(
        repo, "fix", "--worker", _sandbox_env_worker(tmp), "--check", CHECK_FIXED, *NO_REVIEW
    )
    assert rc == 0, (rec.get("reasons"), err)
    limits = rec["sandbox"].pop("limits", None)  # the cgroup's bounds (docs/containment.md)
    assert rec["sandbox"] == {"mode": "off", "enforced": False, "weaker": ["sandbox off"]}
    assert limits is None or set(limits) <= {"pids", "memory"}
    git(repo, "config", "sup.sandbox", "sometimes")
    rc, rec, _ = start_json(repo, "fix", "--worker", _sandbox_env_worker(tmp), *NO_REVIEW)
    assert rc == 4 and any("sup.sandbox" in r for r in rec["reasons"]), rec


def test_auto_without_seccomp_and_pid_namespace_records_the_weaker_guarantee(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITSUP_SANDBOX_REFUSE", "seccomp,pidns")
    assert run_sup(repo, "init").returncode == 0
    rc, rec, err = start_json(
        repo, "fix", "--worker", _sandbox_env_worker(tmp), "--check", CHECK_FIXED, *NO_REVIEW
    )
    assert rc == 0, (rec.get("reasons"), err)
    sb = rec["sandbox"]
    assert sb["enforced"] is False and sb["seccomp"] is False and sb["pid_ns"] is False, sb
    assert sb["mount_ns"] is True and sb["landlock_abi"] >= 1, sb
    weaker = " ".join(sb["weaker"])
    assert "seccomp not enforced" in weaker and "pidns not enforced" in weaker, weaker
    git(repo, "config", "sup.sandbox", "required")
    rc, rec, _ = start_json(repo, "fix", "--worker", _sandbox_env_worker(tmp), *NO_REVIEW)
    assert rc == 4 and rec["state"] == "failed", rec
    assert any("required" in r and "seccomp" in r for r in rec["reasons"]), rec["reasons"]


@pytest.mark.parametrize(
    ("refused", "desc", "message"),
    [
        ("landlock", {"landlock": True}, "Landlock is not available"),
        ("seccomp", {"seccomp": "/nonexistent.bpf"}, "seccomp is not available"),
        ("pidns", {"mountns": True, "pidns": True}, "PID namespaces are not available"),
    ],
)
def test_bootstrap_refuses_what_it_cannot_enforce(
    tmp: Path, refused: str, desc: dict[str, Any], message: str
) -> None:
    desc = {"mountns": False, "read": ["/usr"], "write": [], **desc}
    env = {**os.environ, "GITSUP_SANDBOX_REFUSE": refused}
    res = subprocess.run(
        [PYTHON, "-m", "gitsup.host.bootstrap", "--sandbox", json.dumps(desc), "--", "true"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 126 and message in res.stderr, res.stderr


def test_bootstrap_reports_what_the_process_saw(tmp: Path) -> None:
    """The observation comes from the process about to exec, not from the description:
    what was not applied reads false."""
    bpf = tmp / "filter.bpf"
    bpf.write_bytes(seccomp_program())
    full = {"mountns": True, "pidns": True, "seccomp": str(bpf), "caps": True,
            "read": [], "write": [], "hide": [], "ro": []}  # fmt: skip
    lesser = {"mountns": True, "pidns": False, "seccomp": "", "caps": False,
              "read": [], "write": [], "hide": [], "ro": []}  # fmt: skip
    seen = []
    for desc in (full, lesser):
        out = tmp / "observed.json"
        res = subprocess.run(
            [PYTHON, "-m", "gitsup.host.bootstrap", "--sandbox",
             json.dumps({**desc, "observe": str(out)}), "--", "true"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        seen.append(json.loads(out.read_text()))
        # the environment it saw: digests of each variable, never the values
        env = seen[-1].pop("env")
        assert all(env[k] == env_digest(k, v) for k, v in os.environ.items()), env
        assert os.environ["PATH"] not in json.dumps(env)
    everything = {"no_new_privs", "caps_dropped", "seccomp", "pid_ns", "mount_ns"}
    assert seen[0] == dict.fromkeys(everything, True), seen[0]
    assert seen[1] == {"no_new_privs": True, "caps_dropped": False, "seccomp": False,
                       "pid_ns": False, "mount_ns": True}, seen[1]  # fmt: skip


@pytest.fixture
def world_tmp() -> Iterator[Path]:
    """A directory another user can reach (pytest's own tmp is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="gitsup-sandbox-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_bootstrap_sandboxes_an_unprivileged_user_too(world_tmp: Path) -> None:
    """Without root, the mount namespace comes with a user namespace; the result is the same:
    the host's /tmp hidden but the task's own directory bound back, nothing else writable."""
    require("setpriv", "running as another user")
    tmp = world_tmp
    wt = tmp / "wt"
    wt.mkdir()
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "host.sock").touch()
    for d in (tmp, wt, outside):
        d.chmod(0o777)
    bpf = tmp / "filter.bpf"
    bpf.write_bytes(seccomp_program())
    bpf.chmod(0o644)
    desc = json.dumps(
        {
            "mountns": True,
            "pidns": True,
            "seccomp": str(bpf),
            "landlock": True,
            "caps": True,
            "read": ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "/dev", str(wt)],
            "write": [str(wt), "/dev/null"],
            "hide": ["/tmp", "/run", "/dev/shm"],
            "ro": [],
            "scratch": ["/dev/shm"],
        }
    )
    script = (
        f"echo inside > {wt}/own && echo own-ok; "
        "echo x > /dev/shm/own && echo shm-ok; "
        f"echo x > {outside}/f 2>/dev/null || echo outside-blocked; "
        f"test -e {outside}/host.sock || echo socket-hidden; "
        "grep -q '^CapEff:.0000000000000000' /proc/self/status && echo caps-zero; "
        "grep -q '^NoNewPrivs:.1' /proc/self/status && echo nnp; "
        "grep -q '^Seccomp:.2' /proc/self/status && echo seccomp; "
        "echo pid-$$; ls /proc | grep -c '^[0-9]'"
    )
    res = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         PYTHON, "-m", "gitsup.host.bootstrap", "--sandbox", desc, "--", "/bin/sh", "-c", script],
        cwd=wt, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    # its own PID namespace: the shell is 2 (the bootstrap's init is 1); 4 processes in /proc
    # (init, the shell, `ls` and `grep`)
    assert res.stdout.split() == [
        "own-ok", "shm-ok", "outside-blocked", "socket-hidden", "caps-zero", "nnp", "seccomp", "pid-2", "4"
    ]  # fmt: skip
    assert (wt / "own").read_text() == "inside\n" and not (outside / "f").exists()
    assert not Path("/dev/shm/own").exists()  # its /dev/shm was its own


def test_reviewer_and_decider_run_sandboxed_with_a_read_only_worktree(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command reviewer and decider are programs too: sandboxed, and they cannot even
    change the worktree they judge."""
    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)
    assert run_sup(repo, "init").returncode == 0
    judge = tmp / "judge.py"
    judge.write_text(
        "import json, os, pathlib, sys\n"
        "payload = sys.stdin.read()\n"
        "r = {}\n"
        "for name, path in [('worktree', 'calc.py'), ('config', sys.argv[2])]:\n"
        "    try:\n"
        "        open(path, 'a').write('# changed by the judge\\n')\n"
        "        r[name] = 'ESCAPED'\n"
        "    except OSError as exc:\n"
        "        r[name] = 'blocked: ' + str(exc.errno)\n"
        "r['home_is_private'] = os.environ['HOME'].endswith('/sandbox/home')\n"
        "pathlib.Path(os.environ['TMPDIR'], sys.argv[1] + '.json').write_text(json.dumps(r))\n"
        "if sys.argv[1] == 'review':\n"
        "    print(json.dumps({'verdict': 'pass', 'findings': []}))\n"
        "else:\n"
        "    print(json.dumps({'action': 'verify'}))\n"
    )
    config = str(common_dir(repo) / "config")
    worker = write_worker(
        tmp,
        "import pathlib, subprocess\n"
        "p = pathlib.Path('calc.py')\n"
        "p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        "subprocess.run(['git', 'commit', '-q', '-am', 'fix add'], check=True)\n",
    )
    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "fix"\n'
        f'[worker]\nkind = "process"\nargv = {json.dumps(shlex.split(worker))}\n'
        f'[review]\nkind = "command"\nargv = {json.dumps([PYTHON, str(judge), "review", config])}\n'
        f'[decider]\nkind = "command"\nargv = {json.dumps([PYTHON, str(judge), "decide", config])}\n'
    )
    before = (common_dir(repo) / "config").read_bytes()
    rc, rec, err = start_json(repo, "--spec", str(spec))
    assert rc == 0, (rec.get("reasons"), err)
    box = common_dir(repo) / "sup" / "tasks" / rec["id"] / "sandbox" / "tmp"
    review = json.loads((box / "review.json").read_text())
    assert review["worktree"].startswith("blocked") and review["config"].startswith("blocked")
    assert review["home_is_private"] is True
    decide = json.loads((box / "decide.json").read_text())
    assert decide["worktree"].startswith("blocked") and decide["config"].startswith("blocked")
    assert (common_dir(repo) / "config").read_bytes() == before
    assert "changed by the judge" not in git(repo, "show", f"{rec['candidate']}:calc.py")


def test_the_record_says_what_the_process_saw(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record's no_new_privs, caps_dropped, seccomp and env_allowlist are what the
    bootstrap observed of itself after dropping, not what was asked: here on a host
    without the system call filter (refused), the worker reads /proc/self/status itself and
    both accounts agree."""
    monkeypatch.setenv("GITSUP_SANDBOX_REFUSE", "seccomp")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_not_for_tasks")
    assert run_sup(repo, "init").returncode == 0
    worker = write_worker(
        tmp,
        """
        import json, os, pathlib, subprocess
        status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
        seen = {k: status[k].strip() for k in ("NoNewPrivs", "CapEff", "CapPrm", "CapBnd", "Seccomp")}
        seen["env"] = sorted(os.environ)
        pathlib.Path(os.environ["TMPDIR"], "status.json").write_text(json.dumps(seen))
        p = pathlib.Path("calc.py")
        p.write_text(p.read_text().replace("a - b", "a + b"))
        subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
        """,
    )
    rc, rec, err = start_json(repo, "fix", "--worker", worker, *NO_REVIEW)
    assert rc == 0, (rec.get("reasons"), err)
    box = common_dir(repo) / "sup" / "tasks" / rec["id"] / "sandbox"
    seen = json.loads((box / "tmp" / "status.json").read_text())
    assert seen["NoNewPrivs"] == "1" and seen["Seccomp"] == "0", seen
    assert {seen[k] for k in ("CapEff", "CapPrm", "CapBnd")} == {"0000000000000000"}, seen
    assert "GITHUB_TOKEN" not in seen["env"]
    sb = rec["sandbox"]
    assert sb["no_new_privs"] is True and sb["caps_dropped"] is True, sb
    assert sb["seccomp"] is False and sb["enforced"] is False, sb
    assert sb["env_allowlist"] is True, sb
    observed = json.loads((box / "observed.json").read_text())
    assert observed["no_new_privs"] is True and observed["seccomp"] is False, observed


def test_etc_entries_made_after_the_sandbox_started_stay_unreadable(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/etc is readable entry by entry (a Landlock rule on each, never one on /etc) so that
    what the host writes there while a task runs stays out of reach: a denied file created
    after the sandbox started (`/etc/credstore*`), one that replaced a denied file by a rename
    (as `passwd` replaces /etc/shadow), and an ordinary new file. A single rule on /etc with
    the secrets masked in the mount namespace would let the task read all three (a rename
    over a mount point detaches the mask)."""
    require("landlock", "the per-entry rules under /etc")
    from gitsup.host.contain import bootstrap_argv
    from gitsup.host.sandbox import build_plan, default_rules

    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)
    tag = os.urandom(4).hex()
    secret = f"SECRET-{tag}"
    made = Path(f"/etc/credstore.gitsup-{tag}")  # a deny glob (/etc/credstore*)
    replaced = Path(f"/etc/credstore.gitsup-{tag}-old")
    plain = Path(f"/etc/gitsup-later-{tag}")
    task_dir = tmp / "task"
    (task_dir / "git").mkdir(parents=True)
    try:
        replaced.write_text("old\n")  # there when the sandbox starts, denied
        plan = build_plan(
            mode="auto",
            rules=default_rules(),
            worktree=repo,
            common_dir=repo / ".git",
            task_dir=task_dir,
            branch="sup/t",
            env=dict(os.environ),
            programs=[[PYTHON, "-c", "x"]],
        )
        hostile = (
            "import json, pathlib, time\n"
            "pathlib.Path('ready').write_text('x')\n"
            "while not pathlib.Path('go').exists(): time.sleep(0.05)\n"
            "out = {}\n"
            f"for p in ('/etc/passwd', {str(made)!r}, {str(replaced)!r}, {str(plain)!r}):\n"
            "    try:\n"
            "        out[p] = 'ESCAPED ' + open(p).read()\n"
            "    except OSError as exc:\n"
            "        out[p] = 'blocked: ' + exc.strerror\n"
            "pathlib.Path('seen.json').write_text(json.dumps(out))\n"
        )
        argv = bootstrap_argv([PYTHON, "-c", hostile], cgroup=None, netns=None, sandbox=plan.argv())
        proc = subprocess.Popen(argv, cwd=repo, env=plan.env)
        try:
            for _ in range(600):
                if (repo / "ready").exists() or proc.poll() is not None:
                    break
                time.sleep(0.1)
            assert (repo / "ready").exists(), "the sandboxed process did not start"
            # the host writes /etc while the task runs
            made.write_text(secret + "\n")
            plain.write_text(secret + "\n")
            swap = replaced.with_name(replaced.name + ".new")
            swap.write_text(secret + "\n")
            swap.rename(replaced)
            (repo / "go").touch()
            assert proc.wait(timeout=60) == 0
        finally:
            proc.kill()
            proc.wait()
    finally:
        for p in (made, replaced, plain):
            p.unlink(missing_ok=True)
    seen = json.loads((repo / "seen.json").read_text())
    assert seen.pop("/etc/passwd").startswith("ESCAPED root:"), "/etc is readable at all"
    assert all(v.startswith("blocked") for v in seen.values()), seen
    assert secret not in json.dumps(seen)
