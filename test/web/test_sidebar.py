"""The page's sidebar and layout from a plain file server (no model): the row menu (open,
keyboard, Rename, Delete, closing), titles not cut short by the row's actions, and the phone
layout with a highlighted answer, saved as artifacts/web/phone.png to be looked at.
The footer's model name needs a real server: test_chat_live.py checks it.
"""

from web_helpers import DESKTOP, PHONE, screenshot

TITLES = ["Write a Python function", "SQL: second highest salary", "Process vs thread"]
ANSWER = (
    "Here is a function that checks for a palindrome:\n\n"
    "```python\ndef is_palindrome(s: str) -> bool:\n    # keep letters and digits only\n"
    "    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n```\n\n"
    "It runs in **O(n)** time. For example:\n\n"
    "| input | result |\n|---|---|\n| `\"Racecar\"` | `True` |\n| `\"abc\"` | `False` |\n"
)


def conversation(i, title, messages=()):
    return {"id": f"c{i}", "title": title, "titleSet": True, "created": i, "updated": i,
            "settings": {}, "messages": list(messages)}


def open_with(new_page, url, conversations, viewport=DESKTOP):
    page = new_page(viewport=viewport)
    page.goto(url)
    page.evaluate("""(convs) => localStorage.setItem('llaisys.chat.v1',
      JSON.stringify({ activeId: convs[0].id, conversations: convs }))""", conversations)
    page.reload()
    page.wait_for_selector("body[data-state=idle]", state="attached")
    return page


def row(i):
    return f"#conv-list li[data-id=c{i}]"


def shown(page, selector):
    """The ⋯ button is transparent rather than hidden when not shown (so the keyboard reaches it)."""
    return page.eval_on_selector(selector, "(e) => getComputedStyle(e).opacity") == "1"


def truncated(page, selector):
    return page.evaluate("(s) => { const e = document.querySelector(s); return e.scrollWidth > e.clientWidth; }",
                         selector + " .conv-open")


def test_titles_are_whole_with_the_menu_closed(new_page, static_server):
    page = open_with(new_page, static_server.url, [conversation(i, t) for i, t in enumerate(TITLES)])
    assert page.locator("#conv-list .conv-menu").count() == 0
    assert not truncated(page, row(0))  # the open row shows its ⋯ button ...
    page.hover(f"{row(1)} .conv-open")
    assert shown(page, f"{row(1)} .conv-more")
    assert not truncated(page, row(1))  # ... and so does a hovered one, beside the whole title
    assert not shown(page, f"{row(2)} .conv-more") and shown(page, f"{row(0)} .conv-more")
    assert page.inner_text(f"{row(0)} .conv-open") == TITLES[0]


def test_row_menu(new_page, static_server, page_errors):
    page = open_with(new_page, static_server.url, [conversation(i, t) for i, t in enumerate(TITLES)])
    page.hover(f"{row(1)} .conv-open")
    page.click(f"{row(1)} .conv-more")
    menu = page.locator(f"{row(1)} .conv-menu[role=menu]")
    assert menu.is_visible()
    assert page.get_attribute(f"{row(1)} .conv-more", "aria-expanded") == "true"
    assert menu.locator("[role=menuitem]").all_inner_texts() == ["Rename", "Delete"]
    # The menu sits beside its button, inside the window.
    box, more = menu.bounding_box(), page.locator(f"{row(1)} .conv-more").bounding_box()
    assert box["y"] >= more["y"] + more["height"] - 1 and box["x"] + box["width"] <= more["x"] + more["width"] + 1
    assert box["x"] >= 0 and box["y"] + box["height"] <= DESKTOP["height"]
    screenshot(page, "desktop-row-menu")
    # Keyboard: focus starts on Rename, arrows move, Escape closes and returns to ⋯.
    assert page.evaluate("document.activeElement.dataset.action") == "rename"
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.activeElement.dataset.action") == "delete"
    page.keyboard.press("Escape")
    assert page.locator("#conv-list .conv-menu").count() == 0
    assert page.evaluate("document.activeElement.classList.contains('conv-more')")
    # A click elsewhere closes it too, without doing anything else.
    page.click(f"{row(1)} .conv-more")
    page.click("#messages")
    assert page.locator("#conv-list .conv-menu").count() == 0
    assert page.get_attribute(row(0), "class") == "conv-item active"

    # Rename a row that is not the open one.
    page.click(f"{row(1)} .conv-more")
    page.click(f"{row(1)} .conv-menu [data-action=rename]")
    page.fill(".rename-input", "Salaries")
    page.press(".rename-input", "Enter")
    assert page.inner_text(f"{row(1)} .conv-open") == "Salaries"
    assert page.inner_text("#conv-title") == TITLES[0]  # the open chat stays open

    # Delete it: the first click asks, the second deletes.
    page.click(f"{row(1)} .conv-more")
    page.click(f"{row(1)} .conv-menu [data-action=delete]")
    assert page.inner_text(f"{row(1)} .conv-menu [data-action=delete]") == "Click again to delete"
    page.click(f"{row(1)} .conv-menu [data-action=delete]")
    assert page.locator("#conv-list li .conv-open").all_inner_texts() == [TITLES[0], TITLES[2]]
    assert page.locator("#conv-list .conv-menu").count() == 0
    stored = page.evaluate("JSON.parse(localStorage.getItem('llaisys.chat.v1')).conversations.map((c) => c.title)")
    assert stored == [TITLES[0], TITLES[2]]
    assert page_errors == []


