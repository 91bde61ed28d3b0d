"""gitsup.jsonio: `loads` reads every text exactly as json.loads does (the same value, types and
key order included, or the same error), and the prebuilt compact encoder writes what json.dumps
writes."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitsup import jsonio


def outcome(fn: Any, text: str | bytes) -> tuple[str, str]:
    try:
        return "value", repr(fn(text))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        return type(exc).__name__, str(exc)


def same(text: str | bytes) -> None:
    assert outcome(jsonio.loads, text) == outcome(json.loads, text), text


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=600, deadline=None)
@given(values, st.booleans(), st.booleans())
def test_json_written_by_python_reads_the_same(
    value: Any, ascii_only: bool, as_bytes: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    same(text.encode() if as_bytes else text)


@settings(max_examples=600, deadline=None)
@given(values, st.data())
def test_damaged_json_reads_the_same(value: Any, data: st.DataObject) -> None:
    """Cut, spliced or with a byte changed: the same value or the same error and message."""
    text = json.dumps(value, ensure_ascii=data.draw(st.booleans()))
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, len(text)))
    piece = data.draw(
        st.sampled_from(
            [
                "",
                " ",
                "0",
                "9" * 20,
                ",",
                "]",
                "}",
                '"',
                "\\",
                "\x00",
                "é",
                "\\ud800",
                "NaN",
                "1e999",
                "-",
            ]
        )
    )
    same(text[:i] + piece + text[j:])


@settings(max_examples=400, deadline=None)
@given(st.from_regex(r"\A-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?\Z"))
def test_numbers_read_the_same(number: str) -> None:
    """Integers past 64 bits, long mantissas, huge and tiny exponents."""
    same(number)
    same(f'{{"n":{number}}}')


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "[Infinity, -Infinity]",
        "1e400",
        "-1e-400",
        "123456789012345678901234567890",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "0.1000000000000000055511151231257827",
        '"\\ud800"',
        '"\\udc00x"',
        '{"a": 1, "a": 2}',
        "[1,]",
        "",
        " ",
        "tru",
        '{"a":1}x',
        "[1 2]",
        "[" * 1100 + "]" * 1100,
        "[" * 100000 + "]" * 100000,
        '"\x01"',
        '"\\u0000"',
        "\ufeff{}",
        "\ud800",
        '"\ud800"',
    ],
)
def test_edge_texts_read_the_same(text: str) -> None:
    same(text)


@pytest.mark.parametrize(
    "raw",
    [
        b"\xef\xbb\xbf{}",
        '{"é":1}'.encode("utf-16"),
        '{"é":1}'.encode("utf-32"),
        b'"\xff"',
        b"[1,2]",
    ],
)
def test_bytes_read_the_same(raw: bytes) -> None:
    same(raw)


def test_big_integers_stay_integers() -> None:
    """orjson alone would read this as a float and lose digits."""
    assert jsonio.loads('{"n": 123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890
    }
    assert type(jsonio.loads("18446744073709551616")) is int


@settings(max_examples=400, deadline=None)
@given(values, st.booleans(), st.sampled_from([(",", ":"), (", ", ": "), (",\n    ", ": ")]))
def test_the_compact_encoder_writes_what_json_dumps_writes(
    value: Any, ascii_only: bool, separators: tuple[str, str]
) -> None:
    encode = jsonio.compact_encoder(ensure_ascii=ascii_only, default=str, separators=separators)
    assert encode(value) == json.dumps(
        value, separators=separators, ensure_ascii=ascii_only, default=str
    )


def test_the_compact_encoder_refuses_what_json_dumps_refuses() -> None:
    encode = jsonio.compact_encoder(ensure_ascii=False, default=None)
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode({"a": object()})
    assert jsonio.compact_encoder(ensure_ascii=True, default=str)({"p": 1j}) == '{"p":"1j"}'


class Colour(enum.Enum):
    RED = "red"


class Shade(enum.StrEnum):
    DARK = "dark"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


class Count(int):
    pass


# What orjson writes differently from the standard encoder, or refuses, next to the values it
# writes alike: floats (1e+16 as 1e16, NaN as null), integers past 64 bits, enums, str and int
# subclasses, tuples, non-str keys, DEL, control characters, non-ASCII, lone surrogates.
odd_scalars = (
    scalars
    | st.text(
        alphabet=st.sampled_from(["a", "\x7f", "\x00", "\x1f", "\n", '"', "\\", "é", "\ud800"])
    )
    | st.integers(min_value=2**63 - 2, max_value=2**64 + 2)
    | st.integers(min_value=-(2**63) - 2, max_value=-(2**63) + 2)
    | st.sampled_from([Colour.RED, Shade.DARK, Level.HIGH, Name("n"), Count(7), 1e16, 1e-7, 0.5])
    | st.sampled_from([float("nan"), float("inf"), -0.0, 2.5e-320])
)
odd_keys = st.text(max_size=4) | st.sampled_from([Name("k"), 1, 2.5, True, None, "\x7f", "é"])
odd_values = st.recursive(
    odd_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(odd_keys, inner, max_size=4)
    ),
    max_leaves=16,
)


@settings(max_examples=1500, deadline=None)
@given(odd_values, st.booleans())
def test_the_orjson_path_writes_what_json_dumps_writes(value: Any, ascii_only: bool) -> None:
    """The compact encoder hands plain dicts and lists to orjson: byte for byte the standard
    encoder's text, whatever the value holds."""
    encode = jsonio.compact_encoder(ensure_ascii=ascii_only, default=str)
    for v in (value, [value], {"k": value}):
        assert encode(v) == json.dumps(
            v, separators=(",", ":"), ensure_ascii=ascii_only, default=str
        )


def test_the_orjson_path_is_taken_for_plain_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dict of plain values is written by orjson (the generated tests above compare its
    text), anything else by the standard encoder."""
    if jsonio.orjson is None:
        pytest.skip("no orjson on this platform")
    calls: list[Any] = []
    real = jsonio.orjson.dumps

    def spy(o: Any) -> bytes:
        calls.append(o)
        return real(o)

    monkeypatch.setattr(jsonio.orjson, "dumps", spy)
    encode = jsonio.compact_encoder(ensure_ascii=True, default=str)
    plain = {"a": ["x", 1, True, None, {"b": "\n"}], "c": -(2**63)}
    assert encode(plain) == json.dumps(plain, separators=(",", ":"), default=str)
    assert calls == [plain]
    for other in ({"f": 1.5}, {"e": Colour.RED}, {1: "x"}, {"t": ("x",)}, "s", {"s": Name("n")}):
        assert encode(other) == json.dumps(other, separators=(",", ":"), default=str)
    assert calls == [plain, {1: "x"}]  # orjson refuses the int key: the standard encoder writes it
