"""The chat page against the real server and the real Qwen2.5-Coder-0.5B, in headless
Chromium: streaming, Stop, edit and regenerate, conversations across a reload, injection
from model output, and screenshots of the main states at desktop and phone widths.

Answers are kept short (max_tokens set through the page's own settings panel) so the module
runs in a few minutes on a busy CPU. Waits have generous limits; nothing asserts a speed.
"""

import re
import time

import pytest

from web_helpers import DESKTOP, PHONE, screenshot

pytestmark = pytest.mark.slow

ANSWER_TIMEOUT_MS = 180_000  # one short answer on a loaded 2-core machine

# Records every distinct text the streaming answer shows, for the incremental check.
RECORD_STREAM_JS = """() => {
  window.__snaps = [];
  new MutationObserver(() => {
    const body = document.querySelector('.msg.assistant.generating .msg-body');
    if (!body) return;
    const text = body.textContent;
    if (window.__snaps.at(-1) !== text) window.__snaps.push(text);
  }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
}"""


def open_chat(new_page, live_server, viewport=DESKTOP, max_tokens=16, temperature=0, system=None):
    """A fresh browser profile on the page, with this conversation's settings filled in."""
    page = new_page(viewport=viewport)
    page.goto(live_server.url)
    page.wait_for_selector("body[data-state=idle]")
    page.wait_for_function("document.getElementById('server-status').textContent.startsWith('Connected')")
    configure(page, max_tokens=max_tokens, temperature=temperature, system=system)
    return page


def configure(page, max_tokens=None, temperature=None, system=None):
    page.click("#toggle-settings")
    if system is not None:
        page.fill("#set-system", system)
    for sel, value in (("#set-max-tokens", max_tokens), ("#set-temperature", temperature)):
        if value is not None:
            page.fill(sel, str(value))
            page.press(sel, "Tab")
    page.click("#close-settings")


def chat_requests(page):
    """Bodies of the page's POSTs to /v1/chat/completions, filled in as they are sent."""
    bodies = []
    page.on("request", lambda r: bodies.append(r.post_data_json)
            if r.method == "POST" and r.url.endswith("/v1/chat/completions") else None)
    return bodies


def send(page, text, wait=True):
    page.fill("#input", text)
    page.press("#input", "Enter")
    page.wait_for_selector("body[data-state=generating]", state="attached")
    if wait:
        wait_idle(page)


def wait_idle(page):
    page.wait_for_selector("body[data-state=idle]", state="attached", timeout=ANSWER_TIMEOUT_MS)


def turns(page):
    """[(role class, body text)] of the open conversation, top to bottom."""
    return page.evaluate("""() => [...document.querySelectorAll('#messages .msg')].map((m) =>
      [m.classList.contains('user') ? 'user' : 'assistant', m.querySelector('.msg-body').textContent])""")


def stored(page):
    return page.evaluate("JSON.parse(localStorage.getItem('llaisys.chat.v1'))")


def test_streaming_answer_and_phone_layout(new_page, live_server, page_errors):
    page = open_chat(new_page, live_server, max_tokens=24)
    check_model_name_whole(page)
    screenshot(page, "desktop-empty")
    page.evaluate(RECORD_STREAM_JS)
    send(page, "Write a Python function that adds two numbers.", wait=False)
    assert page.is_visible("#stop") and not page.is_visible("#send")
    # Screenshot once some text is on screen, while the answer is still streaming.
    page.wait_for_function("(window.__snaps || []).filter((s) => s.length > 40).length > 0",
                           timeout=ANSWER_TIMEOUT_MS)
    if page.get_attribute("body", "data-state") == "generating":
        screenshot(page, "desktop-streaming")
    wait_idle(page)
    final = turns(page)[-1][1]
    snaps = [s for s in page.evaluate("window.__snaps") if s not in ("", "…")]
    partial = {s for s in snaps if len(s) < len(final)}
    assert len(partial) >= 3, f"expected several partial renders, saw {snaps!r}"
    assert len(final) > 0
    stats = page.inner_text("#messages .msg.assistant .msg-stats")
    assert re.search(r"\d+ tokens · [\d.]+ tok/s · TTFT [\d.]+ s · \d+ of \d+ prompt tokens cached", stats), stats
    assert page.is_visible("#send") and not page.is_visible("#stop")
    assert page.locator("#messages .msg.assistant [data-action=regenerate]").is_enabled()
    screenshot(page, "desktop-short-answer")  # the README's is tools/doc_screenshot.py's
    page.click("#toggle-settings")
    screenshot(page, "desktop-settings")
    page.click("#close-settings")
    check_phone_layout(page)
    assert page_errors == []


