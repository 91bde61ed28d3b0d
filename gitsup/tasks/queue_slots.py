"""Slots: several compositions of the queue under test at once (`sup.queue.slots`,
`queue run --slots N`).

The queued candidates in a window (the first `--batch` of them) are composed in queue
order on the target's tip: that chain is the *predicted* order. Every composition under
test is a prefix of it: the first k candidates, candidate k on top of the k-1 ahead of it
as predicted now. What the memo knows of the prefixes decides:

- the longest prefix whose required checks passed on its exact tree is integrated at once
  (one signed integration per candidate, in queue order, the target moved once); the free
  slots start on what is behind it first (its trees stay the same once the target moves);
- a first candidate whose own composition on the target fails on every attempt is the
  culprit: it is sent back, and every composition behind it (all of them included it) is
  composed again without it and tested again: the nearest non-failing candidate is what
  they build on;
- otherwise free slots test more prefixes: the whole window first and, while the window
  holds candidates that were in no composition yet, evenly spread shorter prefixes (a
  bisection made in advance); once some prefix failed, points spread evenly between the
  longest passing and the shortest failing prefix (an N-ary search; with one slot this is
  the binary search of the serial queue).

Every composition runs once; a failure is confirmed in a slot of its own while the others go
on: the first candidate's, while what is behind it is tested composed without it; the
shortest failing prefix's, and when its search interval is small (`nearest`), while what is
behind its last candidate is tested without that candidate (a guess that it is the culprit,
which blames nobody: only a first candidate is ever sent back).

The same check (argv) on the same tree in the same environment runs once: a check that a
slot is running already is not started by another; the composition waits for its result.

Where a slot's checks run is `Slots`: here, a thread per slot with its own throw-away
confined place (`ConfinedChecks`: worktree, private dirs; a cgroup and a network namespace
per check). Deciding what to test, recording results, integrating and sending back happen
in the runner's own thread only, so the queue's state has one writer and a runner killed
with busy slots leaves what the serial runner leaves: integrations the target holds (the
next run reconciles them) and results the memo keeps.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import queue as _queue
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gitsup.ids import Oid
from gitsup.tasks.queue_checks import CheckSlots, Composition, Tested, _Step
from gitsup.tasks.queue_state import Entry, QueueError, write_runner_status
from gitsup.verification.confined import ConfinedChecks, Confinement

if TYPE_CHECKING:
    from gitsup.tasks.queue import Runner

DEFAULT_SLOTS = 1  # `git config sup.queue.slots`, `queue run --slots`


def nearest(slots: int, hi: int) -> bool:
    """Whether to speculate that the last candidate of the shortest failing prefix `hi` (the
    longest passing one is integrated at once, so it is 0) is the culprit: test what is
    behind it composed without it while prefix hi-1 is tested and hi's failure confirmed.
    It takes two slots and narrows the search to the others, so only when the search
    interval is small enough for them and at least one slot is left to search."""
    return slots >= 3 and 1 < hi <= slots


def points(
    n: int,
    known: dict[int, bool | str | None],
    busy: set[int],
    slots: int,
    *,
    spread: bool,
    top: bool = False,
) -> list[int]:
    """The prefixes (lengths 1..n of the predicted order) worth testing next, best first.
    `known`: prefix -> passed (None: not known), `busy`: prefixes whose checks run now;
    `top`: once a prefix failed, the one just shorter than it among them (`nearest`),
    after the others (when slots are short, the search goes on first)."""
    lo = max((k for k, v in known.items() if v is True), default=0)
    hi = min((k for k, v in known.items() if v is False and k > lo), default=None)
    if hi is None:
        want = [n]
        if spread:
            want += [lo + ((n - lo) * i) // slots for i in range(1, slots)]
    elif any(lo < k < hi for k in busy):
        return []  # what runs inside the search's interval narrows it first: wait for it
    elif top:
        want = [lo + ((hi - 1 - lo) * i) // slots for i in range(1, slots)] + [hi - 1]
    else:
        want = [lo + ((hi - lo) * i) // (slots + 1) for i in range(1, slots + 1)]
    out: list[int] = []
    for k in want:
        if not lo < k <= n or (hi is not None and k >= hi):
            continue
        if known.get(k) is None and k not in busy and k not in out:
            out.append(k)
    return out


class Slots:
    """Where the slots' checks run: on this machine, a thread per slot, each with its own
    confined place. `submit` returns a future of the composition's `Tested`."""

    def __init__(
        self,
        n: int,
        make_box: Callable[[int], ConfinedChecks],
        work: Callable[[ConfinedChecks, Composition], Tested],
    ) -> None:
        self._pool = cf.ThreadPoolExecutor(max_workers=n, thread_name_prefix="gitsup-slot")
        self._free: _queue.SimpleQueue[ConfinedChecks] = _queue.SimpleQueue()
        self._boxes: list[ConfinedChecks] = []
        self._lock = threading.Lock()
        self._make, self._work = make_box, work

    def _take(self) -> ConfinedChecks:
        with contextlib.suppress(_queue.Empty):
            return self._free.get_nowait()
        with self._lock:
            box = self._make(len(self._boxes) + 1)
            self._boxes.append(box)
        return box

    def submit(self, comp: Composition) -> cf.Future[Tested]:
        def job() -> Tested:
            box = self._take()
            try:
                return self._work(box, comp)
            finally:
                self._free.put(box)

        return self._pool.submit(job)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for box in self._boxes:
            box.close()


