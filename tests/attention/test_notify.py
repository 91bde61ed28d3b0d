"""Notifications: a real HTTP receiver on 127.0.0.1, a real command notifier, real tasks."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gitsup.attention.fold import Tracker
from gitsup.attention.notify import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    Notifier,
    NotifyConfig,
    load_config,
)
from tests.conftest import PYTHON, git, run_sup
from tests.helpers.sup import (
    COMMIT_WITHOUT_FIX,
    FIX_AND_COMMIT,
    PYTEST_CHECK,
    common_dir,
    task_ids,
    write_worker,
)

SECRET = "s3cret-signing-key-for-tests"


@dataclass
class Receiver:
    url: str
    mode: str = "ok"  # ok | hang | an HTTP status to answer with
    posts: list[dict[str, Any]] = field(default_factory=list)

    def events(self) -> list[str]:
        return [p["body"]["event"] for p in self.posts]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver(url="")
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            rec.posts.append(
                {
                    "raw": body,
                    "body": json.loads(body),
                    "signature": self.headers.get(SIGNATURE_HEADER),
                    "delivery": self.headers.get(DELIVERY_HEADER),
                    "path": self.path,
                    "at": time.monotonic(),
                }
            )
            if rec.mode == "hang":
                stop.wait(30)
                return
            self.send_response(int(rec.mode) if rec.mode.isdigit() else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield rec
    stop.set()
    server.shutdown()
    server.server_close()


def _events(repo: Path, task: str) -> list[dict[str, Any]]:
    path = common_dir(repo) / "sup" / "tasks" / task / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_notifications(repo: Path, task: str, n: int, timeout: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        got = [e["data"] for e in _events(repo, task) if e["type"] == "notification"]
        if len(got) >= n or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_webhook_gets_one_signed_post_per_event(repo: Path, tmp: Path, receiver: Receiver) -> None:
    worker = write_worker(tmp, FIX_AND_COMMIT)
    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "fix add; the token is api_key=sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"\n'
        f'[worker]\nkind = "process"\nargv = {json.dumps(worker.split())}\n'
        '[review]\nkind = "none"\n'
        "[budget]\nmax_turns = 1\n"
        f'[notify]\nwebhook = "{receiver.url}"\nsecret_env = "GITSUP_TEST_HOOK_SECRET"\n'
    )
    res = run_sup(
        repo,
        "start",
        "--spec",
        str(spec),
        "--check",
        PYTEST_CHECK,
        env={"GITSUP_TEST_HOOK_SECRET": SECRET},
    )
    assert res.returncode == 0, res.stderr
    (task,) = task_ids(repo)
    # max_turns = 1: one turn spends the turn budget (needs-human), then the task is ready.
    assert sorted(receiver.events()) == ["needs-human", "ready"], receiver.posts
    for p in receiver.posts:
        want = "sha256=" + hmac.new(SECRET.encode(), p["raw"], hashlib.sha256).hexdigest()
        assert p["signature"] == want
        assert p["body"]["task"] == task and p["path"] == "/hook"
        assert "sk-ant-api03" not in p["raw"].decode()  # redacted
    ready = next(p["body"] for p in receiver.posts if p["body"]["event"] == "ready")
    assert ready["status"] == "ready" and ready["candidate"]
    human = next(p["body"] for p in receiver.posts if p["body"]["event"] == "needs-human")
    assert "budget" in human["reason"]
    got = _wait_notifications(repo, task, 2)
    assert all(n["ok"] and n["attempts"] == 1 and n["status_code"] == 204 for n in got), got
    # Deduplicated per task and event: a second delivery of the same event is not sent.
    from gitsup.attention.fold import Tracker
    from gitsup.attention.notify import Notifier

    tdir = common_dir(repo) / "sup" / "tasks" / task
    n = Notifier(
        NotifyConfig(webhook=receiver.url), task, tdir, tdir / "events.jsonl", Tracker(task)
    )
    n.fire("ready", {"seq": 1})
    n.join(10)
    assert sorted(receiver.events()) == ["needs-human", "ready"]


def test_parked_task_notifies_parked_and_the_command_gets_the_json(
    repo: Path, tmp: Path, receiver: Receiver
) -> None:
    sink = tmp / "notified.jsonl"
    script = tmp / "notify.py"
    script.write_text(f"import sys\nopen({str(sink)!r}, 'a').write(sys.stdin.read() + '\\n')\n")
    git(repo, "config", "sup.notify.webhook", receiver.url)
    git(repo, "config", "--add", "sup.notify.command", PYTHON)
    git(repo, "config", "--add", "sup.notify.command", str(script))
    worker = write_worker(tmp, COMMIT_WITHOUT_FIX)
    res = run_sup(
        repo, "start", "fix add", "--worker", worker, "--check", PYTEST_CHECK, "--review", "none"
    )
    assert res.returncode == 3, res.stderr  # parked
    (task,) = task_ids(repo)
    assert receiver.events() == ["parked"]
    assert receiver.posts[0]["signature"] is None  # no secret configured: unsigned
    lines = [json.loads(x) for x in sink.read_text().splitlines() if x.strip()]
    assert [x["event"] for x in lines] == ["parked"]
    assert lines[0]["task"] == task and lines[0]["status"] == "parked"
    assert lines[0]["reasons"], lines[0]
    got = _wait_notifications(repo, task, 2)
    assert {n["channel"] for n in got} == {"command", "webhook"} and all(n["ok"] for n in got)


@pytest.mark.parametrize("mode", ["500", "hang"])
def test_failing_receiver_is_retried_boundedly_and_the_task_ends_normally(
    repo: Path, tmp: Path, receiver: Receiver, mode: str
) -> None:
    receiver.mode = mode
    git(repo, "config", "sup.notify.webhook", receiver.url)
    git(repo, "config", "sup.notify.retries", "2")
    git(repo, "config", "sup.notify.timeout", "0.5")
    git(repo, "config", "sup.notify.events", "ready failed")
    worker = write_worker(tmp, FIX_AND_COMMIT)
    t0 = time.monotonic()
    res = run_sup(
        repo,
        "start",
        "fix add",
        "--worker",
        worker,
        "--check",
        PYTEST_CHECK,
        "--review",
        "none",
        timeout=60,
    )
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    (task,) = task_ids(repo)
    record = json.loads((common_dir(repo) / "sup" / "tasks" / task / "task.json").read_text())
    assert record["status"] == "ready"
    # 1 try + 2 retries, with backoff between them; then given up (and the process exits).
    assert receiver.events() == ["ready"] * 3
    gaps = [b["at"] - a["at"] for a, b in zip(receiver.posts, receiver.posts[1:], strict=False)]
    assert gaps[1] > gaps[0] * 1.3, gaps  # exponential backoff
    (n,) = _wait_notifications(repo, task, 1)
    assert n["ok"] is False and n["attempts"] == 3
    assert (
        (n["status_code"] == 500)
        if mode == "500"
        else ("timed out" in n["error"] or "Timeout" in n["error"])
    )
    assert took < 30


def test_retries_are_capped_at_ten() -> None:
    for given, kept in (("99", 10), ("10", 10), ("4", 4), ("0", 0), ("-3", 0)):
        cfg = load_config({}, lambda k, v=given: [v] if k == "sup.notify.retries" else [])
        assert cfg.retries == kept, given
    assert load_config({"retries": 1000}, lambda k: []).retries == 10
    assert load_config({}, lambda k: []).retries == 3


def _post_to(receiver: Receiver, tmp: Path, retries: int) -> dict[str, Any]:
    """One webhook delivery as a task's notifier makes it, with no wait between tries."""
    cfg = NotifyConfig(webhook=receiver.url, retries=retries, backoff=0.0, timeout=5.0)
    notifier = Notifier(cfg, "t", tmp, tmp / "events.jsonl", Tracker("t"))
    return notifier._post(b'{"event": "ready"}')


