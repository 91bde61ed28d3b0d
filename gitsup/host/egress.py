"""The egress gate: an agent in a loopback-only network namespace reaches its model API only.

The agent (Claude Code worker, reviewer, decider) runs in a fresh network namespace with
nothing but `lo`. From a short-lived thread that `setns()`es into that namespace (the network
namespace is per thread), the gate creates listening sockets *inside* it; the sockets stay
there, the thread ends, and the gate accepts and forwards from the host side. The gate runs
as a process of its own (gitsup/host/egress_gate.py), which serves an `EgressGate`:

* loopback endpoints (`http://127.0.0.1:PORT`, the scripted stand-in or a local gateway, and
  `127.0.0.1:PORT` entries of the allow-list): a listener on the same 127.0.0.1:PORT inside the
  namespace, spliced to the host's 127.0.0.1:PORT;
* everything else (`https://api.anthropic.com`, `host:port` entries): an HTTP CONNECT proxy
  inside the namespace (HTTPS_PROXY for the agent) that accepts only the allowed host:port
  pairs and resolves names on the host side.

Anything else is refused: there is no route, no DNS, no host loopback. Every request the
proxy refuses is reported (`on_refused(host, port, reason)`) and every connection forwarded
(`on_forward(target)`): the gate process logs both, and the supervisor turns the refusals
into `egress_refused` events.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gitsup.errors import GitsupError

CLONE_NEWNET = 0x40000000
DEFAULT_MODEL_URL = "https://api.anthropic.com"
DEFAULT_OPENAI_URL = "https://api.openai.com"
_HEAD_LIMIT = 16 * 1024
_HEAD_TIMEOUT = 30.0
_BUF = 256 * 1024

Refused = Callable[[str, int, str], None]


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_endpoint(text: str) -> Endpoint:
    """`host:port` or `[v6]:port`; the port is required."""
    s = text.strip()
    host, sep, port = s.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise GitsupError(
            f"egress entry {text!r} is not host:port", hint='write it as "registry.example:443"'
        )
    return Endpoint(host.lower(), int(port))


@dataclass(frozen=True)
class EgressPlan:
    """What a gate lets through: loopback ports forwarded as they are, CONNECT targets."""

    forward: tuple[int, ...] = ()
    connect: tuple[Endpoint, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.forward and not self.connect

    def as_dict(self) -> dict[str, object]:
        return {
            "forward": [f"127.0.0.1:{p}" for p in self.forward],
            "connect": [str(e) for e in self.connect],
        }


def model_endpoint(env: Mapping[str, str], kind: str = "claude") -> Endpoint:
    """The model API the agent's environment points at: for Claude Code ANTHROPIC_BASE_URL,
    else Anthropic's; for Codex (`kind` "codex") OPENAI_BASE_URL, else OpenAI's."""
    var, default = (
        ("OPENAI_BASE_URL", DEFAULT_OPENAI_URL)
        if kind == "codex"
        else ("ANTHROPIC_BASE_URL", DEFAULT_MODEL_URL)
    )
    url = env.get(var) or default
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise GitsupError(f"{var} {url!r} is not an http(s) URL")
    ep = Endpoint(u.hostname.lower(), u.port or (443 if u.scheme == "https" else 80))
    if u.scheme == "http" and not ep.loopback:
        raise GitsupError(
            f"the egress gate does not forward plain http to {ep}",
            hint=f'use an https:// {var}, a 127.0.0.1 gateway, or network = "host"',
        )
    return ep


def proxy_env(proxy_port: int | None) -> dict[str, str]:
    """The agent's proxy variables for a gate whose CONNECT proxy listens on `proxy_port`."""
    if proxy_port is None:
        return {}
    proxy = f"http://127.0.0.1:{proxy_port}"
    no_proxy = "127.0.0.1,localhost,::1"
    return {
        "HTTPS_PROXY": proxy,
        "https_proxy": proxy,
        "HTTP_PROXY": proxy,
        "http_proxy": proxy,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
    }


def make_plan(endpoints: Sequence[Endpoint]) -> EgressPlan:
    forward: list[int] = []
    connect: list[Endpoint] = []
    for ep in endpoints:
        if ep.loopback:
            if ep.port not in forward:
                forward.append(ep.port)
        elif ep not in connect:
            connect.append(ep)
    return EgressPlan(tuple(forward), tuple(connect))


