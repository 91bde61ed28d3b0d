"""The tmux TUI worker behind the egress gate (`network = "none"` and `auto`): its model
requests and its http hooks reach the supervisor only through the gate, a process of its own
that outlives the supervisor (tests/workers/tmux/test_tmux_worker.py kills one)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.host.contain import list_gitsup_netns
from gitsup.host.procid import ProcessId
from gitsup.spec import spec_from_mapping
from gitsup.state import Status
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import run_task
from tests.helpers.require import requires
from tests.workers.tmux.conftest import seed_config
from tests.workers.tmux.test_tmux_worker import COMMIT_STEPS, events_of, tmux_spec

pytestmark = requires("netns")


def test_tui_completes_through_the_gate_with_network_none(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    model = scripted_model({"default": {"steps": COMMIT_STEPS}})
    config = seed_config(tmp / "claude-config")
    data = {**tmux_spec(claude_bin, model, config), "isolation": {"network": "none"}}
    record = run_task(SupRepo.discover(repo), spec_from_mapping(data, "test"))
    evs = events_of(repo, record.id)
    assert record.status == Status.READY, (record.reasons, evs[-15:])
    started = next(e for e in evs if e["type"] == "worker_started")["data"]
    net = started["network"]
    model_port = model.url.rsplit(":", 1)[1].rstrip("/")
    assert net["mode"] == "gated" and net["forward"] == [f"127.0.0.1:{model_port}"], net
    assert started["extra"]["netns"] == net["netns"]
    # the hooks answered every permission request through the gate's added forward
    decided = [e for e in evs if e["type"] == "permission_decided"]
    assert decided
    summary = [
        e["data"] for e in evs if e["type"] == "egress_summary" and e["data"]["who"] == "worker"
    ]
    assert summary and summary[0]["connections"] >= 2  # model + hook endpoint
    assert not [n for n in list_gitsup_netns() if n.label == record.id]


NET_CHECK = """
import json, os, socket

def test_net():
    r = {}
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", OTHER))
        r["direct"] = "connected"
    except OSError as exc:
        r["direct"] = "blocked: " + (exc.strerror or str(exc))
    finally:
        s.close()
    proxy = os.environ.get("HTTPS_PROXY", "")
    r["proxy"] = proxy
    s = socket.create_connection(("127.0.0.1", int(proxy.rsplit(":", 1)[1])), 5)
    s.sendall(("CONNECT 127.0.0.1:%d HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" % OTHER).encode())
    r["connect"] = s.recv(200).decode().split("\\r\\n")[0]
    s.close()
    with open(OUT, "w") as f:
        json.dump(r, f)
"""


def test_tui_under_auto_is_gated_and_reaches_only_its_model(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    """`network = "auto"`: the TUI runs in a gated namespace (its gate a process of its own):
    the model stand-in answers; another port of the host's 127.0.0.1 is refused, directly
    (nothing listens inside) and through the gate's proxy (answered 403 and logged)."""
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(4)
    other.settimeout(0.2)
    port = int(other.getsockname()[1])
    out = tmp / "net.json"
    source = f"OTHER = {port}\nOUT = {str(out)!r}\n" + NET_CHECK
    steps = [
        [
            {
                "type": "tool_use",
                "name": "Write",
                "input": {"file_path": "${CWD}/net_check.py", "content": source},
            }
        ],
        {"bash": "pytest -q -p no:cacheprovider net_check.py"},
        COMMIT_STEPS[0],
        {"bash": "git add -A && git commit -qm 'fix add'"},
        *COMMIT_STEPS[2:],
    ]
    model = scripted_model({"default": {"steps": steps}})
    config = seed_config(tmp / "claude-config")
    data = {
        **tmux_spec(claude_bin, model, config),
        "isolation": {"egress": ["registry.invalid:443"]},
    }
    try:
        record = run_task(SupRepo.discover(repo), spec_from_mapping(data, "test"))
        with pytest.raises(OSError):
            other.accept()  # nobody connected
    finally:
        other.close()
    evs = events_of(repo, record.id)
    assert record.status == Status.READY, (record.reasons, evs[-15:])
    started = next(e for e in evs if e["type"] == "worker_started")["data"]
    net = started["network"]
    assert net["mode"] == "gated" and net["connect"] == ["registry.invalid:443"], net
    gate = ProcessId.from_dict(started["extra"]["egress_gate"])
    assert gate is not None and not gate.alive()  # stopped at the task's end
    result = json.loads(out.read_text())
    assert result["direct"] == "blocked: Connection refused", result
    assert result["connect"].startswith("HTTP/1.1 403"), result
    refused = [e["data"] for e in evs if e["type"] == "egress_refused"]
    assert {"who": "worker", "host": "127.0.0.1", "port": port} in [
        {k: r[k] for k in ("who", "host", "port")} for r in refused
    ], refused
    # the gate's own log, which the supervisor read into those events
    log = Path(started["extra"]["egress_gate"]["log"])
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert {"event": "refused", "host": "127.0.0.1", "port": port} in [
        {k: x.get(k) for k in ("event", "host", "port")} for x in lines
    ], lines
    summary = [
        e["data"] for e in evs if e["type"] == "egress_summary" and e["data"]["who"] == "worker"
    ]
    assert summary and summary[0]["connections"] >= 2 and summary[0]["refused"] >= 1, summary
    assert not [n for n in list_gitsup_netns() if n.label == record.id]
