"""The built distributions hold what an installed gitsup needs and nothing of a developer's
checkout: the sdist is built from the checkout's files (plus the junk a working checkout has:
caches, byte code, a virtualenv, the agent CLIs, a test's key), the wheel from that sdist."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KEY_MARK = b"gitsup-test-key-7f3a9c"
PRIVATE_KEY = b"-----BEGIN OPENSSH PRIVATE KEY-----\n" + KEY_MARK + b"\n"
# what a developer's checkout holds besides its tracked files
JUNK = {
    ".venv/lib/python3.11/site-packages/evil.py": b"x = 1\n",
    ".tools/claude/node_modules/.bin/claude": b"#!/bin/sh\n",
    ".pytest_cache/v/cache/lastfailed": b"{}\n",
    ".mypy_cache/3.11/gitsup/ids.data.json": b"{}\n",
    ".ruff_cache/CACHEDIR.TAG": b"x\n",
    "gitsup/__pycache__/" + "ids.cpython-311.pyc": b"\0\0",  # (a clean clone has none)
    "gitsup/data/__pycache__/" + "stale.cpython-311.pyc": b"\0\0",  # (no such file here)
    "gitsup/data/.pytest_cache/x": b"x\n",
    "tests/boundary/keys/id_ed25519": PRIVATE_KEY,
    "build/lib/gitsup/stale.py": b"x = 1\n",
}
FORBIDDEN_PARTS = {
    "__pycache__",
    ".venv",
    ".tools",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "tests",
    "bench",
    "build",
}


def _build(kind: str, src: Path, out: Path) -> Path:
    """`build_sdist` or `build_wheel` of setuptools' PEP 517 backend, in `src`."""
    code = (
        f"import sys\nfrom setuptools import build_meta as b\nprint(b.build_{kind}(sys.argv[1]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return out / res.stdout.strip().splitlines()[-1]


def _bad(names: list[str], blobs: dict[str, bytes]) -> list[str]:
    bad = [n for n in names if FORBIDDEN_PARTS & set(Path(n).parts) or n.endswith(".pyc")]
    bad += [n for n, data in blobs.items() if KEY_MARK in data]
    return bad


def test_sdist_and_wheel_hold_what_they_must_and_nothing_else(tmp_path: Path) -> None:
    try:
        import setuptools
        import wheel  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"{exc}: install the test extra (pip install -e '.[test]')", pytrace=False)
    major = int(setuptools.__version__.split(".")[0])
    assert major >= 68, f"setuptools {setuptools.__version__}: pip install -e '.[test]'"
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    src = tmp_path / "src"
    for rel in (t.decode() for t in tracked if t):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    for rel, data in JUNK.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    out = tmp_path / "dist"
    out.mkdir()

    sdist = _build("sdist", src, out)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        top = f"{sdist.name.removesuffix('.tar.gz')}/"
        names = [m.name.removeprefix(top) for m in members]
        blobs = {}
        for m in members:
            fh = tar.extractfile(m)
            assert fh is not None
            blobs[m.name.removeprefix(top)] = fh.read()
        tar.extractall(tmp_path / "unpacked", filter="data")
    for must in (
        "pyproject.toml",
        "README.md",
        "man/git-sup.1",
        "policies/default.toml",
        "policies/rules.toml",
        "gitsup/hookrelay.py",
        "gitsup/workers/claude/relay.py",
        "gitsup/data/demo_scenario.json",
        "gitsup/data/demo_worker.py",
        "gitsup/py.typed",
    ):
        assert must in names, must
    assert not _bad(names, blobs), _bad(names, blobs)

    # the wheel, built from the sdist alone (as an installer given the sdist does) and from
    # the checkout itself (as `pip install .` does)
    _check_wheel(_build("wheel", tmp_path / "unpacked" / top.rstrip("/"), out), tracked)
    direct = tmp_path / "direct"
    direct.mkdir()
    # (an in-place build ships whatever a stale build/lib holds: setuptools' way, which is
    # why a release is built from the sdist; the sdist above left it out)
    shutil.rmtree(src / "build")
    _check_wheel(_build("wheel", src, direct), tracked)


def _check_wheel(whl: Path, tracked: list[bytes]) -> None:
    """Every module of the checkout, the man page, the policies, the hook relay (what
    `git sup hooks install` registers) and the demo's data; nothing else."""
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        blobs = {n: z.read(n) for n in names}
    modules = {n for n in names if n.endswith(".py")}
    files = [t.decode() for t in tracked if t]
    expected = {f for f in files if f.startswith("gitsup/") and f.endswith(".py")}
    expected |= {f"gitsup/{f}" for f in files if f.startswith("policies/") and f.endswith(".py")}
    assert modules == expected, modules ^ expected
    data = f"{whl.name.split('-')[0]}-{whl.name.split('-')[1]}.data/data/"
    for must in (
        data + "share/man/man1/git-sup.1",
        "gitsup/policies/default.toml",
        "gitsup/policies/rules.toml",
        "gitsup/hookrelay.py",
        "gitsup/data/demo_scenario.json",
        "gitsup/py.typed",
    ):
        assert must in names, must
    # every tracked data file (the demo's, the page's templates and script)
    missing = [f for f in files if f.startswith("gitsup/data/") and f not in names]
    assert not missing, missing
    assert blobs[data + "share/man/man1/git-sup.1"] == (REPO / "man/git-sup.1").read_bytes()
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "git-sup = gitsup.cli.main:run" in blobs[entry].decode()
    assert not _bad(names, blobs), _bad(names, blobs)
