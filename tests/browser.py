"""A real headless Chromium for the viewer's page: Debian's ``/usr/bin/chromium`` driven by
Playwright's Python package, which never downloads a browser of its own here.

:func:`browser_or_skip` skips a test when chromium or playwright is missing, or fails it when
``AGENTTRACE_REQUIRE_CHROMIUM=1`` (what ``.ci/run`` sets: it installs Debian's chromium).
:func:`launch` is also what ``scripts/viewer_screenshots.py`` uses for the README's images.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
#: No sandbox (containers, root), no GPU, no /dev/shm (small in containers: Chromium's
#: renderer crashes when it fills), and nothing that reaches the network by itself.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
REPO = Path(__file__).resolve().parent.parent
#: Where each browser test leaves its screenshot (git-ignored).
ARTIFACTS = REPO / "test-artifacts" / "view"
#: Read when this module is imported: the tests' autouse fixture clears AGENTTRACE_* settings.
REQUIRE_CHROMIUM = os.environ.get("AGENTTRACE_REQUIRE_CHROMIUM") == "1"


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        found = shutil.which("chromium")
        return f"{CHROMIUM} is missing ({found or 'no chromium on PATH'}; .ci/run installs it)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is missing (the test extra installs it)"
    return None


def browser_or_skip() -> None:
    """Skip (or fail under AGENTTRACE_REQUIRE_CHROMIUM=1) when chromium or playwright is missing."""
    import pytest

    why = missing()
    if why is None:
        return
    if REQUIRE_CHROMIUM:
        pytest.fail(f"{why}, and AGENTTRACE_REQUIRE_CHROMIUM=1")
    pytest.skip(why)


@contextlib.contextmanager
def launch() -> Iterator[Any]:
    """A headless Chromium (Playwright's Browser), closed at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


def block_other_hosts(context: Any) -> None:
    """Requests to anything but 127.0.0.1 fail: the page must work offline (no CDN)."""

    def route(route: Any) -> None:
        url = route.request.url
        if url.startswith(("http://127.0.0.1:", "data:", "about:")):
            route.continue_()
        else:
            route.abort()

    context.route("**/*", route)


def screenshot_path(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return ARTIFACTS / f"{safe}.png"
