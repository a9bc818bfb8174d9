// Notifications: the bell in the header (the signed-in person's unread
// count, looked up again every few seconds, so it moves without a reload),
// and the notifications page: the person's notifications newest first
// with paging, marking one or all read, and their preferences per kind and
// channel (the e-mail channel only where the deployment sends e-mail).
import { api, h, route, toast, fmtTime, signedIn, reload } from '/console/app.js';
import { apiProblem } from '/console/pages/admin-common.js';

// What each kind means to the person, in the preferences.
const KINDS = {
  run_needs_user: 'a run you started needs a person',
  run_ended: 'a run you started ended',
  payment_followup_failed: 'a refund or cancellation the payment provider refused (admins)',
  gateway_gone: 'a gateway lost its connection (admins)',
  api_key_expiring: 'a key you minted expires within a week or a day',
  device_offline: 'a device you used this week went offline',
  copilot_near_limit: 'the copilot allowance went past four fifths this month (admins, and whose turn it was)',
  copilot_exhausted: 'the copilot allowance is spent this month (admins, and whose turn it was)',
};

// How often the bell looks again.
const BELL_EVERY_MS = 2000;
const PAGE_SIZE = 20;

// ---- The bell.

let unread = null;
const bellCount = h('span', { class: 'bell-count', 'aria-hidden': 'true' });
const bell = h('a', { href: '#/notifications', id: 'bell', class: 'bell' }, bellIcon(), bellCount);

// bellIcon draws the bell (an SVG: no emoji font is assumed).
function bellIcon() {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('width', '20');
  svg.setAttribute('height', '20');
  svg.setAttribute('aria-hidden', 'true');
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', 'M12 22a2.5 2.5 0 0 0 2.45-2h-4.9A2.5 2.5 0 0 0 12 22zm7-6V11a7 7 0 0 0-5.5-6.84V3.5a1.5 1.5 0 0 0-3 0v.66A7 7 0 0 0 5 11v5l-2 2v1h18v-1l-2-2z');
  path.setAttribute('fill', 'currentColor');
  svg.append(path);
  return svg;
}

function showUnread(n) {
  unread = n;
  bellCount.textContent = n > 0 ? String(n) : '';
  bell.classList.toggle('has-unread', n > 0);
  bell.setAttribute('aria-label', n === 1 ? 'Notifications, 1 unread' : 'Notifications, ' + n + ' unread');
  bell.dataset.unread = String(n);
}

async function bellTick() {
  if (signedIn()) {
    try {
      const page = await api.get('/v1/notifications', { limit: 1 });
      if (page.unreadCount !== unread) {
        showUnread(page.unreadCount);
        const list = document.querySelector('[data-notifications-list]');
        if (list && list.isConnected) reload();
      }
    } catch (e) { /* the bell never breaks a page; an API key or a deployment without notifications shows no count */ }
  }
  setTimeout(bellTick, BELL_EVERY_MS);
}

function mountBell() {
  const mode = document.getElementById('mode');
  if (mode && !document.getElementById('bell')) mode.before(bell);
  showUnread(0);
  bellTick();
}
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', mountBell); else mountBell();

// ---- The page.

function item(n, after) {
  const markRead = async (ev) => {
    ev.currentTarget.disabled = true;
    try {
      const r = await api.post('/v1/notifications/read', { ids: [n.notificationId] });
      showUnread(r.unreadCount);
      await after();
    } catch (e) { toast(apiProblem(e), 'error'); ev.currentTarget.disabled = false; }
  };
  return h('li', { class: 'notification' + (n.read ? ' read' : ' unread'), 'data-notification-id': n.notificationId, 'data-kind': n.kind },
    h('div', { class: 'notification-head' },
      h('strong', {}, n.title),
      h('span', { class: 'muted small' }, ' ', fmtTime(n.createdAt), n.read ? ' · read' : ' · unread')),
    h('p', {}, n.body),
    n.subject.runId ? h('a', { href: '#/runs/' + encodeURIComponent(n.subject.runId) }, 'Open the run') : null,
    n.subject.deviceId && !n.subject.runId ? h('a', { href: '#/devices/' + encodeURIComponent(n.subject.deviceId) }, 'Open the device') : null,
    n.read ? null : h('div', { class: 'row-actions' },
      h('button', { type: 'button', 'aria-label': 'Mark read: ' + n.title, on: { click: markRead } }, 'Mark read')));
}

