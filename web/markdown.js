/**
 * Markdown to DOM nodes, for model answers.
 *
 * Model output is untrusted text, so this renderer never parses HTML: every piece of text
 * becomes a Text node and every element is made with createElement, so `<script>` or
 * `<img onerror=...>` in an answer is shown as the characters it is. Links are kept only
 * for http(s) and mailto URLs; images are shown as links (no remote loads from model text).
 *
 * Covers what chat answers use: fenced code blocks (with a Copy button; an unclosed fence,
 * as while streaming, runs to the end), headings, paragraphs with line breaks, bullet and
 * numbered lists (nested by indentation), block quotes, tables, rules, and inline code,
 * bold, italic, strikethrough, links and bare URLs.
 */

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
const SAFE_URL = /^(https?:\/\/|mailto:)/i;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Copies `text` to the clipboard; falls back to a hidden textarea outside secure contexts. */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = el('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.className = 'offscreen';
  document.body.append(area);
  area.select();
  document.execCommand('copy');
  area.remove();
}

function codeBlock(code, lang) {
  const wrap = el('div', 'code-block');
  const head = el('div', 'code-head');
  head.append(el('span', 'code-lang', lang || 'text'));
  const button = el('button', 'copy-btn', 'Copy');
  button.type = 'button';
  button.addEventListener('click', async () => {
    try {
      await copyText(code);
      button.textContent = 'Copied';
    } catch {
      button.textContent = 'Copy failed';
    }
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  });
  head.append(button);
  const pre = el('pre');
  const codeEl = el('code', null, code);
  if (lang) codeEl.dataset.lang = lang;
  pre.append(codeEl);
  wrap.append(head, pre);
  return wrap;
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function table(header, aligns, rows) {
  const wrap = el('div', 'table-wrap');
  const t = el('table');
  const thead = el('thead');
  const tr = el('tr');
  header.forEach((cell, i) => {
    const th = el('th');
    if (aligns[i]) th.classList.add(`align-${aligns[i]}`);
    renderInline(cell, th);
    tr.append(th);
  });
  thead.append(tr);
  const tbody = el('tbody');
  for (const row of rows) {
    const r = el('tr');
    header.forEach((_, i) => {
      const td = el('td');
      if (aligns[i]) td.classList.add(`align-${aligns[i]}`);
      renderInline(row[i] || '', td);
      r.append(td);
    });
    tbody.append(r);
  }
  t.append(thead, tbody);
  wrap.append(t);
  return wrap;
}

function indentOf(line) {
  return line.match(/^\s*/)[0].replace(/\t/g, '    ').length;
}

/** Lines [start, end) that form one list; items split at the first item's indentation. */
function list(lines, start) {
  const first = lines[start].match(ITEM);
  const base = indentOf(lines[start]);
  const ordered = /\d/.test(first[2]);
  const node = el(ordered ? 'ol' : 'ul');
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  const items = [];
  let i = start;
  for (; i < lines.length; i++) {
    const line = lines[i];
    const m = line.match(ITEM);
    if (m && indentOf(line) === base && /\d/.test(m[2]) === ordered) {
      items.push([m[3]]);
    } else if (line.trim() === '') {
      // A blank line ends the list unless an indented continuation follows.
      const next = lines[i + 1];
      if (next === undefined || indentOf(next) <= base) break;
      items[items.length - 1].push('');
    } else if (indentOf(line) > base) {
      items[items.length - 1].push(line.slice(Math.min(indentOf(line), base + 2)));
    } else {
      break;
    }
  }
  for (const body of items) {
    const li = el('li');
    const rest = body.slice(1);
    if (rest.some((l) => l.trim() !== '')) {
      renderInline(body[0], li);
      li.append(...renderBlocks(rest.join('\n')));
    } else {
      renderInline(body[0], li);
    }
    node.append(li);
  }
  return [node, i];
}

function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)
    || ITEM.test(line) || (line.includes('|') && TABLE_SEP.test(lines[i + 1] || '') && lines[i + 1].includes('-'));
}

