"""Off loopback the token must not cross the network in clear: `serve` speaks https with
`--tls-cert/--tls-key` (the cookie is then Secure), or answers only to the https origin of a
reverse proxy in front (`--public-url`)."""

from __future__ import annotations

import http.client
import ssl
import subprocess
from pathlib import Path

from tests.conftest import GIT_SUP
from tests.helpers.require import require
from tests.helpers.sup import kill_tree
from tests.web.server import serving


def _cert(tmp: Path) -> tuple[Path, Path]:
    require("openssl", "a self-signed certificate for the https test")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_serve_speaks_https_with_a_certificate(repo: Path, tmp: Path) -> None:
    cert, key = _cert(tmp)
    with serving(repo, "--tls-cert", str(cert), "--tls-key", str(key)) as s:
        assert s.url.startswith("https://127.0.0.1:"), s.url
        port = int(s.base.rsplit(":", 1)[1])
        ctx = ssl.create_default_context(cafile=str(cert))
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
        c.request("GET", "/?token=" + s.token)
        r = c.getresponse()
        r.read()
        assert r.status == 303
        assert "secure" in (r.getheader("set-cookie") or "").lower()
        c.request("GET", "/api/tasks", headers={"Authorization": f"Bearer {s.token}"})
        r = c.getresponse()
        assert r.status == 200 and b'"tasks"' in r.read()
        c.close()
        # Plain http to the same port is not an answer.
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            plain.request("GET", "/api/tasks", headers={"Authorization": f"Bearer {s.token}"})
            got = plain.getresponse().status
        except (OSError, http.client.HTTPException):
            got = None
        assert got != 200


def test_behind_a_proxy_only_its_origin_is_answered(repo: Path) -> None:
    proc = subprocess.Popen(
        [GIT_SUP, "serve", "--public-url", "https://sup.example.org"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("https://sup.example.org/?token="), url
        token = url.split("?token=", 1)[1]
        # Where it listens: loopback, a free port (as the proxy is told).
        import psutil

        [port] = {
            c.laddr.port for c in psutil.Process(proc.pid).net_connections() if c.status == "LISTEN"
        }
        auth = {"Authorization": f"Bearer {token}"}

        def get(headers: dict[str, str]) -> int:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/api/tasks", headers=headers)
            status = c.getresponse().status
            c.close()
            return status

        assert get({**auth, "Host": "sup.example.org"}) == 200
        assert get({**auth, "Host": f"127.0.0.1:{port}"}) == 421
        assert get({**auth, "Host": "sup.example.org", "Origin": "https://evil.example"}) == 403
        assert get({**auth, "Host": "sup.example.org", "Origin": "https://sup.example.org"}) == 200
        assert get({"Host": "sup.example.org"}) == 401
    finally:
        kill_tree(proc.pid)
        proc.wait()
