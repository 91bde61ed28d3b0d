"""Real headless Chromium (Debian's `chromium`, never a downloaded one) driven by Playwright:
a page, every console message and page error it produced, screenshots in the test's tmp dir."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.browser import chromium_bin


@dataclass
class Tab:
    page: Any  # playwright.sync_api.Page
    shots: Path
    console: list[str] = field(default_factory=list)  # errors and warnings
    errors: list[str] = field(default_factory=list)  # uncaught exceptions

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000
        return path

    def clean(self) -> None:
        assert self.console == [] and self.errors == [], (self.console, self.errors)


@contextmanager
def chromium(tmp: Path) -> Iterator[Tab]:
    from playwright.sync_api import sync_playwright

    exe = chromium_bin()
    shots = tmp / "screenshots"
    shots.mkdir(exist_ok=True)
    with sync_playwright() as p:
        # --no-sandbox: the tests run as root; the page is the subject here.
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(120_000)
            tab = Tab(page, shots)
            page.on(
                "console",
                lambda m: (
                    tab.console.append(f"{m.type}: {m.text}")
                    if m.type in ("error", "warning")
                    else None
                ),
            )
            page.on("pageerror", lambda exc: tab.errors.append(str(exc)))
            page.on("dialog", lambda d: d.accept())
            yield tab
        finally:
            browser.close()
