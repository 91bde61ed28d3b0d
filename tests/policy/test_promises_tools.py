"""Tool-rule decisions a mutation run of gitsup/policy/tools.py showed untested: the Git
config of a linked worktree (through a `.git` path and through the common dir), other Git
internals, Glob patterns that climb out, and each decision's rule, reason and part."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsup.policy import Decision, decide_tool, load_policy


@pytest.fixture()
def repo(tmp_path: Path) -> dict[str, Path]:
    main = tmp_path / "main"
    common = main / ".git"
    (common / "hooks").mkdir(parents=True)
    (common / "worktrees" / "wt").mkdir(parents=True)
    (common / "config").write_text("[core]\n")
    wt = tmp_path / "wt"
    (wt / "src").mkdir(parents=True)
    (wt / ".git").write_text(f"gitdir: {common}/worktrees/wt\n")
    return {"wt": wt, "common": common, "main": main, "home": tmp_path / "home"}


def _decide(repo: dict[str, Path], tool: str, common: bool = True, **inp: object) -> Decision:
    return decide_tool(
        tool,
        inp,
        worktree=str(repo["wt"]),
        policy=load_policy(),
        git_common_dir=str(repo["common"]) if common else None,
        home=str(repo["home"]),
    )


@pytest.mark.parametrize("common", [True, False])
@pytest.mark.parametrize("name", ["config", "config.worktree"])
def test_a_linked_worktrees_git_config_is_denied(
    repo: dict[str, Path], common: bool, name: str
) -> None:
    target = repo["common"] / "worktrees" / "wt" / name
    d = _decide(repo, "Write", common, file_path=str(target))
    assert (d.verdict, d.rule, d.part) == ("deny", "D3.git-config", str(target))
    assert d.reason == f"Write of the repository's Git config ({target})"


@pytest.mark.parametrize("common", [True, False])
@pytest.mark.parametrize(
    "rel",
    [
        "worktrees/wt/HEAD",
        "worktrees/wt/sub/config",  # deeper than a worktree's own config
        "modules/x/config.worktree",  # not under worktrees/
        "info/exclude",
    ],
)
def test_other_git_internals_are_asked_not_denied(
    repo: dict[str, Path], common: bool, rel: str
) -> None:
    target = repo["common"] / rel
    d = _decide(repo, "Edit", common, file_path=str(target))
    assert (d.verdict, d.rule, d.part) == ("ask", "tool.git-dir", str(target))
    assert d.reason == f"Edit under the Git directory ({target})"


def test_hooks_and_the_main_config(repo: dict[str, Path]) -> None:
    hook = repo["common"] / "hooks" / "pre-push"
    d = _decide(repo, "Write", file_path=str(hook))
    assert (d.verdict, d.rule, d.part) == ("deny", "D3.hooks-dir", str(hook))
    assert d.reason == f"Write into a Git hooks directory ({hook})"
    cfg = repo["common"] / "config"
    assert _decide(repo, "Write", False, file_path=str(cfg)).rule == "D3.git-config"
    # the worktree's `.git` file itself
    d = _decide(repo, "Write", file_path=".git")
    assert (d.verdict, d.rule) == ("ask", "tool.git-dir")


def test_write_and_read_decisions_in_full(repo: dict[str, Path]) -> None:
    d = _decide(repo, "Write", file_path="src/a.py")
    assert d == Decision("allow", "tool.write", "Write inside the worktree", "src/a.py")
    d = _decide(repo, "Read", file_path="src/a.py")
    assert d == Decision("allow", "tool.read", "Read inside the worktree", "src/a.py")
    d = _decide(repo, "Grep")  # no path: the worktree
    assert (d.verdict, d.rule, d.part) == ("allow", "tool.read", str(repo["wt"]))
    out = repo["home"] / "x"
    d = _decide(repo, "Write", file_path="~/x")
    assert d == Decision("ask", "tool.outside-path", f"Write outside the worktree ({out})", "~/x")
    for tool, inp, reason in [
        ("Bash", {"command": 7}, "Bash request without a command string"),
        ("Write", {"file_path": ""}, "Write request without a path"),
        ("Read", {"file_path": 7}, "Read request with a non-string path"),
    ]:
        assert _decide(repo, tool, **inp) == Decision("ask", "tool.invalid-input", reason, "")


@pytest.mark.parametrize(
    ("pattern", "verdict"),
    [
        ("src/*.py", "allow"),
        ("../*", "ask"),  # climbs out before any glob
        ("src/*/../../../*", "ask"),  # climbs out after a glob
        ("src/[ab]/../../../x", "ask"),
        ("src/?/../../../x", "ask"),
        ("/etc/*.conf", "ask"),
        ("~/*.txt", "ask"),
        ("src/../src/*.py", "allow"),  # `..` that stays inside, before any glob
    ],
)
def test_glob_patterns_that_climb_out(repo: dict[str, Path], pattern: str, verdict: str) -> None:
    d = _decide(repo, "Glob", pattern=pattern)
    assert d.verdict == verdict, d
    if verdict == "ask":
        assert d == Decision(
            "ask", "tool.outside-path", f"Glob pattern reaches outside ({pattern})", pattern
        )


def test_glob_pattern_absolute_inside_the_worktree(repo: dict[str, Path]) -> None:
    pattern = str(repo["wt"] / "src" / "*.py")
    assert _decide(repo, "Glob", pattern=pattern).verdict == "allow"


def test_questions_web_mcp_and_unknown_tools(repo: dict[str, Path]) -> None:
    q = _decide(repo, "AskUserQuestion", questions=[{"question": "which?"}])
    assert (q.verdict, q.rule, q.part) == ("ask", "tool.ask_user", "[{'question': 'which?'}]")
    q = _decide(repo, "AskUserQuestion", question="x" * 600)
    assert q.part == "x" * 500
    assert _decide(repo, "AskUserQuestion").part == ""
    assert _decide(repo, "WebFetch", url="http://127.0.0.1/") == Decision(
        "ask", "tool.web", "WebFetch reaches the network", "WebFetch"
    )
    assert _decide(repo, "mcp__x__y") == Decision(
        "ask", "tool.mcp", "MCP tool mcp__x__y", "mcp__x__y"
    )
    assert _decide(repo, "Teleport") == Decision(
        "ask", "tool.unknown", "unknown tool Teleport", "Teleport"
    )


# --- printf in substitutions (gitsup/policy/facts.py, `ScanState`) -------------------------------------


@pytest.mark.parametrize(
    ("fmt", "args", "out"),
    [
        ("%s-%s;", ["a", "b", "c"], "a-b;c-;"),  # the format repeats while arguments remain
        ("100%% %s", ["x"], "100% x"),
        ("plain", ["a", "b"], "plain"),  # no directive: printed once, arguments ignored
        ("%s", [], ""),
        ("%d|", ["1", "2"], "1|2|"),
    ],
)
def test_printf_as_the_policy_reads_it(fmt: str, args: list[str], out: str) -> None:
    from gitsup.policy.facts import printf_format

    assert printf_format(fmt, args) == out


@pytest.mark.parametrize(
    "command",
    [
        '$(printf "%s %s" git push) origin',
        '$(printf "%s" git) push',
        'eval "$(printf "%s " git push)"',
        'x=$(printf "gi%s" t); $x push',
        "$(printf 'g%s%s' i t) push --force",
    ],
)
def test_a_push_spelled_with_printf_is_denied(command: str) -> None:
    from gitsup.policy import classify_command, load_policy

    d = classify_command(command, worktree="/home/dev/repo", policy=load_policy(), home="/home/dev")
    assert (d.verdict, d.rule) == ("deny", "D1.push"), d
