"""Pure building blocks: durations, task ids, the state machine."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from gitsup.durations import format_duration, parse_duration
from gitsup.errors import Exit, GitsupError
from gitsup.ids import new_task_id, parse_task_id
from gitsup.layout import Layout
from gitsup.state import (
    EXIT_OF,
    STATUS_OF,
    TERMINAL,
    TRANSITIONS,
    InvalidTransition,
    State,
    Status,
    check_transition,
)
from gitsup.store.record import TaskRecord
from gitsup.store.records import TaskStore
from tests.conftest import REPO_ROOT

# The state-machine diagram of docs/design.md ("The task state machine").
_DESIGN_FILE = REPO_ROOT / "docs" / "design.md"

# --- durations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        (0, 0.0),
        ("90", 90.0),
        ("2.5", 2.5),
        ("90s", 90.0),
        ("10m", 600.0),
        ("4h", 14400.0),
        ("1d", 86400.0),
        ("250ms", 0.25),
        ("1h30m", 5400.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        (" 10M ", 600.0),
        ("4H", 14400.0),
    ],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert isinstance(parse_duration(text), float)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        " ",
        "abc",
        "10x",
        "s",
        "5 m",
        "1h30",
        "-5",
        "-5s",
        "10m-",
        "1e3",
        "m10",
        -1,
        -0.5,
        True,
        False,
        None,
        [10],
        {"s": 1},
        float("nan"),
        float("inf"),
        float("-inf"),
        "400d",
        10**12,
    ],
)
def test_parse_duration_rejects(bad: object) -> None:
    with pytest.raises(ValueError) as ei:
        parse_duration(bad)
    assert str(ei.value)  # a readable message, not an empty one


def test_format_duration() -> None:
    assert format_duration(5) == "5s"
    assert format_duration(90) == "1m30s"
    assert format_duration(3600 + 120) == "1h02m"
    assert format_duration(2 * 86400 + 3 * 3600) == "2d03h"


# --- ids ----------------------------------------------------------------------------------

ID_RE = re.compile(r"^\d{8}-[0-9a-f]{6}$")


def test_task_id_format_is_utc_date_and_six_hex() -> None:
    t = time.mktime((2026, 3, 4, 12, 0, 0, 0, 0, -1))
    tid = new_task_id(t)
    assert ID_RE.match(tid)
    assert tid.startswith(time.strftime("%Y%m%d", time.gmtime(t)))
    assert parse_task_id(tid) == tid


def test_task_ids_sort_by_date() -> None:
    days = [time.time() - d * 86400 for d in (400, 30, 2, 1, 0)]
    ids = [new_task_id(t) for t in days]
    assert sorted(ids) == ids
    # a later day sorts after an earlier one whatever the random part is
    for _ in range(200):
        a, b = new_task_id(days[2]), new_task_id(days[3])
        assert a < b


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "2026-01-01",
        "20260101-ABCDEF",
        "20260101-abcde",
        "20260101-abcdefa",
        "../20260101-abcdef",
        "20260101-abcdef/..",
        "x20260101-abcdef",
    ],
)
def test_parse_task_id_rejects(bad: str) -> None:
    with pytest.raises(GitsupError):
        parse_task_id(bad)


def test_store_allocates_unique_ids_over_many(tmp: Path) -> None:
    store = TaskStore(Layout(tmp / "common"))
    ids = [store.create() for _ in range(2000)]
    assert len(set(ids)) == 2000
    assert all(ID_RE.match(i) for i in ids)
    assert len(list((tmp / "common" / "sup" / "tasks").iterdir())) == 2000


def test_store_draws_again_on_collision(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The random part collides: the store must not reuse a directory, it draws again."""
    store = TaskStore(Layout(tmp / "common"))
    draws = iter([b"\x00\x00\x01"] * 3 + [b"\x00\x00\x02"])
    monkeypatch.setattr("gitsup.ids.os.urandom", lambda n: next(draws))
    first = store.create()
    second = store.create()
    assert first != second
    assert first.endswith("000001") and second.endswith("000002")


