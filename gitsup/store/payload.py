"""Typed event payloads: the base class, how a payload is written and read back, and the
checks of field values. The event types themselves are in gitsup/store/eventtypes.py.

The payload of every event type, as code: one frozen dataclass per type.

An event's `data` on disk is the payload's fields as JSON keys, in the order the class
declares them. A few keys are not Python names (`from`, `round`, `bytes`): their fields
say so (`key("from")`). A field that defaults to `UNSET` is left out of the JSON when it
was not given, so one class covers the few types written in more than one shape (a
`worker_stopped` from the stop, the cgroup or the exit). A `spread` field is a mapping
whose items are written as keys of their own (the transport-specific keys of a worker's
output, the channel-specific keys of a notification).

`REGISTRY` maps each type string to its class. `payload_of(type, data)` reads a record
back: the typed payload when the data fits the class, else `Untyped(type, data)` — an
unknown type, or a record of an older or newer shape, stays readable as plain data. (A
record whose strings the log cut to its size cap still fits; one whose lists or objects
it replaced does not.)
`python -m gitsup.store.eventtypes --schema` prints the table of docs/events.md.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, NewType, TypeVar

from gitsup.ids import Oid, TaskId

Seq = NewType("Seq", int)
"""An event's position in its task's log: 1, 2, 3 … without gaps."""

T = TypeVar("T")
D = TypeVar("D")


class Unset(enum.Enum):
    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET
"""A field left out of the event (not the same as a field written as null)."""


def key(name: str) -> Any:
    """A field written under another JSON key (`from`, `round`, `bytes`)."""
    return field(metadata={"key": name})


def opt(name: str | None = None) -> Any:
    """A field that may be left out (UNSET), written as `name` when it is not its own name."""
    meta = {"key": name} if name else {}
    return field(default=UNSET, metadata=meta)


def spread() -> Any:
    """A mapping whose items are written as keys of the event's data, where it stands."""
    return field(default_factory=dict, metadata={"spread": True})


class PayloadError(TypeError):
    """A payload built with a value of the wrong type (a TypeError, as a wrong field name is)."""


REGISTRY: dict[str, type[Payload]] = {}


@dataclass(frozen=True, slots=True)
class Payload:
    """An event's data. Subclasses set `TYPE` and are registered under it."""

    TYPE: ClassVar[str] = ""
    PRE_REDACTED: ClassVar[bool] = False  # its text was redacted where it was read

    def __init_subclass__(cls) -> None:
        t = cls.__dict__.get("TYPE")
        if t:
            old = REGISTRY.get(t)
            # dataclass(slots=True) makes the class anew: the same one is registered twice
            if old is not None and (old.__module__, old.__name__) != (cls.__module__, cls.__name__):
                raise TypeError(f"event type {t!r} has two payload classes")
            REGISTRY[t] = cls

    def __post_init__(self) -> None:
        # The first payload of a class compiles the class's own checks and `to_data` and
        # sets them on the class (`_compile_methods`); every later one runs those.
        _compile_methods(type(self)).check(self)

    def _refuse(self, name: str) -> None:
        v = getattr(self, name)
        tp = next(f.tp for f in _plan(type(self)) if f.name == name)
        raise PayloadError(
            f"{type(self).__name__}.{name}: {type(v).__name__} {v!r:.80} is not {tp}"
        )

    @property
    def event_type(self) -> str:
        return self.TYPE

    def to_data(self) -> dict[str, Any]:
        """The event's `data`: the fields as JSON keys, in their order."""
        return _compile_methods(type(self)).to_data(self)

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Payload | None:
        """The payload of `data`, or None when `data` does not fit this class."""
        kwargs: dict[str, Any] = {}
        used: set[str] = set()
        rest: str | None = None
        for f in _plan(cls):
            if f.spread:
                rest = f.name
            elif f.key in data:
                kwargs[f.name] = data[f.key]
                used.add(f.key)
            elif f.required:
                return None
        # `_truncated`: the log cut the record's longest strings to its size cap (events.py)
        extra = {k: v for k, v in data.items() if k not in used and k != "_truncated"}
        if extra:
            if rest is None:
                return None
            kwargs[rest] = extra
        try:
            return cls(**kwargs)
        except TypeError:
            return None


