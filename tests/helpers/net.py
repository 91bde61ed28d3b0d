"""A listener on the host that counts who reached it (and logs nothing): what a confined
process must not reach. The tests check the count from outside."""

from __future__ import annotations

import socket
import threading
from pathlib import Path


class Listener:
    """A TCP listener on the host's 127.0.0.1 (`port`: the one given, else any free one), or
    with `address` a UNIX socket server (a path, or an abstract name starting with NUL).
    `reached` counts accepted connections."""

    def __init__(self, address: str | None = None, *, port: int = 0) -> None:
        self.address = address
        if address is None:
            self.sock = socket.socket()
            self.sock.bind(("127.0.0.1", port))
            self.port = self.sock.getsockname()[1]
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(address)
            self.port = 0
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.reached = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.reached += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        if self.address is not None and not self.address.startswith("\0"):
            Path(self.address).unlink(missing_ok=True)
