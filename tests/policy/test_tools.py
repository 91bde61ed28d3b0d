"""Tool rules (docs/policy.md, "Tools other than Bash") against real directories with real symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitsup.policy import Decision, decide_tool, load_policy, unattended_denial


@pytest.fixture()
def repo(tmp_path: Path) -> dict[str, Path]:
    main = tmp_path / "main"
    common = main / ".git"
    (common / "hooks").mkdir(parents=True)
    (common / "config").write_text("[core]\n")
    (common / "refs" / "heads").mkdir(parents=True)
    wt = tmp_path / "wt"
    (wt / "src").mkdir(parents=True)
    (wt / ".git").write_text(f"gitdir: {common}/worktrees/wt\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, wt / "link-out")
    os.symlink(common / "hooks", wt / "hooks-link")
    os.symlink(wt / "src", wt / "link-in")
    return {"wt": wt, "common": common, "outside": outside, "home": tmp_path}


def _decide(repo: dict[str, Path], tool: str, **inp: object) -> Decision:
    return decide_tool(
        tool,
        inp,
        worktree=str(repo["wt"]),
        policy=load_policy(),
        git_common_dir=str(repo["common"]),
        home=str(repo["home"]),
    )


@pytest.mark.parametrize("tool", ["Write", "Edit", "MultiEdit"])
def test_write_inside_is_allowed(repo: dict[str, Path], tool: str) -> None:
    d = _decide(repo, tool, file_path=str(repo["wt"] / "src" / "a.py"))
    assert (d.verdict, d.rule) == ("allow", "tool.write")


def test_relative_and_inner_symlink_write(repo: dict[str, Path]) -> None:
    assert _decide(repo, "Write", file_path="src/new.py").verdict == "allow"
    assert _decide(repo, "Write", file_path=str(repo["wt"] / "link-in" / "x.py")).verdict == "allow"


def test_symlink_escaping_the_worktree_is_resolved(repo: dict[str, Path]) -> None:
    d = _decide(repo, "Write", file_path=str(repo["wt"] / "link-out" / "evil.txt"))
    assert (d.verdict, d.rule) == ("ask", "tool.outside-path")


def test_dotdot_and_home_are_outside(repo: dict[str, Path]) -> None:
    assert _decide(repo, "Edit", file_path=str(repo["wt"] / ".." / "x")).verdict == "ask"
    assert _decide(repo, "Write", file_path="~/.bashrc").rule == "tool.outside-path"


def test_hooks_through_symlink_is_denied(repo: dict[str, Path]) -> None:
    d = _decide(repo, "Write", file_path=str(repo["wt"] / "hooks-link" / "pre-commit"))
    assert (d.verdict, d.rule) == ("deny", "D3.hooks-dir")


def test_hooks_and_config_of_common_dir(repo: dict[str, Path]) -> None:
    d = _decide(repo, "Write", file_path=str(repo["common"] / "hooks" / "pre-push"))
    assert (d.verdict, d.rule) == ("deny", "D3.hooks-dir")
    d = _decide(repo, "Edit", file_path=str(repo["common"] / "config"))
    assert (d.verdict, d.rule) == ("deny", "D3.git-config")
    d = _decide(repo, "Write", file_path=str(repo["common"] / "refs" / "heads" / "main"))
    assert (d.verdict, d.rule) == ("ask", "tool.git-dir")


def test_gitfile_is_ask(repo: dict[str, Path]) -> None:
    d = _decide(repo, "Write", file_path=str(repo["wt"] / ".git"))
    assert (d.verdict, d.rule) == ("ask", "tool.git-dir")


def test_notebook_edit_uses_notebook_path(repo: dict[str, Path]) -> None:
    d = _decide(repo, "NotebookEdit", notebook_path=str(repo["wt"] / "n.ipynb"))
    assert d.verdict == "allow"
    d = _decide(repo, "NotebookEdit", notebook_path=str(repo["outside"] / "n.ipynb"))
    assert d.verdict == "ask"


@pytest.mark.parametrize(
    ("tool", "key"), [("Read", "file_path"), ("Grep", "path"), ("Glob", "path"), ("LS", "path")]
)
def test_read_tools(repo: dict[str, Path], tool: str, key: str) -> None:
    assert _decide(repo, tool, **{key: str(repo["wt"] / "src"), "pattern": "x"}).verdict == "allow"
    d = _decide(repo, tool, **{key: str(repo["outside"]), "pattern": "x"})
    assert (d.verdict, d.rule) == ("ask", "tool.outside-path")
    d = _decide(repo, tool, **{key: str(repo["wt"] / "link-out"), "pattern": "x"})
    assert d.verdict == "ask"


def test_read_tools_default_to_the_worktree(repo: dict[str, Path]) -> None:
    assert _decide(repo, "Grep", pattern="TODO").verdict == "allow"
    assert _decide(repo, "Glob", pattern="**/*.py").verdict == "allow"
    assert _decide(repo, "Glob", pattern="../../**/*").verdict == "ask"


def test_bash_goes_through_the_classifier(repo: dict[str, Path]) -> None:
    assert _decide(repo, "Bash", command="git push").rule == "D1.push"
    assert _decide(repo, "Bash", command="ls src").verdict == "allow"
    assert _decide(repo, "Bash").verdict == "ask"


def test_other_tools(repo: dict[str, Path]) -> None:
    d = _decide(repo, "AskUserQuestion", questions=[{"question": "Which?"}])
    assert (d.verdict, d.rule) == ("ask", "tool.ask_user")
    assert _decide(repo, "WebFetch", url="https://x").rule == "tool.web"
    assert _decide(repo, "WebSearch", query="x").rule == "tool.web"
    assert _decide(repo, "mcp__srv__do", x=1).rule == "tool.mcp"
    assert _decide(repo, "SomethingNew").rule == "tool.unknown"


def test_unattended_denial_names_rule_and_alternative() -> None:
    d = Decision("deny", "D1.push", "`git push` publishes to a remote", "git push")
    msg = unattended_denial(d)
    assert "D1.push" in msg
    assert "publishing is done by the supervisor after verification" in msg
    assert "commit locally" in msg
    ask = Decision("ask", "ask.interpreter", "python -c", "python -c 1")
    assert "ask.interpreter" in unattended_denial(ask)
    assert "Instead:" in unattended_denial(Decision("ask", "ask.weird", "x", "x"))


def test_decision_as_dict_has_exactly_five_keys() -> None:
    d = Decision("allow", "A.read-only", "r", "ls")
    assert d.as_dict() == {
        "verdict": "allow",
        "rule": "A.read-only",
        "reason": "r",
        "part": "ls",
        "sandboxed": False,
    }
