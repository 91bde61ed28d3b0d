"""A person in the loop: how soon `git sup answer` reaches a waiting worker.

    GITSUP_CLAUDE_BIN=… .venv/bin/python bench/bench_human.py [--asks N] [--via api]

A real Claude Code worker (scripted model, human decider) asks N times for a call the policy
sends to `ask`; each time, once the ask is pending, `git sup answer … allow` runs through the
console script. Per answer: from the CLI call to the supervisor's `permission_decided` event
(written once the worker was sent its answer; goal <= 1 s), and the CLI's own duration (it
returns once the supervisor recorded `human_answer`). With `--via api` each answer is a
`POST /api/tasks/ID/answer` to a running `git sup serve` instead (no Python start-up). Prints the distribution; asserts
nothing. Everything happens in a temporary directory with a hermetic Git environment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))
BIN = Path(sys.executable).parent
GIT_SUP = str(BIN / "git-sup")

from bench_foundation import git, hermetic_env  # noqa: E402


def sup(repo: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GIT_SUP, *args], cwd=repo, capture_output=True, text=True, env=env, timeout=300
    )


def events(repo: Path, task: str) -> list[dict[str, object]]:
    path = Path(git(repo, "rev-parse", "--git-common-dir"))
    path = (repo / path if not path.is_absolute() else path) / "sup" / "tasks" / task
    lines = (path / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--asks", type=int, default=10)
    ap.add_argument("--via", choices=("cli", "api"), default="cli")
    opts = ap.parse_args()
    n, via = opts.asks, opts.via
    claude = os.environ.get("GITSUP_CLAUDE_BIN")
    if not claude:
        sys.exit("set GITSUP_CLAUDE_BIN to Claude Code's binary")
    from gitsup.demo.scripted_model import ScriptedModel

    steps = [
        {
            "content": [
                {
                    "type": "tool_use",
                    "name": "Bash",
                    "input": {"command": f"curl --version > c{i}.txt", "description": "Curl"},
                }
            ]
        }
        for i in range(n)
    ]
    steps.append({"bash": "git add -A && git commit -qm curl"})
    steps.append({"text": "Done."})
    with tempfile.TemporaryDirectory() as tmp, ScriptedModel({"default": steps}) as model:
        root = Path(tmp)
        hermetic_env(root / "home")
        repo = root / "repo"
        repo.mkdir()
        git(repo, "init", "-q")
        (repo / "README").write_text("bench\n")
        git(repo, "add", "README")
        git(repo, "commit", "-qm", "init")
        spec = root / "task.toml"
        spec.write_text(
            'goal = "Record curl versions and commit."\n'
            '[worker]\nkind = "claude"\n[review]\nkind = "none"\n'
            '[decider]\nkind = "human"\nhuman_timeout = "5m"\n'
            '[budget]\ndeadline = "30m"\nno_output_timeout = "5m"\n'
        )
        env = {
            **os.environ,
            "GITSUP_CLAUDE_BIN": claude,
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": "sk-scripted-not-a-key",
            "CLAUDE_CONFIG_DIR": str(root / "cfg"),
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        res = sup(repo, "start", "--detach", "--spec", str(spec), "-q", env=env)
        if res.returncode != 0:
            sys.exit(res.stderr)
        task = res.stdout.strip().split()[-1]
        server = None
        if via == "api":
            server = subprocess.Popen(
                [GIT_SUP, "serve"], cwd=repo, stdout=subprocess.PIPE, text=True, env=env
            )
            assert server.stdout is not None
            base, token = server.stdout.readline().strip().split("/?token=", 1)
        reach: list[float] = []
        cli: list[float] = []
        channel: list[float] = []
        answered: set[str] = set()
        while len(answered) < n:
            shown = json.loads(sup(repo, "show", task, "--json", env=env).stdout)
            if shown["state"] in ("completed", "blocked", "failed", "stopped"):
                sys.exit(f"the task ended early: {shown['reasons']}")
            todo = [a for a in shown["pending"] if a["request_id"] not in answered]
            if not todo:
                time.sleep(0.05)
                continue
            rid = todo[0]["request_id"]
            t0 = time.time()
            if server is not None:
                import urllib.request

                req = urllib.request.Request(
                    f"{base}/api/tasks/{task}/answer",
                    data=json.dumps({"request_id": rid, "decision": "allow"}).encode(),
                    headers={"Authorization": f"Bearer {token}"},
                    method="POST",
                )
                with urllib.request.urlopen(req, timeout=60) as resp:
                    stdout = json.dumps(json.loads(resp.read())["taken"])
            else:
                r = sup(repo, "answer", task, rid, "allow", "--json", env=env)
                if r.returncode != 0:
                    sys.exit(r.stderr)
                stdout = r.stdout
            t1 = time.time()
            answered.add(rid)
            decided = [
                e
                for e in events(repo, task)
                if e["type"] == "permission_decided"
                and isinstance(e["data"], dict)
                and e["data"].get("request_id") == rid
            ]
            reach.append(float(decided[0]["ts"]) - t0)  # type: ignore[arg-type]
            # the request's ref starts with the time it was written (ns, hex)
            written = int(json.loads(stdout or "{}").get("ref", "0-").split("-")[0], 16) / 1e9
            channel.append(float(decided[0]["ts"]) - written)  # type: ignore[arg-type]
            cli.append(t1 - t0)
        sup(repo, "wait", task, "--timeout", "120", env=env)
        if server is not None:
            server.terminate()
            server.wait(10)

    def dist(xs: list[float]) -> str:
        q = statistics.quantiles(xs, n=10) if len(xs) >= 2 else xs
        return (
            f"min {min(xs) * 1000:6.0f} ms  median {statistics.median(xs) * 1000:6.0f} ms  "
            f"p90 {q[-1] * 1000:6.0f} ms  max {max(xs) * 1000:6.0f} ms"
        )

    print(f"answers: {n} (one worker, one supervisor, 2-core host shared with other work)")
    how = "POST" if via == "api" else "CLI call"
    print(f"{how} -> worker answered (permission_decided): {dist(reach)}  (goal <= 1 s)")
    print(f"request written -> worker answered:               {dist(channel)}")
    print(f"{how} -> answer (human_answer recorded):     {dist(cli)}")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
