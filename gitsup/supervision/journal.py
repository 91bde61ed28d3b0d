"""A task's journal: its event log (append, then seal into Git), its record and the
notifier, written in one place so that an event, the record and the sealed log agree."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from gitsup.errors import GitsupError
from gitsup.faults import fault
from gitsup.git import GitRepo, RefConflict
from gitsup.ids import TaskId
from gitsup.layout import Layout
from gitsup.spec import TaskSpec
from gitsup.state import State
from gitsup.store.events import Event, EventLog
from gitsup.store.eventtypes import Payload, ProtocolNoise
from gitsup.store.flood import Flood
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
        self.on_event = on_event
        self.notifier = notify.notifier_for(
            repo, layout, spec, task, current=lambda: self.record.model_dump(mode="json")
        )
        self.lock = threading.RLock()  # the egress gate reports from its own thread
        self.flood = Flood(spec.events.max_output_bytes, spec.events.max_refused)

    def emit(self, payload: Payload) -> Event | None:
        """Append `payload`; None when the flood bounds (gitsup/store/flood.py) dropped it
        or folded it into a count."""
        with self.lock:
            written = None
            for p in self.flood.admit(payload):
                ev = self._append(p)
                if p is payload:
                    written = ev
        return written

    def _append(self, payload: Payload) -> Event:
        ev = self.log.append(payload)
        self.flood.wrote(payload, self.log.last_bytes)
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(ev)
        if self.notifier is not None:
            with contextlib.suppress(Exception):
                self.notifier.on_event(ev)
        return ev

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
                self.log.append(ProtocolNoise(error=f"seal failed: {exc}"))

    def close(self) -> None:
        self.log.close()

    def drain(self) -> None:
        if self.notifier is not None:  # the task has ended: let bounded deliveries finish
            self.notifier.join(120.0)
