"""The setup phase and the package caches, end to end: real `git sup` tasks whose
`[environment] setup` runs `npm ci` in the task sandbox against a stand-in npm registry on
127.0.0.1 (tests/helpers/npmreg.py), `git sup env warm` filling the shared cache, a hostile
setup that tries to poison it, and a setup that fails before any worker runs."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, run_sup
from tests.helpers.npmreg import Registry
from tests.helpers.require import requires
from tests.helpers.sup import common_dir, start_json, worker_argv, write_spec

pytestmark = requires("npm")

DEPS = [f"dep{i}" for i in range(6)]

# a worker that records that it ran (in its worktree) and commits a change
MARK_AND_COMMIT = """
import pathlib, subprocess
pathlib.Path("WORKER_RAN").write_text("yes\\n")
pathlib.Path("index.js").write_text("module.exports = 2;\\n")
subprocess.run(["git", "add", "index.js", "WORKER_RAN"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "change"], check=True)
"""


@pytest.fixture
def registry() -> Iterator[Registry]:
    reg = Registry()
    for name in DEPS:
        reg.add(name)
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture
def npm_repo(tmp: Path, registry: Registry) -> Path:
    """A JavaScript project on main whose dependencies come from the stand-in registry, and
    its environment recipe committed in `.gitsup/environment.toml`."""
    r = tmp / "app"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    registry.project(r, DEPS)
    (r / "index.js").write_text("module.exports = 1;\n")
    (r / ".gitignore").write_text("node_modules/\n")
    _recipe(r, registry, ["npm ci"])
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "app")
    return r


def _recipe(root: Path, registry: Registry, setup: list[Any], cache: bool = True) -> None:
    (root / ".gitsup").mkdir(exist_ok=True)
    (root / ".gitsup" / "environment.toml").write_text(
        "[environment]\n"
        f"setup = {json.dumps(setup)}\n"
        f'setup_egress = ["127.0.0.1:{registry.port}"]\n'
        + ('cache = ["npm"]\n' if cache else "")
        + 'setup_timeout = "2m"\n'
    )


def _spec(tmp: Path, name: str = "task.toml", worker: str = MARK_AND_COMMIT) -> Path:
    argv = worker_argv(tmp, worker, f"{name}.py")
    return write_spec(
        tmp,
        f"""
        goal = "change index.js"
        [worker]
        kind = "process"
        argv = {json.dumps(argv)}
        [review]
        kind = "none"
        [[checks]]
        name = "npm test"
        argv = ["npm", "test"]
        timeout = "2m"
        """,
        name,
    )


def _events(repo: Path, task: str) -> list[dict[str, Any]]:
    path = common_dir(repo) / "sup" / "tasks" / task / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _digest(root: Path) -> str:
    """Every path, mode and content under `root`, hashed (what a task must not change)."""
    h = hashlib.sha256()
    if not root.exists():
        return "absent"
    for dirpath, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(files):
            p = Path(dirpath) / f
            h.update(str(p.relative_to(root)).encode() + b"\0")
            h.update(p.read_bytes() if not p.is_symlink() else os.readlink(p).encode())
    return h.hexdigest()


def _shared(repo: Path) -> Path:
    return common_dir(repo) / "sup" / "cache" / "env" / "npm"


def test_setup_installs_then_the_warm_cache_serves_the_next_task(
    npm_repo: Path, tmp: Path, registry: Registry
) -> None:
    # first task: no warm cache yet; setup fetches every tarball through the gate
    rc, rec, err = start_json(npm_repo, "--spec", str(_spec(tmp)), timeout=300)
    assert rc == 0 and rec["status"] == "ready", (err, rec.get("reasons"))
    assert rec["setup"]["passed"] is True and rec["setup"]["command"] == ["npm", "ci"]
    assert [c["name"] for c in rec["checks"] if c["passed"]] == ["npm test"]
    types = [e["type"] for e in _events(npm_repo, rec["id"])]
    assert types.index("setup_finished") < types.index("worker_started")
    started = next(e for e in _events(npm_repo, rec["id"]) if e["type"] == "setup_started")
    assert started["data"]["egress"] == [f"127.0.0.1:{registry.port}"]
    assert registry.tarball_requests() == len(DEPS)
    shown = json.loads(run_sup(npm_repo, "show", rec["id"], "--json").stdout)
    assert shown["setup"]["passed"] is True

    # warm the shared cache (its setup fetches them once more), then a second task
    res = run_sup(npm_repo, "env", "warm", "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    warm = json.loads(res.stdout)
    assert warm["caches"]["npm"]["bytes"] > 0 and warm["passed"] is True
    fetched = registry.tarball_requests()
    rc, rec2, err = start_json(npm_repo, "--spec", str(_spec(tmp, "t2.toml")), timeout=300)
    assert rc == 0 and rec2["status"] == "ready", (err, rec2.get("reasons"))
    assert rec2["setup"]["cache_bytes"] > 0
    assert registry.tarball_requests() == fetched  # every tarball came from the cache


def test_a_failing_setup_ends_the_task_before_the_worker(
    npm_repo: Path, tmp: Path, registry: Registry
) -> None:
    spec = write_spec(
        tmp,
        f"""
        goal = "never runs"
        [worker]
        kind = "process"
        argv = {json.dumps(worker_argv(tmp, MARK_AND_COMMIT))}
        [review]
        kind = "none"
        [environment]
        setup = ["sh -c 'echo installing; echo no such package >&2; exit 7'"]
        """,
    )
    rc, rec, err = start_json(npm_repo, "--spec", str(spec), timeout=300)
    assert rc != 0 and rec["status"] == "failed", (rc, err)
    reason = next(r for r in rec["reasons"] if r.startswith("setup failed"))
    assert "exited 7" in reason and "no such package" in reason, reason
    assert not (Path(rec["worktree"]) / "WORKER_RAN").exists()  # the worker never started
    types = [e["type"] for e in _events(npm_repo, rec["id"])]
    assert "setup_finished" in types and "worker_started" not in types
    assert rec["setup"]["exit_code"] == 7 and "no such package" in rec["setup"]["output_tail"]
    shown = run_sup(npm_repo, "show", rec["id"]).stdout
    assert "setup     FAILED" in shown and "| no such package" in shown, shown


def test_setup_egress_is_for_the_setup_phase_only(
    npm_repo: Path, tmp: Path, registry: Registry
) -> None:
    """The worker (agent phase) cannot reach what only setup_egress allows."""
    probe = f"""
