"""Typed event payloads: every type round-trips through a real log file, logs written by the
previous version (untyped dicts) still read as typed payloads with the same JSON, unknown and
ill-fitting records stay readable as they were, a wrong field is refused (at run time here,
by mypy in the last test), and docs/events.md is the table the classes generate."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest

from gitsup.ids import TaskId
from gitsup.store import eventtypes as et
from gitsup.store.events import EVENT_TYPES, EventLog
from gitsup.store.payload import (
    REGISTRY,
    UNSET,
    Payload,
    PayloadError,
    Unset,
    Untyped,
    payload_of,
    schema_table,
)

ROOT = Path(__file__).resolve().parents[2]
OLD_LOGS = sorted((Path(__file__).parent / "data" / "oldlogs").glob("*.jsonl"))
TASK = TaskId("20261130-abcdef")


def _sample(tp: Any, n: int) -> Any:
    """A value of type `tp` (never UNSET: the variant with every optional field given)."""
    if tp is Any:
        return {"any": n}
    sup = getattr(tp, "__supertype__", None)
    if sup is not None:
        return f"{n:040x}" if tp is et.Oid else _sample(sup, n)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _sample(next(a for a in args if a not in (Unset, type(None))), n)
    if origin is Literal:
        return args[-1]
    if origin is list:
        return [_sample(args[0], n), _sample(args[0], n + 1)]
    if origin in (dict, typing.Mapping) and args[1] is not Any:
        return {"k": _sample(args[1], n)}
    if origin in (dict, typing.Mapping):
        return {"k": n, "nested": {"list": [1, "two", None]}}
    return {str: f"text {n} ✓", int: n, float: n + 0.25, bool: True}[tp]


def _full(cls: type[Payload]) -> Payload:
    hints = typing.get_type_hints(cls, vars(et))
    kw: dict[str, Any] = {}
    for i, f in enumerate(dataclasses.fields(cls)):
        if f.metadata.get("spread"):
            kw[f.name] = {"transport_key": i, "other": "x"}
        else:
            kw[f.name] = _sample(hints[f.name], i + 1)
    return cls(**kw)


def _minimal(cls: type[Payload]) -> Payload:
    """Only the fields that have no default (every optional one left out)."""
    full = _full(cls)
    kw = {
        f.name: getattr(full, f.name)
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return cls(**kw)


ALL = sorted(REGISTRY.items())


def test_the_registry_is_one_class_per_type_named_after_it() -> None:
    assert frozenset(REGISTRY) == EVENT_TYPES
    assert len(REGISTRY) >= 40
    for t, cls in REGISTRY.items():
        assert t == cls.TYPE
        assert cls.__name__ == "".join(w.capitalize() for w in t.split("_")), t
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert "__slots__" in vars(cls), t
    # every type the supervisor and the queue write has its class (not just the old list)
    for t in ("egress_refused", "worker_left_behind", "model_error", "resume_auto", "queue_parked"):
        assert t in REGISTRY


@pytest.mark.parametrize(("t", "cls"), ALL, ids=[t for t, _ in ALL])
def test_every_type_round_trips_through_a_real_log(t: str, cls: type[Payload], tmp: Path) -> None:
    log = EventLog(tmp / "events.jsonl", TASK)
    sent = [_full(cls), _minimal(cls)]
    written = [log.append(p) for p in sent]
    log.close()
    lines = (tmp / "events.jsonl").read_bytes().splitlines()
    back = list(EventLog(tmp / "events.jsonl", TASK).read())
    for p, w, line, ev in zip(sent, written, lines, back, strict=True):
        rec = json.loads(line)
        assert rec["type"] == t and list(rec) == ["seq", "ts", "task", "type", "data"]
        # the keys, in the class's order, and nothing that was left out
        assert rec["data"] == p.to_data() == w.data
        assert list(rec["data"]) == list(p.to_data())
        assert all(v is not UNSET for v in rec["data"].values())
        # and back: the same dataclass
        assert ev.payload == p, (t, rec["data"])
        assert type(ev.payload) is cls
    assert len(set(map(bytes, lines))) == 2


def test_keys_that_are_not_python_names_and_left_out_fields() -> None:
    p = et.StateChanged(from_="waiting", to="verifying", reason="turn completed")
    assert list(p.to_data().items()) == [
        ("from", "waiting"),
        ("to", "verifying"),
        ("reason", "turn completed"),
    ]
    paused = et.TurnCompleted(subtype="success", result="ok", paused=True)
    assert paused.to_data() == {"subtype": "success", "result": "ok", "paused": True}
    full = et.TurnCompleted(subtype="success", result="ok", cost_usd=None, repair_round=2)
    assert full.to_data() == {"subtype": "success", "result": "ok", "cost_usd": None, "round": 2}
    assert (
        et.WorkImported(branch="b", from_=None, to="a" * 40, objects=1, size=9).to_data()["bytes"]
        == 9
    )
    # a spread field writes its items where it stands, in their order
    out = et.WorkerOutput(stream="notification", text="t", more={"method": "m", "z": 1})
    assert list(out.to_data()) == ["stream", "text", "method", "z"]
    assert payload_of("worker_output", out.to_data()) == out


@pytest.mark.parametrize("path", OLD_LOGS, ids=[p.stem for p in OLD_LOGS])
def test_logs_written_by_the_untyped_version_read_as_typed_payloads(path: Path, tmp: Path) -> None:
    """Each file is the event log of a real task run by the version before payload classes
    (process workers through `git sup start`: ready, parked, stopped, watchdog, reviewer and
    decider failures)."""
    shutil.copy(path, tmp / "events.jsonl")
    raw = [json.loads(line) for line in path.read_bytes().splitlines()]
    evs = list(EventLog(tmp / "events.jsonl", TASK).read())
    assert [e.as_dict() for e in evs] == raw  # read as it was
    for ev, rec in zip(evs, raw, strict=True):
        p = ev.payload
        assert not isinstance(p, Untyped), (rec["type"], rec["data"])
        assert type(p) is REGISTRY[rec["type"]]
        # the payload writes exactly these bytes again: same keys, same order, same values
        assert json.dumps(p.to_data()) == json.dumps(rec["data"]), rec["type"]


def test_the_old_logs_cover_the_common_types() -> None:
    seen = {json.loads(line)["type"] for p in OLD_LOGS for line in p.read_bytes().splitlines()}
    assert {
        "task_started",
        "state_changed",
        "worker_started",
        "worker_output",
        "turn_completed",
        "decision",
        "acceptance_result",
        "review_result",
        "candidate_ready",
        "candidate_parked",
        "wip_saved",
        "worker_stopped",
        "watchdog_timeout",
        "stop_requested",
        "task_finished",
    } <= seen


def test_unknown_types_and_records_that_do_not_fit_are_kept_as_they_were(tmp: Path) -> None:
    path = tmp / "events.jsonl"
    log = EventLog(path, TASK)
    log.append(Untyped("from_a_newer_version", {"x": [1, 2], "y": None}))
    log.append_raw("state_changed", {"from": "a", "to": "b"})  # an older shape: no reason
    log.append_raw("state_changed", {"from": "a", "to": "b", "reason": "", "new_key": 1})
    log.append_raw("state_changed", {"from": "a", "to": 7, "reason": ""})  # a wrong type
    log.append_raw("task_finished", {"_truncated": True, "_cut": "20 keys", "keys": ["a"]})
    log.close()
    with path.open("ab") as fh:
        fh.write(b'{"not":"a record"}\n[1,2]\n{"seq":"x"}\n')
    log = EventLog(path, TASK)
    log.append(et.StopRequested(reason="after the garbage"))
    evs = list(log.read())
    assert [e.seq for e in evs] == [1, 2, 3, 4, 5, 6]
    payloads = [e.payload for e in evs]
    assert payloads[0] == Untyped("from_a_newer_version", {"x": [1, 2], "y": None})
    for e, p in zip(evs[1:5], payloads[1:5], strict=True):
        assert p == Untyped(e.type, e.data)  # nothing dropped, nothing invented
    assert payloads[5] == et.StopRequested(reason="after the garbage")


def test_a_record_cut_to_the_size_cap_still_reads_when_its_strings_were_cut(tmp: Path) -> None:
    log = EventLog(tmp / "events.jsonl", TASK, max_record_bytes=1024)
    ev = log.append(et.HumanInput(text="y" * 5000))
    assert ev.data.get("_truncated") is True and len(ev.data["text"]) < 5000
    (back,) = log.read()
    assert isinstance(back.payload, et.HumanInput) and back.payload.text.startswith("yyy")
    ev = log.append(
        et.TaskStarted(
            goal="g",
            baseline="b" * 40,
            base="HEAD",
            branch="sup/x",
            worktree="/w",
            worker="process",
            checks=["c" * 900] * 4,
        )
    )
    assert ev.data["checks"] == "[cut: too large]"
    assert isinstance(list(log.read())[-1].payload, Untyped)  # no invented list


def test_a_wrong_field_is_refused_when_the_payload_is_built() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'frm'"):
        et.StateChanged(frm="a", to="b", reason="")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'reason'"):
        et.StateChanged(from_="a", to="b")  # type: ignore[call-arg]
    with pytest.raises(PayloadError, match=r"StateChanged.to: int 7 is not"):
        et.StateChanged(from_="a", to=7, reason="")  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="checks"):
        et.TaskStarted(
            goal="g",
            baseline="b",
            base="HEAD",
            branch="x",
            worktree="/w",
            worker="process",
            checks=["ok", 3],
        )  # type: ignore[list-item]
    with pytest.raises(PayloadError):
        et.WatchdogTimeout(kind="no_output", limit=True)  # a bool is not a number here
    with pytest.raises(PayloadError):
        et.PermissionDecided(request_id="r", answer="maybe")  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        et.Notification(event="ready", result={1: "not a key"})  # type: ignore[dict-item]
    # frozen
    p = et.StopRequested(reason="r")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.reason = "other"  # type: ignore[misc]


def _fits(v: Any, tp: Any) -> bool:
    """What a field of type `tp` accepts, written out plainly (the reference for the checks
    each payload class compiles)."""
    if tp is Any:
        return True
    sup = getattr(tp, "__supertype__", None)
    if sup is not None:
        return _fits(v, sup)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return any(_fits(v, a) for a in args)
    if origin is Literal:
        return any(v == a and type(v) is type(a) for a in args)
    if origin is list:
        return isinstance(v, list | tuple) and all(_fits(x, args[0]) for x in v)
    if origin in (dict, typing.Mapping):
        return isinstance(v, typing.Mapping) and all(
            isinstance(k, str) and _fits(x, args[1]) for k, x in v.items()
        )
    if tp in (int, float):
        return isinstance(v, int | float if tp is float else int) and not isinstance(v, bool)
    if tp is type(None):
        return v is None
    return isinstance(v, tp)


PANEL: list[Any] = [
    "text",
    "allow",
    "deny",
    "",
    3,
    0,
    True,
    False,
    2.5,
    None,
    UNSET,
    [],
    ["a", "b"],
    ["a", 1],
    ("a",),
    [["a"]],
    {},
    {"k": 1},
    {"k": "v"},
    {"k": None},
    {1: "v"},
    {"k": {"n": [1]}},
    [{"k": 1}],
    et.Oid("0" * 40),
]


@pytest.mark.parametrize(("type_", "cls"), ALL)
def test_each_field_accepts_exactly_its_type(type_: str, cls: type[Payload]) -> None:
    """Every field of every class, with values of every JSON shape (and UNSET): the payload is
    built exactly when the value is of the field's declared type, else a PayloadError."""
    full = _full(cls)
    hints = typing.get_type_hints(cls, vars(et))
    for f in dataclasses.fields(cls):
        if f.metadata.get("spread"):
            continue
        for v in PANEL:
            expected = _fits(v, hints[f.name])
            try:
                built = dataclasses.replace(full, **{f.name: v})
            except PayloadError:
                assert not expected, (cls.__name__, f.name, v)
            else:
                assert expected, (cls.__name__, f.name, v)
                assert (f.metadata.get("key", f.name) in built.to_data()) is (v is not UNSET)


