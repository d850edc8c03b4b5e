"""The page's markdown renderer (web/markdown.js) in a real browser, no model needed.

The module is loaded from web/ over HTTP and run on the inputs below; the checks read the
DOM it built. Injection cases must come out as text with no element, attribute or URL that
could run script.
"""

import pytest

INJECTIONS = [
    '<script>window.__xss = "script"</script>',
    '<img src=x onerror="window.__xss = \'img\'">',
    '<svg onload="window.__xss = \'svg\'"></svg>',
    '<iframe src="javascript:window.__xss = \'iframe\'"></iframe>',
    '[click](javascript:window.__xss="link")',
    '**<b onmouseover="window.__xss=1">bold</b>**',
    '| a | <img src=y onerror="window.__xss=\'td\'"> |\n|---|---|\n| <script>1</script> | x |',
    '```html\n<script>window.__xss = "code"</script>\n```',
    '`<img src=z onerror="window.__xss=\'inline\'">`',
    '# <img src=h onerror="window.__xss=\'h\'">',
    '- <img src=l onerror="window.__xss=\'li\'">\n> <script>window.__xss="quote"</script>',
]

RENDER_JS = """async (text) => {
  delete window.__xss;
  const md = await import('./markdown.js');
  const host = document.createElement('div');
  host.id = 'host';
  document.body.replaceChildren(host);
  host.append(md.renderMarkdown(text));
  return host.innerHTML;
}"""


@pytest.fixture(scope="module")
def md_page(module_page, static_server):
    # A blank page of the same origin: the renderer alone, without the app's own requests.
    module_page.goto(static_server.url + "markdown.js")
    module_page.evaluate("document.open(); document.write('<!doctype html><body></body>'); document.close()")
    return module_page


def render(page, text):
    return page.evaluate(RENDER_JS, text)


@pytest.mark.parametrize("text", INJECTIONS)
def test_injection_is_text(md_page, text):
    render(md_page, text)
    md_page.wait_for_timeout(200)  # an injected onerror/onload would have fired by now
    found = md_page.evaluate("""() => {
      const host = document.getElementById('host');
      const bad = [...host.querySelectorAll('script, img, svg, iframe, object, embed, b')]
        .map((e) => e.tagName);
      const attrs = [...host.querySelectorAll('*')].flatMap((e) => [...e.attributes]
        .filter((a) => a.name.startsWith('on') || /^\\s*javascript:/i.test(a.value))
        .map((a) => a.name));
      return { bad, attrs, xss: window.__xss ?? null, text: host.textContent };
    }""")
    assert found["bad"] == [] and found["attrs"] == [], found
    assert found["xss"] is None
    # The dangerous markup is still there for the reader to see, as characters.
    for needle in ("script", "onerror", "onload", "javascript:", "onmouseover"):
        if needle in text:
            assert needle in found["text"], (needle, found["text"])
    assert md_page.errors == []


def test_blocks_and_inline(md_page):
    text = (
        "## Title with `code`\n\nSome **bold**, *italic*, ~~gone~~ and snake_case_name.\n"
        "Next line.\n\n"
        "1. first\n2. second\n   - nested a\n   - nested b\n3. third\n\n"
        "> quoted\n\n"
        "| col | n |\n|:---|---:|\n| a | 1 |\n| b | 2 |\n\n"
        "See https://example.org/x, or [docs](https://example.org/docs).\n\n---\n"
    )
    html = render(md_page, text)
    q = md_page.evaluate("""() => {
      const h = document.getElementById('host');
      const t = (s) => [...h.querySelectorAll(s)].map((e) => e.textContent);
      return {
        h4: t('h4'), strong: t('strong'), em: t('em'), s: t('s'), code: t('code.inline'),
        ol: t('ol > li').length, nested: t('ol > li ul > li'), quote: t('blockquote'),
        th: t('th'), td: t('td'), links: [...h.querySelectorAll('a')].map((a) => [a.textContent, a.href, a.rel]),
        br: h.querySelectorAll('p br').length, hr: h.querySelectorAll('hr').length,
        rightAligned: t('td.align-right'),
      };
    }""")
    assert q["h4"] == ["Title with code"], html
    assert q["strong"] == ["bold"] and q["em"] == ["italic"] and q["s"] == ["gone"]
    assert q["code"] == ["code"]
    assert q["ol"] == 3 and q["nested"] == ["nested a", "nested b"]
    assert q["quote"] == ["quoted"]
    assert q["th"] == ["col", "n"] and q["td"] == ["a", "1", "b", "2"] and q["rightAligned"] == ["1", "2"]
    assert q["links"] == [["https://example.org/x", "https://example.org/x", "noopener noreferrer"],
                          ["docs", "https://example.org/docs", "noopener noreferrer"]]
    assert q["br"] == 1 and q["hr"] == 1
    assert "snake_case_name" in md_page.evaluate("document.getElementById('host').textContent")


def test_code_block_copy_button(md_page):
    code = "def f(x):\n    return x * 2  # <not html>\n"
    render(md_page, f"Here:\n\n```python\n{code}```\n\nDone.")
    assert md_page.inner_text("#host .code-lang") == "python"
    assert md_page.evaluate("document.querySelector('#host pre code').textContent") == code.rstrip("\n")
    md_page.click("#host .copy-btn")
    md_page.wait_for_function("document.querySelector('#host .copy-btn').textContent === 'Copied'")
    assert md_page.evaluate("navigator.clipboard.readText()") == code.rstrip("\n")


def test_unclosed_fence_while_streaming(md_page):
    # Mid-stream an answer often has an opening fence and no closing one yet.
    render(md_page, "Start\n```js\nconst a = 1;\nconst b = '<b>';")
    blocks = md_page.evaluate("[...document.querySelectorAll('#host pre code')].map((c) => c.textContent)")
    assert blocks == ["const a = 1;\nconst b = '<b>';"]
    assert md_page.evaluate("document.querySelectorAll('#host b').length") == 0