@pytest.mark.parametrize("code", ["500", "503", "408", "429"])
def test_a_receiver_that_may_recover_gets_every_retry(
    tmp: Path, receiver: Receiver, code: str
) -> None:
    receiver.mode = code
    retries = load_config({}, lambda k: ["50"] if k == "sup.notify.retries" else []).retries
    got = _post_to(receiver, tmp, retries)
    assert len(receiver.posts) == 11 and got["attempts"] == 11, got
    assert got["ok"] is False and got["status_code"] == int(code)


@pytest.mark.parametrize("code", ["400", "401", "404", "410", "422"])
def test_a_receiver_that_refuses_the_payload_gets_it_once(
    tmp: Path, receiver: Receiver, code: str
) -> None:
    receiver.mode = code
    got = _post_to(receiver, tmp, 10)
    assert len(receiver.posts) == 1 and got["attempts"] == 1, got
    assert got["ok"] is False and got["status_code"] == int(code)


def test_bad_notify_config_is_recorded_and_never_fails_the_task(repo: Path, tmp: Path) -> None:
    git(repo, "config", "sup.notify.webhook", "file:///etc/passwd")
    worker = write_worker(tmp, FIX_AND_COMMIT)
    res = run_sup(
        repo, "start", "fix add", "--worker", worker, "--check", PYTEST_CHECK, "--review", "none"
    )
    assert res.returncode == 0, res.stderr
    (task,) = task_ids(repo)
    bad = [e["data"] for e in _events(repo, task) if e["type"] == "notification"]
    assert bad and bad[0]["ok"] is False and "not an http(s) URL" in bad[0]["error"]