function preferencesForm(p) {
  const email = p.channels.includes('email');
  const status = h('p', { class: 'muted small', role: 'status' });
  const address = email ? h('input', { type: 'email', name: 'email', id: 'notify-email', value: p.email || '', autocomplete: 'email' }) : null;
  const rows = p.kinds.map((k) => h('tr', {},
    h('th', { scope: 'row' }, h('code', {}, k.kind), h('div', { class: 'muted small' }, KINDS[k.kind] || '')),
    h('td', { 'data-label': 'Console' }, h('input', { type: 'checkbox', name: k.kind + '.console', checked: k.console,
      'aria-label': 'Console: ' + (KINDS[k.kind] || k.kind) })),
    email ? h('td', { 'data-label': 'E-mail' }, h('input', { type: 'checkbox', name: k.kind + '.email', checked: k.email,
      'aria-label': 'E-mail: ' + (KINDS[k.kind] || k.kind) })) : null));
  const form = h('form', { class: 'panel notification-preferences', 'aria-labelledby': 'prefs-title' },
    h('h2', { id: 'prefs-title' }, 'Preferences'),
    email
      ? h('label', { for: 'notify-email' }, 'E-mail address (empty: no e-mail)', address)
      : h('p', { class: 'muted' }, 'This deployment sends no e-mail: notifications reach you here only.'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'stack' },
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Kind'), h('th', { scope: 'col' }, 'Console'), email ? h('th', { scope: 'col' }, 'E-mail') : null)),
      h('tbody', {}, rows))),
    h('div', { class: 'row-actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save preferences')),
    status);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const kinds = {};
    for (const k of p.kinds) {
      kinds[k.kind] = { console: form.elements[k.kind + '.console'].checked };
      if (email) kinds[k.kind].email = form.elements[k.kind + '.email'].checked;
    }
    const body = { kinds };
    if (email) body.email = address.value.trim();
    try {
      await api.patch('/v1/me/notification-preferences', body);
      status.textContent = 'Saved.';
      toast('Preferences saved.', 'ok');
    } catch (e) { status.textContent = ''; toast(apiProblem(e), 'error'); }
  });
  return form;
}

route('/notifications', async (main, params, query) => {
  const only = query.get('unread') === 'true';
  const [page, prefs] = await Promise.all([
    api.get('/v1/notifications', { limit: PAGE_SIZE, unread: only ? 'true' : '' }),
    api.get('/v1/me/notification-preferences'),
  ]);
  showUnread(page.unreadCount);
  const list = h('ul', { class: 'notifications', 'data-notifications-list': '' });
  const more = h('div', { class: 'row-actions' });
  const append = (p) => {
    list.append(...p.notifications.map((n) => item(n, reload)));
    more.replaceChildren();
    if (p.nextBefore) {
      more.append(h('button', { type: 'button', on: { click: async () => {
        try {
          append(await api.get('/v1/notifications', { limit: PAGE_SIZE, unread: only ? 'true' : '', before: p.nextBefore, beforeId: p.nextBeforeId }));
        } catch (e) { toast(apiProblem(e), 'error'); }
      } } }, 'Older'));
    }
  };
  append(page);
  main.append(...[
    h('h1', {}, 'Notifications'),
    h('div', { class: 'toolbar' },
      h('label', { class: 'checkbox' }, h('input', { type: 'checkbox', checked: only,
        on: { change: (ev) => { location.hash = '#/notifications' + (ev.currentTarget.checked ? '?unread=true' : ''); } } }), 'Unread only'),
      h('button', { type: 'button', disabled: page.unreadCount === 0, on: { click: async (ev) => {
        ev.currentTarget.disabled = true;
        try { showUnread((await api.post('/v1/notifications/read')).unreadCount); await reload(); } catch (e) { toast(apiProblem(e), 'error'); }
      } } }, 'Mark all read'),
      h('span', { class: 'muted', 'data-unread-count': String(page.unreadCount) }, page.unreadCount + ' unread')),
    page.notifications.length === 0 ? h('p', { class: 'muted' }, only ? 'No unread notifications.' : 'No notifications yet.') : null,
    list, more,
    preferencesForm(prefs)].filter(Boolean));
});
