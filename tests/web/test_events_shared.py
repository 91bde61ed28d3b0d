"""Every open page reads one server-wide view of the tasks (`GET /events` fans out one
poller's changes): each change is numbered once for the whole server (the stream's `id:`), so a
page opened late starts at the number an early page got for the same rows, with the same rows.
A real `git sup serve`, real tasks, real HTTP streams."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from tests.boundary.conftest import Setup, make_task
from tests.tasks.test_queue_slots import _init
from tests.web.server import Served, serving


class Stream:
    """An open `GET /events`: `next()` is the next `rows` event's id and data."""

    def __init__(self, served: Served) -> None:
        u = urlsplit(served.base)
        self.conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=60)
        self.conn.request("GET", "/events", headers={"Authorization": f"Bearer {served.token}"})
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, self.resp.status

    def next(self) -> tuple[int, str]:
        ident: int | None = None
        name = ""
        while True:
            line = self.resp.fp.readline().decode()
            assert line, "the stream ended"
            if line.startswith("id: "):
                ident = int(line[4:])
            elif line.startswith("event: "):
                name = line[7:].strip()
            elif line.startswith("data: ") and name == "rows":
                assert ident is not None, "a rows event without an id"
                return ident, line[6:].rstrip("\n")


@contextmanager
def stream(served: Served) -> Iterator[Stream]:
    s = Stream(served)
    try:
        yield s
    finally:
        s.conn.close()


def _turn(repo: Path, tid: str, cost: float) -> None:
    """What a supervisor appends when a turn ends: the page shows the cost."""
    from gitsup.ids import TaskId
    from gitsup.store.events import EventLog
    from gitsup.store.eventtypes import TurnCompleted
    from gitsup.store.suprepo import SupRepo

    ctx = SupRepo.discover(repo)
    with EventLog(ctx.layout.events(TaskId(tid)), TaskId(tid)) as log:
        log.append(TurnCompleted(subtype="success", result="", cost_usd=cost))


def _cost(data: str, tid: str) -> float:
    return float(next(r["cost_usd"] for r in json.loads(data) if r["id"] == tid))


def test_pages_share_one_numbered_view(repo: Path) -> None:
    _init(repo)
    qs = Setup(repo, repo.parent, repo.parent, repo.parent)
    a = make_task(qs, files=(("a.txt", "a\n"),))
    b = make_task(qs, files=(("b.txt", "b\n"),))
    with serving(repo) as served, stream(served) as early:
        first, rows = early.next()
        assert {r["id"] for r in json.loads(rows)} == {a["id"], b["id"]}
        # two changes while only the early page is open: it gets each, numbered upwards
        _turn(repo, a["id"], 0.25)
        seen = first
        while True:
            seen, rows = early.next()
            if _cost(rows, a["id"]) >= 0.25:
                break
        _turn(repo, b["id"], 0.5)
        while True:
            seen, rows = early.next()
            if _cost(rows, b["id"]) >= 0.5:
                break
        assert seen > first
        # a page opened now starts where the server is: the same number, the same rows
        with stream(served) as late:
            late_id, late_rows = late.next()
            assert (late_id, late_rows) == (seen, rows)
            # and the next change reaches both pages as one: same number, same rows
            _turn(repo, a["id"], 0.25)
            got_early = early.next()
            got_late = late.next()
            assert got_early == got_late and got_early[0] > seen, (got_early, got_late)
            assert _cost(got_early[1], a["id"]) >= 0.5
