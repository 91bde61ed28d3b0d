"""gitsup.jsonio: `loads` reads every text exactly as json.loads does (the same value, types and
key order included, or the same error), and the prebuilt compact encoder writes what json.dumps
writes."""

from __future__ import annotations

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
