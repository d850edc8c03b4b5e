/**
 * The conversation list's behaviour: open a conversation, the row menu (⋯: Rename, Delete
 * asked twice), renaming in place, and the phone layout's drawer (☰). State lives in
 * app.js's `ui` (renaming, menu, confirming); this module reads and sets it and redraws
 * through renderSidebar, or through app.js's renderAll when the open conversation changes.
 *
 * Escape is handled innermost first: the row menu and a rename take it (and mark it
 * handled with preventDefault), else it closes the drawer, if one is open.
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

/** Whether the sidebar is a drawer now (the phone layout, where ☰ shows). */
function isDrawer() {
  return $('toggle-sidebar').getClientRects().length > 0;
}

/**
 * Opens or closes the phone layout's drawer. Opening moves focus into it (the open row);
 * closing with `returnFocus` gives it back to ☰, the button that opened it.
 */
export function openDrawer(open, { returnFocus = false } = {}) {
  $('app').classList.toggle('sidebar-open', open);
  $('toggle-sidebar').setAttribute('aria-expanded', String(open));
  if (open && isDrawer()) {
    (document.querySelector('#conv-list .conv-item.active .conv-open') ?? $('new-chat')).focus({ preventScroll: true });
  } else if (!open && returnFocus && isDrawer()) {
    $('toggle-sidebar').focus();
  }
}

function onConversationAction(action, id) {
  if (action === 'open') {
    ctx.store.open(id);
    ctx.ui.editing = null;
    ctx.ui.confirming = null;
    openDrawer(false);
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
    e.preventDefault(); // the menu takes this Escape, not the drawer
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
    if (e.key === 'Escape') {
      e.preventDefault(); // the rename takes this Escape, not the drawer
      finishRename(e.target, false);
    }
  });
  $('conv-list').addEventListener('focusout', (e) => {
    if (e.target.classList.contains('rename-input')) finishRename(e.target, true);
  });
  $('conv-list').addEventListener('scroll', () => closeMenu());
  window.addEventListener('resize', () => closeMenu());
  document.addEventListener('click', (e) => { // a click anywhere but the menu or its button
    if (ctx.ui.menu !== null && !e.target.closest('.conv-menu, .conv-more')) closeMenu();
  });
  $('toggle-sidebar').addEventListener('click', () => openDrawer(!$('app').classList.contains('sidebar-open')));
  // Escape closes the drawer unless something inside took it first (a menu, a rename, an
  // edit); nothing else on the page uses Escape at this level, streaming or not.
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || e.defaultPrevented || e.isComposing) return;
    if (!$('app').classList.contains('sidebar-open') || !isDrawer()) return;
    e.preventDefault();
    openDrawer(false, { returnFocus: true });
  });
}