def test_config_merges_spec_over_git_config() -> None:
    values = {
        "sup.notify.webhook": ["http://127.0.0.1:9/a"],
        "sup.notify.events": ["ready,parked", "failed"],
        "sup.notify.command": ["notify-send", "gitsup"],
    }
    cfg = load_config({"webhook": "http://127.0.0.1:9/b"}, lambda k: values.get(k, []))
    assert cfg.webhook == "http://127.0.0.1:9/b"
    assert cfg.events == ("ready", "parked", "failed")
    assert cfg.command == ("notify-send", "gitsup")
    from gitsup.errors import GitsupError

    with pytest.raises(GitsupError, match="unknown event"):
        load_config({"events": ["done"]}, lambda k: [])


def test_apprise_services_get_the_event(repo: Path, tmp: Path, receiver: Receiver) -> None:
    pytest.importorskip("apprise")
    host = receiver.url.removeprefix("http://")
    git(repo, "config", "sup.notify.apprise", f"json://{host}")
    worker = write_worker(tmp, FIX_AND_COMMIT)
    res = run_sup(
        repo, "start", "fix add", "--worker", worker, "--check", PYTEST_CHECK, "--review", "none"
    )
    assert res.returncode == 0, res.stderr
    (task,) = task_ids(repo)
    got = _wait_notifications(repo, task, 1)
    assert got and got[0]["channel"] == "apprise" and got[0]["ok"] is True, got
    (post,) = receiver.posts
    assert post["body"]["title"] == f"gitsup: task {task} ready"
    assert "status ready" in post["body"]["message"]


@pytest.mark.parametrize("point", ["before_task_finished", "after_task_finished"])
def test_a_task_completed_by_recover_is_notified(
    repo: Path, tmp: Path, receiver: Receiver, point: str
) -> None:
    """The supervisor dies as the task ends, before its `ready` notification was sent (or
    after it began one it never recorded): `recover` sends it once, with the task's counters."""
    worker = write_worker(tmp, FIX_AND_COMMIT)
    spec = tmp / "task.toml"
    spec.write_text(
        f'goal = "fix add"\n[worker]\nkind = "process"\nargv = {json.dumps(worker.split())}\n'
        f'[review]\nkind = "none"\n[notify]\nwebhook = "{receiver.url}"\n'
    )
    res = run_sup(
        repo, "start", "--spec", str(spec), "--check", PYTEST_CHECK, env={"GITSUP_FAULT": point}
    )
    assert res.returncode == -9, res.stderr
    (task,) = task_ids(repo)
    res = run_sup(repo, "recover", task, "--json", "-q")
    assert res.returncode == 0, res.stderr
    record = json.loads(res.stdout)
    # Delivery is at least once: at `after_task_finished` the dead supervisor's own post may
    # have gone out before it died, unrecorded. A repeat carries the same delivery id.
    posts = receiver.posts
    if point == "before_task_finished":
        assert len(posts) == 1, posts
    assert {p["body"]["event"] for p in posts} == {"ready"} and len(posts) <= 2, posts
    assert {p["body"]["delivery"] for p in posts} == {f"{task}/ready"}, posts
    assert {p["delivery"] for p in posts} == {f"{task}/ready"}, posts
    body = posts[-1]["body"]
    assert (body["task"], body["status"], body["state"]) == (task, "ready", "completed")
    assert body["candidate"] == record["candidate"] and body["turns"] == 1
    assert [n["event"] for n in _wait_notifications(repo, task, 1)] == ["ready"]
    sent = len(receiver.posts)
    assert run_sup(repo, "recover", task).returncode != 0  # already ended: nothing more is sent
    assert len(receiver.posts) == sent