import pathlib, socket, subprocess
try:
    socket.create_connection(("127.0.0.1", {registry.port}), timeout=5).close()
    got = "reached"
except OSError as exc:
    got = "refused: " + type(exc).__name__
pathlib.Path("PROBE").write_text(got)
subprocess.run(["git", "add", "PROBE"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "probe"], check=True)
"""
    _rc, rec, err = start_json(npm_repo, "--spec", str(_spec(tmp, worker=probe)), timeout=300)
    assert rec["setup"]["passed"] is True, (err, rec)
    assert (Path(rec["worktree"]) / "PROBE").read_text().startswith("refused"), rec


HOSTILE = r"""
const fs = require('fs'), path = require('path'), net = require('net');
const [shared, secret, port] = process.argv.slice(2);
const out = [];
function walk(d) {
  let r = [];
  try {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      r = e.isDirectory() ? r.concat(walk(p)) : r.concat([p]);
    }
  } catch (e) {}
  return r;
}
let own = 0;
for (const f of walk(process.env.npm_config_cache || '/nonexistent')) {
  if (f.includes('content-v2')) { try { fs.writeFileSync(f, 'poison'); own++; } catch (e) {} }
}
out.push('own copy poisoned: ' + own);
let wrote = 0;
for (const f of walk(shared)) { try { fs.writeFileSync(f, 'poison'); wrote++; } catch (e) {} }
try { fs.mkdirSync(path.join(shared, 'planted'), { recursive: true }); wrote++; } catch (e) {}
try { fs.writeFileSync(path.join(path.dirname(shared), 'planted'), 'x'); wrote++; } catch (e) {}
out.push('shared written: ' + wrote);
try { out.push('ssh file: ' + fs.readFileSync(secret, 'utf8')); } catch (e) { out.push('ssh file: ' + e.code); }
const s = net.connect(+port, '127.0.0.1');
const done = (what) => { out.push('listener: ' + what); console.log(out.join('\n')); process.exit(0); };
s.on('connect', () => done('reached'));
s.on('error', (e) => done(e.code));
"""


def test_a_hostile_setup_is_contained_and_cannot_poison_the_shared_cache(
    npm_repo: Path,
    tmp: Path,
    registry: Registry,
    hermetic_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.helpers.net import Listener

    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)  # the default rules only
    res = run_sup(npm_repo, "env", "warm", "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    shared = _shared(npm_repo)
    before = _digest(shared)
    fetched = registry.tarball_requests()
    secret = hermetic_env / ".ssh" / "id_ed25519"
    secret.parent.mkdir()
    secret.write_text("PRIVATE KEY MATERIAL\n")
    listener = Listener()
    try:
        # the recipe's setup is now a script that attacks (as a hostile package's install
        # script, or a candidate's change to a setup script, would)
        (npm_repo / "hostile.js").write_text(HOSTILE)
        _recipe(npm_repo, registry, [["node", "hostile.js", str(shared), str(secret),
                                      str(listener.port)]])  # fmt: skip
        git(npm_repo, "add", ".")
        git(npm_repo, "commit", "-q", "-m", "hostile setup")
        rc, rec, err = start_json(npm_repo, "--spec", str(_spec(tmp)), timeout=300)
        assert rec.get("setup", {}).get("passed") is True, (rc, err, rec.get("reasons"))
        said = rec["setup"]["output_tail"]
        assert "own copy poisoned: 0" not in said, said  # the attack ran on its own copy
        assert "shared written: 0" in said, said
        assert "PRIVATE KEY" not in said and "ssh file: E" in said, said
        assert "listener: reached" not in said, said
        # from outside: the shared layer is byte for byte what warm left, nobody connected
        assert _digest(shared) == before
        assert not (shared.parent / "planted").exists()
        assert listener.reached == 0
    finally:
        listener.close()

    # the next task (genuine setup) reads the shared layer: the genuine packages, no fetch
    spec = write_spec(
        tmp,
        f"""
        goal = "change index.js"
        [worker]
        kind = "process"
        argv = {json.dumps(worker_argv(tmp, MARK_AND_COMMIT, "w2.py"))}
        [review]
        kind = "none"
        [[checks]]
        name = "genuine"
        argv = ["node", "-e", "if (require('dep0') !== 'dep0') process.exit(1)"]
        [environment]
        setup = ["npm ci"]
        """,
        "genuine.toml",
    )
    rc, rec, err = start_json(npm_repo, "--spec", str(spec), timeout=300)
    assert rc == 0 and rec["status"] == "ready", (err, rec.get("reasons"), rec.get("setup"))
    assert registry.tarball_requests() == fetched


DNS_PROBE = """
import pathlib, socket, subprocess, time
out = []
t = time.monotonic()
try:
    r = subprocess.run(["getent", "hosts", "registry.npmjs.org"], capture_output=True, timeout=20)
    out.append(f"getent: exit {r.returncode}")
