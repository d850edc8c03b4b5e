"""The answer renderer (web/render.js: markdown-it, highlight.js, DOMPurify from web/vendor/)
in a real browser, no model needed.

The vendored libraries and the module are loaded from web/ over HTTP onto a blank page of
the same origin; the checks read the DOM the renderer built. The XSS cases are in
test_xss.py.
"""

import pytest

from web_helpers import load_renderer

RENDER_JS = """([text, streaming]) => {
  const host = document.createElement('div');
  host.id = 'host';
  host.className = 'msg-body';
  document.body.replaceChildren(host);
  host.append(window.__render.renderMarkdown(text, { streaming }));
  return host.innerHTML;
}"""


@pytest.fixture(scope="module")
def md_page(module_page, static_server):
    return load_renderer(module_page, static_server.url)


def render(page, text, streaming=False):
    return page.evaluate(RENDER_JS, [text, streaming])


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
        ol: t('ol > li').length, nested: t('ol > li ul > li'), quote: t('blockquote').map((s) => s.trim()),
        th: t('th'), td: t('td'),
        links: [...h.querySelectorAll('a')].map((a) => [a.textContent, a.href, a.rel, a.target]),
        br: h.querySelectorAll('p br').length, hr: h.querySelectorAll('hr').length,
        rightAligned: t('td.align-right'), styled: h.querySelectorAll('[style]').length,
      };
    }""")
    assert q["h4"] == ["Title with code"], html
    assert q["strong"] == ["bold"] and q["em"] == ["italic"] and q["s"] == ["gone"]
    assert q["code"] == ["code"]
    assert q["ol"] == 3 and q["nested"] == ["nested a", "nested b"]
    assert q["quote"] == ["quoted"]
    assert q["th"] == ["col", "n"] and q["td"] == ["a", "1", "b", "2"] and q["rightAligned"] == ["1", "2"]
    assert q["styled"] == 0  # alignment is a class: the page's CSP refuses inline styles
    assert q["links"] == [["https://example.org/x", "https://example.org/x", "noopener noreferrer", "_blank"],
                          ["docs", "https://example.org/docs", "noopener noreferrer", "_blank"]]
    assert q["br"] == 1 and q["hr"] == 1
    assert "snake_case_name" in md_page.evaluate("document.getElementById('host').textContent")


def test_relative_links_and_images_are_not_loaded(md_page):
    render(md_page, "[here](/v1/models) ![cat](https://example.org/cat.png) [mail](mailto:a@example.org)")
    q = md_page.evaluate("""() => {
      const h = document.getElementById('host');
      return { imgs: h.querySelectorAll('img').length,
               links: [...h.querySelectorAll('a')].map((a) => [a.textContent, a.getAttribute('href')]),
               text: h.textContent };
    }""")
    assert q["imgs"] == 0  # an image is shown as a link: no remote loads from model text
    assert q["links"] == [["cat", "https://example.org/cat.png"], ["mail", "mailto:a@example.org"]]
    assert "[here](/v1/models)" in q["text"]


CODE = "def area(r: float) -> float:\n    # a comment\n    return 3.14159 * r ** 2  # <not html>\n"


def code_colours(page):
    """Computed colours in the first code block: the code's own and each token class's."""
    return page.evaluate("""() => {
      const code = document.querySelector('#host pre code');
      const colour = (e) => getComputedStyle(e).color;
      const spans = {};
      for (const s of code.querySelectorAll('span[class^="hljs-"]')) spans[s.className] = colour(s);
      return { plain: colour(code), classes: [...code.classList], spans };
    }""")


def test_highlighted_code_block(md_page, static_server):
    render(md_page, f"Here:\n\n```python\n{CODE}```\n\nDone.")
    assert md_page.inner_text("#host .code-lang") == "python"
    assert md_page.evaluate("document.querySelector('#host pre code').textContent") == CODE.rstrip("\n")
    q = code_colours(md_page)
    assert "hljs" in q["classes"] and "language-python" in q["classes"]
    for cls in ("hljs-keyword", "hljs-comment", "hljs-number"):
        assert cls in q["spans"], q
        assert q["spans"][cls] != q["plain"], (cls, q)  # the theme colours the tokens
    assert q["spans"]["hljs-keyword"] != q["spans"]["hljs-comment"]


def test_language_is_guessed_once_complete(md_page):
    code = "#include <stdio.h>\nint main(void) {\n    printf(\"hi\\n\");\n    return 0;\n}\n"
    render(md_page, f"```\n{code}```\n", streaming=True)  # still growing: not guessed yet
    assert md_page.inner_text("#host .code-lang") == "text"
    assert md_page.locator("#host pre code span").count() == 0
    render(md_page, f"```\n{code}```\n\nThat prints hi.", streaming=True)  # closed, text after it
    assert md_page.inner_text("#host .code-lang") in ("c", "cpp")
    assert md_page.locator("#host pre code span.hljs-keyword").count() > 0


def test_code_block_copy_button(md_page):
    render(md_page, f"```python\n{CODE}```")
    md_page.click("#host .copy-btn")
    md_page.wait_for_function("document.querySelector('#host .copy-btn').textContent === 'Copied'")
    assert md_page.evaluate("navigator.clipboard.readText()") == CODE.rstrip("\n")


def test_unclosed_fence_while_streaming(md_page):
    # Mid-stream an answer often has an opening fence and no closing one yet.
    render(md_page, "Start\n```js\nconst a = 1;\nconst b = '<b>';", streaming=True)
    blocks = md_page.evaluate("[...document.querySelectorAll('#host pre code')].map((c) => c.textContent)")
    assert blocks == ["const a = 1;\nconst b = '<b>';"]
    assert md_page.evaluate("document.querySelectorAll('#host b').length") == 0
    assert md_page.locator("#host pre code span.hljs-keyword").count() > 0  # a named language is highlighted


def test_streaming_renders_grow(md_page):
    """Each prefix of an answer renders (as the page does per frame), ending in the full answer."""
    answer = f"Sure:\n\n```python\n{CODE}```\n\n| x | y |\n|---|---|\n| 1 | **2** |\n\nDone."
    texts = md_page.evaluate("""([answer, step]) => {
      const out = [];
      for (let n = step; n < answer.length + step; n += step) {
        const frag = window.__render.renderMarkdown(answer.slice(0, n), { streaming: n < answer.length });
        const div = document.createElement('div');
        div.append(frag);
        out.push(div.textContent);
      }
      return out;
    }""", [answer, 7])
    assert len(texts) > 10
    assert all(t.strip() for t in texts[1:])
    assert texts[-1].startswith("Sure:") and texts[-1].strip().endswith("Done.")
    assert md_page.errors == []


def test_a_streaming_frame_sanitises_only_what_changed(md_page):
    """Finished blocks come from the cache: one more chunk at the end costs one sanitise call,
    and a cached render is the same DOM as a fresh one."""
    answer = "".join(f"Part {i}:\n\n```python\nx = {i}\n```\n\n| a | b |\n|---|---|\n| {i} | 2 |\n\n" for i in range(6))
    found = md_page.evaluate("""(answer) => {
      const P = window.DOMPurify, sanitize = P.sanitize;
      let calls = 0;
      P.sanitize = (...args) => { calls++; return sanitize.apply(P, args); };
      const html = (t) => { const d = document.createElement('div'); d.append(window.__render.renderMarkdown(t, { streaming: true })); return d.innerHTML; };
      try {
        const first = html(answer + 'The end');
        const before = calls;
        const again = html(answer + 'The end');
        const cachedCalls = calls - before;
        html(answer + 'The end is near');
        return { first: first === again, cachedCalls, grewCalls: calls - before - cachedCalls };
      } finally {
        P.sanitize = sanitize;
      }
    }""", answer)
    assert found == {"first": True, "cachedCalls": 0, "grewCalls": 1}, found
