/**
 * The conversation list's behaviour: open a conversation, the row menu (⋯: Rename, Delete
 * asked twice), renaming in place. State lives in app.js's `ui` (renaming, menu,
 * confirming); this module reads and sets it and redraws through renderSidebar, or through
 * app.js's renderAll when the open conversation changes.
 */

import { renderConversationList } from './view.js';

const $ = (id) => document.getElementById(id);
let ctx = null; // { store, ui, busyId: () => id of the conversation answering, renderAll }

export function renderSidebar() {
  renderConversationList($('conv-list'), ctx.store, {
    renaming: ctx.ui.renaming, menu: ctx.ui.menu, confirming: ctx.ui.confirming, busyId: ctx.busyId(),
  });
  const input = document.querySelector('.rename-input');
  if (input) {
    input.focus();
    input.select();
  }
  placeMenu();
}

/**
 * The open row menu floats beside its ⋯ button (fixed, so the list's scrolling cannot clip
 * it), below the button or above it when there is no room.
 */
function placeMenu() {
  const box = document.querySelector('.conv-menu');
  if (!box) return;
  const at = box.parentElement.querySelector('.conv-more').getBoundingClientRect();
  const below = at.bottom + 4 + box.offsetHeight <= window.innerHeight;
  box.style.top = `${below ? at.bottom + 4 : at.top - 4 - box.offsetHeight}px`;
  box.style.left = `${Math.max(4, at.right - box.offsetWidth)}px`;
}

function closeMenu(focusButton = false) {
  if (ctx.ui.menu === null) return;
  const id = ctx.ui.menu;
  ctx.ui.menu = null;
  ctx.ui.confirming = null;
  renderSidebar();
  if (focusButton) document.querySelector(`#conv-list .conv-more[data-id="${id}"]`)?.focus();
}

function onConversationAction(action, id) {
  if (action === 'open') {
    ctx.store.open(id);
    ctx.ui.editing = null;
    ctx.ui.confirming = null;
    $('app').classList.remove('sidebar-open');
    ctx.renderAll();
  } else if (action === 'menu') {
    ctx.ui.confirming = null;
    ctx.ui.menu = ctx.ui.menu === id ? null : id;
    renderSidebar();
    document.querySelector('#conv-list .conv-menu .menu-item')?.focus();
  } else if (action === 'rename') {
    ctx.ui.menu = null;
    ctx.ui.renaming = id;
    renderSidebar();
  } else if (action === 'delete') {
    if (ctx.busyId() === id) return; // stop it first
    if (ctx.ui.confirming !== id) {
      ctx.ui.confirming = id;
      renderSidebar();
      document.querySelector('#conv-list .conv-menu [data-action=delete]')?.focus();
      setTimeout(() => {
        if (ctx.ui.confirming === id) {
          ctx.ui.confirming = null;
          renderSidebar();
        }
      }, 3000);
      return;
    }
    ctx.ui.confirming = null;
    ctx.ui.menu = null;
    ctx.store.remove(id);
    if (!ctx.store.active) ctx.store.create();
    ctx.renderAll();
  }
}

/** Arrow keys move between the menu's items; Escape closes it. */
function menuKey(e) {
  const items = [...document.querySelectorAll('#conv-list .conv-menu .menu-item:not(:disabled)')];
  const at = items.indexOf(e.target);
  if (e.key === 'Escape') {
    closeMenu(true);
  } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
    e.preventDefault();
    items[(at + (e.key === 'ArrowDown' ? 1 : items.length - 1)) % items.length]?.focus();
  }
}

function finishRename(input, commit) {
  if (ctx.ui.renaming === null) return;
  if (commit) ctx.store.rename(input.dataset.id, input.value);
  ctx.ui.renaming = null;
  ctx.renderAll();
}

/** Wires the list's events; `context` as `ctx` above. */
export function bindSidebar(context) {
  ctx = context;
  $('conv-list').addEventListener('click', (e) => {
    const b = e.target.closest('button[data-action]');
    if (b) onConversationAction(b.dataset.action, b.dataset.id);
  });
  $('conv-list').addEventListener('keydown', (e) => {
    if (e.target.closest('.conv-menu')) menuKey(e);
    if (!e.target.classList.contains('rename-input')) return;
    if (e.key === 'Enter') finishRename(e.target, true);
    if (e.key === 'Escape') finishRename(e.target, false);
  });
  $('conv-list').addEventListener('focusout', (e) => {
    if (e.target.classList.contains('rename-input')) finishRename(e.target, true);
  });
  $('conv-list').addEventListener('scroll', () => closeMenu());
  window.addEventListener('resize', () => closeMenu());
  document.addEventListener('click', (e) => { // a click anywhere but the menu or its button
    if (ctx.ui.menu !== null && !e.target.closest('.conv-menu, .conv-more')) closeMenu();
  });
}
