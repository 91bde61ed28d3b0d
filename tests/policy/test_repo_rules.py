"""Rules a repository writes (`[[rules]]` in `.gitsup/policy.toml`): a decision for a pattern of
words, with examples checked at load; a rule can only make a verdict stricter or allow what the
built-in rules ask about, never weaken a deny. `git sup policy explain` says which rules looked
at a command. The CLI runs as the real console script in real repositories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitsup.errors import GitsupError
from gitsup.policy import Policy, classify_command, load_policy
from gitsup.policy.explain import explain_command
from tests.conftest import git, run_sup
from tests.helpers.sup import task_ids

HOME = "/home/dev"

RULES = """
[[rules]]
id = "no-npm-release"
decision = "deny"
pattern = ["npm", ["publish", "unpublish", "dist-tag"]]
message = "releases go through the release pipeline"
match = ["npm publish", "npm dist-tag add x@1 latest", "sudo npm unpublish x"]
not_match = ["npm test", "npm run publish"]

[[rules]]
id = "slow-build"
decision = "ask"
pattern = ["cargo", ["build", "test"], "--release"]
match = ["cargo test --release"]
not_match = ["cargo test"]

[[rules]]
id = "docs"
decision = "allow"
pattern = ["make", ["docs", "html"]]
message = "building the docs writes only under build/"
match = ["make docs", "make html -j2"]
not_match = ["make deploy", "make docs > /tmp/out"]

[[rules]]
id = "no-make-html-in-ci"
decision = "ask"
pattern = ["make", "html", "CI=1"]
match = ["make html CI=1"]
"""


def _repo(tmp_path: Path, text: str) -> Path:
    (tmp_path / ".gitsup").mkdir(exist_ok=True)
    (tmp_path / ".gitsup" / "policy.toml").write_text(text)
    return tmp_path


def _v(policy: Policy, cmd: str, w: Path, *, sandboxed: bool = False) -> tuple[str, str]:
    d = classify_command(cmd, worktree=str(w), policy=policy, home=HOME, sandboxed=sandboxed)
    return d.verdict, d.rule


@pytest.mark.parametrize("sandboxed", [False, True])
def test_rules_decide_their_commands(tmp_path: Path, sandboxed: bool) -> None:
    w = _repo(tmp_path, RULES)
    p = load_policy(w)
    # deny: stricter than the built-in ask, also through a wrapper and a shell payload
    for cmd in ("npm dist-tag add x@1 latest", "sudo npm unpublish x", "bash -c 'npm publish'"):
        assert _v(p, cmd, w, sandboxed=sandboxed) == ("deny", "deny.repo"), cmd
    d = classify_command("npm publish", worktree=str(w), policy=p, home=HOME)
    assert d.reason == "repository rule 'no-npm-release': releases go through the release pipeline"
    # ask: stricter than the built-in allow
    assert _v(p, "cargo test --release", w, sandboxed=sandboxed) == ("ask", "ask.repo")
    assert _v(p, "cargo test", w, sandboxed=sandboxed) == ("allow", "A.local-dev")
    # allow: what the built-in rules ask about, and only that part of the command
    assert _v(p, "make docs", w) == ("allow", "A.repo")
    assert _v(p, "make docs && pytest -q", w) == ("allow", "A.repo")
    assert _v(p, "make docs && curl http://x", w)[0] == "ask"
    assert _v(load_policy(), "make docs", w) == ("ask", "ask.run")
    # the part's form still counts: a redirection outside W, a wrapper, an expansion
    assert _v(p, "make docs > /tmp/out", w, sandboxed=sandboxed) == ("ask", "ask.outside-path")
    assert _v(p, "timeout 60 make docs", w)[0] == "ask"
    assert _v(p, "make docs $X", w)[0] == "ask"
    # an ask rule and an allow rule on the same words: the stricter one decides
    assert _v(p, "make html CI=1", w, sandboxed=sandboxed) == ("ask", "ask.repo")


def test_an_allow_rule_never_weakens_a_deny(tmp_path: Path) -> None:
    w = _repo(
        tmp_path,
        """
[[rules]]
id = "push-ok"
decision = "allow"
pattern = ["git", "push"]
match = ["git push origin HEAD"]

