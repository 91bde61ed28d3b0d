"""Durations as numbers of seconds or strings like `90s`, `10m`, `4h`, `1h30m`."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
# Longer waits overflow the timers of the supervisor loop and of subprocess polling.
MAX_SECONDS = 366 * 86400.0


def parse_duration(value: object) -> float:
    """Return seconds. Raises ValueError with a readable message."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '90s', '10m', '4h'")
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"a duration must be a finite number of seconds, not {value!r}")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        if value > MAX_SECONDS:
            raise ValueError(f"a duration cannot exceed 366d ({int(MAX_SECONDS)}s)")
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            return parse_duration(float(text))
        pos = 0
        total = 0.0
        for m in _PART.finditer(text):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if text and pos == len(text):
            return parse_duration(total)
    raise ValueError(
        f"not a duration: {value!r} (use seconds or a string like '90s', '10m', '4h', '1h30m')"
    )


def require_unit(value: str, option: str) -> str:
    """A duration given on the command line: a bare number other than 0 is refused (is
    `--deadline 4` four seconds or four hours?). Returns `value` unchanged."""
    text = value.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text) and float(text) != 0:
        raise ValueError(
            f"{option} {value}: a duration needs a unit: ms, s, m, h or d "
            f"(e.g. {text}s, {text}m or {text}h)"
        )
    return value  # anything else is checked where it is used, naming its setting


def format_duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
