/**
 * Building the page's DOM from the store: the conversation list, the messages, the stats.
 *
 * Pure rendering: no state of its own and no listeners on data; buttons carry a
 * data-action (and data-index / data-id) that app.js handles by delegation. User text is
 * set with textContent; answers go through render.js (markdown-it with HTML off, then
 * DOMPurify), so no model or user text reaches the DOM as markup.
 */

import { renderMarkdown } from './render.js';

export const SUGGESTIONS = [
  'Write a Python function that checks whether a string is a palindrome.',
  'Explain the difference between a process and a thread in three sentences.',
  'Show a SQL query that finds the second highest salary.',
];

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(label, action, extra = {}) {
  const b = el('button', `btn ghost small ${extra.className || ''}`.trim(), label);
  b.type = 'button';
  b.dataset.action = action;
  for (const [k, v] of Object.entries(extra.data || {})) b.dataset[k] = v;
  if (extra.title) b.title = extra.title;
  return b;
}

/**
 * The conversation list. `renaming` is the id being renamed, `menu` the id whose row menu
 * is open (Rename, Delete), `confirming` the id whose Delete was clicked once. A row is its
 * title and a ⋯ button; the menu is a popup app.js places beside that button.
 */
export function renderConversationList(list, store, { renaming, menu, confirming, busyId }) {
  list.replaceChildren();
  for (const conv of store.conversations) {
    const li = el('li', 'conv-item');
    li.dataset.id = conv.id;
    if (conv.id === store.activeId) li.classList.add('active');
    if (conv.id === busyId) li.classList.add('busy');
    if (conv.id === renaming) {
      const input = el('input', 'rename-input');
      input.value = conv.title;
      input.dataset.id = conv.id;
      input.setAttribute('aria-label', 'Conversation name');
      li.append(input);
      list.append(li);
      continue;
    }
    const open = el('button', 'conv-open', conv.title);
    open.type = 'button';
    open.dataset.action = 'open';
    open.dataset.id = conv.id;
    open.title = conv.title;
    const more = el('button', 'conv-more', '⋯');
    more.type = 'button';
    more.dataset.action = 'menu';
    more.dataset.id = conv.id;
    more.title = 'Rename or delete';
    more.setAttribute('aria-label', `Actions for ${conv.title}`);
    more.setAttribute('aria-haspopup', 'menu');
    more.setAttribute('aria-expanded', String(conv.id === menu));
    li.append(open, more);
    if (conv.id === menu) {
      li.classList.add('menu-open');
      const box = el('div', 'conv-menu');
      box.setAttribute('role', 'menu');
      box.setAttribute('aria-label', `Actions for ${conv.title}`);
      const confirm = conv.id === confirming;
      for (const [label, action, cls] of [['Rename', 'rename', ''],
        [confirm ? 'Click again to delete' : 'Delete', 'delete', confirm ? 'danger confirm' : 'danger']]) {
        const item = el('button', `menu-item ${cls}`.trim(), label);
        item.type = 'button';
        item.dataset.action = action;
        item.dataset.id = conv.id;
        item.setAttribute('role', 'menuitem');
        item.disabled = action === 'delete' && conv.id === busyId; // stop the answer first
        box.append(item);
      }
      li.append(box);
    }
    list.append(li);
  }
}

function formatStats(s) {
  const parts = [];
  if (s.completion_tokens !== undefined) parts.push(`${s.completion_tokens} tokens`);
  if (s.tokens_per_s) parts.push(`${s.tokens_per_s.toFixed(1)} tok/s`);
  if (s.ttft_ms !== undefined) parts.push(`TTFT ${(s.ttft_ms / 1000).toFixed(2)} s`);
  if (s.prompt_tokens !== undefined) {
    parts.push(`${s.cached_tokens || 0} of ${s.prompt_tokens} prompt tokens cached`);
  }
  return parts.join(' · ');
}

/**
 * The reasoning block above an answer: a <details> closed by default, its summary "Thinking…"
 * while the reasoning streams and "Thought for N s" once the answer starts. The node is kept
 * across streamed re-renders so an expanded block stays expanded. Text only (textContent).
 */
function fillReasoning(node, msg, thinking) {
  let box = node.querySelector(':scope > details.reasoning');
  if (!msg.reasoning) {
    if (box) box.remove();
    return;
  }
  if (!box) {
    box = el('details', 'reasoning');
    box.append(el('summary'), el('div', 'reasoning-body'));
    node.querySelector('.msg-body').before(box);
  }
  const secs = msg.reasoning_ms !== undefined ? msg.reasoning_ms / 1000 : null;
  box.querySelector('summary').textContent = thinking ? 'Thinking…'
    : `Thought for ${secs === null ? '?' : secs < 10 ? secs.toFixed(1) : Math.round(secs)} s`;
  box.querySelector('.reasoning-body').textContent = msg.reasoning.trim();
}