class Speculation:
    """The runner's loop with N slots (`Runner._loop` when slots > 1)."""

    def __init__(self, runner: Runner, slots: int) -> None:
        from gitsup.tasks.queue_checks import run_composition

        self.r = runner
        self.n = slots
        setup = runner.checks.setup() if runner.hosts is None else None
        self.slots: Slots | CheckSlots = runner.hosts or Slots(
            slots,
            lambda i: runner.checks.new_box(f"s{i}-"),
            lambda box, comp: run_composition(box, comp, setup=setup, say=runner.say),
        )
        # future -> (slot number, composition); memo keys being computed now
        self.running: dict[cf.Future[Tested], tuple[int, Composition]] = {}
        self.inflight: set[str] = set()
        # future -> when it started, and the critical path's depth then
        self.began: dict[cf.Future[Tested], tuple[float, int]] = {}
        self.seen: set[str] = set()  # candidates that were in a composition under test
        self._merges: dict[tuple[str, str], tuple[Oid, Oid]] = {}
        self._prepared: dict[str, _Step] = {}
        self._prepared_on = ""

    def land(self) -> None:
        r = self.r
        try:
            while True:
                state, _ = r.q.read()
                window = state.queued()[: r.batch]
                if not window and not self.running:
                    r._flush_repairs()
                    return
                base = r.repo.ref_target(r.q.target_ref)
                assert base is not None
                steps = self._steps(base, window)
                if steps and self._decide(base, steps, state.results):
                    continue
                if not self.running:
                    if steps:
                        raise QueueError("the queue made no progress (no composition to test)")
                    continue  # every candidate of the window went back: the next window
                self._publish(steps)
                self._wait()
        finally:
            self.slots.close()
            write_runner_status(r.q, None)

    # the predicted order

    def _steps(self, base: Oid, window: list[Entry]) -> list[_Step]:
        """The window's candidates, checked once per target tip (`Runner._prepare`),
        composed in order on `base` (merges remembered: a chain already composed is not
        composed again); conflicting candidates go back."""
        r = self.r
        if self._prepared_on != base:
            self._prepared, self._prepared_on = {}, base
        new = [e for e in window if e.task not in self._prepared]
        if new:
            for s in r._prepare(new):
                self._prepared[s.entry.task] = s
        steps = [replace(self._prepared[e.task]) for e in window if e.task in self._prepared]
        composed = r._compose(base, steps, cache=self._merges)
        kept = {s.entry.task for s in composed}
        for s in steps:
            if s.entry.task not in kept:  # sent back: it conflicts
                self._prepared.pop(s.entry.task, None)
        return composed

    # deciding on what the memo knows

    def _decide(self, base: Oid, steps: list[_Step], memo: dict[str, dict[str, Any]]) -> bool:
        """Integrate, send back, or start tests; True when the queue changed (read again)."""
        r = self.r
        digests: dict[Confinement, str] = {}
        view = self._view(steps, memo, digests)
        known, comps = view
        lo = max((k for k, v in known.items() if v is True), default=0)
        if lo:
            rest = steps[lo:]
            if rest and r.hosts is None:
                # what is behind keeps its trees once the branch moves: the slots start on
                # it first, so they do not wait for the signed integrations (not on the
                # cluster's hosts: they fetch a composition's base from the target branch,
                # which only signed integrations reach)
                known2, comps2 = self._view(rest, memo, digests)
                if known2[1] is not False:
                    self._plan(steps[lo - 1].merge, rest, known2, comps2, memo, digests)
            r._integrate(base, steps[:lo])
            r._flush_repairs()
            return True
        if known[1] is False:
            _comp, failed = r.checks.composition(steps, 1, memo=memo, digests=digests)
            r._finish(
                steps[0].entry,
                "failed",
                f"required checks fail when composed onto {r.q.branch}: "
                + ", ".join(str(f["name"]) for f in failed),
                {"failed": failed, "base": base, "composed_on": base},
                park_task=True,
            )
            r._flush_repairs()
            return True
        self._plan(base, steps, known, comps, memo, digests)
        return False

    def _plan(
        self,
        base: Oid,
        steps: list[_Step],
        known: dict[int, bool | str | None],
        comps: dict[int, Composition],
        memo: dict[str, dict[str, Any]],
        digests: dict[Confinement, str],
    ) -> None:
        """Start tests in the free slots: the predicted order `steps` composed on `base`,
        none of its prefixes known to pass and its first not known to fail."""
        r = self.r
        # every composition runs once: a failure is confirmed in a slot of its own (with what
        # is left of the retries) while the slots go on, never by a retry that holds a slot
        plan = {k: (v if v != "suspect" else False) for k, v in known.items()}
        hi = min((k for k, v in plan.items() if v is False), default=0)
        if hi == 1:
            # the first candidate failed once: confirm it and meanwhile test what is behind
            # it composed without it (the nearest non-failing candidate)
            self._start(1, replace(comps[1], retries=max(0, r.retries - 1)))
            self._without(base, steps, 1, memo, digests)
            return
        busy = self._busy(comps)
        guess = nearest(self.n, hi)
        if not any(0 < k < hi for k in busy):  # else what runs there narrows the search first
            spread = any(s.entry.task not in self.seen for s in steps)
            room = self.n - 2 if guess else self.n
            for k in points(len(steps), plan, busy, room, spread=spread, top=guess):
                self._start(k, replace(comps[k], retries=0))
        elif not guess:
            return
        # confirm the shortest failing prefix (what the serial queue's retry does): when
        # everything before it passes, its last candidate is decided
        if hi > 1 and known[hi] == "suspect":
            self._start(hi, replace(comps[hi], retries=max(0, r.retries - 1)))
        if guess:
            # and speculate that its last candidate is the culprit: what is behind it,
            # composed without it, is tested while prefix hi-1 and its failure are
            self._without(base, steps, hi, memo, digests)

    def _without(
        self,
        base: Oid,
        steps: list[_Step],
        k: int,
        memo: dict[str, dict[str, Any]],
        digests: dict[Confinement, str],
    ) -> None:
        """Test the predicted order without its k-th candidate: the k-1 ahead of it and
        what is behind it, composed on `base` (a candidate that conflicts there is left
        out, not sent back). Behind the first candidate, its prefixes are searched as the
        predicted order's are; behind a later one, its whole length is tested once."""
        r = self.r
        kept = [replace(x) for x in steps[: k - 1] + steps[k:]]
        rest = r._compose(base, kept, cache=self._merges, send_back=False)
        if len(rest) < k:  # nothing behind it (or a conflict ahead of it)
            return
        if k > 1:
            comp, failed = r.checks.composition(rest, len(rest), memo=memo, digests=digests)
            if not failed and not comp.suspect and comp.todo:
                self._start(len(rest), replace(comp, retries=0))
            return
        known2, comps2 = self._view(rest, memo, digests)
        plan2 = {j: (v if v != "suspect" else False) for j, v in known2.items()}
        for j in points(len(rest), plan2, self._busy(comps2), self.n, spread=False):
            self._start(j, replace(comps2[j], retries=0))

    def _view(
        self,
        steps: list[_Step],
        memo: dict[str, dict[str, Any]],
        digests: dict[Confinement, str],
    ) -> tuple[dict[int, bool | str | None], dict[int, Composition]]:
        """Per prefix: passed (True), failed (False), failed once, not yet confirmed
        ("suspect"), or not known (None); and its composition."""
        known: dict[int, bool | str | None] = {}
        comps: dict[int, Composition] = {}
        for k in range(1, len(steps) + 1):
            comp, failed = self.r.checks.composition(steps, k, memo=memo, digests=digests)
            comps[k] = comp
            if failed:
                known[k] = False
            elif comp.suspect:
                known[k] = "suspect"
            else:
                known[k] = None if comp.todo else True
        return known, comps

    def _busy(self, comps: dict[int, Composition]) -> set[int]:
        """Prefixes whose every unknown check runs in a slot now."""
        return {k for k, c in comps.items() if c.todo and set(c.keys()) <= self.inflight}

    def _start(self, k: int, comp: Composition) -> None:
        """Test a composition in a free slot, but no check that a slot runs already."""
        if len(self.running) >= self.n:
            return
        keys = comp.keys()
        todo = [c for c, key in zip(comp.todo, keys, strict=True) if key not in self.inflight]
        if not todo:
            return
        comp = replace(comp, todo=todo, suspect=[x for x in comp.suspect if x not in self.inflight])
        used = {slot for slot, _c in self.running.values()}
        slot = min(i for i in range(1, self.n + 1) if i not in used)
        self.r.say(
            f"slot {slot}: testing {len(comp.tasks)} candidate(s) on {comp.tree[:12]}: "
            f"{', '.join(c.name for c in todo)}"
        )
        fut = self.slots.submit(comp)
        self.running[fut] = (slot, comp)
        self.began[fut] = (time.monotonic(), self.r.checks.depth)
        self.inflight.update(comp.keys())
        self.seen.update(comp.tasks)

    def _wait(self) -> None:
        """Until a slot's composition is tested; its results go into the memo."""
        t0 = time.monotonic()
        done, _ = cf.wait(list(self.running), return_when=cf.FIRST_COMPLETED)
        self.r.res.waited_seconds += time.monotonic() - t0
        for fut in done:
            slot, comp = self.running.pop(fut)
            started, after = self.began.pop(fut)
            self.inflight.difference_update(comp.keys())
            self.r.checks.record(comp, fut.result(), slot=slot, started=started, after=after)

    def _publish(self, steps: list[_Step]) -> None:
        self.r.checks.publish(
            sorted(self.running.values(), key=lambda x: x[0]),
            [s.entry.task for s in steps],
        )
