"""What the egress gate adds per model request, on loopback, measured side by side.

    .venv/bin/python bench/bench_egress.py [--n 300]

A stand-in Messages API on the host's 127.0.0.1 answers each POST /v1/messages with a
streamed (SSE) reply of about 2 KB. The same client (its own process, http.client) sends
the same requests:

* direct: on the host network, straight to the stand-in (the baseline);
* gated: from inside a loopback-only network namespace, through the gate's forwarder on
  the same 127.0.0.1:PORT (how the Claude worker reaches a loopback ANTHROPIC_BASE_URL);
* gated via CONNECT: through the gate's CONNECT proxy (how an https endpoint is reached;
  the tunnel here carries plain HTTP to a loopback target, which isolates the gate's cost).

Each with keep-alive (as Claude Code's client) and with a new connection per request. The
gate is the real one: a process of its own (gitsup/host/egress_gate.py) that logs every
connection. Then what starting and stopping a gate process takes (once per gated process).
Goal: the gate adds <= 2 ms p50 per request.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gitsup.host.contain import bootstrap_argv, isolated_netns
from gitsup.host.egress import EgressPlan, Endpoint
from gitsup.host.egress_gate import GateProcess

EVENTS = b"".join(
    b"event: content_block_delta\ndata: "
    + json.dumps({"type": "content_block_delta", "delta": {"text": "x" * 60}}).encode()
    + b"\n\n"
    for _ in range(20)
)


class Model(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(EVENTS)))
        self.end_headers()
        self.wfile.write(EVENTS)

    def log_message(self, *args: object) -> None:
        pass


CLIENT = r"""
import http.client, json, sys, time
port, n, keep, proxy = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
body = json.dumps({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi" * 500}]})
def conn():
    if proxy:
        c = http.client.HTTPConnection("127.0.0.1", proxy, timeout=10)
        c.set_tunnel("127.0.0.1", port)
        return c
    return http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c = conn()
out = []
for i in range(n + 20):
    if not keep:
        c = conn()
    t = time.perf_counter()
    c.request("POST", "/v1/messages", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    if i >= 20:
        out.append(time.perf_counter() - t)
    if not keep:
        c.close()
print(json.dumps(out))
"""


def run_client(
    port: int, n: int, keep: bool, *, netns: str | None = None, proxy: int = 0
) -> list[float]:
    argv = [sys.executable, "-c", CLIENT, str(port), str(n), "1" if keep else "0", str(proxy)]
    if netns is not None:
        argv = bootstrap_argv(argv, cgroup=None, netns=netns)
    res = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True)
    out: list[float] = json.loads(res.stdout)
    return out


def pct(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs) * 1000, xs[min(len(xs) - 1, int(len(xs) * 0.95))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    n = ap.parse_args().n
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    port = int(srv.server_address[1])
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    rows: list[tuple[str, str, list[float]]] = []
    starts: list[float] = []
    stops: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, isolated_netns(f"bench-{os.getpid()}") as ns:
        plan = EgressPlan(forward=(port,), connect=(Endpoint("127.0.0.1", port),))

        def start(i: int) -> GateProcess:
            log = Path(tmp, f"egress-{i}.log")
            return GateProcess.start(ns, plan, log, lambda h, p, r: None, task="bench")

        gate = start(0)
        try:
            for keep in (True, False):
                how = "keep-alive" if keep else "new connection"
                rows.append(("direct", how, run_client(port, n, keep)))
                rows.append(("gated", how, run_client(port, n, keep, netns=ns)))
                pport = gate.proxy_port or 0
                rows.append(
                    ("gated via CONNECT", how, run_client(port, n, keep, netns=ns, proxy=pport))
                )
        finally:
            gate.close()
        for i in range(1, 16):
            t0 = time.perf_counter()
            g = start(i)
            t1 = time.perf_counter()
            g.close()
            starts.append(t1 - t0)
            stops.append(time.perf_counter() - t1)
    srv.shutdown()
    base: dict[str, float] = {}
    for name, how, xs in rows:
        p50, p95 = pct(xs)
        if name == "direct":
            base[how] = p50
            extra = ""
        else:
            extra = f"  (+{p50 - base[how]:.3f} ms p50 over direct)"
        print(f"{name:18} {how:15} p50 {p50:7.3f} ms  p95 {p95:7.3f} ms{extra}")
    for what, xs in (("gate process start", starts), ("gate process stop", stops)):
        p50, p95 = pct(xs)
        print(f"{what:34} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
