"""`python -m gitsup.demo.scripted_model` and `python -m gitsup.demo.scripted_openai`: each prints its
URL, answers on 127.0.0.1 until SIGTERM (then exits 0), and refuses a scenario it cannot
load with exit 2 and its own name on stderr."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

SCENARIO = {"scripts": {"default": {"steps": [{"text": "hello"}]}}}


@pytest.mark.parametrize(
    ("module", "post_path"),
    [
        ("gitsup.demo.scripted_model", "/v1/messages"),
        ("gitsup.demo.scripted_openai", "/v1/responses"),
    ],
)
def test_serves_until_sigterm(tmp_path: Path, module: str, post_path: str) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    p = subprocess.Popen(
        [sys.executable, "-m", module, str(scenario)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None
        url = urlsplit(p.stdout.readline().strip())
        assert url.hostname == "127.0.0.1" and url.port
        conn = http.client.HTTPConnection("127.0.0.1", url.port, timeout=30)
        conn.request("POST", "/nowhere", b"{}", {"content-type": "application/json"})
        assert conn.getresponse().status == 404
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", url.port, timeout=30)
        conn.request("POST", post_path, b"not json", {"content-type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 400 and resp.getheader("content-type") == "application/json"
        assert json.loads(resp.read())["error"]["type"] == "invalid_request_error"
        conn.close()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("module", ["gitsup.demo.scripted_model", "gitsup.demo.scripted_openai"])
def test_a_scenario_it_cannot_load_exits_2(tmp_path: Path, module: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run(
        [sys.executable, "-m", module, str(bad)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert r.stderr.startswith(module.rsplit(".", 1)[1] + ": ")
    assert r.stdout == ""
