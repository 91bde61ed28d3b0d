"""A task's journal: its event log (append, then seal into Git), its record and the
notifier, written in one place so that an event, the record and the sealed log agree."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from gitsup.errors import GitsupError
from gitsup.faults import fault
from gitsup.git import GitRepo, RefConflict
from gitsup.ids import TaskId
from gitsup.layout import Layout
from gitsup.spec import TaskSpec
from gitsup.state import State
from gitsup.store.events import Event, EventLog
from gitsup.store.eventtypes import ProtocolNoise, RecoverableFailure
from gitsup.store.flood import Flood
from gitsup.store.payload import Payload
from gitsup.store.record import TaskRecord
from gitsup.store.records import TaskStore

EventSink = Callable[[Event], None]


def task_log(layout: Layout, task: TaskId, spec: TaskSpec) -> EventLog:
    """The task's event log, with the bounds its spec sets."""
    return EventLog(
        layout.events(task),
        task,
        max_record_bytes=spec.events.max_record_bytes,
        rotate_bytes=spec.events.rotate_bytes,
        keep_files=spec.events.keep_files,
    )


class Journal:
    def __init__(
        self,
        repo: GitRepo,
        layout: Layout,
        record: TaskRecord,
        spec: TaskSpec,
        *,
        on_event: EventSink | None = None,
    ) -> None:
        from gitsup.attention import notify

        self.repo = repo
        self.store = TaskStore(layout)
        self.record = record
        task = TaskId(record.id)
        self.log = task_log(layout, task, spec)
        self.log.worker = record.spawns  # every record says which worker it belongs to
        self.on_event = on_event
        self.notifier = notify.notifier_for(
            repo, layout, spec, task, current=lambda: self.record.model_dump(mode="json")
        )
        self.lock = threading.RLock()  # the egress gate reports from its own thread
        self.flood = Flood(spec.events.max_output_bytes, spec.events.max_refused)
        # Events an append failed to write, in order (see `_append`), and the first failure
        # (type, error) not yet reported.
        self.pending: list[Payload] = []
        self._failed: tuple[str, str] | None = None

    def emit(self, payload: Payload) -> Event | None:
        """Append `payload`; None when the flood bounds (gitsup/store/flood.py) dropped it
        or folded it into a count, or when it is kept pending (below)."""
        with self.lock:
            self.flush()
            written = None
            for p in self.flood.admit(payload):
                ev = self._append(p)
                if p is payload:
                    written = ev
        return written

    def _append(self, payload: Payload) -> Event | None:
        """Append, or keep `payload` pending: an append that fails (a full disk, EIO) is not
        the end of the task. What is pending is written, in order and before anything
        after it, by the next `flush` (every emit and every turn of the supervisor's loop
        try), followed by a `recoverable_failure` that says so."""
        if self.pending:
            self.pending.append(payload)
            return None
        try:
            ev = self._log_append(payload)
        except OSError as exc:
            self.pending.append(payload)
            if self._failed is None:
                self._failed = (payload.event_type, str(exc))
            return None
        self._wrote(payload, ev)
        return ev

    def flush(self) -> bool:
        """Write what is pending, in order; True when nothing is left pending."""
        with self.lock:
            if not self.pending:
                return True
            if self._failed is not None:
                # Said first: the events after it were written late, in their order.
                what, error = self._failed
                self._failed = None
                self.pending.insert(
                    0,
                    RecoverableFailure(
                        what=f"append of {what}",
                        error=error,
                        action="kept pending and written late, in order (the events after this)",
                        pending=len(self.pending),
                    ),
                )
            while self.pending:
                p = self.pending[0]
                try:
                    ev = self._log_append(p)
                except OSError:
                    return False
                self.pending.pop(0)
                self._wrote(p, ev)
        return True

    def _log_append(self, payload: Payload) -> Event:
        """Append; first, when the record could pass the log's size cap, seal the log and
        rotate it (a rotated file is always sealed whole). A seal that fails leaves the
        file as it is: it grows past its cap rather than lose what it holds."""
        if self.log.room() < 0:
            with contextlib.suppress(GitsupError, RefConflict):
                self.log.seal(self.repo, "the event log reached its size cap", rotate=True)
        return self.log.append(payload)

    def flush_or_wait(self, seconds: float = 30.0) -> bool:
        """`flush`, tried again for up to `seconds` (the task's end waits for its log)."""
        end = time.monotonic() + seconds
        delay = 0.05
        while not self.flush():
            if time.monotonic() >= end:
                return False
            time.sleep(delay)
            delay = min(1.0, delay * 2)
        return True

    def _wrote(self, payload: Payload, ev: Event) -> None:
        self.flood.wrote(payload, self.log.last_bytes)
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(ev)
        if self.notifier is not None:
            with contextlib.suppress(Exception):
                self.notifier.on_event(ev)

    def save(self, state: State) -> None:
        self.record.state = state
        self.store.save(self.record)

    def finish(self, final: State, finished: Payload) -> None:
        """The end, in an order that no crash turns into a lie: the terminal record is
        staged beside the record, `finished` (`task_finished`) appended, and only then the
        staged record becomes the record. A record that says the task ended finds its log
        complete; a supervisor that died in between left the staged record, which
        `git sup recover` completes (gitsup/supervision/recovery.py)."""
        self.record.state = final
        self.store.stage_final(self.record)
        with self.lock:  # what the flood bounds folded or dropped, said before the end
            for p in self.flood.final():
                self._append(p)
        fault("before_task_finished")
        self.emit(finished)
        fault("after_task_finished")
        if not self.flush_or_wait():
            # The staged record stays: `git sup recover` completes it once the log can be
            # written (it appends `task_finished` when the log lacks it).
            raise GitsupError(
                f"the event log of task {self.record.id} cannot be written "
                f"({len(self.pending)} events pending): the task ended, its record is staged",
                hint=f"free space, then `git sup recover {self.record.id}` completes it",
            )
        self.store.commit_final(TaskId(self.record.id))

    def add_reason(self, text: str, *, once: bool = False) -> None:
        if not once or text not in self.record.reasons:
            self.record.reasons.append(text)

    def seal(self, reason: str) -> None:
        with self.lock:
            try:
                self.log.seal(self.repo, reason)
            except (GitsupError, RefConflict) as exc:
                # Sealing is retried at the next transition; the WAL keeps every event.
                self._append(ProtocolNoise(error=f"seal failed: {exc}"))

    def close(self) -> None:
        self.log.close()

    def drain(self) -> None:
        if self.notifier is not None:  # the task has ended: let bounded deliveries finish
            self.notifier.join(120.0)
