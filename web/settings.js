/**
 * The settings panel: the open conversation's system prompt, temperature, top-p, max tokens,
 * model and tools (OpenAI function tools as JSON), and the server's API key (one for the
 * browser, not per conversation).
 *
 * Each field writes through to the store as it changes; numbers out of range are clamped,
 * and a field left empty or unreadable goes back to its previous value.
 */

import { DEFAULT_SETTINGS } from './store.js';

const $ = (id) => document.getElementById(id);

const NUMBERS = [ // input id, settings key, allowed range
  ['set-temperature', 'temperature', { min: 0, max: 2 }],
  ['set-top-p', 'top_p', { min: 0.01, max: 1 }],
  ['set-max-tokens', 'max_tokens', { min: 1, max: 32768, integer: true }],
];

/** Fills the panel from the open conversation; `models` are the ids from /v1/models. */
export function renderSettings(store, models) {
  const s = store.active?.settings || DEFAULT_SETTINGS;
  const select = $('set-model');
  select.replaceChildren();
  const ids = models.length ? models : [''];
  for (const id of ids) {
    const opt = document.createElement('option');
    opt.value = id;
    opt.textContent = id || '(server default)';
    select.append(opt);
  }
  select.value = ids.includes(s.model) ? s.model : ids[0];
  $('set-system').value = s.system;
  $('set-tools').value = s.tools || '';
  showToolsState(s.tools || '');
  for (const [id, key] of NUMBERS) $(id).value = String(s[key]);
  $('set-api-key').value = store.apiKey;
}

/** Marks the tools field invalid unless it is empty or a JSON array (only then is it sent). */
function showToolsState(text) {
  let ok = true;
  if (text.trim()) {
    try {
      ok = Array.isArray(JSON.parse(text));
    } catch {
      ok = false;
    }
  }
  $('set-tools').classList.toggle('invalid', !ok);
  $('tools-hint').textContent = ok ? 'Sent with each request; calls the model makes are shown in the answer.'
    : 'Not a JSON array of tools: not sent.';
}

export function openSettings(open = true) {
  $('app').classList.toggle('settings-open', open);
  $('settings').hidden = !open;
}

/** Wires the fields to `store`; onApiKey() runs after the key changed. */
export function bindSettings(store, { onApiKey }) {
  $('set-model').addEventListener('change', (e) => {
    store.active.settings.model = e.target.value;
    store.save();
  });
  $('set-system').addEventListener('input', (e) => {
    store.active.settings.system = e.target.value;
    store.save();
  });
  $('set-tools').addEventListener('input', (e) => {
    store.active.settings.tools = e.target.value;
    showToolsState(e.target.value);
    store.save();
  });
  for (const [id, key, { min, max, integer = false }] of NUMBERS) {
    const input = $(id);
    input.addEventListener('change', () => {
      const settings = store.active.settings;
      let v = Number(input.value);
      if (input.value.trim() === '' || Number.isNaN(v)) v = settings[key];
      v = Math.min(max, Math.max(min, integer ? Math.round(v) : v));
      settings[key] = v;
      input.value = String(v);
      store.save();
    });
  }
  $('set-api-key').addEventListener('change', (e) => {
    store.apiKey = e.target.value.trim();
    onApiKey();
  });
}
