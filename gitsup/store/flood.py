"""Bounds on the events a worker can cause at will: its output (`worker_output`) and the
connections the egress gate refuses (`egress_refused`). A worker that prints 1 GiB or
opens 100,000 refused connections must not grow its task's event log without bound.

- `worker_output`: written until the records written for it reach `max_output_bytes`
  (as written, JSON included); later ones are dropped and counted (events, bytes of text).
- `egress_refused`: the first refusal of each (who, host, port, reason) is written, at
  most `max_refused` distinct ones; a repeat is folded into a count, written as one more
  `egress_refused` with `repeats` (every `FOLD_FLUSH` repeats, and when the task ends);
  refusals past `max_refused` distinct ones are dropped and counted.
- `events_dropped` says what was dropped: once when a type first drops (`final` false),
  and with the totals when the task ends (`final` true), whenever anything was dropped.

So whatever the worker does, the log holds at most `max_output_bytes` (plus one record)
of worker output, and for n refused connections at most twice `max_refused` plus
n / `FOLD_FLUSH` refusal records (and two `events_dropped`).
"""

from __future__ import annotations

import threading
from typing import Any

from gitsup.store.eventtypes import EgressRefused, EgressSummary, EventsDropped, WorkerOutput
from gitsup.store.payload import Payload

MiB = 1024 * 1024
DEFAULT_MAX_OUTPUT_BYTES = 64 * MiB
DEFAULT_MAX_REFUSED = 1000
FOLD_FLUSH = 10_000


class Flood:
    """Which of a task's events are written; thread-safe (the egress gate reports from
    its own thread)."""

    def __init__(
        self,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_refused: int = DEFAULT_MAX_REFUSED,
    ) -> None:
        self.max_output_bytes = max_output_bytes
        self.max_refused = max_refused
        self.output_bytes = 0  # written for worker_output
        self.dropped_output = [0, 0]  # events, bytes of text
        self.dropped_refused = 0
        self.folded = 0  # repeats folded into a count
        self._pending: dict[tuple[str, str, int, str], int] = {}
        self._noticed: set[str] = set()
        self._lock = threading.Lock()

    def admit(self, payload: Payload) -> list[Payload]:
        """What to write for `payload`: itself, nothing (dropped or folded), or a notice or
        a folded count as well."""
        if isinstance(payload, WorkerOutput):
            with self._lock:
                if self.output_bytes < self.max_output_bytes:
                    return [payload]
                self.dropped_output[0] += 1
                self.dropped_output[1] += len(payload.text)
                return self._notice("worker_output")
        if isinstance(payload, EgressRefused):
            k = (payload.who, payload.host, payload.port, payload.reason)
            with self._lock:
                n = self._pending.get(k)
                if n is not None:
                    self.folded += 1
                    if n + 1 < FOLD_FLUSH:
                        self._pending[k] = n + 1
                        return []
                    self._pending[k] = 0
                    return [_repeat(k, n + 1)]
                if len(self._pending) < self.max_refused:
                    self._pending[k] = 0
                    return [payload]
                self.dropped_refused += 1
                return self._notice("egress_refused")
        if isinstance(payload, EgressSummary):
            # the gate closed: its folded repeats are said before its summary
            with self._lock:
                out: list[Payload] = []
                for k, n in self._pending.items():
                    if n and k[0] == payload.who:
                        out.append(_repeat(k, n))
                        self._pending[k] = 0
                return [*out, payload]
        return [payload]

    def wrote(self, payload: Payload, nbytes: int) -> None:
        """`payload` was written as a record of `nbytes` bytes."""
        if isinstance(payload, WorkerOutput):
            with self._lock:
                self.output_bytes += nbytes

    def final(self) -> list[Payload]:
        """At the end: the folded repeats not written yet, and the totals of what was
        dropped (nothing when nothing was)."""
        with self._lock:
            out: list[Payload] = [_repeat(k, n) for k, n in self._pending.items() if n]
            self._pending = dict.fromkeys(self._pending, 0)
            if self.dropped_output[0] or self.dropped_refused:
                out.append(self._dropped(final=True))
            return out

    def _notice(self, kind: str) -> list[Payload]:
        if kind in self._noticed:
            return []
        self._noticed.add(kind)
        return [self._dropped(final=False)]

    def _dropped(self, *, final: bool) -> EventsDropped:
        dropped: dict[str, Any] = {}
        if self.dropped_output[0]:
            dropped["worker_output"] = {
                "events": self.dropped_output[0],
                "bytes": self.dropped_output[1],
            }
        if self.dropped_refused:
            dropped["egress_refused"] = {"events": self.dropped_refused}
        return EventsDropped(
            dropped=dropped,
            limits={
                "max_output_bytes": self.max_output_bytes,
                "max_refused": self.max_refused,
                "written_output_bytes": self.output_bytes,
                "folded_repeats": self.folded,
            },
            final=final,
        )


def _repeat(k: tuple[str, str, int, str], n: int) -> EgressRefused:
    return EgressRefused(who=k[0], host=k[1], port=k[2], reason=k[3], repeats=n)
