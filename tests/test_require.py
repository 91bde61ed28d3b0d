"""A guarantee test never skips silently under CI: a missing host feature skips it on a
developer's machine and fails it where CI is set (tests/helpers/require.py), and no test
skips for a missing feature any other way."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import require

TESTS = Path(__file__).resolve().parent
# skips that are not about a guarantee: a documentation tool, an optional speed-up, a
# generated case that does not apply
ALLOWED_SKIPS = {
    ("tests/supervision/test_failures.py", "man"),
    ("tests/cli/test_readme_help.py", "man(1)"),
    ("tests/test_jsonio.py", "orjson"),
    ("tests/store/test_eventtypes.py", "no candidate fits"),
}


@pytest.fixture(autouse=True)
def own_counts() -> Iterator[None]:
    """What these tests ask for stays out of the session's summary."""
    saved = (require._needed.copy(), require._lacking.copy(), dict(require._found))
    yield
    require._needed.clear()
    require._needed.update(saved[0])
    require._lacking.clear()
    require._lacking.update(saved[1])
    require._found.clear()
    require._found.update(saved[2])


@pytest.fixture
def no_cgroup(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GITSUP_CGROUP_ROOT", "none")
    require.missing.cache_clear()
    yield
    require.missing.cache_clear()


def outcome(fn: Callable[[], object]) -> BaseException:
    """What `fn` raised (a skip and a failure are both exceptions: caught here, so that a
    skip where a failure is due cannot pass as a skipped test)."""
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("it went on")


def test_a_missing_feature_skips_here(no_cgroup: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    exc = outcome(lambda: require.require("cgroup", "a test"))
    assert isinstance(exc, pytest.skip.Exception), exc
    assert "cgroup: no writable cgroup v2" in str(exc)


def test_a_missing_feature_fails_under_ci(no_cgroup: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    for fn in (
        lambda: require.require("cgroup", "a test"),
        lambda: require.unavailable("claude-agent-acp", "not found"),
    ):
        exc = outcome(fn)
        assert isinstance(exc, pytest.fail.Exception), exc
        assert "CI is set" in str(exc)


def test_a_present_feature_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    require.require("root" if require.missing("root") is None else "tmux")


def test_an_unknown_feature_is_an_error() -> None:
    with pytest.raises(KeyError):
        require.requires("landlok")


def test_no_test_skips_for_a_feature_outside_the_helper() -> None:
    found = set()
    pattern = re.compile(r"pytest\.(?:skip\(|mark\.skipif\()\s*([^\n]*)")
    for path in TESTS.rglob("*.py"):
        rel = str(path.relative_to(TESTS.parent))
        if rel in ("tests/helpers/require.py", "tests/test_require.py"):
            continue
        for m in pattern.finditer(path.read_text()):
            if not any(rel == f and word in m.group(0) for f, word in ALLOWED_SKIPS):
                found.add(f"{rel}: {m.group(0).strip()}")
    assert not found, "skip through tests/helpers/require.py instead:\n" + "\n".join(found)
