/**
 * Markdown to DOM for model answers, through maintained libraries (web/vendor/, loaded by
 * index.html as plain scripts before the app's modules; see doc/web.md):
 *
 *   1. markdown-it, html: false   the answer text -> an HTML string; raw HTML in the text is
 *                                 escaped, links are kept only for http(s) and mailto URLs
 *   2. highlight.js               fenced code -> <span class="hljs-…"> inside that string
 *   3. DOMPurify                  the string -> a DocumentFragment, through the allow-list
 *                                 below; nothing reaches the page's DOM before this step
 *   4. decorate                   on the sanitised nodes: links open in a new tab, each code
 *                                 block gets a header with its language and a Copy button
 *
 * Model output is untrusted: step 1 already turns `<script>` into text, step 3 is the second
 * wall should a renderer rule or plugin ever emit markup it should not.
 * Streaming re-renders the whole answer per frame, cheaply: markdown-it parses the whole
 * text (fast), then each top-level block is rendered on its own and its sanitised fragment
 * cached by its HTML, so a frame sanitises only the blocks that changed (the last one,
 * mostly) and clones the rest. Highlighting is cached by (language, code) the same way, and
 * a block still growing at the end of a streaming answer is not language-guessed yet.
 */

const SAFE_URL = /^(?:https?:|mailto:)/i;
const LANG = /^[\w+#.-]{1,32}$/; // a fence's language as a class name and a label
const CACHE_MAX = 256; // entries in each cache below; a cache is dropped when it fills

const PURIFY = {
  ALLOWED_TAGS: ['p', 'br', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'strong', 'em', 's', 'code', 'pre',
    'blockquote', 'ul', 'ol', 'li', 'hr', 'a', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'span'],
  ALLOWED_ATTR: ['href', 'class', 'start', 'title'],
  ALLOWED_URI_REGEXP: SAFE_URL,
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

let md = null; // the markdown-it instance, made on first use
const cache = new Map(); // `${lang}\0${guessed}\0${code}` -> [html, language shown]
const blockCache = new Map(); // one top-level block's HTML -> its sanitised DocumentFragment

function vendor(name, file) {
  const lib = globalThis[name];
  if (!lib) throw new Error(`web/vendor/${file} did not load (${name} is undefined); see doc/web.md`);
  return lib;
}

/** highlight.js HTML for `code` and the language it was highlighted as ('' for none). */
function highlight(code, lang, auto) {
  const key = `${lang}\0${auto && !lang}\0${code}`;
  let hit = cache.get(key);
  if (hit) return hit;
  const hljs = vendor('hljs', 'highlight.min.js');
  if (lang && hljs.getLanguage(lang)) {
    hit = [hljs.highlight(code, { language: lang, ignoreIllegals: true }).value, lang];
  } else if (!lang && auto) {
    const r = hljs.highlightAuto(code);
    hit = [r.value, r.language || ''];
  } else {
    hit = [md.utils.escapeHtml(code), lang];
  }
  if (cache.size >= CACHE_MAX) cache.clear();
  cache.set(key, hit);
  return hit;
}

/** Token rewrites: headings h3..h6 (answers sit under the page's own), classes not styles. */
function adjustTokens(state) {
  for (const t of state.tokens) {
    if (t.type === 'heading_open' || t.type === 'heading_close') {
      t.tag = `h${Math.min(Number(t.tag[1]) + 2, 6)}`;
    } else if (t.type === 'th_open' || t.type === 'td_open') {
      const align = /text-align:\s*(left|center|right)/.exec(t.attrGet('style') || '');
      t.attrs = align ? [['class', `align-${align[1]}`]] : null; // no inline style (CSP)
    } else if (t.type === 'inline') {
      for (const c of t.children) if (c.type === 'code_inline') c.attrJoin('class', 'inline');
    }
  }
}

function makeRenderer() {
  const m = vendor('markdownit', 'markdown-it.min.js')({ html: false, linkify: true, breaks: true });
  m.validateLink = (url) => SAFE_URL.test(url.trim());
  m.core.ruler.push('llaisys_adjust', adjustTokens);
  const esc = m.utils.escapeHtml;
  m.renderer.rules.fence = (tokens, idx, options, env) => {
    const t = tokens[idx];
    const info = t.info.trim().split(/\s+/)[0] || '';
    const lang = LANG.test(info) ? info.toLowerCase() : '';
    // The block still growing at the end of a streaming answer is not language-guessed yet.
    const growing = env.streaming && env.last && !tokens.slice(idx + 1).some((x) => x.map);
    const [html, shown] = highlight(t.content.replace(/\n$/, ''), lang, !growing);
    const cls = shown ? `hljs language-${esc(shown)}` : 'hljs';
    return `<pre><code class="${cls}">${html}</code></pre>\n`;
  };
  m.renderer.rules.image = (tokens, idx, options, env, self) => { // a link: no remote loads
    const t = tokens[idx];
    const src = t.attrGet('src');
    return `<a href="${esc(src)}">${esc(self.renderInlineAsText(t.children, options, env) || src)}</a>`;
  };
  return m;
}

/** Step 3: `html` through DOMPurify with the page's allow-list, as a DocumentFragment. */
export function sanitize(html) {
  return vendor('DOMPurify', 'purify.min.js').sanitize(html, PURIFY);
}

/** Copies `text` to the clipboard; falls back to a hidden textarea outside secure contexts. */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.className = 'offscreen';
  document.body.append(area);
  area.select();
  document.execCommand('copy');
  area.remove();
}

function codeHeader(code) {
  const head = document.createElement('div');
  head.className = 'code-head';
  const label = document.createElement('span');
  label.className = 'code-lang';
  const cls = [...code.classList].find((c) => c.startsWith('language-'));
  label.textContent = cls ? cls.slice('language-'.length) : 'text';
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'copy-btn';
  button.textContent = 'Copy';
  button.addEventListener('click', async () => {
    try {
      await copyText(code.textContent);
      button.textContent = 'Copied';
    } catch {
      button.textContent = 'Copy failed';
    }
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  });
  head.append(label, button);
  return head;
}

/** Step 4, on sanitised nodes only. */
function decorate(frag) {
  for (const a of frag.querySelectorAll('a[href]')) {
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
  }
  for (const pre of frag.querySelectorAll('pre')) {
    const code = pre.querySelector('code');
    if (!code) continue;
    const wrap = document.createElement('div');
    wrap.className = 'code-block';
    pre.replaceWith(wrap);
    wrap.append(codeHeader(code), pre);
  }
  return frag;
}

/** [start, end) token ranges of the top-level blocks (a list, a table, a fence, ...). */
function topLevelBlocks(tokens) {
  const out = [];
  let start = 0;
  let depth = 0;
  tokens.forEach((t, i) => {
    depth += t.nesting;
    if (depth === 0) {
      out.push([start, i + 1]);
      start = i + 1;
    }
  });
  return out;
}

/** A fragment holding the rendered, sanitised markdown of `text` (steps 1 to 4). */
export function renderMarkdown(text, { streaming = false } = {}) {
  if (!md) md = makeRenderer();
  const env = { streaming, last: false }; // last: rendering the final top-level block
  const tokens = md.parse(text, env); // whole text: reference links resolve across blocks
  const blocks = topLevelBlocks(tokens);
  const frag = document.createDocumentFragment();
  blocks.forEach(([a, b], k) => {
    env.last = k === blocks.length - 1;
    const html = md.renderer.render(tokens.slice(a, b), md.options, env);
    let clean = blockCache.get(html);
    if (!clean) {
      clean = sanitize(html);
      if (blockCache.size >= CACHE_MAX) blockCache.clear();
      blockCache.set(html, clean);
    }
    frag.append(clean.cloneNode(true));
  });
  return decorate(frag);
}
