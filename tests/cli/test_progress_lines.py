"""What `git sup start` prints while it runs: refused connections named as such, once each
with a count, the setting that allows them; the outcome after the terminal transition; event
fields never cut inside a value."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from gitsup.cli.task_render import brief
from tests.conftest import GIT_SUP, git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, write_worker

KNOCK = (
    """
import os, socket
port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
for _ in range(12):
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.sendall(b"CONNECT 127.0.0.1:9 HTTP/1.1\\r\\nHost: 127.0.0.1:9\\r\\n\\r\\n")
    s.recv(1024)
    s.close()
"""
    + FIX_AND_COMMIT
)


def test_refused_connections_are_named_once_with_a_count(repo: Path, tmp: Path) -> None:
    # a host-name endpoint gives the task the gate's CONNECT proxy (nothing connects to it)
    git(repo, "config", "--add", "sup.egress", "registry.example.invalid:443")
    worker = write_worker(tmp, KNOCK)
    res = run_sup(repo, "start", "fix", "--worker", worker, "--review", "none", timeout=120)
    assert res.returncode == 0, res.stderr
    err = res.stderr
    assert err.count("127.0.0.1:9 refused by the egress gate") == 1, err
    assert "git config --add sup.egress 127.0.0.1:9" in err
    assert "12 refused (repeated: 127.0.0.1:9 x12)" in err, err


def test_a_stopped_task_says_stopped_before_its_outcome(repo: Path, tmp: Path) -> None:
    marker = tmp / "started"
    worker = write_worker(
        tmp,
        f"import pathlib, time\npathlib.Path({str(marker)!r}).write_text('x')\ntime.sleep(60)\n",
    )
    p = subprocess.Popen(
        [GIT_SUP, "start", "sleep", "--worker", worker, "--review", "none"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    task = next((repo / ".git" / "sup" / "tasks").iterdir()).name
    stopper = threading.Thread(target=run_sup, args=(repo, "stop", task))
    stopper.start()
    _, err = p.communicate(timeout=120)
    stopper.join()
    assert p.returncode == 5, err
    assert "-> stopped" in err and "candidate parked" in err, err
    assert err.index("-> stopped") < err.index("candidate parked"), err


def test_event_fields_are_cut_between_values() -> None:
    data = {"who": "worker", "path": "/x/" + "y" * 100, **{f"k{i}": i for i in range(40)}}
    text = brief(data)
    assert text.startswith('who="worker" path=<str, 105 chars> k0=0 k1=1 ')
    assert text.endswith(" more)") and len(text) < 200
    shown = text.split(" (+")[0].split(" ")[4:]
    assert all(p.split("=")[1] == p.split("=")[0][1:] for p in shown), shown


FETCH = (
    """
import os, urllib.request
proxy = os.environ["HTTPS_PROXY"]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": proxy}))
try:
    opener.open("https://pypi.example.invalid/simple/", timeout=10)
    said = "fetched"
except Exception as exc:
    said = str(exc)
open(os.path.join(os.environ["TMPDIR"], "said.txt"), "w").write(said)
print(said)
"""
    + FIX_AND_COMMIT
)


def test_the_agent_reads_what_the_gate_refused_and_how_to_allow_it(repo: Path, tmp: Path) -> None:
    """A client in the task (urllib, as pip uses) sees the gate's words in its own error: the
    endpoint, that the egress gate refused it, and the setting that allows it."""
    git(repo, "config", "--add", "sup.egress", "registry.example.invalid:443")
    worker = write_worker(tmp, FETCH)
    res = run_sup(repo, "start", "fix", "--worker", worker, "--review", "none", timeout=120)
    assert res.returncode == 0, res.stderr
    task = next((repo / ".git" / "sup" / "tasks").iterdir())
    said = (task / "sandbox" / "tmp" / "said.txt").read_text()
    assert "403" in said and "refused by the gitsup egress gate" in said, said
    assert "git config --add sup.egress pypi.example.invalid:443" in said, said
    assert "pypi.example.invalid:443 refused by the egress gate" in res.stderr
