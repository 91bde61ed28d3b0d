"""Installing the gate as Git hooks: client `pre-push` (by `git sup init`) and
server `pre-receive` (by `git sup gate install`, gitsup/integration/setup.py `install_gate`).

The installed hook is a tiny POSIX-shell launcher: it runs a hook that was
there before (kept as `<hook>.local`, same arguments, same stdin) and then the
evaluator with the absolute interpreter that installed it (`python -I -S`,
with the gitsup package directory on sys.path: no site-packages start-up), falling back to `git-sup` on PATH. It
fails closed when neither can be found. Installation honours `core.hooksPath`,
is idempotent, and never chains twice.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.host.proc import package_root

MARKER = "# gitsup-boundary-hook v1"
LOCAL_SUFFIX = ".local"

_LAUNCHER = """#!/bin/sh
{marker} ({hook}): installed by `git sup {installer}`. See docs/boundary.md.
# A {hook} hook that was here before lives on as {hook}{local}; it runs first, with the same input.
GITSUP_PYTHON={python}
GITSUP_PATH={path}
ENTRY='import sys; sys.path.insert(0, sys.argv[1]); from gitsup.boundary.hook import main; sys.exit(main(sys.argv[2:]))'
input=$(cat)
feed() {{ if [ -n "$input" ]; then printf '%s\\n' "$input"; fi; }}
case "$0" in */*) here=${{0%/*}} ;; *) here=. ;; esac
if [ -x "$here/{hook}{local}" ]; then
\tfeed | "$here/{hook}{local}" "$@" || exit $?
fi
if [ -x "$GITSUP_PYTHON" ] && [ -f "$GITSUP_PATH/gitsup/boundary/hook.py" ]; then
\t# -I -S: no site-packages, no .pth files; the hook needs only the standard library.
\tfeed | "$GITSUP_PYTHON" -I -S -c "$ENTRY" "$GITSUP_PATH" {hook} "$@"
\texit $?
fi
if command -v git-sup >/dev/null 2>&1; then
\tfeed | git-sup hook {hook} "$@"
\texit $?
fi
echo "gitsup: rejected push: the gitsup gate cannot run ($GITSUP_PYTHON is gone and git-sup is not on PATH); reinstall gitsup, or remove $0" >&2
exit 1
"""


def launcher(hook: str, installer: str, python: str | None = None) -> str:
    # Resolved paths: the same interpreter and package reached by another spelling (a venv's
    # python symlink, a symlinked checkout) write the same launcher, so `init` stays
    # idempotent. The hook runs with -I -S (standard library only), so the venv adds nothing.
    return _LAUNCHER.format(
        marker=MARKER,
        hook=hook,
        installer=installer,
        local=LOCAL_SUFFIX,
        python=shlex.quote(os.path.realpath(python or sys.executable)),
        path=shlex.quote(package_root()),
    )


def hooks_dir(repo: GitRepo) -> Path:
    """Where Git looks for this repository's hooks (core.hooksPath or $GIT_COMMON_DIR/hooks)."""
    configured = repo.config_get("core.hooksPath")
    if configured:
        path = Path(os.path.expanduser(configured))
        if not path.is_absolute():
            # Git runs hooks from the top of the worktree (the git dir when bare).
            path = (repo.common_dir if repo.is_bare else repo.main_workdir) / path
        return path
    return repo.common_dir / "hooks"


def is_ours(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return MARKER.encode() in fh.read(4096)
    except OSError:
        return False


def install_hook(directory: Path, hook: str, installer: str) -> list[str]:
    """Install the launcher as `directory/hook`; returns the paths written (empty: unchanged)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / hook
    body = launcher(hook, installer)
    written: list[str] = []
    if os.path.lexists(target) and not is_ours(target):
        chained = directory / f"{hook}{LOCAL_SUFFIX}"
        if os.path.lexists(chained):
            raise GitsupError(
                f"cannot install the gitsup {hook} hook: {target} exists and so does {chained}",
                hint=f"merge the two into {chained} (it runs before the gate), then run this again",
            )
        os.replace(target, chained)
        written.append(str(chained))
    elif target.is_file() and target.read_text(errors="replace") == body:
        return []
    tmp = directory / f".{hook}.gitsup-tmp"
    tmp.write_text(body)
    tmp.chmod(0o755)
    os.replace(tmp, target)
    written.insert(0, str(target))
    return written


def install_pre_push(repo: GitRepo) -> list[str]:
    """The client-side gate for `git sup init`. Returns the hook paths written."""
    return install_hook(hooks_dir(repo), "pre-push", "init")