def _listen_inside(netns: str, ports: Sequence[int]) -> list[socket.socket]:
    """Listening sockets on 127.0.0.1:PORT (0: any) inside the namespace at `netns`."""
    out: list[socket.socket] = []
    err: list[BaseException] = []

    def run() -> None:  # this thread enters the namespace and ends; its sockets stay there
        try:
            fd = os.open(netns, os.O_RDONLY)
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            finally:
                os.close(fd)
            for port in ports:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", port))
                s.listen(128)
                s.setblocking(False)
                out.append(s)
        except BaseException as exc:  # reported to the caller
            err.append(exc)

    t = threading.Thread(target=run, name="gitsup-egress-setns")
    t.start()
    t.join()
    if err:
        for s in out:
            s.close()
        raise GitsupError(f"cannot listen inside the network namespace {netns}: {err[0]}")
    return out


@dataclass
class EgressGate:
    """Listeners inside `netns`, served by one asyncio loop on a host-side thread."""

    netns: str
    plan: EgressPlan
    on_refused: Refused = field(default=lambda host, port, reason: None)
    proxy_port: int | None = None
    on_forward: Callable[[str], None] = field(default=lambda target: None)
    # how each connection ended: the target and, per direction, what ended it (`_splice`), or
    # {"upstream": error} when the loopback target could not be reached (the client is closed)
    on_closed: Callable[[str, dict[str, Any]], None] = field(default=lambda target, how: None)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _socks: list[socket.socket] = field(default_factory=list)
    _ready: threading.Event = field(default_factory=threading.Event)
    _servers: list[asyncio.AbstractServer] = field(default_factory=list)
    _conns: set[asyncio.Task[None]] = field(default_factory=set)
    forwarded: int = 0
    refused: int = 0

    def start(self) -> EgressGate:
        want: list[int] = list(self.plan.forward)
        if self.plan.connect:
            want.append(self.proxy_port or 0)  # a gate served again keeps the agent's proxy
        socks = _listen_inside(self.netns, want)
        self._socks = socks
        if self.plan.connect:
            self.proxy_port = int(socks[-1].getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="gitsup-egress", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def add_forward(self, port: int) -> None:
        """Forward one more loopback port (e.g. the supervisor's hook endpoint)."""
        if port in self.plan.forward:
            return
        (s,) = _listen_inside(self.netns, [port])
        self.plan = EgressPlan((*self.plan.forward, port), self.plan.connect)
        assert self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(self._serve_forward(s, port), self._loop)
        fut.result(10)

    def env(self) -> dict[str, str]:
        """What the agent's environment needs: the proxy for non-loopback endpoints."""
        return proxy_env(self.proxy_port)

    def close(self) -> None:
        loop, t = self._loop, self._thread
        if loop is not None and t is not None and t.is_alive():
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            t.join(10)
        for s in self._socks:
            s.close()
        if loop is not None and not loop.is_running():
            loop.close()
        self._loop = self._thread = None

    # --- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        n = len(self.plan.forward)
        for s, port in zip(self._socks[:n], self.plan.forward, strict=True):
            loop.run_until_complete(self._serve_forward(s, port))
        if self.plan.connect:
            loop.run_until_complete(self._serve_proxy(self._socks[-1]))
        self._ready.set()
        loop.run_forever()

    async def _serve_forward(self, sock: socket.socket, port: int) -> None:
        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await self._track(self._forward(r, w, port))

        self._servers.append(await asyncio.start_server(handle, sock=sock, limit=_BUF))
        if sock not in self._socks:
            self._socks.append(sock)

    async def _serve_proxy(self, sock: socket.socket) -> None:
        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await self._track(self._proxy(r, w))

        self._servers.append(await asyncio.start_server(handle, sock=sock, limit=_HEAD_LIMIT))

    async def _track(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._conns.add(task)
        try:
            await task
        except (asyncio.CancelledError, OSError, ConnectionError):
            pass
        finally:
            self._conns.discard(task)

    async def _shutdown(self) -> None:
        for srv in self._servers:
            srv.close()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.wait(list(self._conns), timeout=5)

    async def _forward(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, port: int) -> None:
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", port, limit=_BUF)
        except OSError as exc:
            w.close()
            with contextlib.suppress(Exception):
                self.on_closed(f"127.0.0.1:{port}", {"upstream": type(exc).__name__})
            return
        self.forwarded += 1
        with contextlib.suppress(Exception):
            self.on_forward(f"127.0.0.1:{port}")
        how = await _splice(r, w, ur, uw)
        with contextlib.suppress(Exception):
            self.on_closed(f"127.0.0.1:{port}", how)

    async def _proxy(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            self._refuse(w, "", 0, "malformed or incomplete proxy request", 400)
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self._refuse(w, "", 0, "malformed proxy request line", 400)
            return
        method, target = parts[0], parts[1]
        if method != "CONNECT":
            u = urlsplit(target)
            host = (u.hostname or "").lower()
            port = u.port or (443 if u.scheme == "https" else 80)
            self._refuse(w, host, port, f"{method} through the proxy (only CONNECT)", 405)
            return
        try:
            ep = parse_endpoint(target)
        except GitsupError:
            self._refuse(w, target[:200], 0, "CONNECT target is not host:port", 400)
            return
        if ep not in self.plan.connect:
            self._refuse(w, ep.host, ep.port, "not an allowed egress endpoint", 403)
            return
        try:
            ur, uw = await asyncio.wait_for(
                asyncio.open_connection(ep.host, ep.port, limit=_BUF), _HEAD_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            w.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            w.close()
            self.refused += 1
            with contextlib.suppress(Exception):
                self.on_refused(ep.host, ep.port, f"upstream unreachable: {exc}")
            return
        self.forwarded += 1
        with contextlib.suppress(Exception):
            self.on_forward(str(ep))
        w.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        how = await _splice(r, w, ur, uw)
        with contextlib.suppress(Exception):
            self.on_closed(str(ep), how)

    def _refuse(
        self, w: asyncio.StreamWriter, host: str, port: int, reason: str, code: int
    ) -> None:
        status = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed"}[code]
        if code == 403:
            # The reason phrase is what clients print ("Tunnel connection failed: 403 …",
            # pip's ProxyError): say what happened and which setting allows it.
            status = refusal_phrase(host, port)
        body = f"gitsup egress gate: {reason}\n".encode()
        w.write(
            f"HTTP/1.1 {code} {status}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        w.close()
        self.refused += 1
        with contextlib.suppress(Exception):
            self.on_refused(host, port, reason)


def refusal_phrase(host: str, port: int) -> str:
    """The status line's reason for a refused CONNECT: printable ASCII, one line."""
    where = "".join(c for c in f"{host}:{port}" if c.isalnum() or c in ".-:[]_")[:200]
    return (
        f"Forbidden: network {where} refused by the gitsup egress gate; allow it with "
        f"git config --add sup.egress {where}"
    )


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, count: list[int]) -> str:
    """Copy until `src` ends, then half-close `dst`; what ended it: "eof" (src closed
    its side), or the error reading src or writing dst (dst is closed then). `count[0]`
    adds up the bytes copied."""
    try:
        while data := await src.read(_BUF):
            count[0] += len(data)
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
        return "eof"
    except (OSError, ConnectionError) as exc:
        dst.close()
        return type(exc).__name__


async def _splice(
    r: asyncio.StreamReader,
    w: asyncio.StreamWriter,
    ur: asyncio.StreamReader,
    uw: asyncio.StreamWriter,
) -> dict[str, Any]:
    """Copy both ways until both directions ended. How it went, for the gate's log: per
    direction ("up": the client's bytes towards the upstream, "down": back) what ended it
    (`_pump`), the bytes copied and when it ended (ms after the start), and which ended
    first."""
    for writer in (w, uw):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    loop = asyncio.get_running_loop()
    start = loop.time()
    how: dict[str, Any] = {}

    async def pump(name: str, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        count = [0]
        ended = await _pump(src, dst, count)
        how.setdefault("first", name)
        how[name] = ended
        how[f"{name}_bytes"] = count[0]
        how[f"{name}_ms"] = round((loop.time() - start) * 1000)

    try:
        await asyncio.gather(pump("up", r, uw), pump("down", ur, w))
        return how
    finally:
        w.close()
        uw.close()
