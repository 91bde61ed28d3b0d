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
from typing import Any

REDACTED = "[REDACTED]"

# Not preceded by a character that would make the prefix part of a longer word
# ("risk-assessment", base64 data that happens to contain "AKIA"), unless that is the
# end of an escape (a newline in JSON text is backslash-n).
_B = r"(?:(?<![A-Za-z0-9_\-/+])|(?<=\\[nrt]))"

_PATTERNS = [
    # provider keys and tokens with recognisable prefixes
    re.compile(_B + r"sk-ant-[A-Za-z0-9_\-]{8,}"),  # Anthropic
    re.compile(_B + r"sk-(?:proj-)?[A-Za-z0-9_\-]{20,}"),  # OpenAI
    re.compile(_B + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
    re.compile(_B + r"gh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub
    re.compile(_B + r"github_pat_[A-Za-z0-9_]{20,}"),  # GitHub fine-grained
    re.compile(_B + r"glpat-[A-Za-z0-9_\-]{16,}"),  # GitLab
    re.compile(_B + r"xox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack
    re.compile(_B + r"npm_[A-Za-z0-9]{30,}"),  # npm
    re.compile(_B + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"),  # AWS access key id
    re.compile(_B + r"AIza[0-9A-Za-z_\-]{30,}"),  # Google API key
    # JSON Web Tokens (header.payload.signature, both JSON parts start with '{"')
    re.compile(_B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    # PEM private keys: a whole block; an unterminated one up to where base64 ends;
    # the rest of a block whose beginning was cut off (a later chunk of a stream).
    # None crosses a quote: in JSON text a block never leaves its string.
    re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[^\"\\]|\\[nrt])*?-----END [A-Z0-9 ]*PRIVATE KEY-----"
    ),
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[A-Za-z0-9+/=:,\- \t\r\n]|\\[nrt])*"),
    re.compile(r"\A(?:[A-Za-z0-9+/= \t\r\n]|\\[nrt])*-----END [A-Z0-9 ]*PRIVATE KEY-----"),
    # bearer / basic credentials in headers and URLs
    re.compile(r"(?i)(?<=authorization: )(?:bearer|basic|token) [^\s\"'\\]+"),
    re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._\-~+/]{16,}=*"),
    re.compile(r"(?<=://)[^/\s:@\"'\\]+:[^/\s@\"'\\]+(?=@)"),
]
# The names that say "the value is a secret" in key = value forms (env, INI, YAML, JSON,
# Python reprs): not "author", "authentication", "tokens", "tokenizer".
_SECRET_NAME = (
    r"(?:api[_-]?key|apikey|secret|token(?!s|iz)|passw(?:or)?d|credentials?|"
    r"auth(?!or|entic)|access[_-]?key)"
)
# key = value forms: keep the key, hide the value. The value stops at a quote or a
# backslash, so redacting a JSON document as text keeps it valid JSON.
_ASSIGN = re.compile(
    r"(?i)\b([A-Z0-9_]*?" + _SECRET_NAME + r"[A-Z0-9_]*)"
    r"(\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?)([^\s\"'\\,;]{6,})"
)
# A JSON object key naming a secret, with any non-empty string value: what `redact`
# replaces by the key's name alone (see `_secret_key`).
_JSON_KEY = r"(?:api_key|apikey|secret|password|passwd|token)[A-Za-z0-9_]*\\?\"\s*:\s*\\?\"[^\"\\]"

# One screen that matches whenever any pattern above could change the text, or (over a
# serialized JSON body) whenever `redact` could change the value. Most text has none of
# these shapes, and then this search (after a cheaper substring test) is all it costs.
_SCREEN = re.compile(
    r"sk-|sk_|rk_|gh[pousr]_|github_pat_|glpat-|xox[abprs]-|npm_|AKIA|ASIA|AIza|eyJ"
    r"|PRIVATE KEY|://[^/\s]*@|(?i:bearer |authorization: )"
    r"|(?i:" + _SECRET_NAME + r"[A-Z0-9_]*\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?[^\s\"'\\,;]{6,})"
    r"|(?i:" + _JSON_KEY + r")"
)
# Lower-case substrings of which at least one is in every text `_SCREEN` matches.
_KEYWORDS = (
    "sk-",
    "sk_",
    "rk_",
    "gh",
    "github_pat_",
    "glpat-",
    "xox",
    "npm_",
    "akia",
    "asia",
    "aiza",
    "eyj",
    "private key",
    "://",
    "bearer",
    "authorization",
    "api",
    "secret",
    "token",
    "passw",
    "credential",
    "auth",
    "access",
)


def needs_redaction(text: str) -> bool:
    """False when neither `redact_text` nor (for a serialized JSON body) `redact` would
    change anything; True when they might."""
    lower = text.lower()
    if not any(k in lower for k in _KEYWORDS):
        return False
    return _SCREEN.search(text) is not None


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