def test_a_known_type_is_never_written_as_free_form_data(tmp: Path) -> None:
    log = EventLog(tmp / "events.jsonl", TASK)
    with pytest.raises(PayloadError, match="state_changed has a payload class"):
        log.append(Untyped("state_changed", {"from": "a", "to": "b", "reason": ""}))
    assert log.count() == 0
    # and gitsup writes every event through a payload class: the raw writer is the log's own
    for src in (ROOT / "gitsup").rglob("*.py"):
        text = src.read_text()
        if src.name != "events.py":
            assert "append_raw(" not in text, src
        assert not re.search(r"\.(emit|append|event)\(\s*\"[a-z_]+\"\s*,", text), src


def test_the_schema_in_the_docs_is_the_one_the_classes_generate() -> None:
    doc = (ROOT / "docs" / "events.md").read_text()
    m = re.search(r"<!-- BEGIN events schema[^\n]*-->\n(.*?)<!-- END events schema -->", doc, re.S)
    assert m is not None, "docs/events.md lost its generated table"
    printed = subprocess.run(
        [sys.executable, "-m", "gitsup.store.eventtypes", "--schema"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert m.group(1) == printed == schema_table(), (
        "docs/events.md and gitsup/store/eventtypes.py differ: paste `python -m gitsup.store.eventtypes "
        "--schema` between the markers"
    )
    for t in REGISTRY:
        assert f"| `{t}` |" in m.group(1)


def test_the_doc_check_fails_when_a_class_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    before = schema_table()

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class DocDrift(Payload):
        """Only here to see the table change."""

        TYPE: typing.ClassVar[str] = "doc_drift"
        field_a: str

    try:
        assert "`doc_drift`" in schema_table() and schema_table() != before
    finally:
        del REGISTRY["doc_drift"]
    assert schema_table() == before


def test_mypy_refuses_a_wrong_field_and_free_form_data(tmp: Path) -> None:
    src = tmp / "wrong.py"
    src.write_text(
        "from gitsup.store.eventtypes import StateChanged; from gitsup.store.payload import Untyped\n"
        "from gitsup.supervision.journal import Journal\n"
        "def f(j: Journal) -> None:\n"
        "    j.emit(StateChanged(from_='a', to=1, reason=''))\n"
        "    j.emit(StateChanged(frm='a', to='b', reason=''))\n"
        "    j.emit('state_changed', {'from': 'a'})\n"
        "    j.emit(Untyped('worker_note', {'a': 1}))\n"
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            "--cache-dir",
            str(tmp / "cache"),
            str(src),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    errors = sorted({int(m.group(1)) for m in re.finditer(r"wrong\.py:(\d+): error", res.stdout)})
    assert errors == [4, 5, 6], res.stdout  # the last line (an unknown type) is fine
    assert 'Argument "to" to "StateChanged" has incompatible type "int"' in res.stdout
    assert 'Unexpected keyword argument "frm"' in res.stdout


# The compiled check of a class against the per-field checks it is generated from.
_CANDIDATES = [
    UNSET,
    None,
    "s",
    "",
    0,
    7,
    True,
    False,
    1.5,
    [],
    ["x"],
    [1],
    {},
    {"k": "v"},
    {"k": 1},
    {1: "v"},
    ("x",),
    "allow",
    "deny",
]


@pytest.mark.parametrize("cls", sorted(REGISTRY.values(), key=lambda c: c.TYPE))
def test_the_compiled_check_refuses_exactly_what_the_field_checks_refuse(cls: type) -> None:
    """For every field and candidate value (the other fields holding values their own check
    accepts), the generated check refuses the value exactly when the field's check does,
    naming that field; a left-out (UNSET) value passes exactly where the field allows it."""
    from gitsup.store import payload as P

    plan = P._plan(cls)
    check = P._compile_methods(cls).check
    good = {}
    for f in plan:
        ok = [v for v in _CANDIDATES if f.check is None or f.check(v)]
        if not ok:
            pytest.skip(f"no candidate fits {cls.__name__}.{f.name}")
        good[f.name] = ok[0]
    for f in plan:
        for value in _CANDIDATES:
            obj = object.__new__(cls)
            for g in plan:
                object.__setattr__(obj, g.name, value if g is f else good[g.name])
            fits = f.check is None or f.check(value)
            if fits:
                check(obj)
            else:
                with pytest.raises(PayloadError, match=rf"^{cls.__name__}\.{f.name}: "):
                    check(obj)


@pytest.mark.parametrize("cls", sorted(REGISTRY.values(), key=lambda c: c.TYPE))
def test_the_generated_init_does_what_the_dataclass_init_does(cls: type) -> None:
    """A class's generated `__init__` (fields set through their slots) against the one
    dataclasses made: the same fields, or the same error and message, over generated calls
    (missing, unknown and positional arguments, values of every type, defaults and factories)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from gitsup.store import payload as P

    P._compile_methods(cls)
    original = P._DATACLASS_INIT.get(cls)
    assert original is not None, f"{cls.__name__} keeps the dataclass __init__"
    names = [f.name for f in dataclasses.fields(cls)]

    def outcome(init: Any, args: list[Any], kwargs: dict[str, Any]) -> tuple[str, str]:
        obj = object.__new__(cls)
        try:
            init(obj, *args, **kwargs)
        except TypeError as exc:  # PayloadError included
            return type(exc).__name__, str(exc)
        return "ok", repr([getattr(obj, n) for n in names])

    # values each field's own check accepts: most generated calls then build a payload
    fitting = {
        f.name: [v for v in _CANDIDATES if f.check is None or f.check(v)] for f in P._plan(cls)
    }
    good = {name: values[0] for name, values in fitting.items()}

    @settings(max_examples=80, deadline=None)
    @given(
        st.lists(st.sampled_from(_CANDIDATES), max_size=2),
        st.fixed_dictionaries({k: st.sampled_from(v) for k, v in fitting.items()}),
        st.dictionaries(st.sampled_from([*names, "bogus"]), st.sampled_from(_CANDIDATES)),
        st.sets(st.sampled_from(names)),
    )
    def same(
        args: list[Any], base: dict[str, Any], kwargs: dict[str, Any], left_out: set[str]
    ) -> None:
        for call in ({k: v for k, v in base.items() if k not in left_out}, {**base, **kwargs}):
            assert outcome(cls.__init__, [], call) == outcome(original, [], call)
        assert outcome(cls.__init__, args, kwargs) == outcome(original, args, kwargs)

    same()
    assert outcome(cls.__init__, [], good)[0] == "ok"


def test_the_log_knows_every_type_whatever_was_imported_first() -> None:
    """A process that imports only the event log (as `git sup log` may) still has every
    payload class registered: the registry is filled when the classes' module is imported."""
    code = (
        "from gitsup.store.events import EVENT_TYPES; "
        "import gitsup.store.payload as p; "
        "assert 'task_started' in EVENT_TYPES and len(EVENT_TYPES) == len(p.REGISTRY) > 50"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
