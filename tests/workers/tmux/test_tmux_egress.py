"""The tmux TUI worker behind the egress gate (`network = "none"`): its model requests and
its http hooks reach the supervisor only through the gate; under `auto` it stays on the host
network and says so."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.host.contain import list_gitsup_netns, netns_available
from gitsup.spec import spec_from_mapping
from gitsup.state import Status
from gitsup.tasks.lifecycle import SupRepo, run_task
from tests.workers.tmux.conftest import seed_config
from tests.workers.tmux.test_tmux_worker import COMMIT_STEPS, events_of, tmux_spec

pytestmark = pytest.mark.skipif(netns_available() is not None, reason="no network namespaces")


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


def test_tui_under_auto_says_it_runs_on_the_host_network(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    model = scripted_model({"default": {"steps": COMMIT_STEPS}})
    config = seed_config(tmp / "claude-config")
    record = run_task(
        SupRepo.discover(repo), spec_from_mapping(tmux_spec(claude_bin, model, config), "test")
    )
    evs = events_of(repo, record.id)
    assert record.status == Status.READY, (record.reasons, evs[-15:])
    net = next(e for e in evs if e["type"] == "worker_started")["data"]["network"]
    assert net["mode"] == "host" and "tmux" in net["reason"], net
