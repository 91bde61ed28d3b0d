"""Hook latency of the tmux transport, measured side by side.

    .venv/bin/python bench/bench_hooks.py [--n 200] [--spawn-n 30]

* http: a PreToolUse POST to the loopback endpoint (secret header checked), decided by the
  policy gate in a stand-in supervisor (its own process: hook server + a thread doing
  inbox -> decide_tool -> answer), reply read by the client. Keep-alive (as Claude Code's axios client) and a new connection per call.
* relay: one `python -m gitsup.workers.claude.relay` process per call (Claude Code command hook),
  forwarding to the same supervisor over the registry unix socket; compared with a bare
  `python -c pass` of the same interpreter, `node -e 0`, and the console script
  `git-sup hook claude` (which goes through the CLI framework).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gitsup.policy import decide_tool, load_policy, unattended_denial
from gitsup.workers.base import PermissionAnswer, PermissionRequest
from gitsup.workers.claude.hooks import SECRET_HEADER, HookBridge, HookServer
from gitsup.workers.claude.relay import locate, socket_path_for

SECRET = "bench-secret"


def supervisor(inbox: queue.SimpleQueue[object], bridge: HookBridge, worktree: str) -> None:
    policy = load_policy(Path(worktree))
    while True:
        item = inbox.get()
        if item is None:
            return
        if isinstance(item, PermissionRequest):
            d = decide_tool(item.tool_name, item.tool_input, worktree=worktree, policy=policy)
            ans = (
                PermissionAnswer(True)
                if d.verdict == "allow"
                else PermissionAnswer(False, unattended_denial(d))
            )
            bridge.answer(item.request_id, ans)


def pct(xs: list[float]) -> str:
    xs = sorted(xs)
    p50 = statistics.median(xs)
    p95 = xs[min(len(xs) - 1, int(len(xs) * 0.95))]
    return f"p50 {p50 * 1000:7.2f} ms  p95 {p95 * 1000:7.2f} ms  (n={len(xs)})"


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def serve(root: str) -> None:
    common, wt = locate(root) or ("", "")
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    bridge = HookBridge(inbox, bound=10.0)
    server = HookServer(bridge.handle, secret=SECRET, unix_path=socket_path_for(common, wt))
    server.start()
    print(server.port, flush=True)
    supervisor(inbox, bridge, wt)


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--spawn-n", type=int, default=30)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gitsup-bench-"))
    wt = tmp / "repo"
    wt.mkdir()
    subprocess.run(["git", "init", "-q", str(wt)], check=True)
    root = os.path.realpath(wt)
    # The supervisor stand-in runs in its own process, as the real supervisor does.
    served = subprocess.Popen(
        [sys.executable, __file__, "--serve", root], stdout=subprocess.PIPE, text=True
    )
    assert served.stdout is not None
    port = int(served.stdout.readline())
    push = json.dumps(
        {
            "session_id": "b",
            "cwd": root,
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "git push origin HEAD:main"},
            "tool_use_id": "t",
        }
    )
    ls = push.replace("git push origin HEAD:main", "ls -la")
    headers = {"Content-Type": "application/json", SECRET_HEADER: SECRET}
    results: dict[str, str] = {}

    conn = http.client.HTTPConnection("127.0.0.1", port)

    def keepalive(body: str) -> Callable[[], object]:
        def call() -> object:
            conn.request("POST", "/hook", body, headers)
            r = conn.getresponse()
            data = r.read()
            assert r.status == 200
            return data

        return call

    def fresh(body: str) -> Callable[[], object]:
        def call() -> object:
            c = http.client.HTTPConnection("127.0.0.1", port)
            c.request("POST", "/hook", body, headers)
            data = c.getresponse().read()
            c.close()
            return data

        return call

    assert b"deny" in bytes(keepalive(push)())  # type: ignore[call-overload]
    timed(keepalive(push), 20)
    results["http deny (keep-alive)"] = pct(timed(keepalive(push), args.n))
    results["http allow (keep-alive)"] = pct(timed(keepalive(ls), args.n))
    results["http deny (new connection)"] = pct(timed(fresh(push), args.n))

    def spawn(
        argv: list[str], data: bytes | None = None, env: dict[str, str] | None = None
    ) -> Callable[[], object]:
        def call() -> object:
            res = subprocess.run(argv, input=data, capture_output=True, cwd=root, env=env)
            return res.stdout

        return call

    py = sys.executable
    env = {k: v for k, v in os.environ.items() if k != "GITSUP_HOOK_SECRET"}
    relay_out = bytes(spawn([py, "-m", "gitsup.workers.claude.relay"], push.encode(), env)())  # type: ignore[call-overload]
    assert b"deny" in relay_out, relay_out
    rows: list[tuple[str, list[str], bytes | None]] = [
        ("python -c pass", [py, "-c", "pass"], None),
        (
            "python -m gitsup.workers.claude.relay (deny)",
            [py, "-m", "gitsup.workers.claude.relay"],
            push.encode(),
        ),
    ]
    node = shutil.which("node")
    if node:
        rows.append(("node -e 0", [node, "-e", "0"], None))
    gs = Path(py).parent / "git-sup"
    if gs.exists():
        rows.append(("git-sup hook claude (deny)", [str(gs), "hook", "claude"], push.encode()))
    spawn_times: dict[str, float] = {}
    for name, argv, data in rows:
        spawn(argv, data, env)()
        xs = timed(spawn(argv, data, env), args.spawn_n)
        spawn_times[name] = statistics.median(xs)
        results[name] = pct(xs)
    served.terminate()
    served.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    width = max(len(k) for k in results)
    for k, v in results.items():
        print(f"{k:{width}}  {v}")
    base = spawn_times["python -c pass"]
    relay = spawn_times["python -m gitsup.workers.claude.relay (deny)"]
    print(f"relay / python -c pass = {relay / base:.2f}x (goal <= 1.5x)")
    if "node -e 0" in spawn_times:
        print(f"relay / node -e 0      = {relay / spawn_times['node -e 0']:.2f}x (goal < 1)")


if __name__ == "__main__":
    main()
