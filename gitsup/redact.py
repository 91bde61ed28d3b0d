"""Credential-shaped strings are replaced by a marker where output enters gitsup.

Output of workers, checks, reviewers and deciders passes `redact_text` (plain text) or
`redact` (a parsed JSON value) once, where it is read (see docs/design.md, "What is
redacted, where"); the event log writer applies `redact` again to what it appends, for
the one input kept verbatim on purpose (a permission request's tool input, which must
reach the worker unchanged when allowed).

Standard library only: the event log and the worker adapters import this module.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

# ASCII semantics everywhere: a non-ASCII letter never matches [a-z] under (?i), so what
# matches in a string matches the same in its ensure_ascii JSON serialization.
_re = partial(re.compile, flags=re.ASCII)

REDACTED = "[REDACTED]"

# Not preceded by a character that would make the prefix part of a longer word
# ("risk-assessment", base64 data that happens to contain "AKIA"), unless that is the
# end of an escape (a newline in JSON text is backslash-n).
_B = r"(?:(?<![A-Za-z0-9_\-/+])|(?<=\\[nrt]))"

_PATTERNS = [
    # provider keys and tokens with recognisable prefixes
    _re(_B + r"sk-ant-[A-Za-z0-9_\-]{8,}"),  # Anthropic
    _re(_B + r"sk-(?:proj-)?[A-Za-z0-9_\-]{20,}"),  # OpenAI
    _re(_B + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
    _re(_B + r"gh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub
    _re(_B + r"github_pat_[A-Za-z0-9_]{20,}"),  # GitHub fine-grained
    _re(_B + r"glpat-[A-Za-z0-9_\-]{16,}"),  # GitLab
    _re(_B + r"xox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack
    _re(_B + r"npm_[A-Za-z0-9]{30,}"),  # npm
    _re(_B + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"),  # AWS access key id
    _re(_B + r"AIza[0-9A-Za-z_\-]{30,}"),  # Google API key
    # JSON Web Tokens (header.payload.signature, both JSON parts start with '{"')
    _re(_B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    # PEM private keys: a whole block; an unterminated one up to where base64 ends;
    # the rest of a block whose beginning was cut off (a later chunk of a stream).
    # None crosses a quote: in JSON text a block never leaves its string.
    _re(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[^\"\\]|\\[nrt])*?-----END [A-Z0-9 ]*PRIVATE KEY-----"
    ),
    _re(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[A-Za-z0-9+/=:,\- \t\r\n]|\\[nrt])*"),
    _re(r"\A(?:[A-Za-z0-9+/= \t\r\n]|\\[nrt])*-----END [A-Z0-9 ]*PRIVATE KEY-----"),
    # bearer / basic credentials in headers and URLs
    _re(r"(?i)(?<=authorization: )(?:bearer|basic|token) [^\s\"'\\]+"),
    _re(r"(?i)(?<=bearer )[A-Za-z0-9._\-~+/]{16,}=*"),
    _re(r"(?<=://)[^/\s:@\"'\\]+:[^/\s@\"'\\]+(?=@)"),
]
# The names that say "the value is a secret" in key = value forms (env, INI, YAML, JSON,
# Python reprs): not "author", "authentication", "tokens", "tokenizer".
_SECRET_NAME = (
    r"(?:api[_-]?key|apikey|secret|token(?!s|iz)|passw(?:or)?d|credentials?|"
    r"auth(?!or|entic)|access[_-]?key)"
)
# key = value forms: keep the key, hide the value. The value stops at a quote or a
# backslash, so redacting a JSON document as text keeps it valid JSON.
_ASSIGN = _re(
    r"(?i)\b([A-Z0-9_]*?" + _SECRET_NAME + r"[A-Z0-9_]*)"
    r"(\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?)([^\s\"'\\,;]{6,})"
)
# A JSON object key naming a secret, with any non-empty string value: what `redact`
# replaces by the key's name alone (see `_secret_key`).
_JSON_KEY = (
    r"(?:api_key|apikey|secret|password|passwd|token)(?:[^\"\\]|\\.)*"
    r"\\?\"\s*:\s*\\?\"(?!\")"
)

# The screen: a lower-case keyword that every match of a pattern (or, in a serialized
# JSON body, every value `redact` would change) contains, and a pattern anchored where the
# keyword starts. Finding keywords is a few substring searches; the anchored pattern runs
# only where a keyword is. Most text has none, and then that is all it costs.
# (Screens are supersets: over a serialized body a tab is backslash-t, a non-ASCII
# letter a \\uXXXX escape.)
_ASSIGN_SRC = _SECRET_NAME + r"[A-Z0-9_]*(?:\\[a-z]|[\\\"' \t])*[:=]|" + _JSON_KEY
_ASSIGN_AT = _re(r"(?i)" + _ASSIGN_SRC)
_SCREEN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sk", _re(r"sk(?:-[A-Za-z0-9_\-]{8}|_(?:live|test)_[A-Za-z0-9]{16})")),
    ("rk_", _re(r"rk_(?:live|test)_[A-Za-z0-9]{16}")),
    ("gh", _re(r"gh[pousr]_[A-Za-z0-9]{20}")),
    ("github_pat_", _re(r"github_pat_[A-Za-z0-9_]{20}")),
    ("glpat-", _re(r"glpat-[A-Za-z0-9_\-]{16}")),
    ("xox", _re(r"xox[abprs]-[A-Za-z0-9\-]{10}")),
    ("npm_", _re(r"npm_[A-Za-z0-9]{30}")),
    *((k, _re(r"(?:AKIA|ASIA)[0-9A-Z]{16}")) for k in ("akia", "asia")),
    ("aiza", _re(r"AIza[0-9A-Za-z_\-]{30}")),
    ("eyj", _re(r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ")),
    ("private key", _re(r"PRIVATE KEY-----")),
    ("://", _re(r"://[^/\s:@\"']+:[^/\s@\"']+@")),
    ("bearer ", _re(r"(?i)bearer [A-Za-z0-9._\-~+/]{16}")),
    ("auth", _re(r"(?i)authorization: (?:bearer|basic|token) |" + _ASSIGN_SRC)),
    *((k, _ASSIGN_AT) for k in ("api", "secret", "token", "passw", "credential", "access")),
)
# Nothing shorter can hold a match: "://a:b@", or a JSON key like "token":"x".
_MIN_LEN = 7


def needs_redaction(text: str) -> bool:
    """False when neither `redact_text` nor (for a serialized JSON body) `redact` would
    change anything; True when they might."""
    if len(text) < _MIN_LEN:
        return False
    lower = text.lower()
    if len(lower) != len(text):  # a few non-ASCII letters lower-case to two characters
        lower = text.encode("ascii", "replace").decode("ascii").lower()
    for key, pat in _SCREEN:
        if key not in lower:  # the common case, without a method call
            continue
        i = lower.find(key)
        while i >= 0:
            if pat.match(text, i):
                return True
            i = lower.find(key, i + 1)
    return False


class Redacted(dict[str, Any]):
    """Event data redacted where it entered gitsup: the event log does not screen it again."""


def redact_text(text: str) -> str:
    if not text or not needs_redaction(text):
        return text
    for pat in _PATTERNS:
        text = pat.sub(REDACTED, text)
    return _ASSIGN.sub(_keep_name, text)


def _keep_name(m: re.Match[str]) -> str:
    if m.group(3).startswith(REDACTED):
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{REDACTED}"


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