/** The tool calls of an answer, each its function name and its arguments (pretty JSON when they parse). */
function toolCallsNode(calls) {
  const box = el('div', 'tool-calls');
  for (const call of calls.filter(Boolean)) {
    const item = el('div', 'tool-call');
    const head = el('div', 'tool-call-head');
    head.append(el('span', 'tool-call-label', 'Tool call'), el('code', 'tool-call-name', call.name));
    let args = call.arguments;
    try {
      args = JSON.stringify(JSON.parse(call.arguments), null, 2);
    } catch {
      // still streaming, or not JSON: shown as it came
    }
    const pre = el('pre', 'tool-call-args');
    pre.append(el('code', null, args));
    item.append(head, pre);
    box.append(item);
  }
  return box;
}

/** Fills a message's body, stats and notes from `msg` (called again on every streamed chunk). */
export function fillMessage(node, msg, { generating = false } = {}) {
  const body = node.querySelector('.msg-body');
  if (msg.role === 'assistant') {
    const answering = msg.content !== '' || Boolean(msg.tool_calls?.length);
    fillReasoning(node, msg, generating && !answering);
    body.replaceChildren(renderMarkdown(msg.content, { streaming: generating }));
    if (msg.tool_calls?.length) body.append(toolCallsNode(msg.tool_calls));
    if (generating && !answering && !msg.reasoning) body.append(el('span', 'typing', '…'));
    // an answer cut inside its reasoning has no body to show
    body.classList.toggle('empty-answer', !answering && Boolean(msg.reasoning));
  } else {
    body.textContent = msg.content;
  }
  node.classList.toggle('generating', generating);
  node.classList.toggle('stopped', msg.status === 'stopped');
  node.classList.toggle('failed', msg.status === 'error');
  const stats = node.querySelector('.msg-stats');
  const notes = [];
  if (generating) notes.push('Generating…');
  if (msg.status === 'stopped') notes.push('Stopped');
  if (msg.status === 'error') notes.push(`Error: ${msg.error || 'failed'}`);
  if (msg.stats) notes.push(formatStats(msg.stats));
  if (msg.stats?.finish_reason === 'length') notes.push('hit max tokens');
  if (msg.stats?.finish_reason === 'tool_calls') notes.push('waiting for a tool result');
  stats.textContent = notes.filter(Boolean).join(' · ');
}

function messageNode(msg, index, { isLast, busy, editing }) {
  const node = el('article', `msg ${msg.role}`);
  node.dataset.index = String(index);
  node.append(el('div', 'msg-role', msg.role === 'user' ? 'You' : 'Assistant'));
  if (editing) {
    const area = el('textarea', 'edit-input');
    area.value = msg.content;
    area.rows = Math.min(12, msg.content.split('\n').length + 1);
    const bar = el('div', 'msg-actions');
    bar.append(
      button('Save & regenerate', 'save-edit', { data: { index: String(index) }, className: 'primary' }),
      button('Cancel', 'cancel-edit'),
    );
    node.append(area, bar);
    return node;
  }
  node.append(el('div', 'msg-body'), el('div', 'msg-stats'));
  fillMessage(node, msg);
  const bar = el('div', 'msg-actions');
  const data = { index: String(index) };
  if (msg.role === 'user') {
    bar.append(button('Edit', 'edit', { data, title: 'Edit and regenerate from here' }));
    if (isLast) bar.append(button('Retry', 'retry', { data }));
  } else {
    bar.append(button('Copy', 'copy', { data }));
    if (isLast) bar.append(button('Regenerate', 'regenerate', { data }));
  }
  for (const b of bar.querySelectorAll('button')) b.disabled = busy;
  node.append(bar);
  return node;
}

/** All messages of `conv`, or the welcome screen when it has none. */
export function renderMessages(container, conv, { busy, editing }) {
  container.replaceChildren();
  if (!conv || conv.messages.length === 0) {
    const empty = el('div', 'empty');
    empty.append(el('h2', null, 'What can I help with?'),
      el('p', null, 'Answers stream from the llaisys server on this machine.'));
    const chips = el('div', 'suggestions');
    for (const s of SUGGESTIONS) chips.append(button(s, 'suggest', { className: 'chip' }));
    empty.append(chips);
    container.append(empty);
    return;
  }
  conv.messages.forEach((msg, i) => {
    container.append(messageNode(msg, i, {
      isLast: i === conv.messages.length - 1, busy, editing: editing === i,
    }));
  });
}
