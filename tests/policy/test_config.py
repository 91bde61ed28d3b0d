"""Policy files: the packaged default, repository extensions, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsup.errors import GitsupError
from gitsup.policy import Policy, classify_command, load_policy

HOME = "/home/dev"


def _repo(tmp_path: Path, text: str) -> Path:
    (tmp_path / ".gitsup").mkdir()
    (tmp_path / ".gitsup" / "policy.toml").write_text(text)
    return tmp_path


def _v(policy: Policy, cmd: str, w: Path) -> tuple[str, str]:
    d = classify_command(cmd, worktree=str(w), policy=policy, home=HOME)
    return d.verdict, d.rule


def test_default_policy_loads() -> None:
    p = load_policy()
    assert p.protected == ("main", "master", "trunk", "develop", "integration")
    assert "CI" in p.inert_vars
    assert p.is_protected("refs/heads/main") and not p.is_protected("sup/task-123")


def test_repo_extends_protected_runners_and_tightens(tmp_path: Path) -> None:
    w = _repo(
        tmp_path,
        """
protected = ["release/*", "staging"]
ask = ["cargo build"]
deny = ["terraform apply"]
[[allow.runner]]
argv = ["tox", "-e", "py"]
[[allow.runner]]
argv = ["nox", "-s", "tests"]
""",
    )
    p = load_policy(w)
    assert _v(p, "git branch -D release/1.0", w) == ("deny", "D2.protected-ref")
    assert _v(p, "git fetch origin x:staging", w) == ("deny", "D2.protected-ref")
    assert _v(p, "git branch -D main", w) == ("deny", "D2.protected-ref")
    assert _v(p, "tox -e py", w) == ("allow", "A.local-dev")
    assert _v(p, "nox -s tests", w) == ("allow", "A.local-dev")
    assert _v(p, "tox -e lint", w)[0] == "ask"
    assert _v(p, "cargo build", w) == ("ask", "ask.repo")
    assert _v(p, "terraform apply -auto-approve", w) == ("deny", "deny.repo")
    assert _v(load_policy(), "tox -e py", w)[0] == "ask"


def test_repo_cannot_turn_deny_into_allow(tmp_path: Path) -> None:
    w = _repo(
        tmp_path,
        """
[[allow.runner]]
argv = ["git", "push"]
[[allow.runner]]
argv = ["npm", "publish"]
""",
    )
    p = load_policy(w)
    assert _v(p, "git push", w) == ("deny", "D1.push")
    assert _v(p, "npm publish", w) == ("deny", "D1.registry")


def test_extra_protected_from_git_config(tmp_path: Path) -> None:
    p = load_policy(tmp_path, extra_protected=["prod"])
    assert _v(p, "git update-ref refs/heads/prod HEAD", tmp_path) == ("deny", "D2.protected-ref")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("protected = 'main'", "protected"),
        ("protectd = ['x']", "protectd"),
        ("[[allow.runner]]\nargv = []", "allow.runner.0.argv"),
        ("[[allow.runner]]\nargv = ['tox']\nforbid = 3", "allow.runner.0.forbid"),
        ("version = 2", "version"),
        ("ask = ['']", "ask"),
        ("protected = ['-x']", "protected"),
        ("protected = [", "(syntax)"),
    ],
)
def test_malformed_policy_is_a_clear_error(tmp_path: Path, text: str, key: str) -> None:
    w = _repo(tmp_path, text)
    with pytest.raises(GitsupError) as info:
        load_policy(w)
    msg = str(info.value)
    assert str(w / ".gitsup" / "policy.toml") in msg
    assert repr(key) in msg
