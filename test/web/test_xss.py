"""The answer renderer against the OWASP XSS filter-evasion cases (xss_cases.json), in
headless Chromium with the page's CSP bypassed, so that only the renderer stands between a
payload and the page.

Every payload sets top.__xss when it runs (none may), and a dialog (alert) fails the test.
Three ways in: the payload as an answer's markdown (markdown-it with HTML off, then
DOMPurify); the payload as raw HTML straight into the sanitiser, as if a renderer rule had
let the model's markup through; and the whole chat page showing stored answers (and user
turns) that hold every payload. The rendered DOM must hold no script-capable element, no
on* attribute, and no URL other than http(s) or mailto.
"""

import json
from pathlib import Path

import pytest

from web_helpers import load_renderer

CASES = json.loads((Path(__file__).parent / "xss_cases.json").read_text())["cases"]
SETTLE_MS = 800  # onerror / onload / autofocus handlers of every case would have fired by now

# Checks every element under each `hosts` selector; returns { case index: [problems] }.
CHECK_JS = """(hosts) => {
  const FORBIDDEN = 'script, iframe, frame, frameset, object, embed, style, link, meta, base, form, '
    + 'input, textarea, select, img, svg, math, video, audio, source, template, noscript, marquee, '
    + 'details, body, xml, applet, bgsound, button:not(.copy-btn)';
  const SAFE_URL = /^(https?:|mailto:)/i;
  const URL_ATTRS = ['href', 'src', 'action', 'formaction', 'xlink:href', 'background', 'dynsrc',
    'lowsrc', 'data', 'poster', 'srcdoc'];
  const out = {};
  document.querySelectorAll(hosts).forEach((host, i) => {
    const problems = [...host.querySelectorAll(FORBIDDEN)].map((e) => `<${e.tagName.toLowerCase()}>`);
    for (const e of host.querySelectorAll('*')) {
      for (const a of e.attributes) {
        const v = a.value.replace(/[\\u0000-\\u0020]/g, '').toLowerCase();
        if (a.name.startsWith('on') || a.name === 'style') problems.push(`${a.name}=`);
        if (URL_ATTRS.includes(a.name) && !SAFE_URL.test(v)) problems.push(`${a.name}=${a.value}`);
        if (/javascript:|vbscript:|data:text\\/html/.test(v)) problems.push(`${a.name}=${a.value}`);
      }
    }
    if (problems.length) out[i] = problems;
  });
  return out;
}"""


@pytest.fixture(scope="module")
def xss_page(module_page, static_server):
    dialogs = []
    module_page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    module_page.dialogs = dialogs
    return load_renderer(module_page, static_server.url)


def render_all(page, fn):
    """Renders every case with window.__render[fn] into its own .host, then waits."""
    page.evaluate("""([payloads, fn]) => {
      delete window.__xss;
      document.body.replaceChildren();
      for (const p of payloads) {
        const host = document.createElement('div');
        host.className = 'host msg-body';
        document.body.append(host);
        host.append(window.__render[fn](p));
      }
    }""", [[c["payload"] for c in CASES], fn])
    page.wait_for_timeout(SETTLE_MS)


def verdict(page, hosts):
    problems = page.evaluate(CHECK_JS, hosts)
    named = {CASES[int(i)]["name"]: p for i, p in problems.items()}
    return named, page.evaluate("window.__xss ?? null")


def test_cases_file():
    assert len(CASES) >= 40
    names = [c["name"] for c in CASES]
    assert len(set(names)) == len(names)


def test_payloads_as_markdown(xss_page):
    render_all(xss_page, "renderMarkdown")
    problems, probe = verdict(xss_page, ".host")
    assert problems == {} and probe is None, (problems, probe)
    assert xss_page.dialogs == []
    # With HTML off the markup is shown to the reader as the characters it is.
    texts = xss_page.evaluate("[...document.querySelectorAll('.host')].map((h) => h.textContent.toLowerCase())")
    for case, text in zip(CASES, texts):
        if case["name"].startswith("md-"):
            continue  # markdown syntax: a link or image title is not shown
        for needle in ("<script", "onerror", "onload", "javascript:"):
            if needle in case["payload"].lower():
                assert needle in text, (case["name"], needle, text)
    assert xss_page.errors == []


def test_raw_html_through_the_sanitiser(xss_page):
    render_all(xss_page, "sanitize")
    problems, probe = verdict(xss_page, ".host")
    assert problems == {} and probe is None, (problems, probe)
    assert xss_page.dialogs == []
    # The sanitiser keeps harmless markup, so it is not just dropping everything.
    kept = xss_page.evaluate("""() => {
      const host = document.createElement('div');
      host.append(window.__render.sanitize('<p><strong>ok</strong> <a href="https://example.org/" onclick="x()">l</a></p>'));
      return host.innerHTML;
    }""")
    assert kept == '<p><strong>ok</strong> <a href="https://example.org/">l</a></p>'
    assert xss_page.errors == []


def test_payloads_in_the_chat_page(new_page, static_server, page_errors):
    page = new_page()
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    messages = []
    for c in CASES:
        messages += [{"role": "user", "content": c["payload"]}, {"role": "assistant", "content": c["payload"]}]
    page.goto(static_server.url)
    page.evaluate("""(messages) => localStorage.setItem('llaisys.chat.v1', JSON.stringify({
      activeId: 'x', conversations: [{ id: 'x', title: 'xss', titleSet: true, created: 0, updated: 0,
                                       settings: {}, messages }] }))""", messages)
    page.reload()
    page.wait_for_selector("body[data-state=idle]", state="attached")
    assert page.locator("#messages .msg.assistant").count() == len(CASES)
    page.wait_for_timeout(SETTLE_MS)
    problems, probe = verdict(page, "#messages .msg.assistant .msg-body")
    assert problems == {} and probe is None, (problems, probe)
    users = page.evaluate("[...document.querySelectorAll('#messages .msg.user .msg-body')].map((b) => b.textContent)")
    assert users == [c["payload"] for c in CASES]  # user turns are text, exactly as typed
    assert page.evaluate("document.querySelectorAll('#messages .msg.user .msg-body *').length") == 0
    assert dialogs == [] and page_errors == []


def test_page_under_its_own_csp(browser, static_server):
    """Without bypass_csp: the vendored libraries run under the page's Content-Security-Policy
    (no eval, no inline style), answers render and highlight, and nothing is refused."""
    ctx = browser.new_context()
    try:
        ctx.add_init_script("""document.addEventListener('securitypolicyviolation', (e) => {
          (window.__csp = window.__csp || []).push(`${e.violatedDirective} ${e.blockedURI}`); })""")
        page = ctx.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(static_server.url)
        page.evaluate("""() => {
          const messages = [{ role: 'user', content: 'hi' }, { role: 'assistant',
            content: '| a | b |\\n|:-|-:|\\n| 1 | 2 |\\n\\n```js\\nconst x = 1; // one\\n```\\n<img src=x onerror=top.__xss=1>' }];
          localStorage.setItem('llaisys.chat.v1', JSON.stringify({ activeId: 'x', conversations: [
            { id: 'x', title: 't', titleSet: true, created: 0, updated: 0, settings: {}, messages }] }));
        }""")
        page.reload()
        page.wait_for_selector("#messages .code-block code span.hljs-keyword", state="attached")
        page.wait_for_timeout(300)
        found = page.evaluate("({ csp: window.__csp ?? [], xss: window.__xss ?? null, "
                              "right: document.querySelectorAll('#messages td.align-right').length })")
        assert found == {"csp": [], "xss": None, "right": 1} and errors == [], (found, errors)
    finally:
        ctx.close()
