"""The sandboxed mode (docs/policy.md, "Sandboxed mode"): its labelled corpus, and the properties that tie it to
the unsandboxed policy: deny is deny in both modes, and what is allowed without the sandbox stays
allowed with it."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitsup.policy import classify_command, decide_tool, load_policy
from gitsup.policy.parse.parser import parse
from tests.policy.conftest import HOME, W
from tests.policy.test_corpus import ROWS
from tests.policy.test_properties import WRAPPERS

CORPUS = Path(__file__).with_name("corpus_sandboxed.jsonl")
SB_ROWS = [
    tuple(json.loads(line)) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line
]
POLICY = load_policy()
ALL_COMMANDS = sorted({c for _, _, c in ROWS} | {c for _, _, c in SB_ROWS})

# The examples of docs/policy.md, "Sandboxed mode": allow inside the sandbox, ask without it.
SECTION_4A = [
    "pip install -e .",
    "python -m pip install -r requirements.txt",
    "npm ci",
    "npm install",
    "cargo run",
    "go run ./cmd/x",
    "make build",
    "npm run dev",
    "python script.py",
    "tox",
    "mvn package",
    "gradle build",
    "./x",
    "rm -rf build",
    "mv a b",
    "cp a b",
    "ln -s src/a.py link",
    "chmod +x run.sh",
    "sed -i 's/a/b/' src/a.py",
    "tar -xzf dist/a.tgz",
    "git reset --hard HEAD~1",
    "git stash",
    "git restore src/a.py",
    "git checkout -- src/a.py",
    "git rebase HEAD~3",
    # inline code, installed tools and reads anywhere the kernel lets the task read
    "echo $PATH",
    "printenv PATH",
    "env",
    "ls /tmp",
    "cat /etc/os-release",
    "python -c 'print(1)'",
    "node -e 'console.log(1)'",
    "python3 - <<'EOF'\nprint(1)\nEOF",
    "npx ava",
    "npm exec -- ava",
    "./node_modules/.bin/ava",
]


def _c(cmd: str, sandboxed: bool) -> str:
    return classify_command(cmd, worktree=W, policy=POLICY, home=HOME, sandboxed=sandboxed).verdict


def test_sandboxed_corpus_is_large_and_covers_the_classes() -> None:
    assert len(SB_ROWS) >= 200
    verdicts = {v for v, _, _ in SB_ROWS}
    assert verdicts == {"allow", "ask", "deny"}
    rules = {r for _, r, _ in SB_ROWS}
    for rule in ("A.sandboxed", "D1.push", "D3.hooks-dir", "ask.network", "ask.wrapper"):
        assert rule in rules


@pytest.mark.parametrize(("verdict", "rule", "cmd"), SB_ROWS, ids=[c[:60] for _, _, c in SB_ROWS])
def test_sandboxed_corpus(verdict: str, rule: str, cmd: str) -> None:
    d = classify_command(cmd, worktree=W, policy=POLICY, home=HOME, sandboxed=True)
    assert (d.verdict, d.rule) == (verdict, rule), d.reason
    assert d.sandboxed is True
    if rule == "A.sandboxed":
        # the sandboxed mode decided it: without the sandbox the same command asks
        assert _c(cmd, False) == "ask", cmd


@pytest.mark.parametrize("cmd", SECTION_4A)
def test_section_4a_examples(cmd: str) -> None:
    assert (_c(cmd, True), _c(cmd, False)) == ("allow", "ask")


def test_modes_agree_on_deny_and_the_sandbox_never_narrows() -> None:
    """Over every labelled command: deny <=> deny, and unsandboxed allow => sandboxed allow."""
    for cmd in ALL_COMMANDS:
        plain, boxed = _c(cmd, False), _c(cmd, True)
        assert (plain == "deny") == (boxed == "deny"), (cmd, plain, boxed)
        if plain == "allow":
            assert boxed == "allow", cmd


DENY = [c for v, _, c in ROWS if v == "deny" and not parse(c).has_error]
ALLOWED_SB = [c for v, _, c in SB_ROWS if v == "allow" and "\n" not in c]


@settings(max_examples=300, deadline=None)
@given(
    cmd=st.sampled_from(DENY),
    allowed=st.sampled_from(ALLOWED_SB),
    wrappers=st.lists(st.sampled_from(range(len(WRAPPERS))), min_size=1, max_size=3),
)
def test_wrapping_a_deny_in_sandboxed_allowed_work_keeps_it_deny(
    cmd: str, allowed: str, wrappers: list[int]
) -> None:
    text = cmd
    for k in wrappers:
        text = WRAPPERS[k](text, allowed)
    d = classify_command(text, worktree=W, policy=POLICY, home=HOME, sandboxed=True)
    # Deny; or, when the wrapping nests past what the parser reads, the unparseable ask (never
    # allow): the plain mode gives the same `ask.unparseable` for such a text.
    if d.verdict != "deny":
        assert d.verdict == "ask" and d.rule == "ask.unparseable", (text, d)
        plain = classify_command(text, worktree=W, policy=POLICY, home=HOME, sandboxed=False)
        assert plain.rule == "ask.unparseable", (text, plain)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(list("gitpushmakerm -;|&'\"$(){}[]\\\n`<>#~/.*=")), max_size=40
    )
)
def test_arbitrary_text_modes_agree_on_deny(text: str) -> None:
    plain, boxed = _c(text, False), _c(text, True)
    assert (plain == "deny") == (boxed == "deny"), (text, plain, boxed)
    if plain == "allow":
        assert boxed == "allow", text


def test_cache_keeps_the_modes_apart() -> None:
    policy = load_policy()
    for _ in range(2):
        a = classify_command("make build", worktree=W, policy=policy, home=HOME)
        b = classify_command("make build", worktree=W, policy=policy, home=HOME, sandboxed=True)
        assert (a.verdict, a.sandboxed, b.verdict, b.sandboxed) == ("ask", False, "allow", True)


def test_decision_records_the_mode() -> None:
    d = classify_command("git push", worktree=W, policy=POLICY, home=HOME, sandboxed=True)
    assert d.as_dict()["sandboxed"] is True and d.verdict == "deny"
    d = classify_command("git push", worktree=W, policy=POLICY, home=HOME)
    assert d.as_dict()["sandboxed"] is False


def test_decide_tool_passes_the_mode(tmp_path: Path) -> None:
    w = str(tmp_path)
    d = decide_tool("Bash", {"command": "npm ci"}, worktree=w, policy=POLICY, sandboxed=True)
    assert (d.verdict, d.sandboxed) == ("allow", True)
    d = decide_tool("Bash", {"command": "npm ci"}, worktree=w, policy=POLICY)
    assert (d.verdict, d.sandboxed) == ("ask", False)
    # other tools keep their verdicts; the decision still records the mode
    d = decide_tool("WebFetch", {"url": "x"}, worktree=w, policy=POLICY, sandboxed=True)
    assert (d.verdict, d.sandboxed) == ("ask", True)
    d = decide_tool(
        "Write", {"file_path": ".git/hooks/x"}, worktree=w, policy=POLICY, sandboxed=True
    )
    assert d.verdict == "deny"


def test_repository_policy_extends_and_tightens_the_sandboxed_mode(tmp_path: Path) -> None:
    (tmp_path / ".gitsup").mkdir()
    (tmp_path / ".gitsup" / "policy.toml").write_text(
        'ask = ["make build"]\n'
        'deny = ["terraform apply"]\n'
        "[[sandboxed_allow.runner]]\n"
        'argv = ["terraform", "plan"]\n'
        "[[sandboxed_allow.runner]]\n"
        'argv = ["terraform", "apply"]\n'
    )
    policy = load_policy(tmp_path)
    w = str(tmp_path)

    def c(cmd: str, sandboxed: bool = True) -> str:
        return classify_command(cmd, worktree=w, policy=policy, home=HOME, sandboxed=sandboxed).rule

    assert c("terraform plan") == "A.sandboxed"
    assert c("terraform plan", sandboxed=False) == "ask.unknown"
    assert c("terraform apply") == "deny.repo"
    assert c("make build") == "ask.repo"
    assert c("make all") == "A.sandboxed"
    assert "terraform plan" in [
        " ".join(r["argv"]) for r in policy.summary()["sandboxed_allow"]["runners"]
    ]


def test_default_policy_carries_the_sandbox_filesystem_table() -> None:
    """The kernel sandbox keeps its filesystem rules in a `[sandbox]` table of default.toml;
    the classifier loads the file with it and ignores it."""
    from gitsup.policy.config import DefaultFile
    from gitsup.policy.load import _read_toml

    text = Path(__file__).parents[2].joinpath("policies", "default.toml").read_text()
    loaded = DefaultFile.model_validate(_read_toml("default.toml", text))
    assert loaded.sandboxed_allow.runner
    assert "/usr" in loaded.sandbox["read"] and "~" in loaded.sandbox["hide"]


SED_PIECES = st.sampled_from(
    [
        "s/a/b/",
        "s|x|y|",
        "s/\\//x/",
        "g",
        "p",
        "I",
        "2",
        "e",
        "w",
        "r",
        "R",
        "W",
        " ",
        "x",
        ";",
        "\n",
        "1",
        "$",
        "!",
        "{",
        "}",
        "/re/",
        ",",
        "d",
        "y/ab/cd/",
        "a",
        "i",
        "c",
        "\\",
        "id",
        "/tmp/q",
        "#",
        ":",
        "b",
        "t",
        "q",
        "=",
        "l",
        "F",
        "v",
        "z",
        "~",
        "+",
        "\t",
        "M",
        "0",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(SED_PIECES, min_size=1, max_size=10))
def test_sed_scripts_judged_text_only_run_under_sed_sandbox(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str]
) -> None:
    """What the classifier calls a text-only sed script, GNU sed's own --sandbox (which refuses
    the e, r and w commands and flags) accepts."""
    import subprocess

    from gitsup.policy.allow.sandboxed import sed_script_safe

    script = "".join(pieces)
    if not sed_script_safe(script):
        return
    res = subprocess.run(
        ["sed", "--sandbox", "-e", script],
        input="a\nb\n",
        capture_output=True,
        text=True,
        cwd=tmp_path_factory.getbasetemp(),
        timeout=10,
        check=False,
    )
    assert "disabled in sandbox mode" not in res.stderr, (script, res.stderr)


DENY_ONE_LINE = sorted({c for c in DENY if "\n" not in c})


@pytest.mark.parametrize(
    "wrap",
    [
        lambda c: "node -e " + shlex.quote(f"require('child_process').execSync({json.dumps(c)})"),
        lambda c: "python3 -c " + shlex.quote(f"import os; os.system({c!r})"),
        lambda c: f"python3 - <<'EOF'\nimport subprocess\nsubprocess.run({c!r}, shell=True)\nEOF",
    ],
    ids=["node-e", "python-c", "python-heredoc"],
)
def test_a_denied_command_inside_inline_code_is_not_allowed(wrap: Callable[[str], str]) -> None:
    """Inline code runs inside the sandbox, but not when it visibly runs what the shell policy
    denies: every denied command of the corpus, written into inline code, still asks."""
    allowed = []
    for cmd in DENY_ONE_LINE:
        text = wrap(cmd)
        d = classify_command(text, worktree=W, policy=POLICY, home=HOME, sandboxed=True)
        if d.verdict == "allow":
            allowed.append(text)
    assert not allowed, allowed[:10]