def check_model_name_whole(page):
    """The footer shows the served model's name on one line, not cut or broken in two."""
    found = page.evaluate("""() => {
      const e = document.getElementById('server-model');
      return { text: e.textContent, lines: e.getClientRects().length, cut: e.scrollWidth > e.clientWidth,
               height: e.getBoundingClientRect().height, line: parseFloat(getComputedStyle(e).lineHeight) };
    }""")
    served = page.evaluate("fetch('v1/models').then((r) => r.json()).then((b) => b.data[0].id)")
    assert found["text"] == served and len(served) > 20, found  # qwen2.5-coder-0.5b-instruct
    assert found["lines"] == 1 and not found["cut"] and found["height"] < 1.5 * found["line"], found


def check_phone_layout(page):
    """The same page at phone width: list and settings slide over, nothing scrolls sideways."""
    page.set_viewport_size(PHONE)
    page.wait_for_function("document.getElementById('sidebar').getBoundingClientRect().right <= 0")
    assert page.is_visible("#toggle-sidebar")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "phone-answer")
    page.click("#toggle-sidebar")
    page.wait_for_function("document.getElementById('sidebar').getBoundingClientRect().left >= 0")
    check_model_name_whole(page)
    screenshot(page, "phone-conversations")
    page.click("#scrim", position={"x": PHONE["width"] - 20, "y": 400})
    page.wait_for_function("document.getElementById('sidebar').getBoundingClientRect().right <= 0")
    page.click("#toggle-settings")
    assert page.is_visible("#set-max-tokens")
    screenshot(page, "phone-settings")


def test_stop_frees_the_request(new_page, live_server, page_errors):
    page = open_chat(new_page, live_server, max_tokens=400)
    send(page, "Write a long story about a robot who learns to paint.", wait=False)
    page.wait_for_function(
        "(document.querySelector('.msg.assistant .msg-body')?.textContent || '').replace('…', '').length > 10",
        timeout=ANSWER_TIMEOUT_MS)
    assert live_server.running_requests() == 1
    with page.expect_response(lambda r: "/cancel" in r.url) as cancel:
        page.click("#stop")
    assert re.search(r"/v1/requests/chatcmpl-[\w-]+/cancel$", cancel.value.url)
    assert cancel.value.status in (200, 404)  # 404: the closed stream already ended it
    wait_idle(page)
    wait_for_no_running(live_server)
    answer = page.locator("#messages .msg.assistant")
    assert "stopped" in answer.get_attribute("class")
    assert page.inner_text("#messages .msg.assistant .msg-stats").startswith("Stopped")
    assert len(turns(page)[-1][1]) > 10  # the partial answer is kept
    screenshot(page, "desktop-stopped")
    assert stored(page)["conversations"][0]["messages"][-1]["status"] == "stopped"
    assert page_errors == []


def test_reload_mid_answer(new_page, live_server, page_errors):
    page = open_chat(new_page, live_server, max_tokens=400)
    send(page, "Write a long poem about the sea.", wait=False)
    page.wait_for_function(
        "(document.querySelector('.msg.assistant .msg-body')?.textContent || '').replace('…', '').length > 10",
        timeout=ANSWER_TIMEOUT_MS)
    page.reload()
    page.wait_for_selector("body[data-state=idle]", state="attached")
    # The partial answer saved while streaming comes back, marked as stopped ...
    answer = page.locator("#messages .msg.assistant")
    assert "stopped" in answer.get_attribute("class")
    assert len(turns(page)[-1][1]) > 0
    # ... and the server, seeing the page's connection close, frees the request.
    wait_for_no_running(live_server)
    assert page_errors == []


