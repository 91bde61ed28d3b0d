"""Real headless Chromium (Debian's `chromium`): the DOM after load, console messages, a
screenshot. Console messages (including CSP violations) come from Chromium's own log."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from tests.helpers.require import require

_CONSOLE = re.compile(r":CONSOLE(?:\(\d+\)|:\d+)\] (.*)")


def chromium_bin() -> str:
    require("chromium", "the candidate page in a real browser")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path is not None
    return path


@dataclass
class Loaded:
    dom: str
    console: list[str]
    screenshot: Path | None


def load(url: str, tmp: Path, *, screenshot: str | None = None) -> Loaded:
    """Load `url` in a fresh headless Chromium profile; return the DOM and console log."""
    profile = tmp / f"chromium-profile-{len(list(tmp.glob('chromium-profile-*')))}"
    base = [
        chromium_bin(),
        "--headless",
        "--no-sandbox",  # tests run as root; the page itself is the subject here
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-sync",
        "--disable-component-update",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={profile}",
        "--window-size=1280,4000",  # tall: the timeline and the diff in one shot
    ]
    res = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    console = [m.group(1) for line in res.stderr.splitlines() if (m := _CONSOLE.search(line))]
    shot: Path | None = None
    if screenshot is not None:
        shot = tmp / screenshot
        subprocess.run(
            [*base, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120
        )
        assert shot.exists() and shot.stat().st_size > 1000, "no screenshot written"
    assert res.returncode == 0, res.stderr[-2000:]
    return Loaded(res.stdout, console, shot)


class DomIndex(HTMLParser):
    """Tags, ids, links and text of a dumped DOM."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.text: list[str] = []
        self.feed(dom)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "a" and a.get("href"):
            self.links.append(str(a["href"]))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)
