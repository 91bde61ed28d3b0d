"""Credentials never reach Git, the task state, JSON output or the worker's repair message.

Every pattern of gitsup.redact is driven through every sink by a real task (`git sup start`
with a process worker, a command decider, a failing check and a command reviewer that all
print each credential shape); then every Git object, every file of the task state and the
stdout/stderr of the CLI are searched for each raw value. Shapes that only look like
credentials (hashes, UUIDs, base64 data, ordinary words) survive.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitsup.host import proc
from gitsup.redact import _PATTERNS, REDACTED, needs_redaction, redact, redact_text
from gitsup.workers.base import (
    HumanInput,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerOutput,
    WorkerSetup,
)
from gitsup.workers.stream_json import parse_record
from tests.conftest import git, run_sup

ALNUM = string.ascii_letters + string.digits


def _rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def make_secrets() -> dict[str, tuple[str, str]]:
    """name -> (a line as a program would print it, the raw value that must not survive).

    Fresh random values per test: a raw value found anywhere came from this test."""
    b64 = ALNUM + "+/"
    up = string.ascii_uppercase + string.digits
    v = {
        "anthropic": "sk-ant-api03-" + _rand(40),
        "openai": "sk-proj-" + _rand(40),
        "stripe": "sk_live_" + _rand(24),
        "github": "ghp_" + _rand(36),
        "github_pat": f"github_pat_{_rand(22)}_{_rand(59)}",
        "gitlab": "glpat-" + _rand(20),
        "slack": f"xoxb-{_rand(12, string.digits)}-{_rand(24)}",
        "npm": "npm_" + _rand(36),
        "aws_key_id": "AKIA" + _rand(16, up),
        "google": "AIza" + _rand(35),
        "jwt": f"eyJ{_rand(20)}.eyJ{_rand(40)}.{_rand(43)}",
        "pem": _rand(64, b64),
        "pem_unterminated": _rand(64, b64),
        "authorization": _rand(32, b64) + "=",
        "bearer": _rand(40),
        "url": _rand(20),
        "aws_secret": _rand(40, b64),
        "json_password": _rand(18),
    }
    lines = {
        "anthropic": f"ANTHROPIC_API_KEY={v['anthropic']}",
        "openai": f"using key {v['openai']} now",
        "stripe": f"stripe {v['stripe']}",
        "github": f"push with {v['github']}",
        "github_pat": f"token {v['github_pat']}",
        "gitlab": f"{v['gitlab']} in CI",
        "slack": f"slack {v['slack']}",
        "npm": f"//registry.npmjs.org/:_authToken={v['npm']}",
        "aws_key_id": f"AccessKeyId {v['aws_key_id']}",
        "google": f"maps key {v['google']}",
        "jwt": f"jwt {v['jwt']}",
        "pem": f"-----BEGIN RSA PRIVATE KEY-----\n{v['pem']}\n{_rand(40, b64)}==\n"
        "-----END RSA PRIVATE KEY-----",
        "pem_unterminated": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{v['pem_unterminated']}",
        "authorization": f"Authorization: Basic {v['authorization']}",
        "bearer": f"curl -H 'X-Auth: Bearer {v['bearer']}' http://127.0.0.1/",
        "url": f"git clone https://deploy:{v['url']}@git.example.invalid/r.git",
        "aws_secret": f"aws_secret_access_key = {v['aws_secret']}",
        "json_password": f'{{"db_password": "{v["json_password"]}"}}',
    }
    return {k: (lines[k], v[k]) for k in v}


def raw_values(s: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {name: raw for name, (_, raw) in s.items()}


# Look like credentials to a careless pattern, are not: must survive every sink.
NOT_SECRETS = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "request 123e4567-e89b-12d3-a456-426614174000",
    "fixture = 'QUtJQUlPU0ZPRE5ON0VYQU1QTEVBS0lBSU9TRk9ETk43RVhBTVBMRQ=='",
    "see risk-assessment-document-for-the-review",
    "Author: Johnathan Doe <jd@example.invalid>",
    "max_tokens=100000 tokenizer=bert-base-uncased",
    "served on http://localhost:8080/a@b",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "the secret sauce is patience",
]


# --- the patterns, one by one ---------------------------------------------------------------


def test_every_pattern_is_exercised_and_every_value_is_replaced() -> None:
    s = make_secrets()
    hit = [False] * len(_PATTERNS)
    for name, (line, _) in s.items():
        raw = raw_values(s)[name]
        assert raw in line, name
        out = redact_text(line)
        assert raw not in out, (name, out)
        assert REDACTED in out, name
        for i, pat in enumerate(_PATTERNS):
            if pat.search(line):
                hit[i] = True
    # the third PEM form: the rest of a block whose beginning arrived in an earlier chunk
    tail = f"{_rand(64)}\n{_rand(20)}==\n-----END PRIVATE KEY-----\nnext line"
    assert redact_text(tail) == f"{REDACTED}\nnext line"
    hit[[p.pattern.startswith(r"\A") for p in _PATTERNS].index(True)] = True
    unused = [p.pattern for p, h in zip(_PATTERNS, hit, strict=True) if not h]
    assert not unused


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_what_only_looks_like_a_credential_survives(text: str) -> None:
    assert redact_text(text) == text
    assert redact({"text": text, "list": [text]}) == {"text": text, "list": [text]}


def test_key_names_are_kept_and_json_stays_json() -> None:
    s = make_secrets()
    doc = {
        "verdict": "revise",
        "findings": [{"title": line, "detail": line + "\nmore"} for line, _ in s.values()],
    }
    lines = "\n".join(line for line, _ in s.values()).splitlines()
    per_line = {"findings": [{"title": line} for line in lines]}  # a PEM block split up
    for d in (doc, per_line):
        for indent in (None, 1):
            out = redact_text(json.dumps(d, indent=indent))
            back = json.loads(out)  # still valid JSON, the same shape
            assert len(back["findings"]) == len(d["findings"])
            for name, raw in raw_values(s).items():
                # a PEM body line in a string of its own is just base64: not recognisable
                if d is doc or not name.startswith("pem"):
                    assert raw not in out, name
    assert (
        redact_text("aws_secret_access_key = abcdefghij") == f"aws_secret_access_key = {REDACTED}"
    )
    assert redact_text("PGPASSWORD='hunter2hunter2' psql") == f"PGPASSWORD='{REDACTED}' psql"
    # already redacted text is left as it is
    once = redact_text(" ".join(line for line, _ in s.values()))
    assert redact_text(once) == once


FRAGMENTS = [
    *("sk-ant-", "sk-", "sk_live_", "ghp_", "github_pat_", "glpat-", "xoxb-", "npm_", "AKIA"),
    *("AIza", "eyJ", ".", "-----BEGIN RSA PRIVATE KEY-----", "-----END PRIVATE KEY-----"),
    *("Authorization: ", "bearer ", "Basic ", "://", "@", "token", "Tokens", "api_key", "auth"),
    *("Author", "password", "SECRET", "access_key", "=", ":", " ", "\n", '"', "'", "\\"),
    *("abcdefgh", "ABCDEFGHIJKLMNOP", "0123456789", "xY_-", "+/==", "live_", "sk_"),
    *("\u0130", "\u00e9", "\u212a", "\\u00e9"),  # lower-case to two characters, escapes
]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join))
def test_the_screen_never_hides_a_change(text: str) -> None:
    # the cheap screen says "nothing to do" only where nothing would change
    if not needs_redaction(text):
        from gitsup.redact import _ASSIGN

        assert all(p.search(text) is None for p in _PATTERNS), text
        assert _ASSIGN.search(text) is None, text
        assert redact({"k": text}) == {"k": text}
    for body in ({text: "v"}, {"k": {text: text}}, {"token": text}):
        for dumped in (json.dumps(body), json.dumps(body, separators=(",", ":"))):
            if not needs_redaction(dumped):
                assert redact(body) == body, dumped


# --- the entry points -----------------------------------------------------------------------


def test_captured_output_is_redacted_only_when_asked(tmp_path: Path) -> None:
    line = make_secrets()["anthropic"][0]
    argv = [sys.executable, "-c", f"print({line!r})"]
    assert REDACTED in proc.run(argv, redact=True).output
    assert line in proc.run(argv).output  # git plumbing output is never rewritten


def test_stream_json_records_are_redacted_but_tool_input_is_not() -> None:
    s = make_secrets()
    raw = raw_values(s)
    text = "\n".join(line for line, _ in s.values())
    assistant = {
        "type": "assistant",
        "message": {
            "id": "m1",
            "content": [
                {"type": "text", "text": text},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": text}},
            ],
        },
    }
    user = {
        "type": "user",
        "message": {
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": text}],
        },
    }
    result = {"type": "result", "subtype": "success", "result": text, "errors": [text]}
    for rec in (assistant, user, result):
        ev = parse_record(json.dumps(rec))
        assert isinstance(ev, WorkerOutput | TurnCompleted)
        dumped = json.dumps(ev.__dict__, default=str)
        assert REDACTED in dumped
        assert not [k for k, v in raw.items() if v in dumped]
    noise = parse_record("{not json " + text)
    assert isinstance(noise, ProtocolNoise)
    assert not [k for k, v in raw.items() if v in noise.line]
    # a permission request keeps its input: allowed, it is what runs
    req = {
        "type": "control_request",
        "request_id": "r1",
        "request": {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": text}},
    }
    ev = parse_record(json.dumps(req))
    assert isinstance(ev, PermissionRequest) and ev.tool_input["command"] == text


def test_process_worker_output_is_redacted_where_it_is_read(tmp_path: Path) -> None:
    from gitsup.workers.process import ProcessWorker

    s = make_secrets()
    leak = tmp_path / "leak.txt"
    leak.write_text("\n".join(line for line, _ in s.values()) + "\n")
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    ctx = WorkerSetup(
        task_id="t",
        worktree=tmp_path,
        task_dir=tmp_path,
        env=dict(os.environ),
        argv=("sh", "-c", f"cat {leak}; cat {leak} >&2"),
        inbox=inbox,
    )
    w = ProcessWorker(ctx)
    w.start("goal")
    seen = ""
    while True:
        item = inbox.get(timeout=30)
        if isinstance(item, WorkerOutput):
            seen += item.text
        if type(item).__name__ == "WorkerExited":
            break
    assert seen.count("[REDACTED]") >= 2 * len(s)
    assert not [k for k, v in raw_values(s).items() if v in seen]


def test_a_key_written_in_pieces_is_still_redacted(tmp_path: Path) -> None:
    from gitsup.workers.process import ProcessWorker

    tail = _rand(40)
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    ctx = WorkerSetup(
        task_id="t",
        worktree=tmp_path,
        task_dir=tmp_path,
        env=dict(os.environ),
        # two writes, a pause between them: two reads, one line
        argv=("sh", "-c", f"printf 'key sk-ant-api03-'; sleep 0.5; printf '{tail} done\\n'"),
        inbox=inbox,
    )
    ProcessWorker(ctx).start("goal")
    seen = ""
    while True:
        item = inbox.get(timeout=30)
        if isinstance(item, WorkerOutput):
            seen += item.text
        if type(item).__name__ == "WorkerExited":
            break
    assert seen == f"key {REDACTED} done\n"


def test_hook_events_are_redacted_but_prompts_are_recognised() -> None:
    from gitsup.workers.claude.hooks import HookBridge

    line, raw = make_secrets()["github"]
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    bridge = HookBridge(inbox)
    goal = f"deploy with {line}"
    bridge.expect_prompt(goal)
    bridge.handle({"hook_event_name": "UserPromptSubmit", "prompt": goal}, "http")
    bridge.handle({"hook_event_name": "UserPromptSubmit", "prompt": "typed " + line}, "http")
    bridge.handle({"hook_event_name": "Notification", "message": line, "token": "x"}, "http")
    bridge.handle({"hook_event_name": "Stop", "last_assistant_message": line}, "http")
    items = []
    while not inbox.empty():
        items.append(inbox.get())
    # gitsup's own prompt is still recognised (compared before redaction): not a human
    human = [i for i in items if isinstance(i, HumanInput)]
    assert len(human) == 1 and human[0].text == f"typed push with {REDACTED}"
    dumped = json.dumps([i.__dict__ for i in items], default=str)
    assert raw not in dumped and dumped.count(REDACTED) >= 4


# --- the whole task: every pattern through every sink -------------------------------------


def _script(path: Path, body: str) -> str:
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


def _all_objects(repo: Path) -> bytes:
    return subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout


def _state_files(common_dir: Path) -> dict[str, bytes]:
    out = {}
    for root, _dirs, files in os.walk(common_dir / "sup"):
        for f in files:
            p = Path(root) / f
            if p.is_file() and not p.is_symlink():
                out[str(p)] = p.read_bytes()
    return out


@pytest.mark.parametrize("mode", ["foreground", "detach"])
def test_no_credential_reaches_any_sink(repo: Path, tmp_path: Path, mode: str) -> None:
    s = make_secrets()
    raw = raw_values(s)
    leak = tmp_path / "leak.txt"
    entries = [*(line for line, _ in s.values()), *NOT_SECRETS]
    leak.write_text("\n".join(entries) + "\n")
    (tmp_path / "entries.json").write_text(json.dumps(entries))
    worker = _script(
        tmp_path / "worker.sh",
        f"#!/bin/sh\ncat {leak}\ncat {leak} >&2\n"
        "printf 'def add(a, b):\\n    return a + b\\n' > calc.py\n"
        "git commit -qam 'Fix add'\n",
    )
    check = _script(tmp_path / "leaky-check.sh", f"#!/bin/sh\ncat {leak}\nexit 1\n")
    saved = tmp_path / "evidence.json"
    reviewer = _script(
        tmp_path / "reviewer.py",
        f"#!{sys.executable}\nimport json, sys, pathlib\n"
        f"pathlib.Path({str(saved)!r}).write_text(sys.stdin.read())\n"
        f"text = pathlib.Path({str(leak)!r}).read_text()\n"
        f"entries = json.loads(pathlib.Path({str(tmp_path / 'entries.json')!r}).read_text())\n"
        "findings = [{'severity': 'P2', 'title': e, 'detail': text} for e in entries]\n"
        "print(json.dumps({'verdict': 'revise', 'findings': findings}))\n",
    )
    heard = tmp_path / "decider-heard.jsonl"
    decider = _script(
        tmp_path / "decider.py",
        f"#!{sys.executable}\nimport json, sys, pathlib\n"
        f"pathlib.Path({str(heard)!r}).open('a').write(sys.stdin.read() + '\\n')\n"
        f"text = pathlib.Path({str(leak)!r}).read_text()\n"
        "print(json.dumps({'action': 'verify', 'reason': text, 'message': text}))\n",
    )
    spec = tmp_path / "task.toml"
    spec.write_text(
        f'goal = "Fix add"\n[worker]\nkind = "process"\nargv = ["{worker}"]\n'
        f'[[checks]]\nname = "tests"\nargv = ["{sys.executable}", "-m", "pytest", "-q", "-p", "no:cacheprovider"]\n'
        f'[[checks]]\nname = "leaky"\nargv = ["{check}"]\nrequired = false\n'
        f'[review]\nkind = "command"\nargv = ["{reviewer}"]\n'
        f'[decider]\nkind = "command"\nargv = ["{decider}"]\n'
    )
    outputs: list[str] = []
    if mode == "foreground":
        res = run_sup(repo, "start", "--spec", str(spec), "--json")
        outputs += [res.stdout, res.stderr]  # the --json record, the progress lines
        task = json.loads(res.stdout)["id"]
    else:
        res = run_sup(repo, "start", "--spec", str(spec), "--detach", "--json")
        assert res.returncode == 0, res.stderr
        task = json.loads(res.stdout)["id"]
        outputs += [res.stdout, res.stderr]
        waited = run_sup(repo, "wait", task, "--json")
        outputs += [waited.stdout, waited.stderr]
    for args in (("show", task, "--json"), ("log", task, "--json"), ("ls", "--json")):
        r = run_sup(repo, *args)
        assert r.returncode == 0, r.stderr
        outputs.append(r.stdout)
    rec = json.loads(run_sup(repo, "show", task, "--json").stdout)
    assert rec["status"] == "parked", rec["reasons"]
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    state = _state_files(common)
    assert any(p.endswith("task.json") for p in state)
    assert any(p.endswith("events.jsonl") for p in state)
    if mode == "detach":
        assert any(p.endswith("supervisor.log") for p in state)
    objects = _all_objects(repo)
    sinks: dict[str, bytes] = {
        "git objects": objects,
        **state,
        **{f"cli output {i}": o.encode() for i, o in enumerate(outputs)},
        "evidence sent to the reviewer": saved.read_bytes(),
        "what the decider heard": heard.read_bytes(),
    }
    found = [
        (k, where) for k, v in raw.items() for where, data in sinks.items() if v.encode() in data
    ]
    assert not found, found

    # The output was there, redacted: in the note (pushed with the candidate), the
    # record, the events and the sealed log.
    note = json.loads(git(repo, "notes", "--ref=sup", "show", rec["candidate"]))
    leaky = next(c for c in note["checks"] if c["name"] == "leaky")
    assert leaky["output_tail"].count(REDACTED) >= len(s)
    assert note["review"]["verdict"] == "revise"
    titles = [f["title"] for f in note["review"]["findings"]]
    assert len(titles) == len(entries) and titles[len(s) :] == NOT_SECRETS
    assert all(REDACTED in t for t in titles[: len(s)]), titles
    assert REDACTED in note["decisions"][0]["reason"]
    assert any(REDACTED in r for r in note["reasons"])
    events = [json.loads(x) for x in run_sup(repo, "log", task, "--json").stdout.splitlines()]
    worker_text = "".join(e["data"].get("text", "") for e in events if e["type"] == "worker_output")
    assert worker_text.count(REDACTED) >= 2 * len(s)
    assert objects.count(REDACTED.encode()) >= 4 * len(s)  # note + sealed segments
    # what is not a secret is still readable everywhere the output went
    for text in NOT_SECRETS:
        assert text in worker_text
        assert text in leaky["output_tail"]
        assert text.encode() in objects
