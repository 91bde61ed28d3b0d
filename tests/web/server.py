"""A running `git sup serve` (the real console script) and plain HTTP requests to it."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.conftest import GIT_SUP
from tests.helpers.sup import kill_tree


@dataclass
class Served:
    url: str  # as printed, with ?token=
    base: str  # http://127.0.0.1:PORT
    token: str
    proc: subprocess.Popen[str]

    @property
    def host(self) -> str:
        return urlsplit(self.base).netloc


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


@contextmanager
def serving(repo: Path, *args: str, env: Mapping[str, str] | None = None) -> Iterator[Served]:
    proc = subprocess.Popen(
        [GIT_SUP, "serve", *args],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert "?token=" in url, (url, proc.stderr.read() if proc.stderr else "")
        base, token = url.split("/?token=", 1)
        yield Served(url, base, token, proc)
    finally:
        kill_tree(proc.pid)
        proc.wait()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def request(
    url: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 60,
) -> Answer:
    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with _opener.open(req, timeout=timeout) as resp:
            return Answer(resp.status, dict(resp.headers), resp.read().decode())
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, dict(exc.headers), exc.read().decode())


def bearer(s: Served) -> dict[str, str]:
    return {"Authorization": f"Bearer {s.token}"}


def cookie_of(s: Served) -> dict[str, str]:
    """The cookie a browser gets from the first visit with ?token=."""
    first = request(s.url)
    assert first.status == 303, first
    set_cookie = first.headers.get("set-cookie") or first.headers.get("Set-Cookie") or ""
    return {"Cookie": set_cookie.split(";", 1)[0]}


def csrf_of(page: str) -> str:
    marker = '<meta name="gitsup-csrf" content="'
    start = page.index(marker) + len(marker)
    return page[start : page.index('"', start)]
