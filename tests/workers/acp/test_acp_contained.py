"""The ACP agent (Claude Code's ACP adapter and the CLI it runs) inside the task sandbox
and behind the egress gate, like the claude worker: the attacks of
tests/workers/claude/test_sandbox_claude.py and tests/workers/claude/test_egress_claude.py, written by the
scripted model and run through commands the gate allows."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import git, run_sup
from tests.helpers.require import requires
from tests.helpers.supervised import Run, hostile_turn
from tests.workers.acp.test_acp_supervised import supervise
from tests.workers.claude.test_egress_claude import ATTACK as NET_ATTACK
from tests.workers.claude.test_egress_claude import host_listener
from tests.workers.claude.test_sandbox_claude import ATTACK as FS_ATTACK

__all__ = ["host_listener", "supervise"]  # fixtures

pytestmark = pytest.mark.claude


def _tool_results(run: Run) -> list[str]:
    return [
        json.dumps(b.get("content"))
        for req in run.model.requests
        for m in req.body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


@requires("landlock", "mountns")
def test_agent_written_code_stays_inside_the_sandbox(
    supervise: Callable[..., Run],
    repo: Path,
    tmp_path: Path,
    hermetic_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)
    home = hermetic_env
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("secret key\n")
    common = repo / ".git"
    assert run_sup(repo, "init").returncode == 0
    before = {
        "config": (common / "config").read_bytes(),
        "main": git(repo, "rev-parse", "refs/heads/main"),
        "gitconfig": (home / ".gitconfig").read_bytes(),
    }
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "host.sock"))
    listener.listen(1)
    listener.settimeout(0.5)
    source = (
        f"COMMON = {str(common)!r}\nHOME = {str(home)!r}\nSOCK = {str(tmp_path / 'host.sock')!r}\n"
        + FS_ATTACK
    )
    steps = hostile_turn(
        "test_attack.py", source, "python3 -m unittest -q test_attack", "Fixed and committed."
    )
    try:
        run = supervise({"default": {"steps": steps}})
        with pytest.raises(OSError):
            listener.accept()  # nobody connected
    finally:
        listener.close()
    rec = run.record
    assert rec.status.value == "ready", rec.reasons
    assert run.of("worker_started")[0]["sandbox"]["enforced"] is True
    shown = git(repo, "show", f"{rec.candidate}:attack.json", check=False)
    assert shown, _tool_results(run)
    results = json.loads(shown)
    assert len(results) == 5 and all(v.startswith("blocked") for v in results.values()), results
    assert (common / "config").read_bytes() == before["config"]
    assert git(repo, "rev-parse", "refs/heads/main") == before["main"]
    assert (home / ".gitconfig").read_bytes() == before["gitconfig"]


@requires("netns")
def test_hostile_model_cannot_get_out_of_the_gate(
    supervise: Callable[..., Run], host_listener: tuple[int, list[int]]
) -> None:
    port, accepted = host_listener
    steps = hostile_turn(
        "test_net.py",
        NET_ATTACK.format(port=port),
        "python3 -m pytest -q -s -p no:cacheprovider test_net.py",
    )
    r = supervise(
        {"default": steps},
        isolation={"network": "none", "egress": ["registry.invalid:443"]},
    )
    found = [o for o in _tool_results(r) if "NETRESULT" in o]
    assert found, _tool_results(r)
    raw = json.loads(found[0])
    raw = raw if isinstance(raw, str) else "".join(c.get("text", "") for c in raw)
    line = next(x for x in raw.splitlines() if x.startswith("NETRESULT"))
    res = json.loads(line.split(" ", 1)[1])
    # the gate's refusal says what it refused and how to allow it (its reason phrase)
    assert "refused by the gitsup egress gate" in res["proxy other"], res
    res = {k: v.split(": network ", 1)[0] for k, v in res.items()}
    assert res == {
        "host": "failed: ConnectionRefusedError",
        "proxy other": "ok: HTTP/1.1 403 Forbidden",
        "proxy host": "ok: HTTP/1.1 403 Forbidden",
        "dns": "failed: gaierror",
    }, res
    assert accepted == []
    assert ("worker", "evil.invalid", 443) in [
        (d["who"], d["host"], d["port"]) for d in r.of("egress_refused")
    ]
    assert r.of("worker_started")[0]["network"]["mode"] == "gated"
    gate = [d for d in r.of("egress_summary") if d["who"] == "worker"]
    assert gate and gate[-1]["connections"] >= 1  # the model calls went through the gate
    assert r.record.status.value == "ready", r.record.reasons
