"""The egress gate and network namespaces, with the real kernel and real processes.

Attacks run the way a hostile task would run them: a script executed inside the namespace,
as an unprivileged user (what the sandbox leaves a task), against listeners on the host's
127.0.0.1 that this test starts. No address outside 127.0.0.0/8 is ever contacted.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitsup.errors import GitsupError
from gitsup.host.contain import bootstrap_argv, list_gitsup_netns
from gitsup.host.egress import (
    EgressGate,
    EgressPlan,
    Endpoint,
    make_plan,
    model_endpoint,
    parse_endpoint,
)
from gitsup.host.egress_gate import gated_namespace
from gitsup.host.procid import ProcessId
from gitsup.spec import spec_from_mapping
from gitsup.store.events import Event
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.lifecycle import run_task
from tests.conftest import git, run_sup
from tests.helpers.net import Listener
from tests.helpers.require import requires

pytestmark = requires("netns")

NOBODY = 65534


class Echo:
    """A TCP server on the host's 127.0.0.1 that answers `echo:<what it got>`."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with c:
                data = c.recv(1024)
                c.sendall(b"echo:" + data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def echo() -> Iterator[Echo]:
    e = Echo()
    yield e
    e.close()


@pytest.fixture
def other() -> Iterator[Echo]:
    e = Echo()
    yield e
    e.close()


# The hostile task: drops to nobody (as the sandbox does), then tries every way out and
# prints one JSON object of outcomes.
ATTACK = r"""
import ctypes, json, os, socket, sys
import encodings.idna  # noqa: F401  (loaded while the interpreter's files are still readable)
args = json.loads(sys.argv[1])
if os.getuid() == 0:
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
out = {}
def connect(port, send=b"hi"):
    s = socket.create_connection(("127.0.0.1", port), 2)
    s.sendall(send)
    data = s.recv(1024)
    s.close()
    return data.decode("latin-1")
def attempt(name, fn):
    try:
        out[name] = "ok: " + str(fn())
    except Exception as exc:
        out[name] = "failed: " + type(exc).__name__ + ": " + str(exc)
for name, port in args.get("ports", {}).items():
    attempt(name, lambda port=port: connect(port))
proxy = os.environ.get("HTTPS_PROXY")
if proxy:
    pport = int(proxy.rsplit(":", 1)[1])
    for target in args.get("connect", []):
        attempt("CONNECT " + target, lambda t=target: connect(
            pport, f"CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n".encode()).split("\r\n")[0])
    attempt("GET via proxy", lambda: connect(
        pport, b"GET http://plain.invalid/ HTTP/1.1\r\nHost: plain.invalid\r\n\r\n").split("\r\n")[0])
attempt("dns", lambda: socket.getaddrinfo("example.com", 443))
attempt("own listener", lambda: (lambda s: (s.bind(("127.0.0.1", 0)), s.listen(1),
        socket.create_connection(s.getsockname(), 2).close(), "reached")[-1])(socket.socket()))
def back_to_host():
    fd = os.open("/proc/1/ns/net", os.O_RDONLY)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, 0x40000000) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return "entered the host namespace"
attempt("setns host", back_to_host)
print(json.dumps(out))
"""


def run_attack(netns: str, env: dict[str, str], args: dict[str, Any]) -> dict[str, str]:
    res = subprocess.run(
        bootstrap_argv([sys.executable, "-c", ATTACK, json.dumps(args)], cgroup=None, netns=netns),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    out: dict[str, str] = json.loads(res.stdout)
    return out


def test_endpoints_and_plans() -> None:
    assert model_endpoint({}) == Endpoint("api.anthropic.com", 443)
    assert model_endpoint({"ANTHROPIC_BASE_URL": "http://127.0.0.1:8123"}).loopback
    assert model_endpoint({"ANTHROPIC_BASE_URL": "https://gw.example:8443/v1"}) == Endpoint(
        "gw.example", 8443
    )
    with pytest.raises(GitsupError, match="plain http"):
        model_endpoint({"ANTHROPIC_BASE_URL": "http://gw.example/"})
    with pytest.raises(GitsupError):
        model_endpoint({"ANTHROPIC_BASE_URL": "file:///etc/passwd"})
    assert parse_endpoint("[::1]:80") == Endpoint("::1", 80)
    for bad in ("example.com", ":443", "h:0", "h:99999", "h:x"):
        with pytest.raises(GitsupError):
            parse_endpoint(bad)
    plan = make_plan(
        [Endpoint("127.0.0.1", 9), Endpoint("Reg.Example", 443), Endpoint("localhost", 9)]
    )
    assert plan == EgressPlan((9,), (Endpoint("Reg.Example", 443),))


def _listen_on(port: int) -> Listener | None:
    """A counting listener on the host's 127.0.0.1:`port`, or None when the port is taken
    (the probe from inside still runs)."""
    try:
        return Listener(port=port)
    except OSError:
        return None


@pytest.fixture
def model_and_neighbours() -> Iterator[tuple[Echo, dict[str, Listener]]]:
    """An Echo as the model, with counting listeners on the ports right below and above it."""
    for _ in range(50):
        e = Echo()
        near = {"model-1": _listen_on(e.port - 1), "model+1": _listen_on(e.port + 1)}
        if all(near.values()):
            yield e, {k: v for k, v in near.items() if v is not None}
            e.close()
            for li in near.values():
                assert li is not None
                li.close()
            return
        e.close()
        for li in near.values():
            if li is not None:
                li.close()
    raise AssertionError("no free port pair around any model port")


# ports a gate could plausibly forward besides the model's
WELL_KNOWN = {"ssh": 22, "http": 80, "https": 443}


def test_agent_reaches_only_its_model_port(
    model_and_neighbours: tuple[Echo, dict[str, Listener]],
) -> None:
    """The agent reaches the model's port and nothing else on the host: not the ports next to
    it, not the well-known ones, not a host listener; each is a listener on the host's
    127.0.0.1 that counts who reached it."""
    echo, near = model_and_neighbours
    host = Listener()
    known = {name: _listen_on(port) for name, port in WELL_KNOWN.items()}
    env = {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{echo.port}"}
    ports = {
        "model": echo.port,
        "model-1": echo.port - 1,
        "model+1": echo.port + 1,
        "host": host.port,
        **WELL_KNOWN,
    }
    try:
        with gated_namespace("egress-test", env) as net:
            assert net.env == {}  # a loopback model needs no proxy
            out = run_attack(net.netns, net.env, {"ports": ports})
            assert net.gate.forwarded == 1
            closed = _closed_records(net.gate.log)
    finally:
        host.close()
        for li in known.values():
            if li is not None:
                li.close()
    assert out["model"] == "ok: echo:hi", out
    for name in ports.keys() - {"model"}:
        assert out[name].startswith("failed: ConnectionRefusedError"), (name, out)
    assert out["dns"].startswith("failed: gaierror"), out
    assert out["own listener"] == "ok: reached", out
    assert out["setns host"].startswith("failed: PermissionError"), out
    # from outside: only the model was reached, once
    assert echo.accepted == 1
    reached = {
        "host": host.reached,
        **{k: li.reached for k, li in near.items()},
        **{k: li.reached for k, li in known.items() if li is not None},
    }
    assert set(reached.values()) == {0}, reached
    assert not os.path.exists(net.netns)  # removed with the gate
    # the gate's log says how the one connection ended: the client's "hi" up, the echo
    # down, each direction ended by its sender closing
    assert closed == [
        {
            "event": "closed", "target": f"127.0.0.1:{echo.port}", "first": closed[0]["first"],
            "up": "eof", "up_bytes": 2, "up_ms": closed[0]["up_ms"],
            "down": "eof", "down_bytes": 7, "down_ms": closed[0]["down_ms"],
        }
    ], closed  # fmt: skip


def _closed_records(log: Path) -> list[dict[str, Any]]:
    """The gate's "closed" records, once there is one (the gate writes it when both
    directions have ended, a moment after the client closed)."""
    deadline = time.monotonic() + 10
    while True:
        recs = [json.loads(line) for line in log.read_text().splitlines()]
        closed = [r for r in recs if r.get("event") == "closed"]
        if closed or time.monotonic() > deadline:
            return closed
        time.sleep(0.05)


def test_connect_proxy_allows_listed_endpoints_only_and_reports_refusals(
    model_and_neighbours: tuple[Echo, dict[str, Listener]], other: Echo
) -> None:
    from gitsup.host.contain import isolated_netns

    echo, near = model_and_neighbours
    refused: list[tuple[str, int, str]] = []
    # a loopback CONNECT target stands in for a remote host (never contact another address)
    plan = EgressPlan(connect=(Endpoint("127.0.0.1", echo.port),))
    known = {name: _listen_on(port) for name, port in WELL_KNOWN.items()}
    own: Listener | None = None
    with isolated_netns("egress-test") as ns:
        gate = EgressGate(ns, plan, lambda h, p, r: refused.append((h, p, r))).start()
        try:
            env = gate.env()
            assert env["HTTPS_PROXY"].startswith("http://127.0.0.1:")
            assert "127.0.0.1" in env["NO_PROXY"]
            # the host's port with the proxy's number: the gate must not forward its own port
            own = _listen_on(gate.proxy_port or 0)
            # the allowed host's other ports, the proxy's own, the well-known ones: refused
            others = [echo.port - 1, echo.port + 1, gate.proxy_port, *WELL_KNOWN.values()]
            out = run_attack(
                ns,
                env,
                {
                    "ports": {"host": other.port, **WELL_KNOWN},
                    "connect": [
                        f"127.0.0.1:{other.port}",
                        *(f"127.0.0.1:{p}" for p in others),
                        f"localhost:{echo.port}",
                        "evil.invalid:443",
                        "nonsense",
                    ],
                },
            )
            # an allowed CONNECT: the tunnel carries bytes both ways
            s = _connect_inside(ns, gate.proxy_port or 0)
            s.sendall(f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode())
            assert s.recv(1024).startswith(b"HTTP/1.1 200")
            s.sendall(b"through")
            assert s.recv(1024) == b"echo:through"
            s.close()
        finally:
            gate.close()
            for li in [own, *known.values()]:
                if li is not None:
                    li.close()
    for name in ("host", *WELL_KNOWN):
        assert out[name].startswith("failed: ConnectionRefusedError"), (name, out)
    for p in (other.port, *others):
        assert out[f"CONNECT 127.0.0.1:{p}"].startswith("ok: HTTP/1.1 403 Forbidden"), (p, out)
    # the allowed endpoint by another name is another endpoint
    assert out[f"CONNECT localhost:{echo.port}"].startswith("ok: HTTP/1.1 403 Forbidden"), out
    # from outside: nothing but the test's own tunnel reached any listener
    assert echo.accepted == 1
    reached = {
        "own port": own.reached if own is not None else 0,
        **{k: li.reached for k, li in near.items()},
        **{k: li.reached for k, li in known.items() if li is not None},
    }
    assert set(reached.values()) == {0}, reached
    assert out["CONNECT evil.invalid:443"] == (
        "ok: HTTP/1.1 403 Forbidden: network evil.invalid:443 refused by the gitsup egress gate; "
        "allow it with git config --add sup.egress evil.invalid:443"
    ), out
    assert out["CONNECT nonsense"] == "ok: HTTP/1.1 400 Bad Request", out
    assert out["GET via proxy"] == "ok: HTTP/1.1 405 Method Not Allowed", out
    assert other.accepted == 0
    assert ("127.0.0.1", other.port, "not an allowed egress endpoint") in refused
    assert ("evil.invalid", 443, "not an allowed egress endpoint") in refused
    assert ("plain.invalid", 80, "GET through the proxy (only CONNECT)") in refused
    assert len(refused) == 4 + len(others) + 1 and gate.refused == len(refused)


def _connect_inside(netns: str, port: int) -> socket.socket:
    """A client socket created inside the namespace (from a thread that entered it)."""
    import ctypes

    box: list[socket.socket] = []

    def run() -> None:
        fd = os.open(netns, os.O_RDONLY)
        assert ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) == 0
        os.close(fd)
        box.append(socket.create_connection(("127.0.0.1", port), 5))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return box[0]


def test_added_forward_and_gate_close_ends_tunnels(echo: Echo) -> None:
    with gated_namespace("egress-test", {}, model=False) as net:
        assert net.gate.plan.empty and net.env == {}
        net.gate.add_forward(echo.port)
        s = _connect_inside(net.netns, echo.port)
        s.sendall(b"late")
        assert s.recv(1024) == b"echo:late"
        s.close()
    assert not os.path.exists(net.netns)


# --- through the supervisor -------------------------------------------------------------


PROBE = r"""
import json, socket, sys
def reach(port):
    try:
        socket.create_connection(("127.0.0.1", port), 2).close()
        return True
    except OSError:
        return False
own = socket.socket(); own.bind(("127.0.0.1", 0)); own.listen(1)
print(json.dumps({"own": reach(own.getsockname()[1]),
                  **{str(p): reach(p) for p in map(int, sys.argv[1:])}}))
"""


def _run(repo: Path, tmp_path: Path, ports: list[int], **extra: Any) -> tuple[Any, list[Event]]:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    args = " ".join(str(p) for p in ports)
    worker = tmp_path / "w.sh"
    worker.write_text(
        f"#!/bin/sh\n{sys.executable} {probe} {args} > net.json\n"
        "echo 'def add(a, b):\n    return a + b' > calc.py\ngit add -A && git commit -qm fix\n"
    )
    worker.chmod(0o755)
    data: dict[str, Any] = {
        "goal": "g",
        "worker": {"kind": "process", "argv": [str(worker)]},
        "review": {"kind": "none"},
        "checks": [{"name": "net", "argv": [sys.executable, str(probe), *map(str, ports)]}],
        **extra,
    }
    events: list[Event] = []
    rec = run_task(SupRepo.discover(repo), spec_from_mapping(data), on_event=events.append)
    return rec, events


def test_process_worker_and_check_are_loopback_only_by_default(
    repo: Path, tmp_path: Path, echo: Echo
) -> None:
    rec, events = _run(repo, tmp_path, [echo.port])
    assert rec.status.value == "ready", rec.reasons
    seen = json.loads(git(repo, "show", f"{rec.candidate}:net.json"))
    assert seen == {"own": True, str(echo.port): False}
    check = json.loads(rec.checks[0].output_tail)
    assert check == {"own": True, str(echo.port): False}
    started = next(e.data for e in events if e.type == "worker_started")
    assert started["network"]["mode"] == "loopback"
    assert echo.accepted == 0
    assert not [n for n in list_gitsup_netns() if n.label == rec.id]  # all removed


def test_egress_allow_list_from_spec_and_git_config(
    repo: Path, tmp_path: Path, echo: Echo, other: Echo
) -> None:
    third = Echo()
    try:
        git(repo, "config", "--add", "sup.egress", f"127.0.0.1:{other.port}")
        rec, events = _run(
            repo,
            tmp_path,
            [echo.port, other.port, third.port],
            isolation={"egress": [f"127.0.0.1:{echo.port}"]},
        )
        assert rec.status.value == "ready", rec.reasons
        want = {"own": True, str(echo.port): True, str(other.port): True, str(third.port): False}
        assert json.loads(git(repo, "show", f"{rec.candidate}:net.json")) == want
        assert json.loads(rec.checks[0].output_tail) == want
        started = next(e.data for e in events if e.type == "worker_started")
        assert started["network"]["mode"] == "gated"
        assert sorted(started["network"]["forward"]) == sorted(
            [f"127.0.0.1:{echo.port}", f"127.0.0.1:{other.port}"]
        )
        assert third.accepted == 0
    finally:
        third.close()


def test_network_host_is_the_opt_out(repo: Path, tmp_path: Path, echo: Echo) -> None:
    rec, events = _run(repo, tmp_path, [echo.port], isolation={"network": "host"})
    assert json.loads(git(repo, "show", f"{rec.candidate}:net.json"))[str(echo.port)] is True
    started = next(e.data for e in events if e.type == "worker_started")
    assert started["network"]["mode"] == "host"


def test_bad_egress_entry_is_rejected_before_anything_runs(repo: Path, tmp_path: Path) -> None:
    spec = tmp_path / "t.toml"
    spec.write_text('goal = "g"\n[isolation]\negress = ["no-port-here"]\n')
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q")
    assert res.returncode != 0 and "host:port" in res.stderr, res.stderr


def test_doctor_lists_and_removes_a_dead_supervisors_namespace(
    repo: Path, tmp_path: Path, echo: Echo
) -> None:
    from pyroute2 import netns

    rec, _ = _run(repo, tmp_path, [echo.port])
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"gitsup-{rec.id}-{dead.pid}-abcdef"
    netns.create(name)
    try:
        res = run_sup(repo, "doctor", "--json")
        found = [f for f in json.loads(res.stdout) if f["kind"] == "orphan-netns"]
        assert found and found[0]["task"] == rec.id and name in found[0]["detail"]
        res = run_sup(repo, "doctor", "--fix", "--json")
        fixed = [f for f in json.loads(res.stdout) if f["kind"] == "orphan-netns"]
        assert fixed[0]["fixed"] == "removed"
        assert not os.path.exists(f"/var/run/netns/{name}")
        text = run_sup(repo, "doctor").stdout
        assert text.startswith("network: isolated by default")
    finally:
        if os.path.exists(f"/var/run/netns/{name}"):
            netns.remove(name)


def test_a_bad_sup_egress_entry_fails_the_task_instead_of_opening_the_network(
    repo: Path, tmp_path: Path, echo: Echo
) -> None:
    git(repo, "config", "--add", "sup.egress", "registry-without-port")
    rec, events = _run(repo, tmp_path, [echo.port])
    assert rec.status.value == "failed"
    assert any("registry-without-port" in r for r in rec.reasons), rec.reasons
    assert not [e for e in events if e.type == "worker_started"]
    assert echo.accepted == 0


def test_a_namespace_starts_no_helper_programs(tmp_path: Path) -> None:
    """pyroute2 forks a child to create a namespace and another to open a socket in it;
    without a C library handed in, each child looks libc up with `ldconfig -p`. gitsup hands
    it one: making, using and removing a namespace runs no program (each forked child
    reports the programs it starts, through an audit hook it inherits)."""
    log = tmp_path / "programs"
    code = (
        "import os, sys\n"
        f"LOG = {str(log)!r}\n"
        "def hook(event, args):\n"
        "    if event in ('subprocess.Popen', 'os.exec', 'os.posix_spawn', 'os.spawn'):\n"
        "        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)\n"
        "        os.write(fd, (f'{os.getpid()} {args[0]!r}' + chr(10)).encode())\n"
        "        os.close(fd)\n"
        "sys.addaudithook(hook)\n"
        "from gitsup.host import contain\n"
        "with contain.isolated_netns('t') as path:\n"
        "    assert os.path.exists(path)\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"
    assert not log.exists(), log.read_text()


def test_doctor_stops_the_gate_of_a_dead_supervisors_namespace(
    repo: Path, tmp_path: Path, echo: Echo
) -> None:
    """A gate (a process of its own) outlives a killed supervisor; once no live supervisor
    runs its task, `doctor` lists it and `doctor --fix` stops it, with its namespace."""
    from pyroute2 import netns

    from gitsup.host.egress_gate import GateProcess

    rec, _ = _run(repo, tmp_path, [echo.port])
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"gitsup-{rec.id}-{dead.pid}-abcdef"
    netns.create(name)
    plan = make_plan([Endpoint("127.0.0.1", echo.port)])
    gate = GateProcess.start(
        f"/var/run/netns/{name}", plan, tmp_path / "egress.log", lambda h, p, r: None, task=rec.id
    )
    ident = ProcessId(gate.pid, gate.start_time)
    try:
        gate.detach()  # as a killed supervisor leaves it
        assert ident.alive()
        res = run_sup(repo, "doctor", "--json")
        found = [f for f in json.loads(res.stdout) if f["kind"] == "orphan-egress-gate"]
        assert found and found[0]["task"] == rec.id and str(gate.pid) in found[0]["detail"]
        assert ident.alive()  # listed, not touched
        res = run_sup(repo, "doctor", "--fix", "--json")
        fixed = [f for f in json.loads(res.stdout) if f["kind"] == "orphan-egress-gate"]
        assert fixed and fixed[0]["fixed"] == "stopped", fixed
        assert not ident.alive()
        assert not os.path.exists(f"/var/run/netns/{name}")
    finally:
        if ident.alive():
            os.kill(gate.pid, 9)
        if os.path.exists(f"/var/run/netns/{name}"):
            netns.remove(name)
