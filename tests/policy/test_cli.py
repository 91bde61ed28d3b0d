"""`git sup policy check|show` run as the real console script."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

GIT_SUP = str(Path(sys.executable).parent / "git-sup")


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    home = tmp_path / "home"
    home.mkdir()
    e.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    return e


@pytest.fixture()
def repo(tmp_path: Path, env: dict[str, str]) -> Path:
    r = tmp_path / "repo"
    (r / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(r)], check=True, env=env)
    return r


def _run(
    args: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GIT_SUP, "policy", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_text(repo: Path, env: dict[str, str]) -> None:
    r = _run(["check", "--", "git", "push", "origin", "main"], repo, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("deny  D1.push")
    assert "reason:" in r.stdout and "part:" in r.stdout


def test_check_json_exact_keys(repo: Path, env: dict[str, str]) -> None:
    r = _run(["check", "--json", "--", "ls", "-la"], repo, env)
    assert r.returncode == 0
    d = json.loads(r.stdout)
    assert list(d) == ["verdict", "rule", "reason", "part", "sandboxed"]
    assert d["verdict"] == "allow"
    assert d["sandboxed"] is False


def test_check_finds_the_worktree_top_from_a_subdir(repo: Path, env: dict[str, str]) -> None:
    r = _run(["show", "--json"], repo / "src", env)
    assert json.loads(r.stdout)["worktree"] == str(repo)
    r = _run(["check", "--json", "--", "cat", "src/a.py"], repo / "src", env)
    assert json.loads(r.stdout)["verdict"] == "allow"
    r = _run(
        ["check", "--json", "--cwd", str(repo / "src"), "--", "cat", "../README.md"], repo, env
    )
    assert json.loads(r.stdout)["verdict"] == "ask"


def test_batch_mode_keeps_order(repo: Path, env: dict[str, str]) -> None:
    lines = [
        json.dumps("git status"),
        json.dumps({"cmd": "git commit -m \"$(cat <<'EOF'\nFix\nEOF\n)\""}),
        "",
        json.dumps("git push"),
        json.dumps({"cmd": "curl x | sh"}),
    ]
    r = _run(["check", "--json", "-"], repo, env, stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["verdict"] for o in out] == ["allow", "allow", "deny", "deny"]
    assert [o["rule"] for o in out][2:] == ["D1.push", "D4.download-exec"]


@pytest.mark.parametrize("bad", ["not json", "42", '{"command": "x"}'])
def test_batch_bad_line_is_exit_2_naming_the_line(
    repo: Path, env: dict[str, str], bad: str
) -> None:
    r = _run(["check", "--json", "-"], repo, env, stdin=f'"ls"\n{bad}\n')
    assert r.returncode == 2
    assert "line 2" in r.stderr


def test_sup_protected_git_config(repo: Path, env: dict[str, str]) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "config", "--add", "sup.protected", "prod"], check=True, env=env
    )
    r = _run(["check", "--json", "--", "git", "branch", "-D", "prod"], repo, env)
    assert json.loads(r.stdout)["rule"] == "D2.protected-ref"
    r = _run(["show", "--json"], repo, env)
    assert "prod" in json.loads(r.stdout)["protected"]


def test_malformed_repo_policy_is_exit_2(repo: Path, env: dict[str, str]) -> None:
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "policy.toml").write_text("protected = 'main'\n")
    r = _run(["check", "--", "ls"], repo, env)
    assert r.returncode == 2
    assert "policy.toml" in r.stderr and "'protected'" in r.stderr


def test_show(repo: Path, env: dict[str, str]) -> None:
    r = _run(["show"], repo, env)
    assert r.returncode == 0
    assert "protected:  main, master, trunk, develop, integration" in r.stdout
    r = _run(["show", "--json"], repo, env)
    data = json.loads(r.stdout)
    assert data["worktree"] == str(repo)


def test_no_command_is_exit_2(repo: Path, env: dict[str, str]) -> None:
    assert _run(["check"], repo, env).returncode == 2


def test_check_sandboxed_flag(repo: Path, env: dict[str, str]) -> None:
    r = _run(["check", "--json", "--", "make", "build"], repo, env)
    d = json.loads(r.stdout)
    assert (d["verdict"], d["sandboxed"]) == ("ask", False)
    r = _run(["check", "--json", "--sandboxed", "--", "make", "build"], repo, env)
    d = json.loads(r.stdout)
    assert (d["verdict"], d["rule"], d["sandboxed"]) == ("allow", "A.sandboxed", True)
    r = _run(["check", "--sandboxed", "--", "git", "push"], repo, env)
    assert r.stdout.startswith("deny  D1.push  (sandboxed)")


def test_batch_sandboxed_flag_and_per_line_override(repo: Path, env: dict[str, str]) -> None:
    lines = [
        json.dumps("npm ci"),
        json.dumps({"cmd": "npm ci", "sandboxed": False}),
        json.dumps("git push --mirr"),
    ]
    r = _run(["check", "--json", "--sandboxed", "-"], repo, env, stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(o["verdict"], o["sandboxed"]) for o in out] == [
        ("allow", True),
        ("ask", False),
        ("deny", True),
    ]
    r = _run(["check", "--json", "-"], repo, env, stdin='{"cmd": "ls", "sandboxed": "yes"}\n')
    assert r.returncode == 2
    assert "line 1" in r.stderr


def test_check_quotes_each_word_it_is_given(repo: Path, env: dict[str, str]) -> None:
    """Several arguments are one command's words as the shell passed them: each is quoted back,
    so inline code with spaces and quotes stays one word (not "unparseable")."""

    def verdict(*args: str) -> tuple[str, str, str]:
        r = _run(["check", "--json", *args], repo, env)
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        return d["verdict"], d["rule"], d["part"]

    code = "console.log('a b')"
    assert verdict("--", "node", "-e", code)[:2] == ("ask", "ask.interpreter")
    assert verdict("--sandboxed", "--", "node", "-e", code) == (
        "allow",
        "A.sandboxed",
        "node -e " + shlex.quote(code),
    )
    # a word that looks like shell syntax is an argument, not an operator
    assert verdict("--", "echo", "a;", "rm", "-rf", "/")[:2] == ("allow", "A.read-only")
    assert verdict("--", "git", "commit", "-m", "fix the parser")[:2] == (
        "allow",
        "A.git-change",
    )
    # one argument is the command string as written for a shell
    assert verdict("--", "ls && git push origin main")[:2] == ("deny", "D1.push")
    assert verdict("--sandboxed", "--", "echo $PATH")[:2] == ("allow", "A.sandboxed")
