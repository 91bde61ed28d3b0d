"""The egress gate as a process of its own, one per gated namespace (docs/containment.md).

`python -m gitsup.host.egress_gate --netns PATH --log FILE [--forward PORT]… [--connect
HOST:PORT]… [--proxy-port N] --task ID` creates the gate's listening sockets inside the
namespace (gitsup/host/egress.py) and serves them from the host side. It runs in a session
of its own, outside the task's sandbox (it needs the host network to splice to), so it
outlives a supervisor that is killed: a persistent worker's model request in flight is not
cut, and a re-adopting supervisor finds it again by its identity (pid and start time).

It writes one JSON line per forwarded connection, per ended connection ("closed": which side
ended each direction and how, the bytes each way, when; or the loopback target it could not
reach) and per refusal to its log, which the
supervisor reads into `egress_refused` events and the `egress_summary` counts (the log and
how far it was read are in the task directory, so a supervisor that takes over goes on
where the last one stopped). Over its stdin it accepts `{"forward": PORT}` (one more
loopback port) while the supervisor that started it lives; when that supervisor is gone,
stdin ends and the gate keeps serving. SIGTERM stops it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gitsup.errors import GitsupError
from gitsup.host.egress import (
    EgressGate,
    EgressPlan,
    Refused,
    make_plan,
    model_endpoint,
    parse_endpoint,
    proxy_env,
)
from gitsup.names import TASK_MARKER

MODULE = "gitsup.host.egress_gate"
MARKER = "GITSUP_EGRESS_GATE"  # in the gate's environment: the task it serves
START_TIMEOUT = 15.0
_POLL = 0.1


# --- the process --------------------------------------------------------------------------


def _reply(out: IO[str], data: Mapping[str, Any]) -> None:
    with contextlib.suppress(OSError, ValueError):  # the supervisor may be gone
        out.write(json.dumps(data) + "\n")
        out.flush()


def _parse(argv: list[str]) -> dict[str, list[str]]:
    """`--name value` pairs (argparse costs a tenth of the gate's start-up)."""
    out: dict[str, list[str]] = {}
    if len(argv) % 2:
        raise SystemExit(f"{MODULE}: arguments come in --name value pairs")
    for name, value in zip(argv[::2], argv[1::2], strict=True):
        if name not in ("--netns", "--log", "--task", "--forward", "--connect", "--proxy-port"):
            raise SystemExit(f"{MODULE}: unknown argument {name}")
        out.setdefault(name[2:], []).append(value)
    if "netns" not in out or "log" not in out:
        raise SystemExit(f"{MODULE}: --netns and --log are required")
    return out


def main(argv: list[str]) -> int:
    a = _parse(argv)
    netns, log_path = a["netns"][-1], a["log"][-1]
    proxy_port = int(a["proxy-port"][-1]) if "proxy-port" in a else None
    # signals are taken by sigwait in the main thread only (the gate's threads inherit this)
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    lock = threading.Lock()
    log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - open for the gate's life

    def write(rec: dict[str, Any]) -> None:
        with lock:
            log.write(json.dumps(rec, separators=(",", ":")) + "\n")
            log.flush()

    plan = EgressPlan(
        tuple(int(p) for p in a.get("forward", [])),
        tuple(parse_endpoint(c) for c in a.get("connect", [])),
    )
    gate = EgressGate(
        netns,
        plan,
        lambda host, port, reason: write(
            {"event": "refused", "host": host, "port": port, "reason": reason}
        ),
        proxy_port,
        lambda target: write({"event": "forward", "target": target}),
        lambda target, how: write({"event": "closed", "target": target, **how}),
    )
    try:
        gate.start()
    except GitsupError as exc:
        _reply(sys.stdout, {"error": exc.message})
        return 1
    write({"event": "started", "pid": os.getpid(), "proxy_port": gate.proxy_port})
    _reply(sys.stdout, {"ready": True, "proxy_port": gate.proxy_port})

    def control() -> None:
        for line in sys.stdin:
            try:
                port = int(json.loads(line)["forward"])
                gate.add_forward(port)
                write({"event": "listening", "forward": port})
                _reply(sys.stdout, {"ok": True})
            except (GitsupError, ValueError, KeyError, TypeError) as exc:
                _reply(sys.stdout, {"error": getattr(exc, "message", str(exc))})

    threading.Thread(target=control, name="gitsup-egress-control", daemon=True).start()
    signal.sigwait(stop)
    gate.close()
    write({"event": "stopped", "forwarded": gate.forwarded, "refused": gate.refused})
    log.close()
    os._exit(0)  # nothing left to flush; the interpreter's teardown would only add latency


# --- for the supervisor -------------------------------------------------------------------


@dataclass
class GateProcess:
    """A gate process and what the supervisor reads from its log. Started here (`start`), or
    found again after the supervisor that started it died (`attach`)."""

    netns: str
    plan: EgressPlan
    log: Path
    on_refused: Refused
    pid: int
    start_time: float
    proxy_port: int | None = None
    reused: bool = False  # found again after the supervisor that started it died
    _forwarded: int = 0
    _refused: int = 0
    _proc: Any = None  # the Popen while it is ours to talk to
    _stop: threading.Event = field(default_factory=threading.Event)
    _tail: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(
        cls,
        netns: str,
        plan: EgressPlan,
        log: Path,
        on_refused: Refused,
        *,
        task: str,
        proxy_port: int | None = None,
        refuse_by_proxy: bool = False,
    ) -> GateProcess:
        from gitsup.host import proc
        from gitsup.host.procid import ProcessId

        # standard library only (no site-packages to scan): it starts for every gated process
        argv = proc.gitsup_python(
            MODULE, "--netns", netns, "--log", str(log), "--task", task, stdlib_only=True
        )
        for port in plan.forward:
            argv += ["--forward", str(port)]
        for ep in plan.connect:
            argv += ["--connect", str(ep)]
        if (plan.connect or refuse_by_proxy) and proxy_port:
            argv += ["--proxy-port", str(proxy_port)]
        elif refuse_by_proxy:  # a proxy on any free port, refusing what the plan lacks
            argv += ["--proxy-port", "0"]
        env = proc.child_env({MARKER: task}, drop=(TASK_MARKER,))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch(mode=0o600)
        try:
            p = proc.spawn_service(argv, cwd="/", env=env, log=log.with_suffix(".stderr"))
        except OSError as exc:
            raise GitsupError(f"cannot start the egress gate: {exc}") from exc
        try:
            answer = _read_answer(p, START_TIMEOUT)
        except GitsupError:
            proc.kill_each([p])
            p.wait()
            raise
        if "error" in answer:
            p.wait()
            raise GitsupError(f"egress gate: {answer['error']}")
        try:
            started = ProcessId.of(p.pid).start_time
        except Exception as exc:  # gone already
            raise GitsupError(f"the egress gate ended at once: {exc}") from exc
        given = answer.get("proxy_port")
        proxy = int(given) if isinstance(given, int) else None
        gate = cls(netns, plan, log, on_refused, p.pid, started, proxy, _proc=p)
        return gate.follow()

    @classmethod
    def attach(cls, ident: Mapping[str, Any], plan: EgressPlan, on_refused: Refused) -> Any:
        """The gate of a worker identity (`identity()`) if that very process still runs for
        this namespace; else None."""
        from gitsup.host.procid import ProcessId

        pid = ProcessId.from_dict(ident)
        netns, log, port = ident.get("netns"), ident.get("log"), ident.get("proxy_port")
        if pid is None or not isinstance(netns, str) or not isinstance(log, str):
            return None
        if not pid.alive() or not _is_gate(pid.pid, netns):
            return None
        forward = tuple(int(p) for p in ident.get("forward") or () if isinstance(p, int))
        plan = EgressPlan(tuple(dict.fromkeys((*plan.forward, *forward))), plan.connect)
        gate = cls(
            netns, plan, Path(log), on_refused, pid.pid, pid.start_time,
            port if isinstance(port, int) else None, reused=True,
        )  # fmt: skip
        return gate.follow()

    @property
    def forwarded(self) -> int:
        """Connections forwarded so far (read from the log now)."""
        self._read()
        return self._forwarded

    @property
    def refused(self) -> int:
        """Requests refused so far (read from the log now; each also went to `on_refused`)."""
        self._read()
        return self._refused

    def identity(self) -> dict[str, Any]:
        """What a supervisor that takes over needs to find this gate again."""
        return {
            "pid": self.pid,
            "start_time": self.start_time,
            "netns": self.netns,
            "log": str(self.log),
            "proxy_port": self.proxy_port,
            "forward": list(self.plan.forward),
        }

    def env(self) -> dict[str, str]:
        return proxy_env(self.proxy_port)

    def add_forward(self, port: int) -> None:
        """Forward one more loopback port (the tmux worker's hook endpoint)."""
        if port in self.plan.forward:
            return
        p = self._proc
        if p is None or p.stdin is None:
            raise GitsupError(
                f"the egress gate (pid {self.pid}) was started by an earlier supervisor and "
                f"does not forward port {port}"
            )
        with self._lock:
            try:
                p.stdin.write((json.dumps({"forward": port}) + "\n").encode())
                p.stdin.flush()
            except OSError as exc:
                raise GitsupError(f"the egress gate is gone: {exc}") from exc
            answer = _read_answer(p, START_TIMEOUT)
        if "error" in answer:
            raise GitsupError(f"egress gate: {answer['error']}")
        self.plan = EgressPlan((*self.plan.forward, port), self.plan.connect)

    def close(self) -> None:
        """Stop the gate and read the rest of its log."""
        from gitsup.host.procid import ProcessId

        if ProcessId(self.pid, self.start_time).alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGTERM)
            if self._proc is not None:
                from gitsup.host import proc

                if not proc.wait_exit(self._proc, 10):
                    proc.kill_each([self._proc])
                    self._proc.wait()
            else:
                _wait_gone(ProcessId(self.pid, self.start_time), 10)
        elif self._proc is not None:
            self._proc.wait()
        self._stop.set()
        if self._tail is not None:
            self._tail.join(10)
        self._read()
        if self._proc is not None:
            for f in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    f.close()

    def detach(self) -> None:
        """Stop reading its log and talking to it; the gate keeps serving (as when the
        supervisor that started it dies)."""
        self._stop.set()
        if self._tail is not None:
            self._tail.join(10)
        if self._proc is not None:
            for f in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    f.close()
            self._proc = None

    # --- the log ------------------------------------------------------------------------

    def follow(self) -> GateProcess:
        self._tail = threading.Thread(target=self._follow, name="gitsup-egress-log", daemon=True)
        self._tail.start()
        return self

    def _follow(self) -> None:
        while not self._stop.wait(_POLL):
            self._read()

    def _offset_file(self) -> Path:
        return self.log.with_suffix(".read")

    def _read(self) -> None:
        """Every complete line after the last one read (by this or an earlier supervisor)."""
        with self._lock:
            try:
                offset = int(self._offset_file().read_text() or 0)
            except (OSError, ValueError):
                offset = 0
            try:
                with open(self.log, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:
                return
            end = data.rfind(b"\n") + 1
            for line in data[:end].splitlines():
                self._event(line)
            if end:
                tmp = self._offset_file().with_suffix(".read-new")
                tmp.write_text(str(offset + end))
                os.replace(tmp, self._offset_file())

    def _event(self, line: bytes) -> None:
        try:
            rec = json.loads(line)
        except ValueError:
            return
        kind = rec.get("event") if isinstance(rec, dict) else None
        if kind == "forward":
            self._forwarded += 1
        elif kind == "refused":
            self._refused += 1
            with contextlib.suppress(Exception):
                self.on_refused(
                    str(rec.get("host", "")), int(rec.get("port", 0)), str(rec.get("reason", ""))
                )


def _read_answer(p: Any, timeout: float) -> dict[str, Any]:
    """The gate's next answer line on its stdout."""
    out = p.stdout
    ready, _, _ = select.select([out], [], [], timeout)
    if not ready:
        raise GitsupError(f"the egress gate did not answer within {timeout:g}s")
    line = out.readline()
    if not line:
        raise GitsupError("the egress gate ended before it answered")
    try:
        data = json.loads(line)
    except ValueError:
        raise GitsupError(f"the egress gate answered {line[:200]!r}") from None
    return data if isinstance(data, dict) else {"error": f"answered {data!r}"}


def _wait_gone(pid: Any, timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while pid.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid.alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid.pid, signal.SIGKILL)


def _is_gate(pid: int, netns: str | None = None) -> bool:
    import psutil

    try:
        cmd = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    if MODULE not in cmd:
        return False
    return netns is None or (netns in cmd and cmd.index(netns) == cmd.index("--netns") + 1)


@dataclass
class AgentNet:
    """An agent's namespace and its gate: bootstrap with `netns`, add `env` to its env."""

    netns: str
    gate: Any  # a GateProcess (gitsup/host/egress_gate.py)
    env: dict[str, str]

    def describe(self) -> dict[str, object]:
        return {"mode": "gated", "netns": self.netns, **self.gate.plan.as_dict()}


@contextlib.contextmanager
def gated_namespace(
    label: str,
    env: Mapping[str, str],
    extra: Sequence[str] = (),
    on_refused: Refused | None = None,
    *,
    model: bool = True,
    model_kind: str = "claude",
    log: Path | None = None,
    refuse_by_proxy: bool = False,
) -> Iterator[AgentNet]:
    """A loopback-only namespace whose only way out is the gate, a process of its own
    (gitsup/host/egress_gate.py) logging to `log` (default: a temporary file): the model API
    the `env` points at (if `model`), plus the `extra` host:port entries. `refuse_by_proxy`:
    a CONNECT proxy (and its `HTTPS_PROXY`) even when every endpoint is on loopback, so that
    a package manager reaching for another host is refused at once with the setting that
    allows it, instead of failing on a missing name (and retrying)."""
    from gitsup.host.contain import isolated_netns

    endpoints = [model_endpoint(env, model_kind)] if model else []
    endpoints += [parse_endpoint(e) for e in extra]
    plan = make_plan(endpoints)
    with contextlib.ExitStack() as stack:
        if log is None:
            log = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "egress.log"
        ns = stack.enter_context(isolated_netns(label))
        gate = GateProcess.start(
            ns, plan, log, on_refused or (lambda h, p, r: None), task=label,
            refuse_by_proxy=refuse_by_proxy,
        )  # fmt: skip
        stack.callback(gate.close)
        yield AgentNet(ns, gate, gate.env())


@dataclass(frozen=True)
class RunningGate:
    pid: int
    task: str
    netns: str


def running_gates() -> list[RunningGate]:
    """Every egress gate process on this host (for doctor and recover)."""
    import psutil

    out: list[RunningGate] = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if MODULE not in cmd or "--netns" not in cmd:
            continue
        with contextlib.suppress(ValueError, IndexError):
            netns = cmd[cmd.index("--netns") + 1]
            task = cmd[cmd.index("--task") + 1] if "--task" in cmd else ""
            out.append(RunningGate(p.pid, task, netns))
    return out


def stop_gate(pid: int) -> bool:
    """Stop a gate found by `running_gates` (SIGTERM, then SIGKILL); True when it is gone."""
    from gitsup.host.procid import ProcessId

    if not _is_gate(pid):
        return False
    try:
        ident = ProcessId.of(pid)
    except Exception:
        return True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    _wait_gone(ident, 10)
    return not ident.alive()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
