"""Reading JSON on the paths that read a lot of it: the worker's stream, event logs, records.

`loads` returns what `json.loads` returns for the same text and raises what it raises. It
parses with orjson (several times faster) and hands the standard library every text orjson
would read differently or refuses:
- a run of 19 or more digits: orjson reads an integer beyond 64 bits as a float, and a long
  mantissa is where float readers differ (one pass over the bytes finds these);
- what only Python's reader accepts (`NaN`, `Infinity`, escaped lone surrogates, nesting
  deeper than orjson's limit, a byte-order mark or UTF-16/32 in bytes);
- every malformed text, so the error and its message are the standard library's own.
tests/test_jsonio.py compares the two readers over generated and mutated texts.

Writing gives the standard library encoder's bytes: the event log's bytes (ASCII escapes,
float forms, `default=str`) are part of what gitsup keeps in Git. `compact_encoder` is that
encoder without the per-call layers of `json.dumps`; orjson writes only the values it writes
to the same bytes (strings, integers, booleans, null in dicts and lists).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - a platform without a wheel: the standard reader
    orjson = None  # type: ignore[assignment]

# Every ASCII digit to "0", every other byte to a space: a long run of digits is then a
# substring search.
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_NUMBER = b"0" * 19  # 2**63 has 19 digits; anything shorter fits orjson's integers


def _loads_fast(text: str | bytes | bytearray) -> Any:
    if isinstance(text, str):
        try:
            raw: bytes | bytearray = text.encode()
        except UnicodeEncodeError:  # a lone surrogate in the str itself
            return json.loads(text)
    else:
        raw = text
    if _LONG_NUMBER in raw.translate(_DIGITS):
        return json.loads(text)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(text)


loads = json.loads if orjson is None else _loads_fast


def _refuse(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


# Values both encoders write alike: orjson writes these types (exact types, not subclasses)
# as the standard library's C encoder does with separators (",", ":"), down to the escapes
# of control characters. Floats are not among them (orjson writes 1e+16 as 1e16, NaN as
# null), nor is anything `default` would turn into a string.
_SAME = frozenset({str, int, bool, type(None)})
_DEPTH = 16  # deeper data takes the standard encoder (and its RecursionError)


def _plain(value: dict[Any, Any] | list[Any], depth: int) -> bool:
    """True when `value` holds only `_SAME` values, in dicts and lists (exact types)."""
    for v in value.values() if value.__class__ is dict else value:
        c = v.__class__
        if c in _SAME:
            continue
        if (c is dict or c is list) and depth and _plain(v, depth - 1):
            continue
        return False
    return True


def compact_encoder(
    *,
    ensure_ascii: bool,
    default: Callable[[Any], Any] | None,
    separators: tuple[str, str] = (",", ":"),
) -> Callable[[Any], str]:
    """`json.dumps(o, separators=…, ensure_ascii=…, default=…)` as one prebuilt function, for
    paths that encode a lot (every worker record, every `ls --json` row). No cycle check: a
    value that contains itself fails with RecursionError instead of ValueError.

    With the compact separators, a dict or list of plain values (`_plain`) is written by
    orjson, several times faster, and the result is the standard encoder's to the byte: what
    orjson refuses (a key that is not a str, an integer past 64 bits, a lone surrogate) and,
    with `ensure_ascii`, any text orjson writes with a byte the standard encoder escapes
    (non-ASCII, DEL), is written by the standard encoder instead. tests/test_jsonio.py
    compares the two over generated values."""
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - a Python without the C accelerator
        return json.JSONEncoder(
            separators=separators, ensure_ascii=ensure_ascii, default=default
        ).encode
    quote = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    item, key = separators
    encode = make(None, default or _refuse, quote, None, key, item, False, False, True)

    def dumps(o: Any) -> str:
        return "".join(encode(o, 0))

    if orjson is None or separators != (",", ":"):
        return dumps

    def dumps_fast(o: Any) -> str:
        if (o.__class__ is dict or o.__class__ is list) and _plain(o, _DEPTH):
            try:
                raw = orjson.dumps(o)
            except TypeError:  # orjson.JSONEncodeError
                return "".join(encode(o, 0))
            if not ensure_ascii:
                return raw.decode()
            if raw.isascii() and b"\x7f" not in raw:
                return raw.decode("ascii")
        return "".join(encode(o, 0))

    return dumps_fast
