"""Credential-shaped strings never reach the event log or a note."""

from __future__ import annotations

import re
from typing import Any

_PATTERNS = [
    # provider keys and tokens with recognisable prefixes
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"sk-(?:proj-)?[A-Za-z0-9_\-]{20,}"),
    re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"github_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"glpat-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"xox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"AIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
    # bearer / basic credentials in headers and URLs
    re.compile(r"(?i)(?<=authorization: )(?:bearer|basic|token) [^\s\"']+"),
    re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._\-~+/]{16,}=*"),
    re.compile(r"(?<=://)[^/\s:@\"']+:[^/\s@\"']+(?=@)"),
]
# key = value forms: keep the key, hide the value
_ASSIGN = re.compile(
    r"(?i)\b([A-Z0-9_]*(?:api[_-]?key|secret|token|passw(?:or)?d|credential|auth)[A-Z0-9_]*)"
    r"(\s*[:=]\s*[\"']?)([^\s\"',;]{6,})"
)
REDACTED = "[REDACTED]"
# One cheap screen first: most text has none of these shapes.
_SCREEN = re.compile(
    r"sk-|gh[pousr]_|github_pat_|glpat-|xox[abprs]-|AKIA|AIza|PRIVATE KEY|(?i:bearer|basic |token|"
    r"api[_-]?key|secret|passw|credential|auth)|://[^/\s]*@"
)


# A screen over a serialized JSON body that matches whenever `redact` could change anything
# in it (and, rarely, more). Most bodies do not match, and then one search is all it costs.
_BODY_SCREEN = re.compile(
    r"sk-|gh[pousr]_|github_pat_|glpat-|xox[abprs]-|AKIA|AIza|PRIVATE KEY|://[^/\s\"]*@"
    r"|(?i:bearer |basic |authorization)"
    r"|(?i:(?:api[_-]?key|apikey|secret|passw|credential|token|auth)[a-z0-9_]*"
    r"(?:\\?\"\s*:\s*\\?\"[^\"\\]|\s*[:=]\s*[\"']?[^\s\"',;]{6,}))"
)


_KEYWORDS = (
    "sk-",
    "gh",
    "github_pat_",
    "glpat-",
    "xox",
    "akia",
    "aiza",
    "private key",
    "://",
    "bearer",
    "basic ",
    "auth",
    "api_key",
    "api-key",
    "apikey",
    "secret",
    "passw",
    "credential",
    "token",
)


def needs_redaction(serialized: str) -> bool:
    lower = serialized.lower()
    if not any(k in lower for k in _KEYWORDS):
        return False
    return _BODY_SCREEN.search(serialized) is not None


def redact_text(text: str) -> str:
    if not text or not _SCREEN.search(text):
        return text
    for pat in _PATTERNS:
        text = pat.sub(REDACTED, text)
    return _ASSIGN.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def redact(value: Any) -> Any:
    """Redact every string inside a JSON-like value (keys whose name says secret too)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if isinstance(k, str) and _secret_key(k) and isinstance(v, str) and v:
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def _secret_key(key: str) -> bool:
    k = key.lower()
    return any(s in k for s in ("api_key", "apikey", "secret", "password", "passwd", "token"))
