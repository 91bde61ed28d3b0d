"""A stand-in Python package index on 127.0.0.1 (the PEP 503 "simple" layout pip reads):
wheels written by the test (a zip with the module and its `.dist-info`, as `pip wheel` makes
one), every request counted. Wheel files are served as PyPI serves them, immutable and
cacheable, so that pip's HTTP cache keeps them."""

from __future__ import annotations

import base64
import hashlib
import io
import threading
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def wheel(name: str, version: str, module: str) -> tuple[str, bytes]:
    """(file name, bytes) of a pure-Python wheel whose one module `<name>.py` is `module`."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": module.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: gitsup-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(zipfile.ZipInfo(path, date_time=(2024, 1, 1, 0, 0, 0)), data)
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()


@dataclass
class Index:
    wheels: dict[str, dict[str, bytes]] = field(default_factory=dict)  # project -> file -> data
    requests: Counter[str] = field(default_factory=Counter)
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/simple"

    def add(self, name: str, version: str = "1.0", module: str = "") -> str:
        fname, data = wheel(name, version, module or f"VERSION = {version!r}\n")
        self.wheels.setdefault(name, {})[fname] = data
        return fname

    def save(self, name: str, dest: Path) -> Path:
        """The project's wheels written to `dest` (for `pip install --no-index --find-links`)."""
        dest.mkdir(parents=True, exist_ok=True)
        for fname, data in self.wheels[name].items():
            (dest / fname).write_bytes(data)
        return dest

    def file_requests(self) -> int:
        return sum(n for path, n in self.requests.items() if path.startswith("/files/"))

    def start(self) -> Index:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                index.requests[path] += 1
                parts = [p for p in path.split("/") if p]
                if len(parts) == 2 and parts[0] == "simple" and parts[1] in index.wheels:
                    links = "".join(
                        f'<a href="/files/{f}#sha256={hashlib.sha256(d).hexdigest()}">{f}</a>\n'
                        for f, d in index.wheels[parts[1]].items()
                    )
                    self._send(b"<html><body>\n" + links.encode() + b"</body></html>\n",
                               "text/html", "max-age=0")  # fmt: skip
                    return
                if len(parts) == 2 and parts[0] == "files":
                    for files in index.wheels.values():
                        if parts[1] in files:
                            self._send(files[parts[1]], "application/octet-stream",
                                       "max-age=365000000, immutable, public")  # fmt: skip
                            return
                self.send_error(404)

            def _send(self, body: bytes, ctype: str, cache: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", cache)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
