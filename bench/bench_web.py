"""Web benchmark: `git sup serve` with 500 tasks.

    .venv/bin/python bench/bench_web.py [--quick]

Prints numbers and ratios; asserts nothing. Everything happens in a temporary directory with
a hermetic Git environment.

1. The index with 500 tasks, rendered server-side (goal <= 200 ms): in-process (fold the task
   records and logs, render the template) and through HTTP to the real `git sup serve`
   (token, checks, network on 127.0.0.1). Baseline in the same run: the report module's
   index (stdlib only, no template engine) over the same tasks.
2. Event to page (goal <= 1 s): a task's record and log change; the time until an open
   event stream of `git sup serve` (`GET /events`, what the page's EventSource reads)
   delivers the new rows, and until the index open in a real headless Chromium shows it.
3. Open pages: the server's CPU time per second with 1 and 8 event streams open and nothing
   changing (one server-wide poller: the cost should not grow with the pages).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
BIN = Path(sys.executable).parent
GIT_SUP = str(BIN / "git-sup")

sys.path.insert(0, str(REPO_ROOT / "bench"))
from bench_attention import _event, fmt, make_tasks  # noqa: E402
from bench_attention import best as median_of  # noqa: E402 (the median of n runs)
from bench_foundation import git, hermetic_env  # noqa: E402


def bench_index(repo: Path, reps: int) -> None:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.report import render_index
    from gitsup.web.app import Web
    from gitsup.web.auth import guard_for

    os.chdir(repo)
    ctx = SupRepo.discover()
    web = Web(ctx, guard_for("t" * 43, "127.0.0.1", 1, tls=False, public_origin=None))

    def page() -> None:
        web.index(None)  # type: ignore[arg-type]

    def first() -> None:
        Web(ctx, web.guard).index(None)  # type: ignore[arg-type]

    def baseline() -> None:
        render_index(ctx)

    t_first = median_of(first, max(3, reps // 4))
    page()  # the server's fold of the tasks is kept across requests
    t_page = median_of(page, reps)
    t_base = median_of(baseline, reps)
    print(f"index, 500 tasks, first request (cold fold): {fmt(t_first)}")
    print(f"index, 500 tasks, in-process:     {fmt(t_page)}  (goal <= 200 ms)")
    print(f"  baseline (report's stdlib index): {fmt(t_base)}  ratio {t_page / t_base:.2f}")


def serve(repo: Path) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen(
        [GIT_SUP, "serve"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    base, token = url.split("/?token=", 1)
    return proc, base, token


def bench_http(base: str, token: str, reps: int) -> None:
    host, port = base.split("//", 1)[1].split(":")

    def get() -> None:
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        c.request("GET", "/", headers={"Authorization": f"Bearer {token}"})
        r = c.getresponse()
        r.read()
        assert r.status == 200, r.status
        c.close()

    get()
    print(f"index, 500 tasks, GET / over HTTP: {fmt(median_of(get, reps))}")


def bench_event(repo: Path, base: str, token: str, ids: list[str], reps: int) -> None:
    host, port = base.split("//", 1)[1].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.request("GET", "/events", headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    assert r.status == 200, r.status

    def next_rows() -> list[dict[str, object]]:
        while True:
            line = r.fp.readline().decode()
            if line.startswith("data: "):
                return list(json.loads(line[6:]))

    cost = {str(x["id"]): float(x["cost_usd"]) for x in next_rows()}  # type: ignore[arg-type]
    tasks = repo / ".git" / "sup" / "tasks"
    lat = []
    for i in range(reps):
        tid = ids[i % len(ids)]
        d = tasks / tid
        rec = json.loads((d / "task.json").read_text())
        rec["turns"] = int(rec.get("turns", 0)) + 1
        seq = sum(1 for _ in (d / "events.jsonl").open()) + 1
        t0 = time.perf_counter()
        with (d / "events.jsonl").open("a") as f:
            f.write(_event(seq, tid, "turn_completed", {"subtype": "success", "cost_usd": 0.01}))
            f.write("\n")
        (d / "task.json").write_text(json.dumps(rec))
        want = cost[tid] + 0.005
        while True:  # until a list shows this change (the turn's cost added)
            got = {str(x["id"]): float(x["cost_usd"]) for x in next_rows()}  # type: ignore[arg-type]
            cost.update(got)
            if got[tid] >= want:
                break
        lat.append(time.perf_counter() - t0)
        time.sleep(0.3)
    c.close()
    lat.sort()
    print(
        f"event to page (stream), {reps} changes: median {fmt(statistics.median(lat))}, "
        f"p90 {fmt(lat[int(len(lat) * 0.9) - 1])}  (goal <= 1 s)"
    )


def bench_streams(proc: subprocess.Popen[str], base: str, token: str, seconds: float) -> None:
    """The server's CPU use (user + system) while N event streams stay open, idle."""
    import psutil

    host, port = base.split("//", 1)[1].split(":")
    server = psutil.Process(proc.pid)
    for n in (1, 8):
        conns = []
        for _ in range(n):
            c = http.client.HTTPConnection(host, int(port), timeout=30)
            c.request("GET", "/events", headers={"Authorization": f"Bearer {token}"})
            r = c.getresponse()
            assert r.status == 200, r.status
            while not r.fp.readline().decode().startswith("data: "):
                pass
            conns.append(c)
        time.sleep(1.0)  # every stream has its first rows
        t0, c0 = time.perf_counter(), server.cpu_times()
        time.sleep(seconds)
        c1, t1 = server.cpu_times(), time.perf_counter()
        used = (c1.user - c0.user) + (c1.system - c0.system)
        print(f"server CPU, {n} open stream(s), idle: {used / (t1 - t0) * 100:5.1f} % of a core")
        for c in conns:
            c.close()
        time.sleep(1.0)


