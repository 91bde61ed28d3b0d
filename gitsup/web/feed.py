"""The server's one view of every task, shared by the index, the API and every open event
stream (`GET /events`): a single fold of the task records and logs (gitsup/attention/fold.py)
refreshed at most once per `POLL` however many pages are open, and the rows of its last
change, numbered, that every stream sends on (fan-out). A page's cost is then a comparison of
two numbers, not a read of every task's log."""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

from gitsup.web import views

if TYPE_CHECKING:
    from gitsup.attention.fold import TaskStatus
    from gitsup.layout import Layout

# How often the streams' view is refreshed (an event reaches an open page within this and a
# refresh of the fold).
POLL = 0.2


class Feed:
    """Every task's status: `rows()` refreshed now (a request), `poll()` at most once per
    `POLL` for all streams together; `version` grows with each change a page would show and
    `payload()` is it with that change's rows as the stream sends them (JSON, as `GET /api/tasks`)."""

    def __init__(self, layout: Layout) -> None:
        from gitsup.attention.fold import Board

        # each refresh reads only what was appended since; a Board is not thread-safe
        self._board = Board(layout)
        self._lock = threading.Lock()
        self._key: Any = None
        self._rows: list[TaskStatus] = []
        self._payload: str | None = None
        self.polled = 0.0  # time.monotonic() of the last refresh
        self.version = 0  # 0: nothing yet

    def rows(self) -> list[TaskStatus]:
        """Every task's status now, needs-human first."""
        with self._lock:
            return self._refresh()

    def due(self) -> float:
        """Seconds until the streams' view is due for a refresh (0: now)."""
        return max(0.0, self.polled + POLL - time.monotonic())

    def poll(self) -> int:
        """Refresh the view unless another stream did within `POLL` (then wait for that one,
        if it runs); the current version. Blocking: run it in a worker thread."""
        with self._lock:
            if self.version == 0 or self.due() == 0.0:
                self._refresh()
            return self.version

    def payload(self) -> tuple[int, str]:
        """The current version and its rows as the stream sends them (made once, by the
        first stream that sends them)."""
        with self._lock:
            if self._payload is None:
                self._payload = json.dumps([views.row_dict(r) for r in self._rows], default=str)
            return self.version, self._payload

    def _refresh(self) -> list[TaskStatus]:
        rows = self._board.refresh()
        self.polled = time.monotonic()
        # What the page shows, by task: not the order (tasks of a group are sorted by their
        # age, which rounding reorders now and then), not the clocks.
        key = sorted(
            (r.id, r.state, r.status, r.turns, r.cost_usd, r.waiting_for, r.attention) for r in rows
        )
        if key != self._key:
            self._key, self._rows, self._payload = key, rows, None
            self.version += 1
        return rows
