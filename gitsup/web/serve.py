"""Run the server: bind, print the URL with the token, serve until interrupted."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gitsup.errors import GitsupError
from gitsup.web.auth import guard_for, load_token, loopback

if TYPE_CHECKING:
    from gitsup.store.suprepo import SupRepo


def require_web_stack() -> None:
    """The web extra is installed, else a one-line error that says how to get it."""
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise GitsupError("git sup serve needs the web extra: pip install 'gitsup[web]'") from None


def check_options(
    host: str, tls_cert: Path | None, tls_key: Path | None, public_origin: str | None
) -> None:
    """Refuse what would expose the token: an address other than loopback without TLS or
    a reverse proxy in front, half a TLS setting, a proxy origin that is not https."""
    if (tls_cert is None) != (tls_key is None):
        raise GitsupError("--tls-cert and --tls-key go together")
    if public_origin is not None:
        if not public_origin.startswith("https://") or "/" in public_origin[8:].rstrip("/"):
            raise GitsupError(
                f"--public-url {public_origin!r}: the proxy's own address, https://HOST[:PORT]"
            )
        if tls_cert is not None:
            raise GitsupError("--public-url is for a TLS proxy in front; give it or --tls-cert")
    if not loopback(host) and tls_cert is None and public_origin is None:
        raise GitsupError(
            f"--host {host}: the token would cross the network in clear text",
            hint="give --tls-cert/--tls-key, or --public-url for an https reverse proxy",
        )


def serve(
    ctx: SupRepo,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    public_origin: str | None = None,
    new_token: bool = False,
    ready: Callable[[str], None] | None = None,
) -> None:
    import uvicorn

    from gitsup.web.app import make_app

    check_options(host, tls_cert, tls_key, public_origin)
    token = load_token(ctx.layout.root, rotate=new_token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise GitsupError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    except socket.gaierror as exc:
        sock.close()
        raise GitsupError(f"--host {host}: {exc}") from None
    sock.listen(64)
    bound = sock.getsockname()[1]
    tls = tls_cert is not None
    guard = guard_for(token, host, bound, tls=tls, public_origin=public_origin)
    server: uvicorn.Server | None = None
    config = uvicorn.Config(
        make_app(ctx, guard, lambda: server is not None and server.should_exit),
        log_level="warning",
        access_log=False,
        lifespan="off",
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
        timeout_graceful_shutdown=5,
        server_header=False,
    )
    if public_origin is not None:
        base = public_origin.rstrip("/")
    else:
        name = "127.0.0.1" if loopback(host) and ":" not in host else host
        name = f"[{name}]" if ":" in name else name
        base = f"{'https' if tls else 'http'}://{name}:{bound}"
    if ready is not None:
        ready(f"{base}/?token={token}")
    try:
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
    finally:
        sock.close()
