/**
 * The chat page's controller: wires the DOM to the store and the server.
 *
 * One answer streams at a time (`gen`). Its text lands in the conversation it was asked in
 * even if the user switches away; the DOM is refreshed only when that conversation is open.
 * Stop aborts the fetch and also calls the server's cancel route, so the request is freed
 * at once rather than when the server next notices the closed connection.
 * document.body.dataset.state is 'idle' or 'generating', for styling and for tests.
 */

import { cancelRequest, describeError, listModels } from './api.js';
import { AnswerRun, streamAnswer } from './chat.js';
import { copyText } from './render.js';
import { bindSettings, openSettings, renderSettings } from './settings.js';
import { Store, requestMessages } from './store.js';
import { bindSidebar, openDrawer, renderSidebar } from './sidebar.js';
import { fillMessage, renderMessages } from './view.js';

const $ = (id) => document.getElementById(id);
const store = new Store();
const ui = {
  renaming: null, // id of the conversation whose name is being edited (sidebar.js)
  menu: null, // id of the conversation whose row menu (Rename, Delete) is open (sidebar.js)
  confirming: null, // id of the conversation whose Delete was clicked once (sidebar.js)
  editing: null, // index of the user message being edited
  models: [], // ids from /v1/models
  errorKind: null, // ApiError kind of the message in the error banner, if any
};
let gen = null; // { convId, msg, run: AnswerRun, controller, stopped } while an answer streams
let renderQueued = false;
let lastSave = 0;

const SAVE_EVERY_MS = 1000; // how often a streaming answer is written to localStorage

// ---- rendering ------------------------------------------------------------------------

function renderConversation() {
  const conv = store.active;
  $('conv-title').textContent = conv ? conv.title : 'New chat';
  const messages = $('messages');
  renderMessages(messages, conv, { busy: Boolean(gen), editing: ui.editing });
  if (gen && conv && gen.convId === conv.id) {
    const node = messages.querySelector(`[data-index="${conv.messages.indexOf(gen.msg)}"]`);
    if (node) fillMessage(node, gen.msg, { generating: true });
  }
  const area = messages.querySelector('.edit-input');
  if (area) area.focus();
  messages.scrollTop = messages.scrollHeight;
}

function renderAll() {
  renderSidebar();
  renderConversation();
  renderSettings(store, ui.models);
}

/** Redraws the streaming answer at most once per frame. */
function queueStreamRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    const conv = store.active;
    if (!gen || !conv || conv.id !== gen.convId) return;
    const messages = $('messages');
    const node = messages.querySelector(`[data-index="${conv.messages.indexOf(gen.msg)}"]`);
    if (!node) return;
    const atBottom = messages.scrollHeight - messages.scrollTop - messages.clientHeight < 80;
    fillMessage(node, gen.msg, { generating: true });
    if (atBottom) messages.scrollTop = messages.scrollHeight;
  });
}

function setBusy(busy) {
  document.body.dataset.state = busy ? 'generating' : 'idle';
  $('send').hidden = busy;
  $('stop').hidden = !busy;
}

function showError(text, kind = null) {
  $('error-text').textContent = text;
  $('error-banner').hidden = false;
  ui.errorKind = kind;
}

function hideError() {
  $('error-banner').hidden = true;
  ui.errorKind = null;
}

// ---- models -----------------------------------------------------------------------------

/** The served model's name on its own line under the status, never broken in two. */
function showModel(name) {
  const node = $('server-model');
  node.textContent = name;
  node.title = name;
  node.hidden = !name;
}

async function loadModels() {
  try {
    ui.models = await listModels(store.apiKey);
    $('server-status').textContent = 'Connected';
    $('server-status').className = 'server-status ok';
    showModel(ui.models[0] || '');
    if (ui.errorKind === 'auth' || ui.errorKind === 'network') hideError(); // fixed now
  } catch (err) {
    $('server-status').textContent = { auth: 'API key needed', network: 'Server unreachable', busy: 'Server busy' }[
      err.kind] || 'Server error';
    $('server-status').className = 'server-status bad';
    showModel('');
    showError(describeError(err, Boolean(store.apiKey)), err.kind);
    if (err.kind === 'auth') openSettings(true);
  }
  renderSettings(store, ui.models);
}

// ---- generation -------------------------------------------------------------------------

/**
 * Streams an answer to `conv`'s messages as they stand. `restore` is the text of a user
 * message just sent: if the request fails before any answer text, that message is taken
 * back out and its text returned to the input box, so nothing typed is lost.
 */
/** The settings' tools text as an array, or null when it is empty or not a JSON array. */
function parseTools(text) {
  if (!text || !text.trim()) return null;
  try {
    const v = JSON.parse(text);
    return Array.isArray(v) ? v : null;
  } catch {
    return null;
  }
}

