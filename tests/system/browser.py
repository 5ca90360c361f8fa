"""A real headless browser for the UI tests: Debian's chromium driven by Playwright.

Playwright downloads no browser here: it launches the executable ``TURNOUT_TEST_CHROMIUM`` names
(``.ci/run`` installs Debian's ``chromium`` and exports it) or ``chromium`` on the PATH; the tests
that need one are skipped, with the reason, when there is none. The flags keep Chromium from
reaching for Google's hosts, which this machine's closed network refuses.
Screenshots go to the test's temporary folder, or to ``TURNOUT_SCREENSHOTS`` when set:
``TURNOUT_SCREENSHOTS=docs/screenshots`` refreshes the ones the README shows.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = os.environ.get("TURNOUT_TEST_CHROMIUM") or shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM,
    reason="no chromium: install Debian's chromium (see .ci/run) or export TURNOUT_TEST_CHROMIUM=<path>",
)
_FLAGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",  # containers often give /dev/shm 64 MB
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def browser_page(width: int = 1440, height: int = 900) -> Iterator[Page]:
    """One page of a fresh headless Chromium, closed afterwards."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "no chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=_FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


def screenshot(page: Page, name: str, fallback: Path) -> Path:
    folder = Path(os.environ.get("TURNOUT_SCREENSHOTS") or fallback)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name))
    return folder / name
