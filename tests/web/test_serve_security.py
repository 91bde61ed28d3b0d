"""`git sup serve` lets in only the holder of its token, from its own origin: no token, a
wrong Host or Origin, a state change by GET and a cross-site form post are all refused,
and a refused request changes nothing (a running task keeps running)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.conftest import PYTHON, run_sup
from tests.helpers.sup import task_ids, wait_for, write_worker
from tests.web.server import Served, bearer, cookie_of, csrf_of, request, serving

SLEEPER = "import time\ntime.sleep(600)\n"


def _start_sleeper(repo: Path, tmp: Path) -> str:
    worker = write_worker(tmp, SLEEPER, "sleeper.py")
    res = run_sup(repo, "start", "--detach", "sleep", "--worker", worker, "--review", "none", "-q")
    assert res.returncode == 0, res.stderr
    tid = res.stdout.strip().split()[-1]
    wait_for(lambda: _state(repo, tid) == "running", timeout=60, what="running")
    return tid


def _state(repo: Path, tid: str) -> str:
    res = run_sup(repo, "show", tid, "--json")
    return str(json.loads(res.stdout)["state"]) if res.returncode == 0 else ""


def test_every_request_needs_the_token(repo: Path) -> None:
    with serving(repo) as s:
        for path in (
            "/",
            "/task/20990101-000000",
            "/api/tasks",
            "/api/v1/tasks",
            "/events",
            "/static/page.js",
        ):
            got = request(s.base + path)
            assert got.status == 401, (path, got)
            assert got.headers.get("www-authenticate", got.headers.get("WWW-Authenticate"))
            wrong = request(s.base + path, headers={"Authorization": "Bearer " + "x" * 43})
            assert wrong.status == 401, path
        assert request(s.base + "/?token=" + "x" * 43).status == 401
        assert request(s.base + "/api/tasks?token=" + s.token).status == 401  # not for the API
        posted = request(s.base + "/api/tasks/20990101-000000/stop", method="POST", body=b"{}")
        assert posted.status == 401
        # With it: the Bearer header, or the cookie the first visit sets.
        got = request(s.base + "/api/tasks", headers=bearer(s))
        assert got.status == 200 and got.json() == {"api": 1, "tasks": []}
        first = request(s.url)
        assert first.status == 303 and first.headers["location"] == "/"  # the token leaves the URL
        cookie = first.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert request(s.base + "/", headers=cookie_of(s)).status == 200
        for path in ("/task/..%2F..%2Fetc", "/task/20990101-000000", "/static/..%2Fapp.py"):
            assert request(s.base + path, headers=bearer(s)).status == 404, path


def test_a_wrong_host_or_origin_is_refused(repo: Path) -> None:
    with serving(repo) as s:
        for path in ("/", "/api/tasks"):
            got = request(s.base + path, headers={**bearer(s), "Host": "attacker.example:80"})
            assert got.status == 421, path  # DNS rebinding
            port = s.base.rsplit(":", 1)[1]
            got = request(s.base + path, headers={**bearer(s), "Host": f"attacker.example:{port}"})
            assert got.status == 421, path
            got = request(s.base + path, headers={**bearer(s), "Origin": "http://attacker.example"})
            assert got.status == 403, path
            got = request(s.base + path, headers={**bearer(s), "Origin": s.base})
            assert got.status == 200, path


def test_a_state_change_by_get_and_a_cross_site_form_post_are_refused(
    repo: Path, tmp: Path
) -> None:
    tid = _start_sleeper(repo, tmp)
    with serving(repo) as s:
        stop = f"{s.base}/api/tasks/{tid}/stop"
        # By GET, even with the token: not a route.
        for headers in (bearer(s), cookie_of(s)):
            assert request(stop, headers=headers).status == 405
        page = request(f"{s.base}/task/{tid}", headers=cookie_of(s))
        assert page.status == 200
        csrf = csrf_of(page.body)
        form = {"Content-Type": "application/x-www-form-urlencoded", **cookie_of(s)}
        # A form on another site posts with the browser's cookie: refused by its Origin...
        got = request(
            stop, method="POST", body=b"x=1", headers={**form, "Origin": "http://attacker.example"}
        )
        assert got.status == 403
        # ...and without the page's CSRF token, even from an origin that looks like ours...
        got = request(stop, method="POST", body=b"x=1", headers={**form, "Origin": s.base})
        assert got.status == 403 and "CSRF" in got.json()["error"]
        got = request(
            stop,
            method="POST",
            body=b"x=1",
            headers={**form, "Origin": s.base, "X-Gitsup-CSRF": "0" * 64},
        )
        assert got.status == 403
        # ...and with no Origin at all (a browser always sends one with a POST).
        got = request(stop, method="POST", body=b"{}", headers={**form, "X-Gitsup-CSRF": csrf})
        assert got.status == 403
        assert _state(repo, tid) == "running"  # nothing was changed
        # The page's own request: taken.
        got = request(
            stop,
            method="POST",
            body=b"{}",
            headers={
                **cookie_of(s),
                "Origin": s.base,
                "X-Gitsup-CSRF": csrf,
                "Content-Type": "application/json",
            },
        )
        assert got.status == 200, got
        assert got.json()["task"]["state"] not in ("running",)
    assert _state(repo, tid) in ("stopped", "completed", "blocked", "failed")


def test_the_api_acts_with_the_bearer_token_and_says_why_not(repo: Path, tmp: Path) -> None:
    tid = _start_sleeper(repo, tmp)
    with serving(repo) as s:
        api = f"{s.base}/api/tasks/{tid}"
        got = request(api, headers=bearer(s))
        assert got.status == 200 and got.json()["task"]["id"] == tid
        assert request(f"{s.base}/api/tasks/20990101-000000", headers=bearer(s)).status == 404
        # The same refusals as the CLI (exit 2 there, 400 here).
        got = request(
            api + "/answer",
            method="POST",
            headers=bearer(s),
            body=json.dumps({"request_id": "nope", "decision": "allow"}).encode(),
        )
        assert got.status == 400 and "no open request 'nope'" in got.json()["error"]
        got = request(
            api + "/answer",
            method="POST",
            headers=bearer(s),
            body=json.dumps({"request_id": "nope", "decision": "maybe"}).encode(),
        )
        assert got.status == 400 and "allow or deny" in got.json()["error"]
        got = request(
            api + "/message",
            method="POST",
            headers=bearer(s),
            body=json.dumps({"text": "hi"}).encode(),
        )
        assert got.status == 400 and "cannot take messages" in got.json()["error"]
        got = request(api + "/continue", method="POST", headers=bearer(s), body=b"{}")
        assert got.status == 400 and "not paused on its budget" in got.json()["error"]
        got = request(api + "/stop", method="POST", headers=bearer(s), body=b"[1")
        assert got.status == 400 and "JSON" in got.json()["error"]
        assert _state(repo, tid) == "running"
        got = request(api + "/stop", method="POST", headers=bearer(s), body=b"")
        assert got.status == 200, got
        got = request(api + "/stop", method="POST", headers=bearer(s), body=b"")
        assert got.status == 400 and "already ended" in got.json()["error"]


def test_the_token_is_private_kept_and_replaced_on_demand(repo: Path) -> None:
    path = repo / ".git" / "sup" / "serve-token"
    with serving(repo) as s:
        first = s.token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == first
    with serving(repo) as s:
        assert s.token == first  # a bookmarked URL keeps working
    with serving(repo, "--new-token") as s:
        assert s.token != first
        assert (
            request(s.base + "/api/tasks", headers={"Authorization": f"Bearer {first}"}).status
            == 401
        )
    os.chmod(path, 0o644)
    res = run_sup(repo, "serve", timeout=30)
    assert res.returncode == 2 and "may be read by others" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--host", "0.0.0.0"], "--host 0.0.0.0: the token would cross the network in clear text"),
        (["--host", "0.0.0.0", "--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
        (["--public-url", "http://sup.example"], "--public-url 'http://sup.example'"),
        (["--port", "65536"], "--port 65536: a port is 0 to 65535"),
    ],
)
def test_serve_refuses_what_would_expose_the_token(repo: Path, args: list[str], says: str) -> None:
    res = run_sup(repo, "serve", *args, timeout=30)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith(f"git sup: error: {says}"), lines
    assert res.stdout == "" and "Traceback" not in res.stderr


def test_without_the_web_extra_serve_says_how_to_get_it(repo: Path, tmp: Path) -> None:
    # A Python that cannot import the web stack (as without `pip install 'gitsup[web]'`).
    site = tmp / "noweb"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoWeb:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('starlette', 'uvicorn', 'jinja2'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _NoWeb())\n"
    )
    env = {"PYTHONPATH": str(site)}
    check = run_sup(repo, "ls", "--json", env=env)  # the CLI itself needs none of it
    assert check.returncode == 0, check.stderr
    res = run_sup(repo, "serve", env=env, timeout=30)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "git sup: error: git sup serve needs the web extra: pip install 'gitsup[web]'"
    ]
    assert sys.executable and PYTHON  # the same interpreter as the console script
    assert task_ids(repo) == []


def _unused(s: Served) -> None:
    del s
