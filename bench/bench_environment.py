"""Environment benchmark: task start with a big `[environment] include`.

    .venv/bin/python bench/bench_environment.py [--files 20000] [--mb 120] [--reps 3] [--keep]

Prints numbers and ratios; asserts nothing. Everything happens in a temporary directory with a
hermetic Git environment.

A small project whose ignored `node_modules` is generated here (`--files` files, `--mb` MB in
all, nested like a package tree) and named in `.gitsup/environment.toml`. Measured in the same
run, interleaved:

0. `git sup start` (console script) -> the worker's first instruction, nothing included (what
   gitsup's start costs on this machine without any include);
1. the same, the include given as an overlay (the sandbox's mount namespace; nothing copied);
2. the same with `sup.sandbox off`: the include copied (reflink where the file system can);
3. the plain alternative: `git worktree add` + `cp -a node_modules` into it.

Goal: 1 <= 0.5x of 3.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
BIN = Path(sys.executable).parent
GIT_SUP = str(BIN / "git-sup")


def hermetic_env(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text(
        "[init]\n\tdefaultBranch = main\n[user]\n\tname = Bench\n\temail = bench@example.invalid\n"
    )
    os.environ.update(
        {
            "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
            "GIT_TERMINAL_PROMPT": "0",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_project(root: Path, files: int, mb: int) -> Path:
    """A project whose ignored node_modules holds `files` files, `mb` MB in all, in packages
    of 50 files each (a few subdirectories deep)."""
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    for i in range(200):
        (repo / "src" / f"m{i}.js").write_text(f"module.exports = {i}\n")
    (repo / "package.json").write_text('{"name": "bench", "scripts": {"test": "true"}}\n')
    (repo / ".gitignore").write_text("node_modules/\n")
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "environment.toml").write_text(
        '[environment]\ninclude = ["node_modules"]\n'
    )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "bench project")
    nm = repo / "node_modules"
    per = max(1, mb * 1_000_000 // max(1, files))
    block = os.urandom(min(per, 1 << 20))
    for i in range(files):
        pkg = nm / f"pkg{i // 50}" / ("lib" if i % 3 else "dist") / f"d{i % 5}"
        if i % 50 == 0 or not pkg.is_dir():
            pkg.mkdir(parents=True, exist_ok=True)
        data = (block * (per // len(block) + 1))[: per + (i % 7) * 13]
        (pkg / f"f{i}.js").write_bytes(data)
    return repo


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def ours(repo: Path, stamp: Path) -> float:
    stamp.unlink(missing_ok=True)
    os.sync()
    t_wall = time.time()
    res = subprocess.run(
        [GIT_SUP, "start", "bench", "--worker", f"sh -c 'date +%s.%N > {stamp}'",
         "--review", "none", "--no-commit-required", "--quiet", "--json"],
        cwd=repo, capture_output=True, text=True,
    )  # fmt: skip
    if not stamp.exists():
        raise SystemExit(f"the worker never ran: {res.stdout}\n{res.stderr}")
    return float(stamp.read_text().strip()) - t_wall


def plain(repo: Path, root: Path, i: int) -> float:
    dest = root / "plain" / f"wt{i}"
    head = git(repo, "rev-parse", "HEAD")
    os.sync()
    t = time.perf_counter()
    subprocess.run(
        ["git", "worktree", "add", "-q", "--detach", str(dest), head],
        cwd=repo, check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(["cp", "-a", str(repo / "node_modules"), str(dest)], check=True)
    return time.perf_counter() - t


@contextlib.contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="gitsup-bench-env-"))
    try:
        yield root
    finally:
        if keep:
            print(f"kept {root}")
        else:
            subprocess.run(["git", "worktree", "prune"], cwd=root / "repo", capture_output=True)
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--mb", type=int, default=120)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    with workdir(args.keep) as root:
        hermetic_env(root / "home")
        t0 = time.perf_counter()
        repo = make_project(root, args.files, args.mb)
        size = tree_bytes(repo / "node_modules")
        print(
            f"node_modules: {args.files:,} files, {size / 1e6:.0f} MB "
            f"(generated in {time.perf_counter() - t0:.1f} s)"
        )
        subprocess.run([GIT_SUP, "init"], cwd=repo, check=True, capture_output=True)
        (root / "out").mkdir()
        stamp = root / "out" / "stamp"
        env_file = repo / ".gitsup" / "environment.toml"
        recipe = env_file.read_text()
        # the worker writes its stamp there (the sandbox's diagnostics knob; never the repo)
        os.environ["GITSUP_SANDBOX_EXTRA_WRITE"] = str(root / "out")
        none: list[float] = []
        overlay: list[float] = []
        copy: list[float] = []
        base: list[float] = []
        for i in range(args.reps):
            if i % 2 == 0:
                base.append(plain(repo, root, i))
            env_file.write_text("[environment]\ninclude = []\n")
            none.append(ours(repo, stamp))
            env_file.write_text(recipe)
            overlay.append(ours(repo, stamp))
            git(repo, "config", "sup.sandbox", "off")
            copy.append(ours(repo, stamp))
            git(repo, "config", "--unset-all", "sup.sandbox")
            if i % 2 == 1:
                base.append(plain(repo, root, i))
        med = statistics.median
        print(f"load average: {os.getloadavg()[0]:.1f}")
        print(f"0. git sup start, nothing included -> first instruction:   {med(none):.2f} s")
        print(f"1. git sup start, include as overlay -> first instruction: {med(overlay):.2f} s")
        print(f"2. git sup start, sandbox off (copy) -> first instruction:  {med(copy):.2f} s")
        print(f"3. git worktree add + cp -a node_modules:                   {med(base):.2f} s")
        print(f"ratio 1/3: {med(overlay) / med(base):.2f}x (goal <= 0.5x)")
        print(f"ratio 2/3: {med(copy) / med(base):.2f}x")


if __name__ == "__main__":
    main()
