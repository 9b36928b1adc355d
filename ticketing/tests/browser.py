"""The browser the page tests drive: headless Chromium (Debian's /usr/bin/chromium,
driven by Playwright; no browser download), watched for console errors and uncaught
exceptions, which fail the test. Screenshots go to test-artifacts/screenshots/ (the
Redis Cluster run's, beside it, to screenshots-cluster/), and the one-Redis run's to
docs/screenshots/ with UPDATE_SCREENSHOTS=1. A pytest plugin (the root conftest
loads it), so that every app's page tests share one browser per module."""

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from testsupport import require

# Playwright's sync API runs an event loop in this thread; the test's own ORM calls
# are still synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
_RUN = "screenshots-cluster" if settings.REDIS_CLUSTER else "screenshots"
ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts" / _RUN
DOCS = Path(settings.BASE_DIR) / "docs" / "screenshots"


@pytest.fixture(scope="module")
def browser():
    require(Path(CHROMIUM).exists(), f"{CHROMIUM} is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


class Console:
    """What the browser reports going wrong on the pages it is watching: console
    errors (a failed request among them) and uncaught exceptions."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.expected: list[re.Pattern] = []

    def watch(self, context) -> None:
        context.on("console", self._message)
        context.on("weberror", lambda error: self.errors.append(f"uncaught {error.error}"))

    def _message(self, message) -> None:
        if message.type == "error":
            self.errors.append(f"console error: {message.text} ({message.location['url']})")

    def expect(self, pattern: str) -> None:
        """An error the test brings about on purpose (an answer it makes fail)."""
        self.expected.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.expected)]


@pytest.fixture
def console() -> Iterator[Console]:
    """Fails the test on any error its pages reported that it did not expect (after
    the pages' fixtures closed them: those depend on this one)."""
    watching = Console()
    yield watching
    assert not watching.unexpected(), "\n".join(watching.unexpected())


LOCALES = {"en": "en-US", "ko": "ko-KR"}


@contextlib.contextmanager
def opened(
    browser, console, base_url: str, lang: str = "en", size: tuple[int, int] = (390, 844), **options
) -> Iterator:
    """A page in a browser context of its own (cookies, storage), in `lang`'s locale
    and at `size`, whose errors `console` watches; closed on leaving. `options` go to
    Playwright's new_context (a time zone, JavaScript off, ...)."""
    width, height = size
    context = browser.new_context(
        locale=LOCALES[lang], viewport={"width": width, "height": height}, base_url=base_url, **options
    )
    console.watch(context)
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def page(browser, production_server, console, make_event):
    """A phone-sized page in English, closed before the test's events are wiped (a
    page still polling would see them go)."""
    with opened(browser, console, production_server) as page:
        yield page


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("UPDATE_SCREENSHOTS") and not settings.REDIS_CLUSTER:
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS / path.name)


def rank_shown(page) -> int:
    text = page.locator("#position").inner_text()
    return int(re.search(r"(\d[\d,]*)", text).group(1).replace(",", ""))


_LINES = """el => {
  const range = document.createRange();
  range.selectNodeContents(el);
  return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
}"""


def lines_of(locator) -> int:
    """How many lines an element's text takes on the page as drawn."""
    return locator.evaluate(_LINES)