/** Block-level nodes for `text`. */
export function renderBlocks(text) {
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (line.trim() === '') {
      i++;
    } else if ((m = line.match(FENCE))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length && !(lines[i].trim().startsWith(fence[0].repeat(fence.length))
                                    && lines[i].trim().replace(/[`~]/g, '') === '')) {
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence (past the end when the fence is still open)
      out.push(codeBlock(body.join('\n'), m[2]));
    } else if ((m = line.match(HEADING))) {
      const h = el(`h${Math.min(m[1].length + 2, 6)}`); // h3..h6: answers sit under the page's own headings
      renderInline(m[2], h);
      out.push(h);
      i++;
    } else if (RULE.test(line)) {
      out.push(el('hr'));
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && (m = lines[i].match(QUOTE))) {
        body.push(m[1]);
        i++;
      }
      const q = el('blockquote');
      q.append(...renderBlocks(body.join('\n')));
      out.push(q);
    } else if (ITEM.test(line)) {
      const [node, next] = list(lines, i);
      out.push(node);
      i = next;
    } else if (line.includes('|') && TABLE_SEP.test(lines[i + 1] || '') && lines[i + 1].includes('-')) {
      const header = splitRow(line);
      const aligns = splitRow(lines[i + 1]).map((c) => {
        if (c.startsWith(':') && c.endsWith(':')) return 'center';
        if (c.endsWith(':')) return 'right';
        return c.startsWith(':') ? 'left' : null;
      });
      const rows = [];
      i += 2;
      while (i < lines.length && lines[i].includes('|') && lines[i].trim() !== '') {
        rows.push(splitRow(lines[i]));
        i++;
      }
      out.push(table(header, aligns, rows));
    } else {
      const p = el('p');
      const body = [line];
      i++;
      while (i < lines.length && lines[i].trim() !== '' && !startsBlock(lines, i)) {
        body.push(lines[i]);
        i++;
      }
      body.forEach((l, k) => {
        if (k > 0) p.append(el('br'));
        renderInline(l.trim(), p);
      });
      out.push(p);
    }
  }
  return out;
}

/** Index of the closing `marker` for an emphasis span opened at `from`, or -1. */
function closing(text, marker, from) {
  let j = text.indexOf(marker, from);
  while (j !== -1) {
    const inner = text.slice(from, j);
    const single = marker.length === 1;
    // A single * or _ must not be half of a double one, and the span must not be blank.
    if (inner.trim() !== '' && !/^\s/.test(inner) && !/\s$/.test(inner)
        && !(single && (text[j + 1] === marker || text[j - 1] === marker))) {
      if (marker[0] !== '_' || !/\w/.test(text[j + marker.length] || '')) return j;
    }
    j = text.indexOf(marker, j + 1);
  }
  return -1;
}

/** Appends the inline nodes for one line of `text` to `parent`. */
export function renderInline(text, parent) {
  let buf = '';
  const flush = () => {
    if (buf) parent.append(document.createTextNode(buf));
    buf = '';
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    const rest = text.slice(i);
    let m;
    if (c === '\\' && /[\\`*_{}[\]()#+\-.!~|>]/.test(text[i + 1] || '')) {
      buf += text[i + 1];
      i += 2;
      continue;
    }
    if (c === '`') {
      const ticks = rest.match(/^`+/)[0];
      const end = text.indexOf(ticks, i + ticks.length);
      if (end !== -1) {
        flush();
        parent.append(el('code', 'inline', text.slice(i + ticks.length, end).replace(/^ (.+) $/, '$1')));
        i = end + ticks.length;
        continue;
      }
      buf += ticks;
      i += ticks.length;
      continue;
    }
    const emphasis = [['**', 'strong'], ['__', 'strong'], ['~~', 's'], ['*', 'em'], ['_', 'em']];
    let matched = false;
    for (const [marker, tag] of emphasis) {
      if (!rest.startsWith(marker)) continue;
      if (marker[0] === '_' && /\w/.test(text[i - 1] || '')) continue; // snake_case stays text
      const end = closing(text, marker, i + marker.length);
      if (end === -1) continue;
      flush();
      const node = el(tag);
      renderInline(text.slice(i + marker.length, end), node);
      parent.append(node);
      i = end + marker.length;
      matched = true;
      break;
    }
    if (matched) continue;
    if ((m = rest.match(/^!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/))) {
      flush();
      if (SAFE_URL.test(m[2])) {
        const a = el('a');
        a.href = m[2];
        a.target = '_blank';
        a.rel = 'noopener noreferrer';
        renderInline(m[1] || m[2], a);
        parent.append(a);
      } else {
        parent.append(document.createTextNode(m[0]));
      }
      i += m[0].length;
      continue;
    }
    if ((c === 'h' || c === 'H') && !/\w/.test(text[i - 1] || '') && (m = rest.match(/^https?:\/\/[^\s<>()"']+[^\s<>()"'.,;:!?]/i))) {
      flush();
      const a = el('a', null, m[0]);
      a.href = m[0];
      a.target = '_blank';
      a.rel = 'noopener noreferrer';
      parent.append(a);
      i += m[0].length;
      continue;
    }
    buf += c;
    i++;
  }
  flush();
}

/** A fragment holding the rendered markdown of `text`. */
export function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  frag.append(...renderBlocks(text));
  return frag;
}