@dataclass(frozen=True, slots=True)
class Untyped(Payload):
    """An event of a type without a payload class, or a record that does not fit its class
    (an older or newer shape, a record cut to the size cap): kept as it was."""

    type: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not isinstance(self.data, Mapping):
            raise PayloadError(f"Untyped({self.type!r}, …): a type string and a mapping")

    @property
    def event_type(self) -> str:
        return self.type

    def to_data(self) -> dict[str, Any]:
        return dict(self.data)


EmitFn = Callable[[Payload], object]
"""How a collaborator of the supervisor writes an event."""


def payload_of(type: str, data: Mapping[str, Any]) -> Payload:
    """Read an event's data back: its typed payload, or `Untyped` when it does not fit."""
    cls = REGISTRY.get(type)
    p = cls.from_data(data) if cls is not None else None
    return p if p is not None else Untyped(type, data)


@typing.overload
def given(v: T | Unset) -> T | None: ...
@typing.overload
def given(v: T | Unset, default: D) -> T | D: ...
def given(v: Any, default: Any = None) -> Any:
    """A field's value, or `default` when it was left out (UNSET)."""
    return default if v is UNSET else v


def typed(type: str, data: Mapping[str, Any]) -> Payload:
    """The payload of a known `type` built from `data`; a PayloadError when it does not fit
    (for emitters that hold their data as a mapping, like a pydantic model's dump)."""
    cls = REGISTRY[type]
    p = cls.from_data(data)
    if p is None:
        raise PayloadError(f"{type}: {sorted(data)} does not fit {cls.__name__}")
    return p


# --- type checks of field values ---------------------------------------------------------
# Each class's fields are compiled once into checks (a payload is built for every event).

Check = Callable[[Any], bool]


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    key: str
    spread: bool
    tp: Any
    check: Check | None  # None: any value fits
    required: bool  # no default: a record without its key does not fit


_PLANS: dict[type, tuple[_Field, ...]] = {}


