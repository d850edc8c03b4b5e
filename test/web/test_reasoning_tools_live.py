"""The chat page shows a reasoning model's reasoning collapsed above the answer and a
model's tool calls as such, in headless Chromium against real servers: an R1-distill-style
model (the real 0.5B weights with DeepSeek-R1-Distill's tokens and chat template, which opens
<think> in the prompt; test/r1_checkpoint.py) and the real 0.5B with a weather tool set in
the page's settings."""

import json
import re

import pytest

from r1_checkpoint import make_r1_checkpoint
from web_helpers import SMALL_SERVER, LiveServer, chromium_path, screenshot

pytestmark = pytest.mark.slow

ANSWER_TIMEOUT_MS = 300_000
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def r1_server(qwen05_dir, tmp_path_factory):
    chromium_path()
    model = make_r1_checkpoint(tmp_path_factory.mktemp("r1") / "r1-distill-style", qwen05_dir)
    server = LiveServer(model, tmp_path_factory.mktemp("r1srv") / "server.log", extra_args=SMALL_SERVER)
    yield server
    server.stop()


def open_page(new_page, server, max_tokens, tools=None):
    page = new_page()
    page.goto(server.url)
    page.wait_for_selector("body[data-state=idle]")
    page.wait_for_function("document.getElementById('server-status').textContent.startsWith('Connected')")
    page.click("#toggle-settings")
    for sel, value in (("#set-max-tokens", max_tokens), ("#set-temperature", 0)):
        page.fill(sel, str(value))
        page.press(sel, "Tab")
    if tools is not None:
        page.fill("#set-tools", json.dumps(tools))
    page.click("#close-settings")
    return page


def ask(page, text):
    page.fill("#input", text)
    page.press("#input", "Enter")
    page.wait_for_selector("body[data-state=generating]", state="attached")
    page.wait_for_selector("body[data-state=idle]", state="attached", timeout=ANSWER_TIMEOUT_MS)


def test_reasoning_block_is_collapsed_above_the_answer(new_page, r1_server, page_errors):
    page = open_page(new_page, r1_server, max_tokens=12)
    ask(page, "What is 2 + 2? Think step by step first.")
    box = page.locator(".msg.assistant details.reasoning")
    assert box.count() == 1
    summary = box.locator("summary").text_content()
    assert re.fullmatch(r"Thought for \d+(\.\d)? s", summary), summary
    assert box.evaluate("d => d.open") is False  # collapsed
    assert not box.locator(".reasoning-body").is_visible()
    # above the answer body, and expandable
    assert page.evaluate("""() => {
      const m = document.querySelector('.msg.assistant');
      const d = m.querySelector('details.reasoning'), b = m.querySelector('.msg-body');
      return Boolean(d.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING);
    }""")
    box.locator("summary").click()
    assert box.evaluate("d => d.open") is True
    text = box.locator(".reasoning-body").text_content()
    assert text.strip() and "<think>" not in text
    stored = page.evaluate("JSON.parse(localStorage.getItem('llaisys.chat.v1'))")
    (conv,) = stored["conversations"]
    answer = conv["messages"][-1]
    assert answer["reasoning"].strip() == text and answer["reasoning_ms"] >= 0
    assert not page.locator(".msg.assistant .msg-body").is_visible()  # no answer came: no empty bubble
    assert "hit max tokens" in page.locator(".msg.assistant .msg-stats").text_content()
    screenshot(page, "reasoning")
    assert page_errors == []


def test_tool_call_is_shown_as_such(new_page, live_server, page_errors):
    page = open_page(new_page, live_server, max_tokens=40, tools=WEATHER)
    bodies = []
    page.on("request", lambda r: bodies.append(r.post_data_json)
            if r.method == "POST" and r.url.endswith("/v1/chat/completions") else None)
    ask(page, "What is the weather like in Paris today?")
    assert bodies and bodies[0]["tools"] == WEATHER
    call = page.locator(".msg.assistant .tool-call")
    assert call.count() == 1
    assert call.locator(".tool-call-name").text_content() == "get_weather"
    args = json.loads(call.locator(".tool-call-args").text_content())
    assert args == {"city": "Paris"}
    assert "waiting for a tool result" in page.locator(".msg.assistant .msg-stats").text_content()
    screenshot(page, "tool-call")
    assert page_errors == []
