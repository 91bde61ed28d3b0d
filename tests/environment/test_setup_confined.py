"""The setup phase where a candidate's checks run outside its task: the queue's
compositions run `[environment] setup` first, confined like the checks; a setup that fails
there is an environment failure of the queue (no candidate blamed, the queue unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.boundary.conftest import Setup, make_task
from tests.conftest import git, run_sup
from tests.tasks.test_queue import CALC, _events, _note


@pytest.fixture
def esetup(repo: Path, tmp: Path) -> Setup:
    """A green main whose environment recipe's setup fails until `tmp/registry-up` exists
    (a registry that is down, then back)."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    flag = tmp / "registry-up"
    setup = ["sh", "-c", f"test -e {flag} || {{ echo registry unreachable >&2; exit 9; }}"]
    (repo / "calc.py").write_text(CALC)
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(
        f"[environment]\nsetup = [{json.dumps(setup)}]\n"
    )
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "green main, its environment recipe")
    init_repo(SupRepo.discover(repo), explicit=True)
    return Setup(repo, tmp, tmp, tmp)


def test_a_failing_setup_is_an_environment_failure_of_the_queue(esetup: Setup) -> None:
    repo = esetup.repo
    task = make_task(
        esetup, files=(("mod_e.py", "E = 1\n"), ("test_e.py", "def test_e():\n    pass\n"))
    )
    assert run_sup(repo, "queue", "add", task["id"], "--into", "main").returncode == 0
    main = git(repo, "rev-parse", "main")

    res = run_sup(repo, "queue", "run", "--into", "main", "--json", timeout=600)
    assert res.returncode == 4, (res.stdout, res.stderr)
    assert "environment failure of the queue" in res.stderr, res.stderr
    assert "exited 9" in res.stderr and "registry unreachable" in res.stderr, res.stderr
    assert "no candidate was blamed" in res.stderr and "Traceback" not in res.stderr
    # nobody blamed: still queued, its note still ready, nothing sent back, main unmoved
    listed = json.loads(run_sup(repo, "queue", "--json").stdout)
    assert listed[0]["queued"] == [task["id"]]
    assert _note(repo, task["candidate"] if "candidate" in task else git(
        repo, "rev-parse", f"refs/sup/{task['id']}/candidate"))["status"] == "ready"  # fmt: skip
    assert git(repo, "rev-parse", "main") == main
    types = [e["type"] for e in _events(repo)]
    assert "queue_environment_failed" in types and "queue_sent_back" not in types, types
    failed = next(e for e in _events(repo) if e["type"] == "queue_environment_failed")
    assert failed["data"]["exit_code"] == 9

    # the environment mended, the same candidate goes through
    (esetup.tmp / "registry-up").write_text("")
    res = run_sup(repo, "queue", "run", "--into", "main", "--json", timeout=600)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert json.loads(res.stdout)[0]["integrated"] == [task["id"]]


def test_a_candidates_setup_script_in_the_queue_cannot_touch_the_shared_cache(
    repo: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe runs `sh setup.sh`; a candidate rewrites setup.sh to attack the shared
    cache. The queue runs the candidate's script (its composition's setup), confined: the
    shared layer is unchanged, byte for byte."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)  # the default rules only
    (repo / "calc.py").write_text(CALC)
    (repo / "setup.sh").write_text("echo set up\n")
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(
        '[environment]\nsetup = [["sh", "setup.sh"]]\ncache = ["npm"]\n'
    )
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "green main with a setup script")
    init_repo(SupRepo.discover(repo), explicit=True)
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    shared = common / "sup" / "cache" / "env" / "npm"
    (shared / "_cacache").mkdir(parents=True)
    (shared / "_cacache" / "genuine.tgz").write_bytes(b"genuine package\n")
    before = sorted((p.name, p.read_bytes()) for p in shared.rglob("*") if p.is_file())

    hostile = f"""
n=0
for f in $(find {shared} -type f 2>/dev/null); do echo poison > "$f" 2>/dev/null && n=$((n+1)); done
mkdir {shared}/planted 2>/dev/null && n=$((n+1))
echo poison > {shared.parent}/planted 2>/dev/null && n=$((n+1))
own=0
for f in $(find "$npm_config_cache" -type f 2>/dev/null); do echo poison > "$f" && own=$((own+1)); done
echo "shared written: $n; own copy written: $own"
exit 1
"""
    task = make_task(
        Setup(repo, tmp, tmp, tmp),
        files=(("setup.sh", hostile), ("test_h.py", "def test_h():\n    pass\n")),
    )
    assert run_sup(repo, "queue", "add", task["id"], "--into", "main").returncode == 0
    res = run_sup(repo, "queue", "run", "--into", "main", timeout=600)
    assert res.returncode == 4, (res.stdout, res.stderr)
    # the candidate's script ran (on its own copy of the cache) and wrote nothing shared
    assert "shared written: 0; own copy written: 1" in res.stderr, res.stderr
    after = sorted((p.name, p.read_bytes()) for p in shared.rglob("*") if p.is_file())
    assert after == before
    assert not (shared / "planted").exists() and not (shared.parent / "planted").exists()
