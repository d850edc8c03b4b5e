"""The page against a real server started with --api-key: the 401 is explained, the typed
text is kept, a wrong key is told apart from a missing one, and the right key (kept in the
browser across a reload) is sent as a Bearer token. Needs only the server's auth, so it
does not wait for the model to load.
"""

import pytest

from web_helpers import SMALL_SERVER, LiveServer

pytestmark = pytest.mark.slow

KEY = "test-key-7f3a"


@pytest.fixture(scope="module")
def keyed_server(qwen05_served, tmp_path_factory):
    server = LiveServer(qwen05_served, tmp_path_factory.mktemp("keyed") / "server.log",
                        extra_args=("--api-key", KEY, *SMALL_SERVER), loaded=False)
    yield server
    server.stop()


def error_text(page):
    return page.inner_text("#error-text")


def test_api_key_flow(new_page, keyed_server, page_errors):
    page = new_page()
    page.goto(keyed_server.url)
    page.wait_for_function("document.getElementById('server-status').textContent === 'API key needed'")
    assert "needs an API key" in error_text(page)
    assert page.is_visible("#set-api-key")  # settings opened on the key field

    page.fill("#input", "hello")
    page.press("#input", "Enter")
    page.wait_for_selector("body[data-state=idle]", state="attached")
    page.wait_for_function("document.getElementById('error-text').textContent.includes('401')")
    assert page.input_value("#input") == "hello"
    assert page.locator("#messages .msg").count() == 0

    page.fill("#set-api-key", "wrong")
    with page.expect_response(lambda r: r.url.endswith("/v1/models")) as resp:
        page.press("#set-api-key", "Tab")
    assert resp.value.status == 401
    page.wait_for_function("document.getElementById('error-text').textContent.includes('refused the API key')")

    page.fill("#set-api-key", KEY)
    with page.expect_request(lambda r: r.url.endswith("/v1/models")) as req:
        page.press("#set-api-key", "Tab")
    assert req.value.headers.get("authorization") == f"Bearer {KEY}"
    page.wait_for_function("document.getElementById('server-status').textContent.startsWith('Connected')")
    assert not page.is_visible("#error-banner")  # the key problem is solved, so its message goes

    page.reload()
    page.wait_for_function("document.getElementById('server-status').textContent.startsWith('Connected')")
    assert page.input_value("#set-api-key") == KEY
    assert page_errors == []