def bench_page(repo: Path, url: str, ids: list[str], reps: int) -> None:
    """The same change, until the open index in a real headless Chromium shows it."""
    import shutil

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        exe = None
    if exe is None:
        print("event to page (Chromium): no chromium or playwright here")
        return
    tasks = repo / ".git" / "sup" / "tasks"
    lat = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(url)
        page.wait_for_selector("#tasks tbody tr")
        for i in range(reps):
            tid = ids[(i * 7) % len(ids)]
            cell = f"#row-{tid} td:nth-child(5)"
            old = page.inner_text(cell)
            d = tasks / tid
            seq = sum(1 for _ in (d / "events.jsonl").open()) + 1
            t0 = time.perf_counter()
            with (d / "events.jsonl").open("a") as f:
                f.write(
                    _event(seq, tid, "turn_completed", {"subtype": "success", "cost_usd": 0.01})
                )
                f.write("\n")
            page.wait_for_function(
                "([sel, old]) => document.querySelector(sel).textContent !== old",
                arg=[cell, old],
                polling=10,
                timeout=30_000,
            )
            lat.append(time.perf_counter() - t0)
            time.sleep(0.3)
        browser.close()
    lat.sort()
    print(
        f"event to page (Chromium), {reps} changes: median {fmt(statistics.median(lat))}, "
        f"p90 {fmt(lat[int(len(lat) * 0.9) - 1])}  (goal <= 1 s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    reps = 5 if args.quick else 20
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        root = Path(tmp)
        hermetic_env(root / "home")
        repo = root / "repo"
        repo.mkdir()
        git(repo, "init", "-q")
        (repo / "a.txt").write_text("a\n")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "init")
        ids = make_tasks(repo / ".git", 500, 50)
        print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
        bench_index(repo, reps)
        proc, base, token = serve(repo)
        try:
            bench_http(base, token, reps)
            bench_event(repo, base, token, ids, reps)
            bench_streams(proc, base, token, 3.0 if args.quick else 6.0)
            bench_page(repo, f"{base}/?token={token}", ids, reps)
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
