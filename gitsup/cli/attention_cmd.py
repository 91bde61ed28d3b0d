"""Attention and accounting: watch, cost, report, serve."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gitsup.cli.main import app
from gitsup.cli.options import JsonOpt, TaskArg
from gitsup.cli.output import emit_json, emit_jsonl, out, use_colour
from gitsup.errors import GitsupError

if TYPE_CHECKING:
    from gitsup.attention.fold import TaskStatus
    from gitsup.store.suprepo import SupRepo


_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def _sgr(style: str) -> str:
    codes = ";".join(_SGR[w] for w in style.split() if w in _SGR)
    return f"\033[{codes}m" if codes else ""


def render_frame(
    rows: list[TaskStatus],
    now: float,
    *,
    width: int = 200,
    height: int | None = None,
    colour: bool = True,
    queues: dict[str, dict[str, Any]] | None = None,
) -> str:
    """The watch screen: a header and one line per task, each cut to `width` columns,
    coloured with ANSI SGR codes when `colour` (the terminal's width and height); then each
    queue whose runner is live (`queues`: target branch -> its `runner.json`): its slots
    and the predicted order."""
    from gitsup.attention.fold import HEADER, line_parts

    need = sum(1 for r in rows if r.attention)
    live = sum(1 for r in rows if r.state not in ("completed", "blocked", "failed", "stopped"))
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%H:%M:%S")
    head = f"gitsup watch  {len(rows)} task(s), {live} running, {need} need a human  {stamp} UTC"
    lines = [_paint(head[:width], "bold", colour), _paint(HEADER[:width], "dim", colour)]
    shown = rows if height is None else rows[: max(1, height - 3)]
    for r in shown:
        left = width
        parts: list[str] = []
        for text, style in line_parts(r, now):
            cell = text + " "
            if len(cell) > left:
                cell = cell[: max(0, left - 1)] + "…"
            left -= len(cell)
            parts.append(_paint(cell, style, colour))
            if left <= 0:
                break
        lines.append("".join(parts).rstrip())
    if len(shown) < len(rows):
        lines.append(_paint(f"… {len(rows) - len(shown)} more task(s)", "dim", colour))
    for line in _queue_lines(queues or {}):
        lines.append(_paint(line[:width], "cyan", colour))
    return "\n".join(lines)


def _queue_lines(queues: dict[str, dict[str, Any]]) -> list[str]:
    from gitsup.cli.task_render import queue_runner_lines

    lines: list[str] = []
    for into, runner in sorted(queues.items()):
        lines.append(f"queue into {into}:")
        lines += queue_runner_lines(runner)
    return lines


def live_queues(ctx: SupRepo) -> dict[str, dict[str, Any]]:
    """Each queue whose runner is live: target branch -> what it tests (`runner.json`)."""
    from gitsup.tasks.queue_state import queue_branches, runner_status

    found = {b: runner_status(ctx, b) for b in queue_branches(ctx)}
    return {b: r for b, r in found.items() if r is not None}


def _paint(text: str, style: str, colour: bool) -> str:
    code = _sgr(style) if colour and style else ""
    return f"{code}{text}\033[0m" if code else text


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str]]:
    """Keys typed while `watch` runs on a terminal, one at a time and unechoed (`q` quits):
    yields `pressed(timeout)`, the key typed within `timeout` seconds or ""."""
    import select
    import termios
    import tty

    fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None

    def pressed(timeout: float) -> str:
        if fd is None:
            time.sleep(timeout)
            return ""
        ready, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 1).decode(errors="replace") if ready else ""

    if fd is None:
        yield pressed
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield pressed
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@app.command("watch")
def watch_cmd(
    json_out: Annotated[
        bool, typer.Option("--json", help="A stream of JSON lines: statuses and new events.")
    ] = False,
    once: Annotated[bool, typer.Option("--once", help="Show the tasks once and exit.")] = False,
    until_done: Annotated[
        bool, typer.Option("--until-done", help="Exit when no task is running.")
    ] = False,
    attention: Annotated[
        bool, typer.Option("--attention", help="Only the tasks that need a human.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between updates.", min=0.05)
    ] = 1.0,
) -> None:
    """Every task of the repository, live: state, elapsed/deadline, turns, cost, last
    activity, what it waits for; tasks that need a human first. Then each integration queue
    whose runner is live: what is under test in each slot and the predicted order.

    Updates in place on a terminal, prints a line per change otherwise, `--json` streams
    `{"kind": "status", ...}`, `{"kind": "event", ...}` and `{"kind": "queue", ...}` lines.
    """
    from gitsup.attention.fold import Board, plain_line
    from gitsup.store.suprepo import SupRepo

    ctx = SupRepo.discover()
    board = Board(ctx.layout)
    tty = not json_out and not once and use_colour(sys.stdout)

    def snapshot(first: bool) -> list[TaskStatus]:
        rows = board.refresh(keep_events=json_out and not first)
        return [r for r in rows if r.attention] if attention else rows

    ended = ("completed", "blocked", "failed", "stopped")

    def running(rows: list[TaskStatus]) -> bool:
        return any(r.state not in ended for r in rows)

    if tty:
        import shutil

        # Redraw in place: cursor home, each line cleared to its end, the rest cleared.
        sys.stdout.write("\033[?25l\033[H\033[2J")
        try:
            with _keys() as pressed:
                while True:
                    size = shutil.get_terminal_size()
                    rows = snapshot(False)
                    frame = render_frame(
                        rows,
                        time.time(),
                        width=size.columns,
                        height=size.lines,
                        queues=live_queues(ctx),
                    )
                    sys.stdout.write("\033[H" + frame.replace("\n", "\033[K\n") + "\033[K\033[J")
                    sys.stdout.flush()
                    if until_done and not running(rows):
                        break
                    if pressed(interval) in ("q", "Q", "\x1b"):
                        break
        finally:
            sys.stdout.write("\033[?25h\n")
            sys.stdout.flush()
        return
    last: dict[str, Any] = {}
    last_queues: dict[str, Any] = {}
    first = True
    seen_running: set[str] = set()  # tasks this watch saw running, and those whose
    finished: set[str] = set()  # `task_finished` it streamed
    settle_until: float | None = None
    while True:
        rows = snapshot(first)
        now = time.time()
        if json_out:
            for ev in board.new_events:
                if ev.get("type") == "task_finished":
                    finished.add(str(ev.get("task")))
                emit_jsonl({"kind": "event", **ev})
            seen_running.update(r.id for r in rows if r.state not in ended)
        for r in rows:
            key = (r.state, r.status, r.turns, r.cost_usd, r.waiting_for, tuple(r.attention))
            if last.get(r.id) == key and not once:
                continue
            last[r.id] = key
            if json_out:
                emit_jsonl({"kind": "status", "ts": now, **r.as_dict()})
            else:
                stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%H:%M:%S")
                out(f"{stamp} {plain_line(r, now)}")
        queues = live_queues(ctx)
        for into in sorted({*queues, *last_queues}):
            runner = queues.get(into)  # None: its runner ended
            key = _queue_key(runner)
            if last_queues.get(into) == key and not once:
                continue
            if runner is None:
                last_queues.pop(into, None)
            else:
                last_queues[into] = key
            if json_out:
                emit_jsonl({"kind": "queue", "ts": now, "into": into, "runner": runner})
                continue
            stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%H:%M:%S")
            if runner is None:
                out(f"{stamp} queue into {into}: runner ended")
            else:
                out(f"{stamp} queue into {into}:")
                for line in _queue_lines({into: runner})[1:]:
                    out(f"{stamp} {line}")
        sys.stdout.flush()
        first = False
        if once:
            return
        if until_done and not running(rows):
            # A task's record turns terminal after its `task_finished` is in its log, which a
            # later read of the logs streams; one whose supervisor died before it leaves none:
            # the stream waits a few seconds at most.
            if not json_out or seen_running <= finished:
                return
            if settle_until is None:
                settle_until = now + 5.0
            elif now >= settle_until:
                return
        else:
            settle_until = None
        time.sleep(interval)


def _queue_key(runner: dict[str, Any] | None) -> Any:
    """What of a runner's status a change is printed for (not its timestamps)."""
    if runner is None:
        return None
    slots = [
        (u.get("slot"), u.get("tree"), tuple(u.get("tasks", [])))
        for u in runner.get("under_test", [])
    ]
    return (runner.get("pid"), tuple(slots), tuple(runner.get("predicted", [])))


def _parse_since(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        d = dt.datetime.fromisoformat(value)
    except ValueError:
        try:
            from gitsup.durations import parse_duration, require_unit

            return time.time() - parse_duration(require_unit(value, "--since"))
        except Exception:
            raise GitsupError(
                f"--since {value!r} is neither a date (2026-11-30, 2026-11-30T08:00) nor a duration (7d)"
            ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.UTC)
    return d.timestamp()


def _usd(value: float) -> str:
    return f"${value:.4f}"


@app.command("cost")
def cost_cmd(
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only costs from this date (UTC) or this long ago (7d)."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """What tasks cost, from Git: per task, per day, per outcome, per integrated change."""
    from gitsup.store.ledger import cost_summary
    from gitsup.store.suprepo import SupRepo

    summary = cost_summary(SupRepo.discover(), _parse_since(since))
    if json_out:
        emit_json(summary)
        return
    out(f"repository {summary['repository']}")
    out(f"total      ${summary['total_usd']:.4f}")
    if summary["stand_in_usd"]:
        out(
            f"           of which ${summary['stand_in_usd']:.4f} priced for a model API on this "
            "machine (a stand-in such as the scripted model, or a local gateway)"
        )
    per = summary["cost_per_integrated_change_usd"]
    out("per integrated change " + ("-" if per is None else f"${per:.4f}"))
    out("")
    out(f"{'TASK':16} {'OUTCOME':11} {'TOTAL':>10} {'WORKER':>10} {'REVIEW':>9} {'DECIDER':>9}")
    for t in summary["tasks"]:
        out(
            f"{t['task']:16} {t['outcome']:11} {_usd(t['total_usd']):>10} {_usd(t['worker_usd']):>10}"
            f" {_usd(t['reviewer_usd']):>9} {_usd(t['decider_usd']):>9}"
        )
    if summary["by_outcome"]:
        out("")
        for k, v in summary["by_outcome"].items():
            out(f"{k:12} {v['tasks']:4} task(s) ${v['total_usd']:.4f}")
    if summary["by_day"]:
        out("")
        for day, usd in summary["by_day"].items():
            out(f"{day}  ${usd:.4f}")


@app.command("report")
def report_cmd(
    task: TaskArg,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the page here (default stdout).")
    ] = None,
) -> None:
    """One self-contained HTML page for a task: timeline, checks, review, diff, cost."""
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.report import render_task

    page = render_task(SupRepo.discover(), task)
    if output is None:
        sys.stdout.write(page)
        return
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise GitsupError(f"cannot write {output}: {exc.strerror or exc}") from None
    out(str(output))


@app.command("serve")
def serve_cmd(
    port: Annotated[int, typer.Option("--port", help="Port (0: any free one).")] = 0,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to listen on; other than loopback only with --tls-cert/--tls-key "
            "or --public-url.",
        ),
    ] = "127.0.0.1",
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="TLS certificate (PEM) to serve https.")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="The certificate's private key (PEM).")
    ] = None,
    public_url: Annotated[
        str | None,
        typer.Option(
            "--public-url",
            help="Behind an https reverse proxy: its address (https://HOST[:PORT]), the only "
            "Host and Origin answered.",
        ),
    ] = None,
    new_token: Annotated[
        bool, typer.Option("--new-token", help="Replace the token (old URLs stop working).")
    ] = False,
) -> None:
    """The interactive page of every task and its JSON API (docs/web.md), until interrupted.

    Prints one line: the URL, carrying the token as `?token=…`. Needs the web extra
    (`pip install 'gitsup[web]'`).
    """
    if not 0 <= port <= 65535:
        raise GitsupError(f"--port {port}: a port is 0 to 65535 (0: any free one)")
    from gitsup.store.suprepo import SupRepo
    from gitsup.web.serve import require_web_stack, serve

    require_web_stack()

    def ready(url: str) -> None:
        out(url)
        sys.stdout.flush()

    serve(
        SupRepo.discover(),
        host=host,
        port=port,
        tls_cert=tls_cert,
        tls_key=tls_key,
        public_origin=public_url,
        new_token=new_token,
        ready=ready,
    )
