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

Writing stays with the standard library: the event log's bytes (ASCII escapes, float forms,
`default=str`) are part of what gitsup keeps in Git.
"""

from __future__ import annotations

import json
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
