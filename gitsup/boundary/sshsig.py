"""Verifying SSH signatures (OpenSSH's SSHSIG format) in process, for ed25519 keys.

The gates check every integration they have not seen before; one `ssh-keygen -Y verify`
process per signature costs a push of 100 new integrations over half a second. This module
does the same check without a process for the common case, an ed25519 key listed plainly in
the allowed-signers file: it takes the SSHSIG blob apart, rebuilds the data OpenSSH signs
(`"SSHSIG" || namespace || reserved || hash algorithm || H(message)`) and asks OpenSSL's
libcrypto (the library Python's own `hashlib` is built on, reached through `ctypes`) to check
the ed25519 signature. No cryptography is written here: only the framing.

It answers only when it is sure, the way `ssh-keygen -Y verify` applies an allowed-signers
list (a line accepts a signature when its key is the signing key, its `namespaces=` lets
"git" in and the current time lies within its `valid-after`/`valid-before`). Everything
else (certificates, `cert-authority` lines, other key types, options or syntax it does not
know, no libcrypto) is left to `ssh-keygen` by the caller. Standard library only: the hook
path imports this.
"""

from __future__ import annotations

import binascii
import hashlib
import struct
from typing import Any, NamedTuple

MAGIC = b"SSHSIG"
ED25519 = "ssh-ed25519"
BEGIN = b"-----BEGIN SSH SIGNATURE-----"
END = b"-----END SSH SIGNATURE-----"
HASHES = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}


class Allowed(NamedTuple):
    key: bytes  # the public key blob (as in the SSHSIG and the allowed-signers line)
    namespaces: tuple[str, ...] | None  # None: any namespace
    valid_after: int | None
    valid_before: int | None


class Unsure(Exception):
    """The fast path cannot decide: ask `ssh-keygen`."""


def _string(buf: bytes, at: int) -> tuple[bytes, int]:
    if at + 4 > len(buf):
        raise Unsure("truncated")
    (n,) = struct.unpack(">I", buf[at : at + 4])
    end = at + 4 + n
    if end > len(buf):
        raise Unsure("truncated")
    return buf[at + 4 : end], end


def _split_options(text: str) -> list[str]:
    """Comma-separated options, commas inside double quotes kept (as OpenSSH reads them)."""
    out, cur, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if quoted:
        raise Unsure("unbalanced quote")
    out.append(cur)
    return out


def _time(value: str) -> int:
    """OpenSSH's absolute time: YYYYMMDD[HHMM[SS]], local time unless it ends in Z."""
    import calendar  # only for lists with validity options
    import time

    utc = value.endswith(("Z", "z"))
    digits = value[:-1] if utc else value
    if not digits.isdigit() or len(digits) not in (8, 12, 14):
        raise Unsure(f"time {value!r}")
    digits = digits.ljust(14, "0")
    parts = (
        int(digits[0:4]),
        int(digits[4:6]),
        int(digits[6:8]),
        int(digits[8:10]),
        int(digits[10:12]),
        int(digits[12:14]),
    )
    tm = (*parts, 0, 0, -1)
    return calendar.timegm(tm) if utc else int(time.mktime(tm))


