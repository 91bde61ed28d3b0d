"""A stand-in npm registry on 127.0.0.1: packages written by the test (tarballs made with
`tarfile`, the layout `npm pack` makes: `package/package.json`, `package/index.js`), served
as packument JSON and tarballs, every request counted. And a project whose package-lock.json
points at it, so `npm ci` installs from it and nothing else."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def tarball(name: str, version: str, body: str) -> bytes:
    files = {
        "package/package.json": json.dumps(
            {"name": name, "version": version, "main": "index.js", "license": "MIT"}
        ).encode(),
        "package/index.js": body.encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.USTAR_FORMAT) as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass
class Package:
    name: str
    version: str
    data: bytes

    @property
    def integrity(self) -> str:
        return "sha512-" + base64.b64encode(hashlib.sha512(self.data).digest()).decode()

    @property
    def shasum(self) -> str:
        return hashlib.sha1(self.data).hexdigest()

    @property
    def path(self) -> str:
        return f"/{self.name}/-/{self.name}-{self.version}.tgz"


@dataclass
class Registry:
    packages: dict[str, Package] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    port: int = 0
    delay: float = 0.0  # seconds each answer waits (a registry across a network)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, name: str, version: str = "1.0.0", body: str | None = None) -> Package:
        text = body if body is not None else f"module.exports = {json.dumps(name)};\n"
        pkg = Package(name, version, tarball(name, version, text))
        self.packages[name] = pkg
        return pkg

    def tarball_requests(self) -> int:
        return sum(n for p, n in self.requests.items() if p.endswith(".tgz"))

    def packument(self, pkg: Package) -> dict[str, Any]:
        return {
            "name": pkg.name,
            "dist-tags": {"latest": pkg.version},
            "versions": {
                pkg.version: {
                    "name": pkg.name,
                    "version": pkg.version,
                    "main": "index.js",
                    "dist": {
                        "tarball": self.url + pkg.path,
                        "integrity": pkg.integrity,
                        "shasum": pkg.shasum,
                    },
                }
            },
        }

    def start(self) -> Registry:
        reg = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                reg.requests[path] += 1
                if reg.delay:
                    time.sleep(reg.delay)
                body: bytes | None = None
                ctype = "application/json"
                for pkg in reg.packages.values():
                    if path == pkg.path:
                        body, ctype = pkg.data, "application/octet-stream"
                    elif path.lstrip("/") == pkg.name:
                        body = json.dumps(reg.packument(pkg)).encode()
                if body is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def project(self, root: Path, deps: list[str], test: str | None = None) -> None:
        """package.json, package-lock.json (v3, every package resolved here with its
        integrity) and .npmrc naming this registry, in `root`."""
        names = sorted(deps)
        test = test or 'node -e "' + "".join(f"require('{n}');" for n in names) + '"'
        manifest = {
            "name": "app",
            "version": "1.0.0",
            "private": True,
            "scripts": {"test": test},
            "dependencies": {n: self.packages[n].version for n in names},
        }
        lock: dict[str, Any] = {
            "name": "app",
            "version": "1.0.0",
            "lockfileVersion": 3,
            "requires": True,
            "packages": {
                "": {
                    "name": "app",
                    "version": "1.0.0",
                    "dependencies": manifest["dependencies"],
                }
            },
        }
        for n in names:
            p = self.packages[n]
            lock["packages"][f"node_modules/{n}"] = {
                "version": p.version,
                "resolved": self.url + p.path,
                "integrity": p.integrity,
                "license": "MIT",
            }
        (root / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (root / "package-lock.json").write_text(json.dumps(lock, indent=2) + "\n")
        # no audit, no funding notice, no update check: nothing but the registry is asked
        (root / ".npmrc").write_text(
            f"registry={self.url}/\naudit=false\nfund=false\nupdate-notifier=false\n"
        )
