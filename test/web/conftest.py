"""Fixtures for the browser tests: headless Chromium (Debian's, never a downloaded one)
driven by Playwright, a static file server for web/, and the real llaisys server.

Without chromium these tests skip, with the reason, except under CI=true, where a missing
browser is an install bug and fails. Screenshots go to $LLAISYS_ARTIFACTS_DIR (default
artifacts/web); with LLAISYS_DOC_SCREENSHOTS=1 they are also written to doc/img/
for the docs.
"""

import pytest

from web_helpers import SMALL_SERVER, LiveServer, PageErrors, StaticServer, chromium_path, make_pages, unavailable


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for a test module. Not for the session: Playwright's sync API keeps
    an asyncio loop running in the main thread while it is open, so under pytest-xdist every
    later module of the same worker that calls asyncio.run (the Ray router's units, the async
    engine's) failed with "asyncio.run() cannot be called from a running event loop"."""
    path = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install -r requirements-test.txt)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page_errors():
    return PageErrors()


@pytest.fixture
def new_page(browser, page_errors):
    """new_page(viewport=DESKTOP) -> a page in a fresh context (its own localStorage)."""
    contexts = []
    yield make_pages(browser, page_errors, contexts)
    for ctx in contexts:
        ctx.close()


@pytest.fixture(scope="module")
def module_page(browser):
    """One page kept for a whole module (for tests that only evaluate scripts in it)."""
    contexts = []
    errors = PageErrors()
    page = make_pages(browser, errors, contexts)()
    page.errors = errors
    yield page
    for ctx in contexts:
        ctx.close()


@pytest.fixture(scope="module")
def static_server():
    server = StaticServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def live_server(qwen05_served, tmp_path_factory):
    """The real server on the real 0.5B model (in the format `make serve` runs on this CPU),
    started once per test module."""
    chromium_path()  # no point loading the model when the browser tests cannot run
    server = LiveServer(qwen05_served, tmp_path_factory.mktemp("server") / "server.log",
                        extra_args=SMALL_SERVER)
    yield server
    server.stop()