def _plan(cls: type) -> tuple[_Field, ...]:
    got = _PLANS.get(cls)
    if got is None:
        hints = typing.get_type_hints(cls)
        got = tuple(
            _Field(
                f.name,
                f.metadata.get("key", f.name),
                bool(f.metadata.get("spread")),
                hints[f.name],
                _compile(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        )
        _PLANS[cls] = got
    return got


def _fields(cls: type) -> list[tuple[str, Any, str]]:
    return [(f.name, f.tp, f.key) for f in _plan(cls)]


_SCALARS: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (int, float),
    bool: (bool,),
    type(None): (type(None),),
    Unset: (Unset,),
}


def _scalar(tp: Any) -> tuple[tuple[type, ...], bool] | None:
    """For a field of scalar types (a union of str, int, float, bool, None, Unset): the
    `isinstance` tuple, and whether a bool must be refused (an int field is not a bool)."""
    sup = getattr(tp, "__supertype__", None)  # a NewType
    if sup is not None:
        return _scalar(sup)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    options = args if origin is typing.Union or origin is types.UnionType else (tp,)
    if not all(o in _SCALARS for o in options):
        return None
    return _instances(options)


def _instances(scalars: tuple[Any, ...] | list[Any]) -> tuple[tuple[type, ...], bool]:
    """The `isinstance` tuple of scalar types, and whether a bool must be refused."""
    allowed = tuple(t for o in scalars for t in _SCALARS[o])
    return allowed, bool not in scalars and int in allowed


_is_str: Check = str.__instancecheck__


def _instance_check(allowed: tuple[type, ...], no_bool: bool) -> Check:
    if not no_bool:
        return lambda v: isinstance(v, allowed)
    return lambda v: isinstance(v, allowed) and v.__class__ is not bool


def _compile(tp: Any) -> Check | None:
    if tp is Any:
        return None
    sup = getattr(tp, "__supertype__", None)  # a NewType
    if sup is not None:
        return _compile(sup)
    scalar = _scalar(tp)
    if scalar is not None:
        return _instance_check(*scalar)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    options = args if origin is typing.Union or origin is types.UnionType else (tp,)
    if len(options) > 1:
        scalars = [o for o in options if o in _SCALARS]
        parts = [_compile(o) for o in options if o not in _SCALARS]
        if any(p is None for p in parts):
            return None
        checks = [p for p in parts if p is not None]
        if scalars:
            checks.insert(0, _instance_check(*_instances(scalars)))
        if len(checks) == 2:
            first, second = checks
            return lambda v: first(v) or second(v)
        return lambda v: any(c(v) for c in checks)
    if origin is Literal:
        return lambda v: v in args
    if origin is list:
        item = _compile(args[0])
        if item is None:
            return lambda v: isinstance(v, list | tuple)
        return lambda v: isinstance(v, list | tuple) and all(item(x) for x in v)
    if origin in (dict, Mapping):
        value = _compile(args[1])
        if value is None:
            return lambda v: isinstance(v, dict | Mapping) and all(map(_is_str, v))
        return lambda v: (
            isinstance(v, dict | Mapping)
            and all(map(_is_str, v))
            and all(value(x) for x in v.values())
        )
    if isinstance(tp, type):
        return lambda v: isinstance(v, tp)
    raise TypeError(f"no check for field type {tp!r}")


# --- each class's checks, `to_data` and `__init__`, compiled once ---------------------------
# A payload is built and written for every event the supervisor records (one per worker
# record): its field checks and its `to_data` are generated as plain code per class, the
# way dataclasses generates `__init__`, instead of looping over the fields each time; the
# first payload of a class also replaces the dataclass's `__init__` with one that sets the
# slots directly (a frozen dataclass sets each field with `object.__setattr__`).


@dataclass(frozen=True, slots=True)
class _Methods:
    check: Callable[[Any], None]
    to_data: Callable[[Any], dict[str, Any]]


_METHODS: dict[type, _Methods] = {}


def _compile_methods(cls: type) -> _Methods:
    got = _METHODS.get(cls)
    if got is not None:
        return got
    plan = _plan(cls)
    ns: dict[str, Any] = {
        "UNSET": UNSET,
        "cls": cls,
        "_first": Payload.__post_init__,
        "_first_data": Payload.to_data,
    }
    # Set on the class itself: a subclass that inherits them compiles its own first.
    check = ["def check(self):", "    if self.__class__ is not cls:", "        return _first(self)"]
    for i, f in enumerate(plan):
        if f.check is None:
            continue
        scalar = _scalar(f.tp)
        if scalar is None:
            ns[f"c{i}"] = f.check
            test = f"c{i}(v)"
        else:
            ns[f"t{i}"] = scalar[0]
            test = f"isinstance(v, t{i})"
            if scalar[1]:
                test += " and v.__class__ is not bool"
        # A field that may be left out is most often UNSET: that passes without the test.
        unset_ok = "v is UNSET or " if f.check(UNSET) else ""
        check += [
            f"    v = self.{f.name}",
            f"    if not ({unset_ok}{test}):",
            f"        self._refuse({f.name!r})",
        ]
    check.append("    return None")
    # A field whose check refuses UNSET is always written; the others only when given.
    to_data = [
        "def to_data(self):",
        "    if self.__class__ is not cls:",
        "        return _first_data(self)",
        "    out = {}",
    ]
    for f in plan:
        if f.spread:
            to_data.append(f"    v = self.{f.name}")
            to_data.append("    if v is not UNSET: out.update(v)")
        elif f.check is not None and not f.check(UNSET):
            to_data.append(f"    out[{f.key!r}] = self.{f.name}")
        else:
            to_data.append(f"    v = self.{f.name}")
            to_data.append(f"    if v is not UNSET: out[{f.key!r}] = v")
    to_data.append("    return out")
    exec("\n".join(check + to_data), ns)  # code built from the class's own fields only
    got = _METHODS[cls] = _Methods(ns["check"], ns["to_data"])
    if "to_data" not in cls.__dict__ and "__post_init__" not in cls.__dict__:
        cls.__post_init__ = got.check  # type: ignore[attr-defined]
        cls.to_data = got.to_data  # type: ignore[attr-defined]
        init = _fast_init(cls, got.check)
        if init is not None:
            _DATACLASS_INIT[cls] = cls.__dict__["__init__"]  # for tests/store/test_eventtypes.py
            cls.__init__ = init  # type: ignore[misc]
    return got


_DATACLASS_INIT: dict[type, Callable[..., None]] = {}


def _fast_init(cls: type, check: Callable[[Any], None]) -> Callable[..., None] | None:
    """The dataclass's own `__init__` (same parameters, defaults, factories and errors), each
    field set through its slot instead of `object.__setattr__`, then the class's checks; None
    when the class is not the plain frozen slots dataclass this is written for."""
    init = cls.__dict__.get("__init__")
    if init is None or init.__qualname__ != f"{cls.__qualname__}.__init__":
        return None
    ns: dict[str, Any] = {"_check": check, "_HAS": object()}
    params: list[str] = []
    kw_params: list[str] = []
    body: list[str] = []
    for i, f in enumerate(dataclasses.fields(cls)):
        slot: Any = cls.__dict__.get(f.name)
        if not f.init or type(slot).__name__ != "member_descriptor":
            return None
        ns[f"_s{i}"] = slot.__set__
        value = f.name
        if f.default_factory is not dataclasses.MISSING:
            ns[f"_f{i}"] = f.default_factory
            param = f"{f.name}=_HAS"
            value = f"_f{i}() if {f.name} is _HAS else {f.name}"
        elif f.default is not dataclasses.MISSING:
            ns[f"_d{i}"] = f.default
            param = f"{f.name}=_d{i}"
        else:
            param = f.name
        (kw_params if f.kw_only else params).append(param)
        body.append(f"    _s{i}(self, {value})")
    head = ", ".join(["self", *params, *(["*", *kw_params] if kw_params else [])])
    exec(f"def __init__({head}):\n" + "\n".join([*body, "    _check(self)"]), ns)
    fast: Callable[..., None] = ns["__init__"]
    fast.__qualname__ = init.__qualname__
    fast.__doc__ = init.__doc__
    fast.__annotations__ = dict(getattr(init, "__annotations__", {}))
    return fast


# --- the schema table of docs/events.md --------------------------------------------------


def schema_table() -> str:
    """The Markdown table of docs/events.md: every registered type (gitsup/store/eventtypes.py
    registers them), its fields and their types."""
    rows = ["| type | field | JSON type | written | what |", "|---|---|---|---|---|"]
    for t in sorted(REGISTRY):
        cls = REGISTRY[t]
        what = " ".join((cls.__doc__ or "").split()) if "__doc__" in vars(cls) else ""
        if what.startswith(f"{cls.__name__}("):  # the signature dataclass makes up
            what = ""
        fields = list(zip(dataclasses.fields(cls), _fields(cls), strict=True))
        for i, (f, (_name, tp, k)) in enumerate(fields):
            if f.metadata.get("spread"):
                shown, when = "*(other keys)*", "as given"
            else:
                shown = f"`{k}`"
                when = "when set" if f.default is UNSET else "always"
            first = f"`{t}`" if i == 0 else ""
            rows.append(f"| {first} | {shown} | {_show(tp)} | {when} | {what if i == 0 else ''} |")
    return "\n".join(rows) + "\n"


def _show(tp: Any) -> str:
    if tp is Any:
        return "any"
    if tp is Oid:
        return "commit id"
    if tp is TaskId:
        return "task id"
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if tp in simple:
        return simple[tp]
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return " or ".join(_show(a) for a in args if a is not Unset)
    if origin is Literal:
        return " or ".join(f'"{a}"' for a in args)
    if origin is list:
        return f"list of {_show(args[0])}"
    if origin in (dict, Mapping):
        return "object"
    return str(tp)