def wait_for_no_running(live_server, limit_s=60):
    deadline = time.monotonic() + limit_s
    while live_server.running_requests() != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert live_server.running_requests() == 0


def test_edit_first_message_and_regenerate(new_page, live_server, page_errors):
    page = open_chat(new_page, live_server, max_tokens=8)
    bodies = chat_requests(page)
    send(page, "Say hello.")
    send(page, "Now say goodbye.")
    t = turns(page)
    assert [r for r, _ in t] == ["user", "assistant", "user", "assistant"]
    # Each turn sends the whole conversation so far: one growing message list.
    answer = stored(page)["conversations"][0]["messages"][1]["content"]  # as sent back, not as shown
    assert answer.strip() == t[1][1].strip()
    assert bodies[1]["messages"] == [{"role": "user", "content": "Say hello."},
                                     {"role": "assistant", "content": answer},
                                     {"role": "user", "content": "Now say goodbye."}]
    # The second turn's prompt starts with the first's, so the server's prefix cache hits.
    stats = page.locator("#messages .msg.assistant .msg-stats").nth(1).inner_text()
    cached = int(re.search(r"(\d+) of \d+ prompt tokens cached", stats).group(1))
    assert cached > 0, stats

    page.click("#messages .msg.user >> nth=0 >> [data-action=edit]")
    page.fill("#messages .edit-input", "Name a color.")
    screenshot(page, "desktop-edit")
    page.press("#messages .edit-input", "Enter")
    page.wait_for_selector("body[data-state=generating]", state="attached")
    wait_idle(page)
    t = turns(page)
    assert [r for r, _ in t] == ["user", "assistant"]
    assert t[0][1] == "Name a color."
    assert "goodbye" not in page.inner_text("#messages")
    assert bodies[2]["messages"] == [{"role": "user", "content": "Name a color."}]

    page.click("#messages [data-action=regenerate]")
    page.wait_for_selector("body[data-state=generating]", state="attached")
    wait_idle(page)
    assert [r for r, _ in turns(page)] == ["user", "assistant"]
    assert bodies[3]["messages"] == bodies[2]["messages"]  # the old answer is not sent back
    assert len(stored(page)["conversations"][0]["messages"]) == 2
    assert page_errors == []


def test_conversations_switch_and_survive_reload(new_page, live_server, page_errors):
    page = open_chat(new_page, live_server, max_tokens=4)
    bodies = chat_requests(page)
    send(page, "Say one.")
    first = turns(page)
    page.click("#new-chat")
    assert turns(page) == []
    send(page, "Say two.")
    second = turns(page)
    assert bodies[1]["messages"] == [{"role": "user", "content": "Say two."}]  # B does not see A
    assert page.locator("#conv-list li").count() == 2
    assert page.inner_text("#conv-list li.active .conv-open") == "Say two."

    page.click("#conv-list li:not(.active) .conv-open")
    assert turns(page) == first
    assert page.inner_text("#conv-title") == "Say one."
    page.reload()
    page.wait_for_selector("body[data-state=idle]")
    assert turns(page) == first  # the open conversation is remembered too
    page.click("#conv-list li:not(.active) .conv-open")
    assert turns(page) == second
    assert [c["title"] for c in stored(page)["conversations"]] == ["Say two.", "Say one."]
    assert page_errors == []


def test_script_in_model_output_is_text(new_page, live_server, page_errors):
    payload = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
    page = open_chat(new_page, live_server, max_tokens=40,
                     system="Repeat the user's message exactly as written, character for character, "
                            "with nothing before or after it.")
    send(page, payload)
    answer = turns(page)[-1][1]
    # The model did echo markup, so the check below is about model text, not just ours.
    assert "<script>" in answer or "onerror" in answer, f"model did not echo the markup: {answer!r}"
    page.wait_for_timeout(300)  # an onerror handler would have fired by now
    found = page.evaluate("""() => ({
      xss: window.__xss ?? null,
      elements: document.querySelectorAll('#messages script, #messages img').length,
      user: document.querySelector('#messages .msg.user .msg-body').textContent,
    })""")
    assert found == {"xss": None, "elements": 0, "user": payload}
    screenshot(page, "desktop-injection")
    assert page_errors == []