except subprocess.TimeoutExpired:
    out.append("getent: timed out")
out.append(f"getent took {time.monotonic() - t:.3f}s")
t = time.monotonic()
try:
    socket.getaddrinfo("registry.npmjs.org", 443)
    out.append("getaddrinfo: resolved")
except socket.gaierror as exc:
    out.append(f"getaddrinfo: gaierror {exc.errno}")
out.append(f"getaddrinfo took {time.monotonic() - t:.3f}s")
pathlib.Path("DNS").write_text("\\n".join(out) + "\\n")
subprocess.run(["git", "add", "DNS"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "dns"], check=True)
"""


def test_no_name_resolves_in_a_task_and_npm_is_told_which_setting_allows_it(
    npm_repo: Path, tmp: Path, registry: Registry
) -> None:
    # a name lookup inside the task fails (the worker runs it; 20 s is far above what it takes)
    rc, rec, err = start_json(npm_repo, "--spec", str(_spec(tmp, worker=DNS_PROBE)), timeout=300)
    said = (Path(rec["worktree"]) / "DNS").read_text()
    assert "getent: exit 2" in said and "getaddrinfo: gaierror" in said, said

    # a lockfile that points at the public registry: the setup's npm ci is refused by the
    # gate's proxy at once (nothing leaves this host), and the reason names the setting
    lock = (npm_repo / "package-lock.json").read_text()
    (npm_repo / "package-lock.json").write_text(
        lock.replace(registry.url, "https://registry.npmjs.org")
    )
    npmrc = npm_repo / ".npmrc"
    npmrc.write_text("".join(x for x in npmrc.read_text().splitlines(True) if "registry=" not in x))
    git(npm_repo, "commit", "-q", "-am", "public registry")
    spec = _spec(tmp, "public.toml")
    rc, rec, err = start_json(npm_repo, "--spec", str(spec), timeout=300)
    assert rec["status"] == "failed" and not rec["setup"]["passed"], (rc, err)
    reason = next(r for r in rec["reasons"] if r.startswith("setup failed"))
    assert "refused by the gitsup egress gate" in reason, reason
    assert "git config --add sup.egress registry.npmjs.org:443" in reason, reason
    refused = [e for e in _events(npm_repo, rec["id"]) if e["type"] == "egress_refused"]
    assert refused and refused[0]["data"]["host"] == "registry.npmjs.org", refused


def test_env_warm_refuses_a_recipe_with_nothing_to_warm(npm_repo: Path, registry: Registry) -> None:
    env_file = npm_repo / ".gitsup" / "environment.toml"
    for text, needle in (
        ('[environment]\ncache = ["npm"]\n', "has no [environment] setup"),
        ('[environment]\nsetup = ["npm ci"]\n', "names no [environment] cache"),
        ('[environment]\nsetup = ["npm ci"]\ncache = ["yarn"]\n', "'yarn' is not a cache"),
        (
            '[environment]\nsetup = ["npm ci"]\ncache = ["npm"]\nsetup_egress = ["nope"]\n',
            "neither a preset",
        ),
    ):
        env_file.write_text(text)
        res = run_sup(npm_repo, "env", "warm")
        assert res.returncode == 2, (text, res.stdout, res.stderr)
        assert needle in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not _shared(npm_repo).exists()
    assert registry.tarball_requests() == 0  # nothing ran


def test_env_warm_keeps_the_shared_cache_when_the_setup_fails(
    npm_repo: Path, registry: Registry
) -> None:
    res = run_sup(npm_repo, "env", "warm", timeout=300)
    assert res.returncode == 0, res.stderr
    assert "cache npm:" in res.stdout, res.stdout
    before = _digest(_shared(npm_repo))
    _recipe(npm_repo, registry, ["npm ci", "sh -c 'echo broken >&2; exit 3'"])
    res = run_sup(npm_repo, "env", "warm", timeout=300)
    assert res.returncode == 4, (res.stdout, res.stderr)
    assert "exited 3" in res.stderr and "broken" in res.stderr, res.stderr
    assert _digest(_shared(npm_repo)) == before


def test_a_stop_during_the_setup_stops_the_task_before_the_worker(
    npm_repo: Path, tmp: Path, registry: Registry
) -> None:
    from tests.helpers.sup import popen_sup, read_record, task_ids, wait_for, wait_unmarked

    marker = tmp / "setup-sleeps"
    _recipe(npm_repo, registry, [["sh", "-c", "sleep 120", str(marker)]], cache=False)
    proc = popen_sup(npm_repo, "start", "--spec", str(_spec(tmp)), "--json", "-q")
    try:
        tid = wait_for(lambda: task_ids(npm_repo), 30, what="the task")[0]
        wait_for(
            lambda: any(e["type"] == "setup_started" for e in _events(npm_repo, tid)),
            60,
            what="the setup phase",
        )
        res = run_sup(npm_repo, "stop", tid, "--wait", "30")
        assert res.returncode == 0, res.stderr
        assert proc.wait(60) == 5
        rec = read_record(npm_repo, tid)
        assert rec["status"] == "stopped", rec["reasons"]
        types = [e["type"] for e in _events(npm_repo, tid)]
        assert "worker_started" not in types, types
        assert not (Path(rec["worktree"]) / "WORKER_RAN").exists()
        assert wait_unmarked(str(marker), 10)  # the setup's processes are gone
    finally:
        if proc.poll() is None:
            proc.kill()


def test_start_refuses_an_unknown_preset_or_cache_before_it_makes_anything(
    npm_repo: Path, tmp: Path, registry: Registry
) -> None:
    from tests.helpers.sup import task_ids

    for key, value, needle in (
        ("setup_egress", '["npmjs"]', "neither a preset"),
        ("cache", '["yarn"]', "'yarn' is not a cache"),
    ):
        spec = _spec(tmp)
        spec.write_text(spec.read_text() + f"[environment]\n{key} = {value}\n")
        res = run_sup(npm_repo, "start", "--spec", str(spec))
        assert res.returncode == 2 and needle in res.stderr, (res.stdout, res.stderr)
    assert task_ids(npm_repo) == []