async function generate(conv, restore = null) {
  hideError();
  ui.editing = null;
  const s = conv.settings;
  // 'streaming' is saved with the partial text, so a reload mid-answer shows it as stopped.
  const msg = { role: 'assistant', content: '', status: 'streaming' };
  const body = {
    messages: requestMessages(conv), temperature: s.temperature, top_p: s.top_p, max_tokens: s.max_tokens,
  };
  const tools = parseTools(s.tools);
  if (tools && tools.length) body.tools = tools;
  conv.messages.push(msg);
  store.touch(conv);
  const run = new AnswerRun();
  gen = { convId: conv.id, msg, run, controller: new AbortController(), stopped: false };
  const streamed = () => {
    if (run.reasoningMs() !== null) msg.reasoning_ms = run.reasoningMs();
    queueStreamRender();
    if (performance.now() - lastSave > SAVE_EVERY_MS) {
      lastSave = performance.now();
      store.save();
    }
  };
  setBusy(true);
  renderAll();
  try {
    if (!ui.models.length) await loadModels();
    const model = ui.models.includes(s.model) ? s.model : (ui.models[0] || '');
    if (model) body.model = model;
    await streamAnswer(body, run, {
      apiKey: store.apiKey,
      signal: gen.controller.signal,
      onText: (delta) => {
        msg.content += delta;
        streamed();
      },
      onReasoning: (delta) => {
        msg.reasoning = (msg.reasoning || '') + delta;
        streamed();
      },
      onToolCall: (index, head, args) => {
        msg.tool_calls = msg.tool_calls || [];
        if (head) msg.tool_calls[index] = { id: head.id, name: head.name, arguments: '' };
        if (msg.tool_calls[index]) msg.tool_calls[index].arguments += args;
        streamed();
      },
    });
    if (run.reasoningMs() !== null) msg.reasoning_ms = run.reasoningMs();
    msg.stats = run.stats();
    if (run.finish === 'abort') msg.status = 'stopped';
    else delete msg.status;
  } catch (err) {
    if (gen.stopped || err.name === 'AbortError') {
      msg.status = 'stopped';
      msg.stats = run.stats();
    } else if (msg.content === '' && !msg.reasoning && !msg.tool_calls) {
      conv.messages.splice(conv.messages.indexOf(msg), 1);
      if (restore !== null && conv.messages.at(-1)?.role === 'user') {
        conv.messages.pop();
        const box = $('input');
        box.value = box.value ? `${restore}\n${box.value}` : restore;
        autosize(box);
      }
      showError(describeError(err, Boolean(store.apiKey)), err.kind);
      if (err.kind === 'auth') openSettings(true);
    } else {
      msg.status = 'error';
      msg.error = describeError(err, Boolean(store.apiKey));
      showError(msg.error, err.kind);
    }
  } finally {
    gen = null;
    store.touch(conv);
    if (store.saveError) showError(store.saveError);
    setBusy(false);
    renderAll();
  }
}

function stop() {
  if (!gen) return;
  gen.stopped = true;
  if (gen.run.requestId) cancelRequest(gen.run.requestId, store.apiKey);
  gen.controller.abort();
}

function send() {
  const box = $('input');
  const text = box.value;
  if (gen || text.trim() === '') return;
  const conv = store.active || store.create();
  conv.messages.push({ role: 'user', content: text });
  box.value = '';
  autosize(box);
  generate(conv, text);
}

// ---- events -----------------------------------------------------------------------------

function autosize(area) {
  area.style.height = 'auto';
  area.style.height = `${Math.min(area.scrollHeight, 240)}px`;
}

function onMessageAction(action, index) {
  const conv = store.active;
  if (!conv || gen) return;
  const msg = conv.messages[index];
  if (action === 'copy' && msg) {
    copyText(msg.content).catch(() => showError('Could not copy to the clipboard.'));
  } else if (action === 'edit') {
    ui.editing = index;
    renderConversation();
  } else if (action === 'cancel-edit') {
    ui.editing = null;
    renderConversation();
  } else if (action === 'save-edit') {
    const text = document.querySelector('.edit-input').value;
    if (text.trim() === '') return;
    conv.messages.splice(index); // this turn and every later one are replaced
    conv.messages.push({ role: 'user', content: text });
    generate(conv);
  } else if (action === 'regenerate') {
    if (conv.messages.at(-1)?.role === 'assistant') conv.messages.pop();
    generate(conv);
  } else if (action === 'retry') {
    generate(conv);
  }
}

function bind() {
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  $('input').addEventListener('input', (e) => autosize(e.target));
  $('stop').addEventListener('click', stop);
  $('error-close').addEventListener('click', hideError);
  $('new-chat').addEventListener('click', () => {
    const current = store.active;
    if (!current || current.messages.length > 0) store.create(current);
    ui.editing = null;
    openDrawer(false);
    renderAll();
    $('input').focus();
  });
  $('scrim').addEventListener('click', () => {
    openDrawer(false);
    openSettings(false);
  });
  $('toggle-settings').addEventListener('click', () => openSettings($('settings').hidden));
  $('close-settings').addEventListener('click', () => openSettings(false));
  bindSettings(store, { onApiKey: loadModels });
  bindSidebar({ store, ui, busyId: () => gen?.convId, renderAll });


  const messages = $('messages');
  messages.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-action]');
    if (!b || b.classList.contains('copy-btn')) return;
    if (b.dataset.action === 'suggest') {
      $('input').value = b.textContent;
      send();
      return;
    }
    onMessageAction(b.dataset.action, Number(b.dataset.index));
  });
  messages.addEventListener('keydown', (e) => {
    if (!e.target.classList.contains('edit-input')) return;
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      onMessageAction('save-edit', Number(e.target.closest('.msg').dataset.index));
    } else if (e.key === 'Escape') {
      e.preventDefault(); // the edit takes this Escape
      onMessageAction('cancel-edit');
    }
  });
  // Streaming text is saved at most once a second; a page closed or reloaded mid-answer
  // saves what has arrived, so the partial answer comes back (marked stopped) after reload.
  // The fetch that the unload cuts off then fails; gen.stopped makes that a stop, not an error.
  window.addEventListener('pagehide', () => {
    if (!gen) return;
    gen.stopped = true;
    store.save();
  });
}

if (!store.active) store.create();
bind();
setBusy(false);
renderAll();
loadModels();