def test_menu_of_the_last_row_stays_on_screen(new_page, static_server):
    page = open_with(new_page, static_server.url, [conversation(i, f"Chat number {i}") for i in range(40)])
    page.eval_on_selector("#conv-list", "(l) => { l.scrollTop = l.scrollHeight; }")
    page.hover(f"{row(39)} .conv-open")
    page.click(f"{row(39)} .conv-more")
    box = page.locator(f"{row(39)} .conv-menu").bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= DESKTOP["height"], box  # opened upwards
    page.click(f"{row(39)} .conv-menu [data-action=rename]")
    assert page.input_value(".rename-input") == "Chat number 39"


def test_phone_layout(new_page, static_server, page_errors):
    convs = [conversation(0, TITLES[0], [{"role": "user", "content": "Write a palindrome check in Python."},
                                         {"role": "assistant", "content": ANSWER}]),
             *[conversation(i, t) for i, t in enumerate(TITLES[1:], 1)]]
    page = open_with(new_page, static_server.url, convs, viewport=PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    code = page.locator("#messages .code-block pre code")
    assert code.locator("span.hljs-keyword").count() > 0
    box = page.locator("#messages .code-block").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    screenshot(page, "phone")
    page.click("#toggle-sidebar")
    page.wait_for_function("document.getElementById('sidebar').getBoundingClientRect().left >= 0")
    assert shown(page, f"{row(1)} .conv-more")  # no hover on a phone: ⋯ always shows
    page.click(f"{row(1)} .conv-more")
    box = page.locator(f"{row(1)} .conv-menu").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    screenshot(page, "phone-menu")
    assert page_errors == []




def drawer_open(page):
    """Whether the drawer is open (☰'s state, set at once; the slide takes .2 s)."""
    return "sidebar-open" in page.get_attribute("#app", "class").split()


def wait_drawer(page, state):
    """Waits until the drawer has slid fully in ('open') or out ('closed')."""
    check = "r.left >= 0" if state == "open" else "r.right <= 0"
    page.wait_for_function(f"() => {{ const r = document.getElementById('sidebar').getBoundingClientRect(); return {check}; }}")


def test_phone_drawer_closes_on_escape(new_page, static_server, page_errors):
    page = open_with(new_page, static_server.url, [conversation(i, t) for i, t in enumerate(TITLES)],
                     viewport=PHONE)
    assert not drawer_open(page)
    page.click("#toggle-sidebar")
    assert drawer_open(page)
    wait_drawer(page, "open")
    # An Escape taken by something inside the drawer (the row menu) leaves the drawer open ...
    page.click(f"{row(1)} .conv-more")
    page.keyboard.press("Escape")
    assert page.locator("#conv-list .conv-menu").count() == 0
    assert drawer_open(page)
    # ... the next one closes it, and focus goes back to ☰, the button that opened it.
    page.keyboard.press("Escape")
    assert not drawer_open(page)
    wait_drawer(page, "closed")
    assert not page.locator("#scrim").is_visible()
    assert page.evaluate("document.activeElement.id") == "toggle-sidebar"
    # Closed, its rows are hidden (out of the Tab order) and ☰ says so.
    page.wait_for_function("getComputedStyle(document.getElementById('sidebar')).visibility === 'hidden'")
    assert page.get_attribute("#toggle-sidebar", "aria-expanded") == "false"
    # Escape with the drawer closed does nothing; from the keyboard the drawer opens with
    # focus inside it, and Escape closes it again.
    page.keyboard.press("Escape")
    assert not drawer_open(page)
    page.keyboard.press("Enter")  # ☰ has focus
    assert drawer_open(page) and page.get_attribute("#toggle-sidebar", "aria-expanded") == "true"
    wait_drawer(page, "open")
    assert page.evaluate("document.activeElement.closest('#sidebar .conv-item.active') !== null")
    page.keyboard.press("Escape")
    assert not drawer_open(page)
    wait_drawer(page, "closed")
    assert page_errors == []
