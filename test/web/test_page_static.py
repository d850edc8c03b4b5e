"""The chat page served as plain files, with no llaisys server behind it: what it does when
the server is missing or answers with an error, the keyboard, and conversations kept in
localStorage. Fast; the streaming behaviour is in test_chat_live.py (real model).
"""

from web_helpers import StaticServer


def open_page(new_page, url, **kw):
    page = new_page(**kw)
    page.goto(url)
    page.wait_for_selector("body[data-state=idle]")
    return page


def test_http_error_keeps_typed_text(new_page, static_server):
    # A plain file server answers POST /v1/chat/completions with 501: a real 5xx.
    page = open_page(new_page, static_server.url)
    page.fill("#input", "hello there")
    page.press("#input", "Enter")
    page.wait_for_function("document.getElementById('error-text').textContent.includes('501')")
    assert page.is_visible("#error-banner")
    assert page.input_value("#input") == "hello there"
    assert page.locator("#messages .msg").count() == 0  # the unsent turn is not kept
    assert page.get_attribute("body", "data-state") == "idle"
    assert page.is_visible("#send") and not page.is_visible("#stop")


def test_server_down_keeps_typed_text(new_page):
    server = StaticServer()
    page = open_page(new_page, server.url)
    server.stop()
    page.fill("#input", "are you there?")
    page.press("#input", "Enter")
    page.wait_for_function("document.getElementById('error-text').textContent.includes('Cannot reach')")
    # the banner can come from the model list refetched before the request; the send is over
    # (and its text back in the box) once the page is idle again
    page.wait_for_selector("body[data-state=idle]")
    assert page.input_value("#input") == "are you there?"
    assert page.inner_text("#server-status") == "Server unreachable"


def test_shift_enter_is_a_newline(new_page, static_server):
    page = open_page(new_page, static_server.url)
    page.click("#input")
    page.keyboard.type("line one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("line two")
    assert page.input_value("#input") == "line one\nline two"
    assert page.locator("#messages .msg").count() == 0


def test_rename_delete_persist(new_page, static_server):
    page = open_page(new_page, static_server.url)
    page.click("#new-chat")  # the open chat is empty: no second empty one is made
    assert page.locator("#conv-list li").count() == 1
    open_menu(page, "#conv-list li.active")
    page.click("#conv-list .conv-menu [data-action=rename]")
    assert page.locator("#conv-list .conv-menu").count() == 0
    page.fill(".rename-input", "  My <b>plan</b>  ")
    page.press(".rename-input", "Enter")
    assert page.inner_text("#conv-list li.active .conv-open") == "My <b>plan</b>"
    assert page.inner_text("#conv-title") == "My <b>plan</b>"
    page.reload()
    page.wait_for_selector("body[data-state=idle]")
    assert page.inner_text("#conv-list li.active .conv-open") == "My <b>plan</b>"
    # Delete asks once more before it deletes; a fresh empty chat takes the last one's place.
    open_menu(page, "#conv-list li.active")
    page.click("#conv-list .conv-menu [data-action=delete]")
    assert page.inner_text("#conv-list .conv-menu [data-action=delete]") == "Click again to delete"
    page.click("#conv-list .conv-menu [data-action=delete]")
    assert page.locator("#conv-list li").count() == 1
    assert page.inner_text("#conv-list li .conv-open") == "New chat"
    page.reload()
    page.wait_for_selector("body[data-state=idle]")
    assert page.inner_text("#conv-list li .conv-open") == "New chat"


def open_menu(page, row):
    """Opens the row menu of `row` with its ⋯ button; returns the menu's bounding box."""
    page.hover(f"{row} .conv-open")
    page.click(f"{row} .conv-more")
    assert page.get_attribute(f"{row} .conv-more", "aria-expanded") == "true"
    return page.locator(f"{row} .conv-menu[role=menu]").bounding_box()


def test_settings_are_per_conversation(new_page, static_server):
    page = open_page(new_page, static_server.url)
    page.click("#toggle-settings")
    page.fill("#set-system", "Answer in French.")
    page.fill("#set-temperature", "5")  # out of range: clamped to 2
    page.press("#set-temperature", "Tab")
    assert page.input_value("#set-temperature") == "2"
    page.fill("#set-max-tokens", "64")
    page.press("#set-max-tokens", "Tab")
    # Give the first chat a message so New chat makes a second one; it inherits the settings.
    page.evaluate("""() => {
      const doc = JSON.parse(localStorage.getItem('llaisys.chat.v1'));
      doc.conversations[0].messages.push({ role: 'user', content: 'hi' });
      localStorage.setItem('llaisys.chat.v1', JSON.stringify(doc));
    }""")
    page.reload()
    page.wait_for_selector("body[data-state=idle]")
    page.click("#new-chat")
    page.click("#toggle-settings")
    assert page.input_value("#set-system") == "Answer in French."
    page.fill("#set-system", "Be brief.")
    page.click("#conv-list li:not(.active) .conv-open")
    assert page.input_value("#set-system") == "Answer in French."
    assert page.input_value("#set-max-tokens") == "64"