def parse_allowed(text: str) -> list[Allowed]:
    """The lines of an allowed-signers list, or Unsure when one is beyond the fast path.
    Principals are not kept: the gates check every listed key under one identity."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if len(words) < 3 or '"' in words[0]:
            raise Unsure("line shape")
        rest = words[1:]
        namespaces: tuple[str, ...] | None = None
        after = before = None
        if not rest[0].startswith(("ssh-", "ecdsa-", "sk-")):
            if rest[0].count('"') % 2:
                raise Unsure("spaces in options")
            opts, rest = rest[0], rest[1:]
            for opt in _split_options(opts):
                name, eq, value = opt.partition("=")
                name = name.lower()
                if eq and value.startswith('"') and value.endswith('"') and len(value) >= 2:
                    value = value[1:-1]
                elif eq:
                    raise Unsure("quoting")  # OpenSSH wants these values quoted
                if name == "namespaces" and eq:
                    pats = tuple(value.split(","))
                    if any(c in value for c in "*?!"):
                        raise Unsure("namespace pattern")
                    namespaces = pats
                elif name == "valid-after" and eq:
                    after = _time(value)
                elif name == "valid-before" and eq:
                    before = _time(value)
                else:
                    raise Unsure(f"option {name}")  # cert-authority and whatever else
        if len(rest) < 2:
            raise Unsure("no key")
        if rest[0] != ED25519:
            # Another key type can never equal an ed25519 signing key; a signature by such a
            # key is left to ssh-keygen (see verify below).
            continue
        try:
            blob = binascii.a2b_base64(rest[1], strict_mode=True)
        except binascii.Error as e:
            raise Unsure("key encoding") from e
        kind, at = _string(blob, 0)
        pub, at = _string(blob, at)
        if kind != ED25519.encode() or len(pub) != 32 or at != len(blob):
            raise Unsure("key blob")
        out.append(Allowed(blob, namespaces, after, before))
    return out


def _unarmor(signature: bytes) -> bytes:
    lines = [ln.strip() for ln in signature.strip().splitlines()]
    if len(lines) < 3 or lines[0] != BEGIN or lines[-1] != END:
        raise Unsure("armour")
    try:
        return binascii.a2b_base64(b"".join(lines[1:-1]), strict_mode=True)
    except binascii.Error as e:
        raise Unsure("armour") from e


class Verifier:
    """Checks SSH signatures against a parsed allowed-signers list through libcrypto."""

    def __init__(self, allowed: list[Allowed], lib: Any) -> None:
        self.allowed = allowed
        self.lib = lib

    def check(self, signature: bytes, payload: bytes, namespace: str, now: int) -> bool:
        """True/False as `ssh-keygen -Y verify` would answer; Unsure when it cannot tell."""
        blob = _unarmor(signature)
        if blob[:6] != MAGIC:
            return False
        at = 6
        if len(blob) < at + 4:
            return False
        (version,) = struct.unpack(">I", blob[at : at + 4])
        at += 4
        if version != 1:
            raise Unsure("version")
        key, at = _string(blob, at)
        ns, at = _string(blob, at)
        _reserved, at = _string(blob, at)
        hashalg, at = _string(blob, at)
        sig, at = _string(blob, at)
        if at != len(blob):
            return False  # trailing data: OpenSSH refuses it
        kind, k = _string(key, 0)
        if kind != ED25519.encode():
            raise Unsure("key type")  # certificates and other types: ssh-keygen decides
        if ns != namespace.encode():
            return False
        digest = HASHES.get(hashalg.decode("ascii", "replace"))
        if digest is None:
            return False
        sig_kind, s = _string(sig, 0)
        raw, s = _string(sig, s)
        if sig_kind != ED25519.encode() or len(raw) != 64 or s != len(sig):
            return False
        if not any(_line_accepts(a, key, namespace, now) for a in self.allowed):
            return False
        pub = _string(key, k)[0]
        signed = (
            MAGIC
            + _pack(namespace.encode())
            + _pack(b"")
            + _pack(hashalg)
            + _pack(digest(payload).digest())
        )
        return _ed25519_verify(self.lib, pub, raw, signed)


def _pack(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def _line_accepts(a: Allowed, key: bytes, namespace: str, now: int) -> bool:
    if a.key != key:
        return False
    if a.namespaces is not None and namespace not in a.namespaces:
        return False
    if a.valid_after is not None and now < a.valid_after:
        return False
    return not (a.valid_before is not None and now > a.valid_before)


EVP_PKEY_ED25519 = 1087  # NID_ED25519


def libcrypto() -> Any:
    """OpenSSL's libcrypto (3.x or 1.1) through ctypes, or None."""
    import ctypes

    # By soname, not ctypes.util.find_library (which runs ldconfig or a compiler): the one
    # Python's hashlib has loaded already is found at once.
    for name in ("libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.3.dylib", "libcrypto.dylib"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            lib.EVP_PKEY_new_raw_public_key.restype = ctypes.c_void_p
            lib.EVP_PKEY_new_raw_public_key.argtypes = [
                ctypes.c_int,
                ctypes.c_void_p,
                ctypes.c_char_p,
                ctypes.c_size_t,
            ]
            lib.EVP_MD_CTX_new.restype = ctypes.c_void_p
            lib.EVP_MD_CTX_new.argtypes = []
            lib.EVP_DigestVerifyInit.restype = ctypes.c_int
            lib.EVP_DigestVerifyInit.argtypes = [ctypes.c_void_p] * 5
            lib.EVP_DigestVerify.restype = ctypes.c_int
            lib.EVP_DigestVerify.argtypes = [
                ctypes.c_void_p,
                ctypes.c_char_p,
                ctypes.c_size_t,
                ctypes.c_char_p,
                ctypes.c_size_t,
            ]
            lib.EVP_MD_CTX_free.restype = None
            lib.EVP_MD_CTX_free.argtypes = [ctypes.c_void_p]
            lib.EVP_PKEY_free.restype = None
            lib.EVP_PKEY_free.argtypes = [ctypes.c_void_p]
        except AttributeError:
            continue
        return lib
    return None


def _ed25519_verify(lib: Any, pub: bytes, sig: bytes, data: bytes) -> bool:
    pkey = lib.EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, None, pub, len(pub))
    if not pkey:
        raise Unsure("libcrypto refused the key")
    ctx = lib.EVP_MD_CTX_new()
    try:
        if not ctx or lib.EVP_DigestVerifyInit(ctx, None, None, None, pkey) != 1:
            raise Unsure("libcrypto init")
        return bool(lib.EVP_DigestVerify(ctx, sig, len(sig), data, len(data)) == 1)
    finally:
        if ctx:
            lib.EVP_MD_CTX_free(ctx)
        lib.EVP_PKEY_free(pkey)


def verifier(allowed_text: str) -> Verifier | None:
    """A fast verifier for this allowed-signers list, or None (then ssh-keygen does it all)."""
    try:
        allowed = parse_allowed(allowed_text)
    except Unsure:
        return None
    lib = libcrypto()
    return Verifier(allowed, lib) if lib is not None else None