def test_store_gives_up_cleanly_when_every_draw_collides(
    tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TaskStore(Layout(tmp / "common"))
    monkeypatch.setattr("gitsup.ids.os.urandom", lambda n: b"\xaa\xbb\xcc")
    store.create()
    with pytest.raises(GitsupError, match="unique task id"):
        store.create()


def test_store_ids_listed_sorted_and_only_with_records(tmp: Path) -> None:
    store = TaskStore(Layout(tmp / "common"))
    a, b = store.create(), store.create()
    store.save(TaskRecord(id=b))
    assert store.ids() == [b]  # a has no task.json yet
    store.save(TaskRecord(id=a))
    assert store.ids() == sorted([a, b])


# --- state machine ------------------------------------------------------------------------


def _design_states() -> set[str]:
    block = _DESIGN_FILE.read_text().split("### The task state machine", 1)[1]
    diagram = block.split("```text", 1)[1].split("```", 1)[0]
    # every word of the diagram that is not commentary is a state
    commentary = {
        "v",
        "candidate",
        "ready",
        "parked",
        "repair",
        "round",
        "same",
        "worker",
        "stop",
        "from",
    }
    return set(re.findall(r"[a-z]{2,}", diagram)) - commentary


def test_every_state_named_in_design_exists_and_is_reachable() -> None:
    named = _design_states()
    assert named == {s.value for s in State}, named ^ {s.value for s in State}
    seen = {State.IDLE}
    todo = [State.IDLE]
    while todo:
        cur = todo.pop()
        for nxt in TRANSITIONS[cur]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(State)


DESIGN_EDGES = [
    ("idle", "starting"),
    ("starting", "running"),
    ("running", "waiting"),
    ("waiting", "running"),
    ("waiting", "verifying"),
    ("verifying", "completed"),
    ("running", "paused"),
    ("paused", "running"),
    ("waiting", "failed"),
    ("verifying", "running"),
    ("verifying", "blocked"),
    ("starting", "stopped"),
    ("running", "stopped"),
    ("waiting", "stopped"),
    ("paused", "stopped"),
    ("verifying", "stopped"),
]


@pytest.mark.parametrize(("a", "b"), DESIGN_EDGES)
def test_design_transitions_are_allowed(a: str, b: str) -> None:
    assert State(b) in TRANSITIONS[State(a)]
    check_transition(State(a), State(b))


def test_invalid_transitions_raise_and_leave_the_state() -> None:
    allowed = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    invalid = [(a, b) for a in State for b in State if (a, b) not in allowed]
    assert len(invalid) > 60
    for a, b in invalid:
        with pytest.raises(InvalidTransition):
            check_transition(a, b)
    # a few that must never be possible
    for a, b in [
        ("idle", "completed"),
        ("running", "completed"),
        ("waiting", "completed"),
        ("idle", "running"),
        ("blocked", "completed"),
        ("completed", "blocked"),
        ("idle", "stopped"),
    ]:
        assert (State(a), State(b)) not in allowed


def test_terminal_states_are_entered_once() -> None:
    for final in TERMINAL:
        path = [State.IDLE, State.STARTING]
        if final == State.COMPLETED:
            path += [State.RUNNING, State.WAITING, State.VERIFYING]
        for a, b in zip(path, [*path[1:], final], strict=True):
            check_transition(a, b)
        for again in State:
            with pytest.raises(InvalidTransition):
                check_transition(final, again)


def test_stop_is_accepted_from_every_live_state_but_idle() -> None:
    for s in (State.STARTING, State.RUNNING, State.WAITING, State.PAUSED, State.VERIFYING):
        assert State.STOPPED in TRANSITIONS[s]
    assert State.STOPPED not in TRANSITIONS[State.IDLE]


def test_every_live_state_fails_or_parks_directly() -> None:
    """The finaliser takes one transition: the log never shows a state the task did not
    pass through (it used to walk the shortest legal path, e.g. running -> waiting ->
    verifying -> blocked for a task parked while running)."""
    for s in (State.STARTING, State.RUNNING, State.WAITING, State.PAUSED, State.VERIFYING):
        assert {State.FAILED, State.BLOCKED, State.STOPPED} <= TRANSITIONS[s]
    # ready only from verifying: nothing is ready unverified
    assert [s for s in State if State.COMPLETED in TRANSITIONS[s]] == [State.VERIFYING]


def test_status_and_exit_code_of_every_terminal_state() -> None:
    assert {s: STATUS_OF[s] for s in TERMINAL} == {
        State.COMPLETED: Status.READY,
        State.BLOCKED: Status.PARKED,
        State.FAILED: Status.FAILED,
        State.STOPPED: Status.STOPPED,
    }
    assert EXIT_OF[Status.READY] == 0 == Exit.READY
    assert EXIT_OF[Status.PARKED] == 3
    assert EXIT_OF[Status.FAILED] == 4
    assert EXIT_OF[Status.STOPPED] == 5
    assert Exit.BAD_INPUT == 2 and Exit.INTERNAL == 1