[[rules]]
id = "everything"
decision = "allow"
pattern = ["*"]
match = ["make deploy"]
""",
    )
    p = load_policy(w)
    assert [r.id for r in p.refused_rules] == ["push-ok"]
    assert p.refused == (
        "allow rule 'push-ok': example 'git push origin HEAD' is denied (D1.push); "
        "a repository rule cannot weaken a deny",
    )
    for cmd, rule in (
        ("git push origin HEAD", "D1.push"),
        ("git push", "D1.push"),
        ("npm publish", "D1.registry"),
        ("rm -rf /", "D4.rm-root"),
        ("git config core.hooksPath /tmp/h", "D3.hooks-path"),
        ("git branch -f main HEAD", "D2.protected-ref"),
    ):
        assert _v(p, cmd, w) == ("deny", rule), cmd
    assert _v(p, "make deploy", w) == ("allow", "A.repo")
    e = explain_command("git push origin HEAD", worktree=str(w), policy=p, home=HOME)
    effects = {(f.id, f.effect) for part in e.parts for f in part.findings if f.id}
    assert ("push-ok", "refused: a repository rule cannot weaken D1.push") in effects
    assert ("everything", "refused: a repository rule cannot weaken D1.push") in effects


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        # a match example another rule decides
        (
            'id = "docs"\ndecision = "allow"\npattern = ["make", "docs"]\nmatch = ["make doc"]',
            "rule 'docs' (allow): example 'make doc' should be decided by it; "
            "it classified as ask ask.run",
        ),
        # a not_match example the rule decides
        (
            'id = "b"\ndecision = "ask"\npattern = ["pytest"]\nmatch = ["pytest"]\n'
            'not_match = ["pytest -x"]',
            "rule 'b' (ask): example 'pytest -x' should not be decided by it; "
            "it classified as ask ask.repo",
        ),
        # a built-in deny decides before an ask rule
        (
            'id = "c"\ndecision = "ask"\npattern = ["git"]\nmatch = ["git push"]',
            "rule 'c' (ask): example 'git push' should be decided by it; "
            "it classified as deny D1.push",
        ),
        # an allow rule for what is allowed anyway
        (
            'id = "d"\ndecision = "allow"\npattern = ["pytest"]\nmatch = ["pytest"]',
            "rule 'd' (allow): example 'pytest' should be decided by it; "
            "it classified as allow A.local-dev",
        ),
    ],
)
def test_a_wrong_example_is_a_load_error(tmp_path: Path, rule: str, said: str) -> None:
    w = _repo(tmp_path, "[[rules]]\n" + rule + "\n")
    with pytest.raises(GitsupError) as info:
        load_policy(w)
    msg = info.value.message
    assert msg.startswith(f"invalid policy file {w / '.gitsup' / 'policy.toml'}: 1 rule example")
    assert said in msg, msg


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('id = "a"\ndecision = "maybe"\npattern = ["x"]\nmatch = ["x"]', "rules.0.decision"),
        ('id = "a"\ndecision = "ask"\npattern = ["x", []]\nmatch = ["x"]', "rules.0.pattern"),
        ('id = "a"\ndecision = "ask"\npattern = []\nmatch = ["x"]', "rules.0.pattern"),
        ('id = "a"\ndecision = "ask"\npattern = ["x y"]\nmatch = ["x"]', "rules.0.pattern"),
        ('id = "a"\ndecision = "ask"\npattern = ["x"]', "rules.0.match"),
        ('id = "a b"\ndecision = "ask"\npattern = ["x"]\nmatch = ["x"]', "rules.0.id"),
        ('id = "a"\ndecision = "ask"\npattern = ["x"]\nmatch = ["x"]\nwhen = 1', "rules.0.when"),
    ],
)
def test_a_malformed_rule_names_its_key(tmp_path: Path, text: str, key: str) -> None:
    w = _repo(tmp_path, "[[rules]]\n" + text + "\n")
    with pytest.raises(GitsupError) as info:
        load_policy(w)
    assert repr(key) in info.value.message


def test_two_rules_with_one_id(tmp_path: Path) -> None:
    rule = '[[rules]]\nid = "a"\ndecision = "ask"\npattern = ["x"]\nmatch = ["x"]\n'
    w = _repo(tmp_path, rule + rule)
    with pytest.raises(GitsupError, match="two rules with the id 'a'"):
        load_policy(w)


# --- the CLI ------------------------------------------------------------------------------


def test_policy_commands_refuse_a_wrong_example_with_exit_2(repo: Path) -> None:
    bad = '[[rules]]\nid = "docs"\ndecision = "allow"\npattern = ["make", "docs"]\n'
    _repo(repo, bad + 'match = ["make doc"]\n')
    for args in (
        ("policy", "check", "--", "ls"),
        ("policy", "explain", "--", "ls"),
        ("policy", "show"),
    ):
        res = run_sup(repo, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "rule 'docs' (allow): example 'make doc' should be decided by it" in res.stderr
        assert "Traceback" not in res.stderr


def test_start_refuses_a_wrong_example_before_anything_is_written(repo: Path) -> None:
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "policy.toml").write_text(
        '[[rules]]\nid = "no-curl"\ndecision = "deny"\npattern = ["curl"]\nmatch = ["wget x"]\n'
    )
    git(repo, "add", ".gitsup")
    git(repo, "commit", "-qm", "policy")
    before = git(repo, "for-each-ref")
    res = run_sup(repo, "start", "fix it", "--worker", "true", "--review", "none")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "rule 'no-curl' (deny): example 'wget x' should be decided by it" in res.stderr
    assert task_ids(repo) == []
    assert git(repo, "for-each-ref") == before


def test_explain_lists_every_rule_and_the_decision(repo: Path) -> None:
    _repo(repo, RULES)
    res = run_sup(repo, "policy", "explain", "--json", "--", "make docs; cargo test --release; ls")
    assert res.returncode == 0, res.stderr
    e = json.loads(res.stdout)
    assert list(e) == ["command", "decision", "parts", "refused", "note"]
    check = run_sup(repo, "policy", "check", "--json", "--", "make docs; cargo test --release; ls")
    assert e["decision"] == json.loads(check.stdout)
    assert e["decision"]["rule"] == "ask.repo"
    by_part = {p["part"]: p["rules"] for p in e["parts"]}
    assert list(by_part) == ["make docs", "cargo test --release", "ls"]
    make = {
        (r["source"], r["rule"], r["id"], r["verdict"], r["effect"]) for r in by_part["make docs"]
    }
    assert make == {
        ("built-in", "ask.run", "", "ask", "overridden: repository rule 'docs' decides the part"),
        ("repository", "A.repo", "docs", "allow", "allows (the built-in rules ask: ask.run)"),
    }
    cargo = {(r["rule"], r["id"], r["effect"]) for r in by_part["cargo test --release"]}
    assert ("ask.repo", "slow-build", "asks") in cargo
    assert ("A.local-dev", "", "overridden: repository rule 'slow-build' decides the part") in cargo
    assert [(r["rule"], r["effect"]) for r in by_part["ls"]] == [("A.read-only", "allows")]
    text = run_sup(repo, "policy", "explain", "--", "npm", "publish")
    assert text.returncode == 0
    assert "repository  deny   deny.repo 'no-npm-release': denies" in text.stdout
    assert "decision: deny  deny.repo" in text.stdout


def test_show_lists_rules_and_refused(repo: Path) -> None:
    _repo(
        repo,
        '[[rules]]\nid = "push-ok"\ndecision = "allow"\npattern = ["git", "push"]\n'
        'match = ["git push"]\n',
    )
    res = run_sup(repo, "policy", "show", "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["rules"] == [
        {
            "id": "push-ok",
            "decision": "allow",
            "pattern": "git push",
            "message": "",
            "refused": True,
        }
    ]
    assert s["refused"] == [
        "allow rule 'push-ok': example 'git push' is denied (D1.push); "
        "a repository rule cannot weaken a deny"
    ]
    check = json.loads(run_sup(repo, "policy", "check", "--json", "--", "git push").stdout)
    assert (check["verdict"], check["rule"]) == ("deny", "D1.push")
    explain = run_sup(repo, "policy", "explain", "--", "git push")
    assert "A.repo 'push-ok': refused: a repository rule cannot weaken D1.push" in explain.stdout
    assert "refused: allow rule 'push-ok'" in explain.stdout
