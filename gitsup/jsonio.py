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

Writing stays with the standard library's encoder: the event log's bytes (ASCII escapes,
float forms, `default=str`) are part of what gitsup keeps in Git. `compact_encoder` is that
encoder without the per-call layers of `json.dumps`.
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


def compact_encoder(
    *,
    ensure_ascii: bool,
    default: Callable[[Any], Any] | None,
    separators: tuple[str, str] = (",", ":"),
) -> Callable[[Any], str]:
    """`json.dumps(o, separators=…, ensure_ascii=…, default=…)` as one prebuilt function, for
    paths that encode a lot (every worker record, every `ls --json` row). No cycle check: a
    value that contains itself fails with RecursionError instead of ValueError."""
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

    return dumps
