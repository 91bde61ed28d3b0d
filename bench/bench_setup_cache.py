"""The setup phase with and without the warm package cache: `npm ci` in two real tasks.

    .venv/bin/python bench/bench_setup_cache.py [--packages 40] [--latency-ms 0 50]

A stand-in npm registry on 127.0.0.1 serves N generated packages (tests/helpers/npmreg.py);
a repository's recipe says `setup = ["npm ci"]`, `setup_egress = ["127.0.0.1:PORT"]`,
`cache = ["npm"]`. For each registry latency (a wait per request, as a registry across a
network would take):
  cold   a task's setup phase with nothing warmed (every tarball fetched through the gate)
  warm   `git sup env warm`, then a second task's setup phase (its copy of the shared cache)
Reported: each setup phase's duration (the record's `setup.duration`: the commands, confined),
tarballs fetched, and the warm/cold ratio. Goal: warm <= 0.3x cold.
Everything happens in a temporary directory; the setup runs in the task sandbox.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench_queue  # noqa: E402 - beside this file: its Git helpers
from bench_queue import git  # noqa: E402

from tests.helpers.npmreg import Registry  # noqa: E402 - after the path

GIT_SUP = str(Path(sys.executable).parent / "git-sup")


def hermetic(tmp: Path) -> None:
    """bench_queue's hermetic Git environment, and agents looked up only where named."""
    bench_queue.hermetic(tmp)
    os.environ["GITSUP_OWN_TOOLS"] = "0"


def sup(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GIT_SUP, *args], cwd=cwd, capture_output=True, text=True, timeout=900, check=False
    )


def task(repo: Path, spec: Path) -> dict[str, object]:
    res = sup(repo, "start", "--spec", str(spec), "--json", "-q")
    rec: dict[str, object] = json.loads(res.stdout)
    setup = rec.get("setup")
    if not isinstance(setup, dict) or not setup.get("passed"):
        raise SystemExit(f"setup did not pass: {res.stderr}\n{setup}")
    return setup


def one(tmp: Path, packages: int, latency: float) -> tuple[float, float, int, int]:
    reg = Registry(delay=latency)
    names = [f"pkg{i:03d}" for i in range(packages)]
    for n in names:
        reg.add(n, body=f"module.exports = {json.dumps(n)};\n" + "// padding\n" * 200)
    reg.start()
    try:
        repo = tmp / f"app-{int(latency * 1000)}"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        reg.project(repo, names)
        (repo / ".gitignore").write_text("node_modules/\n")
        (repo / ".gitsup").mkdir()
        (repo / ".gitsup" / "environment.toml").write_text(
            '[environment]\nsetup = ["npm ci"]\n'
            f'setup_egress = ["127.0.0.1:{reg.port}"]\ncache = ["npm"]\n'
        )
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "app")
        worker = tmp / "worker.py"
        worker.write_text(
            "import pathlib, subprocess\npathlib.Path('x.txt').write_text('x')\n"
            "subprocess.run(['git', 'add', 'x.txt'], check=True)\n"
            "subprocess.run(['git', 'commit', '-q', '-m', 'x'], check=True)\n"
        )
        spec = tmp / "task.toml"
        spec.write_text(
            'goal = "bench"\n[worker]\nkind = "process"\n'
            f"argv = {json.dumps([sys.executable, str(worker)])}\n"
            '[review]\nkind = "none"\n'
        )
        cold = task(repo, spec)
        cold_fetched = reg.tarball_requests()
        res = sup(repo, "env", "warm", "--json")
        if res.returncode != 0:
            raise SystemExit(f"env warm failed: {res.stderr}")
        before = reg.tarball_requests()
        warm = task(repo, spec)
        return (
            float(cold["duration"]),  # type: ignore[arg-type]
            float(warm["duration"]),  # type: ignore[arg-type]
            cold_fetched,
            reg.tarball_requests() - before,
        )
    finally:
        reg.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", type=int, default=40)
    ap.add_argument("--latency-ms", type=float, nargs="*", default=[0.0, 50.0])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-env-") as d:
        tmp = Path(d)
        hermetic(tmp)
        print(f"{a.packages} packages; setup phase (npm ci, confined) per task")
        for ms in a.latency_ms:
            cold, warm, fetched_cold, fetched_warm = one(tmp, a.packages, ms / 1000)
            ratio = warm / cold if cold else float("nan")
            print(
                f"latency {ms:>4.0f} ms/request: cold {cold:6.2f}s ({fetched_cold} tarballs), "
                f"warm {warm:6.2f}s ({fetched_warm} tarballs), ratio {ratio:.2f}"
                f" (goal <= 0.3: {'met' if ratio <= 0.3 else 'not met'})"
            )


if __name__ == "__main__":
    main()
