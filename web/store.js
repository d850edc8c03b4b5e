/**
 * Conversations kept in the browser's localStorage, restored on reload.
 *
 * One JSON document under STORAGE_KEY holds every conversation and which one is open; the
 * API key sits under its own key so clearing chats never drops it. A conversation is
 *   { id, title, titleSet, created, updated, settings, messages }
 * where settings is { system, temperature, top_p, max_tokens, model, tools } (tools: the JSON
 * text of OpenAI function tools sent with each request, '' for none) and each message is
 *   { role: 'user' | 'assistant', content, reasoning?, reasoning_ms?, tool_calls?, stats?, status? }
 * (reasoning: a reasoning model's reasoning_content; tool_calls: [{ id, name, arguments }])
 * (status: 'streaming' while it arrives; 'stopped' or 'error' for an answer that did not
 * finish normally).
 */

export const STORAGE_KEY = 'llaisys.chat.v1';
export const API_KEY_KEY = 'llaisys.apiKey';

export const DEFAULT_SETTINGS = Object.freeze({
  system: '', temperature: 0.7, top_p: 0.95, max_tokens: 512, model: '', tools: '',
});

const TITLE_CHARS = 48;

function newId() {
  return `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
}

export class Store {
  constructor(storage = window.localStorage) {
    this.storage = storage;
    this.conversations = [];
    this.activeId = null;
    this.saveError = null; // set when the browser refused to save (quota, private mode)
    this.load();
  }

  load() {
    let doc = null;
    try {
      doc = JSON.parse(this.storage.getItem(STORAGE_KEY) || 'null');
    } catch {
      doc = null; // unreadable: start afresh rather than fail to open
    }
    this.conversations = Array.isArray(doc?.conversations) ? doc.conversations.filter(
      (c) => c && typeof c.id === 'string' && Array.isArray(c.messages)) : [];
    for (const c of this.conversations) {
      c.settings = { ...DEFAULT_SETTINGS, ...c.settings };
      for (const m of c.messages) {
        if (m.status === 'streaming') m.status = 'stopped'; // the page was closed mid-answer
      }
    }
    this.activeId = doc?.activeId;
    if (!this.get(this.activeId)) this.activeId = this.conversations[0]?.id ?? null;
  }

  save() {
    try {
      this.storage.setItem(STORAGE_KEY, JSON.stringify({
        conversations: this.conversations, activeId: this.activeId,
      }));
      this.saveError = null;
    } catch (err) {
      this.saveError = `Could not save chats in this browser: ${err.message}`;
    }
  }

  get(id) {
    return this.conversations.find((c) => c.id === id) || null;
  }

  get active() {
    return this.get(this.activeId);
  }

  /** A new empty conversation, first in the list and open; settings carry over from `from`. */
  create(from = null) {
    const now = Date.now();
    const conv = {
      id: newId(), title: 'New chat', titleSet: false, created: now, updated: now,
      settings: { ...DEFAULT_SETTINGS, ...(from ? from.settings : {}) },
      messages: [],
    };
    this.conversations.unshift(conv);
    this.activeId = conv.id;
    this.save();
    return conv;
  }

  open(id) {
    if (!this.get(id)) throw new Error(`no conversation ${id}`);
    this.activeId = id;
    this.save();
  }

  rename(id, title) {
    const conv = this.get(id);
    const clean = title.trim().slice(0, 120);
    if (!conv || !clean) return;
    conv.title = clean;
    conv.titleSet = true;
    this.save();
  }

  remove(id) {
    const at = this.conversations.findIndex((c) => c.id === id);
    if (at === -1) return;
    this.conversations.splice(at, 1);
    if (this.activeId === id) {
      this.activeId = (this.conversations[at] || this.conversations[at - 1] || null)?.id ?? null;
    }
    this.save();
  }

  /** Marks `conv` changed: names it after its first message until the user renames it. */
  touch(conv) {
    conv.updated = Date.now();
    if (!conv.titleSet) {
      const first = conv.messages.find((m) => m.role === 'user');
      if (first) {
        const line = first.content.trim().split('\n')[0];
        conv.title = line.length > TITLE_CHARS ? `${line.slice(0, TITLE_CHARS - 1)}…` : line || 'New chat';
      }
    }
    this.save();
  }

  get apiKey() {
    return this.storage.getItem(API_KEY_KEY) || '';
  }

  set apiKey(key) {
    if (key) this.storage.setItem(API_KEY_KEY, key);
    else this.storage.removeItem(API_KEY_KEY);
  }
}

/** The OpenAI message list for `conv`: system prompt, then every turn with text in it. */
export function requestMessages(conv) {
  const out = [];
  if (conv.settings.system.trim()) out.push({ role: 'system', content: conv.settings.system });
  for (const m of conv.messages) {
    if (m.content !== '') out.push({ role: m.role, content: m.content });
  }
  return out;
}
