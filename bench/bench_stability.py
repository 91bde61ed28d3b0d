"""The stability matrix of the claude worker: whole tasks through the real CLI (`git sup start`)
with the real Claude Code binary against the scripted model, counted and timed.

    GITSUP_CLAUDE_BIN=... .venv/bin/python bench/bench_stability.py [--ordinary 10] [--asks 5]
        [--questions 5]

Three kinds of task, each in a fresh repository whose calc.py has a bug: ordinary (fix,
commit), with a permission ask (a background command the policy gate asks about, answered
by the decider, then fix and commit), with a question (AskUserQuestion answered by the
decider, then fix and commit). A task passes when it ends `ready` with its candidate, and,
for the last two kinds, the ask or the question was decided and answered once. Prints one
line per task and per kind: passes, and the median and slowest wall time. Run it for each
change of the agent adapters; not part of CI's time budget.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gitsup.demo.scripted_model import ScriptedModel  # noqa: E402

GIT_SUP = str(Path(sys.executable).parent / "git-sup")
FIX = {
    "type": "tool_use",
    "name": "Write",
    "input": {"file_path": "${CWD}/calc.py", "content": "def add(a, b):\n    return a + b\n"},
}
COMMIT = {
    "type": "tool_use",
    "name": "Bash",
    "input": {"command": "git add -A && git commit -q -m 'Fix add'", "description": "Commit"},
}
ASK = {
    "type": "tool_use",
    "name": "Bash",
    "input": {"command": "sleep 1 &", "description": "Wait in the background"},
}
QUESTION = {
    "type": "tool_use",
    "name": "AskUserQuestion",
    "input": {
        "questions": [
            {
                "question": "Should add() also accept strings?",
                "header": "Scope",
                "options": [
                    {"label": "yes", "description": "y"},
                    {"label": "no", "description": "n"},
                ],
                "multiSelect": False,
            }
        ]
    },
}


def _step(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"content": list(blocks)}


def _text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


FINISH = [_step(FIX), _step(COMMIT), _step(_text("Fixed and committed."))]
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "ordinary": FINISH,
    "ask": [_step(_text("Waiting first."), ASK), *FINISH],
    "question": [_step(_text("One question first."), QUESTION), *FINISH],
}


def _decided_once(events: list[dict[str, Any]], check: Callable[[dict[str, Any]], bool]) -> bool:
    decided = [e["data"] for e in events if e["type"] == "permission_decided"]
    ids = [d["request_id"] for d in decided if not d.get("cancelled")]
    return len(ids) == len(set(ids)) and sum(1 for d in decided if check(d)) == 1


CHECKS: dict[str, Callable[[list[dict[str, Any]]], bool]] = {
    "ordinary": lambda ev: True,
    "ask": lambda ev: _decided_once(
        ev, lambda d: d.get("verdict") == "ask" and d.get("answer") == "deny"
    ),
    "question": lambda ev: _decided_once(
        ev,
        lambda d: (
            d.get("tool") == "AskUserQuestion"
            and str(d.get("message", "")).startswith("Supervisor answer:")
        ),
    ),
}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "bench")
    _git(repo, "config", "user.email", "bench@example.invalid")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "initial")
    return repo


def _env(url: str, config: Path, claude: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env.update(
        GITSUP_CLAUDE_BIN=claude,
        ANTHROPIC_BASE_URL=url,
        ANTHROPIC_API_KEY="sk-scripted-not-a-key",
        CLAUDE_CONFIG_DIR=str(config),
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        CLAUDE_CODE_MAX_RETRIES="1",
        API_TIMEOUT_MS="20000",
    )
    return env


def run_one(kind: str, claude: str) -> tuple[bool, float, str]:
    """One task of `kind`: (passed, seconds, why it failed)."""
    root = Path(tempfile.mkdtemp(prefix=f"bench-stability-{kind}-"))
    model = ScriptedModel({"default": SCRIPTS[kind]}).start()
    try:
        repo = _repo(root)
        spec = root / "task.toml"
        spec.write_text(
            'goal = "Fix add() in calc.py and commit."\n[worker]\nkind = "claude"\n'
            '[review]\nkind = "none"\n[budget]\ndeadline = "5m"\n'
            f'[[checks]]\nname = "tests"\nargv = ["{sys.executable}", "-m", "pytest", "-q", '
            '"-p", "no:cacheprovider"]\n'
        )
        t0 = time.monotonic()
        res = subprocess.run(
            [GIT_SUP, "start", "--spec", str(spec), "--json", "-q"],
            cwd=repo,
            env=_env(model.url, root / "cfg", claude),
            capture_output=True,
            text=True,
            timeout=600,
        )
        took = time.monotonic() - t0
        try:
            rec = json.loads(res.stdout)
        except ValueError:
            return False, took, f"no record (exit {res.returncode}): {res.stderr[-300:]}"
        common = Path(_git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
        log = common / "sup" / "tasks" / rec["id"] / "events.jsonl"
        events = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        if rec.get("status") != "ready" or not rec.get("candidate"):
            return False, took, f"{rec.get('status')}: {rec.get('reasons')}"
        if not CHECKS[kind](events):
            return False, took, "the ask or question was not decided exactly once"
        return True, took, ""
    finally:
        model.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ordinary", type=int, default=10)
    ap.add_argument("--asks", type=int, default=5)
    ap.add_argument("--questions", type=int, default=5)
    args = ap.parse_args()
    claude = os.environ.get("GITSUP_CLAUDE_BIN") or str(
        REPO / ".tools" / "claude" / "node_modules" / ".bin" / "claude"
    )
    if not Path(claude).exists():
        sys.exit(f"no Claude Code binary at {claude} (set GITSUP_CLAUDE_BIN)")
    plan = [("ordinary", args.ordinary), ("ask", args.asks), ("question", args.questions)]
    failed = 0
    t_all = time.monotonic()
    for kind, n in plan:
        times: list[float] = []
        passed = 0
        for i in range(n):
            ok, took, why = run_one(kind, claude)
            times.append(took)
            passed += ok
            print(f"{kind:9} #{i + 1:<2} {'pass' if ok else 'FAIL'} {took:6.1f} s {why}")
        failed += n - passed
        if times:
            print(
                f"{kind:9} {passed}/{n} passed; median {statistics.median(times):.1f} s, "
                f"slowest {max(times):.1f} s"
            )
    print(f"all: {failed} failed; {time.monotonic() - t_all:.0f} s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
