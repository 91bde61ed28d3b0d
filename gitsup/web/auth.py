"""Who may talk to `git sup serve`: the token, the CSRF token, and the Host/Origin checks.

The token is 32 random bytes (URL-safe base64) in `<gitsup dir>/serve-token`, mode 0600,
created on the first `serve` and reused after it (a bookmarked URL keeps working);
`serve --new-token` replaces it, and every page or script holding the old one is refused.
A browser shows it once, as `?token=…`; the server answers with a cookie (HttpOnly,
SameSite=Strict) and redirects to the same page without it. Scripts send
`Authorization: Bearer <token>`.

A state change is a POST, with either the Bearer header (which no browser adds on its own)
or the cookie together with the page's CSRF token in the `X-Gitsup-CSRF` header (which no
other site can read or set) and an Origin of the server's own. Every request, whatever its
method, must name the server's own Host (another name for the address is DNS rebinding), and
an Origin, when sent, must be the server's own.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from gitsup.errors import GitsupError

TOKEN_FILE = "serve-token"
CSRF_HEADER = "x-gitsup-csrf"


def load_token(root: Path, *, rotate: bool = False) -> str:
    """The server's token, from `root/serve-token` (made 0600 when missing or `rotate`).
    A token file that is not a regular file of this user, or that others may read, is
    refused (whoever could read it could act as the user)."""
    path = root / TOKEN_FILE
    root.mkdir(parents=True, exist_ok=True)
    if not rotate:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise GitsupError(f"cannot read {path}: {exc.strerror or exc}") from None
        else:
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    raise GitsupError(f"{path} is not a regular file of this user")
                if st.st_mode & 0o077:
                    raise GitsupError(
                        f"{path} may be read by others (mode {stat.S_IMODE(st.st_mode):o})",
                        hint="`git sup serve --new-token` replaces it with a private one",
                    )
                token = os.read(fd, 4096).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            if len(token) >= 32:
                return token
    token = secrets.token_urlsafe(32)
    tmp = root / f".{TOKEN_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, token.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return token


@dataclass(frozen=True)
class Guard:
    """The checks every request passes: its token, its Host, its Origin, and for a state
    change the CSRF token."""

    token: str
    hosts: frozenset[str]  # Host header values this server answers to
    origins: frozenset[str]  # Origin header values of its own pages
    cookie: str
    secure: bool  # the page is reached over https (the cookie is Secure)

    @property
    def csrf(self) -> str:
        """The CSRF token of the pages: derived from the token, so it changes with it."""
        return hmac.new(self.token.encode(), b"gitsup csrf", hashlib.sha256).hexdigest()

    def token_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(str(given).encode(), self.token.encode())

    def csrf_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(str(given).encode(), self.csrf.encode())

    def host_ok(self, host: str | None) -> bool:
        return host is not None and host.lower() in self.hosts

    def origin_ok(self, origin: str | None) -> bool:
        return origin is None or origin.lower() in self.origins


def loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


def guard_for(token: str, host: str, port: int, *, tls: bool, public_origin: str | None) -> Guard:
    """The Host and Origin values a server bound to `host:port` answers to. Behind a reverse
    proxy (`public_origin`, e.g. https://sup.example.org), that origin's host and the origin
    itself; on loopback, 127.0.0.1, localhost and [::1] with the port."""
    scheme = "https" if tls else "http"
    if public_origin is not None:
        origin = public_origin.rstrip("/").lower()
        hostpart = origin.split("://", 1)[1]
        hosts = {hostpart}
        origins = {origin}
        secure = origin.startswith("https://")
    else:
        names = ["127.0.0.1", "localhost", "[::1]"] if loopback(host) else [host]
        if ":" in host and not host.startswith("["):
            names = [f"[{host}]"]
        hosts = {f"{n}:{port}" for n in names}
        origins = {f"{scheme}://{n}:{port}" for n in names}
        secure = tls
    return Guard(
        token=token,
        hosts=frozenset(hosts),
        origins=frozenset(origins),
        cookie=f"gitsup_token_{port}",
        secure=secure,
    )
