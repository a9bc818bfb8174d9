// Receipts: the organisation's receipt feed (GET /v1/receipts) with every
// filter of spec 4.3 kept in the page's address (#/receipts?status=failed…),
// so a filtered view is a link; cursor paging (nextBefore and nextBeforeKey
// passed back unchanged); marking a receipt reviewed; the receipt chain's
// NDJSON export as a download. The frame helpers here are shared with the
// run pages (runs.js imports them).
import { api, h, route, toast, errorBox, fmtTime, navigate, reload } from '/console/app.js';

// ---- Shared with runs.js.

// frameCache maps "frameId@maxWidth" to the promise of a blob URL, so a
// page that re-renders (a run being watched) does not fetch a frame again.
// The oldest entries are let go past frameCacheSize.
const frameCache = new Map();
const frameCacheSize = 300;

function frameURL(frameId, maxWidth) {
  const key = frameId + '@' + maxWidth;
  let p = frameCache.get(key);
  if (!p) {
    p = (async () => {
      const r = await api.raw('/v1/frames/' + encodeURIComponent(frameId) + '?format=png&maxWidth=' + maxWidth);
      if (!r.ok) {
        const body = await r.json().catch(() => ({}));
        throw new Error((body.error && body.error.code) || ('HTTP ' + r.status));
      }
      return URL.createObjectURL(await r.blob());
    })();
    p.catch(() => frameCache.delete(key));
    frameCache.set(key, p);
    while (frameCache.size > frameCacheSize) {
      const [oldest, op] = frameCache.entries().next().value;
      frameCache.delete(oldest);
      op.then((u) => URL.revokeObjectURL(u), () => {});
    }
  }
  return p;
}

// frameImage returns a <figure> showing a stored frame (GET
// /v1/frames/{id}?format=png, read with the bearer token and shown as a
// blob URL) with caption; a frame that cannot be read (past retention)
// says so in its place.
export function frameImage(frameId, caption, maxWidth) {
  const w = maxWidth || 240;
  const img = h('img', { class: 'frame', alt: caption + ' (frame ' + frameId + ')', 'data-frame-id': frameId, width: w });
  frameURL(frameId, w).then((u) => { img.src = u; }, (e) => {
    img.alt = caption + ': not available (' + e.message + ')';
    img.classList.add('unavailable');
  });
  return h('figure', { class: 'frame-fig' }, img, h('figcaption', {}, caption));
}

// actionText renders an action with its arguments in a few words:
// "open_app com.android.settings", "tap 540,1200", "key BACK".
export function actionText(action, args) {
  const a = args || {};
  const parts = [action];
  if (a.package) parts.push(a.package);
  if (a.key) parts.push(a.key);
  if (a.ref) parts.push('ref ' + a.ref);
  if (a.x !== undefined && a.y !== undefined) parts.push(a.x + ',' + a.y);
  if (a.x1 !== undefined) parts.push(a.x1 + ',' + a.y1 + ' → ' + a.x2 + ',' + a.y2);
  if (a.text !== undefined) parts.push(JSON.stringify(String(a.text).length > 60 ? String(a.text).slice(0, 60) + '…' : a.text));
  if (a.durationMs !== undefined) parts.push(a.durationMs + ' ms');
  return parts.join(' ');
}

// actorText names a receipt's actor or a run's starter.
export function actorText(actor) {
  if (!actor) return '—';
  if (actor.userId) return 'person ' + actor.userId;
  if (actor.apiKeyId) return 'key ' + actor.apiKeyId;
  return '—';
}

// stateCell shows a receipt's state and, when it failed, the error.
export function receiptState(rc) {
  const out = [h('span', { class: 'state state-' + rc.state }, rc.state)];
  if (rc.outcomeUnknown) out.push(h('span', { class: 'muted' }, ' (outcome unknown)'));
  if (rc.error) {
    out.push(h('div', { class: 'muted small' }, rc.error.code + (rc.error.reason ? ' / ' + rc.error.reason : '') + ': ' + rc.error.message));
  }
  return out;
}

// framesPair shows a receipt's frames before and after, side by side.
export function framesPair(rc, maxWidth) {
  const f = rc.frames || {};
  if (!f.before && !f.after) return h('p', { class: 'muted' }, 'No frames were recorded for this action.');
  return h('div', { class: 'frames-pair' },
    f.before ? frameImage(f.before, 'before', maxWidth) : h('p', { class: 'muted' }, 'no frame before'),
    f.after ? frameImage(f.after, 'after', maxWidth) : h('p', { class: 'muted' }, 'no frame after'));
}

// listDevices reads every device the caller can see (for names and the
// device filter's suggestions).
export async function listDevices() {
  const devices = [];
  let after = '';
  do {
    const page = await api.get('/v1/devices', { limit: 200, after });
    devices.push(...page.devices);
    after = page.nextAfter || '';
  } while (after);
  return devices;
}

// shortId shortens a long id for a table ("arun_01a20f…4841"); the whole
// id stays in the element's title and accessible name.
export function shortId(id) {
  const s = String(id || '');
  const cut = s.indexOf('_') + 7;
  return s.length > cut + 8 ? s.slice(0, cut) + '…' + s.slice(-4) : s;
}

// cell is a table cell with its column's name, which the narrow layout
// shows in front of the value (style.css, "receipts and runs").
export function cell(label, ...children) {
  return h('td', { 'data-label': label }, ...children);
}

// ---- The receipts page.

// The filters of spec 4.3, as the form and the address carry them.
const filterNames = ['deviceId', 'agentRunId', 'status', 'actorUserId', 'actorApiKeyId', 'limit'];

// receiptsPath is the console address of the feed with these filters and,
// for a later page, the cursor.
function receiptsPath(filters, cursor) {
  const q = new URLSearchParams();
  for (const n of filterNames) if (filters[n]) q.set(n, filters[n]);
  if (cursor && cursor.before) {
    q.set('before', cursor.before);
    if (cursor.beforeKey) q.set('beforeKey', cursor.beforeKey);
  }
  const s = q.toString();
  return '/receipts' + (s ? '?' + s : '');
}

function go(path) {
  if (location.hash === '#' + path) reload(); else navigate(path);
}

function filterForm(filters, devices) {
  const field = (name, label, control) => h('label', { for: 'rf-' + name }, label, control);
  const text = (name, hint) => h('input', { id: 'rf-' + name, name, type: 'text', value: filters[name] || '', placeholder: hint, autocomplete: 'off', spellcheck: 'false' });
  const status = h('select', { id: 'rf-status', name: 'status' },
    ['', 'pending', 'committed', 'failed'].map((s) => h('option', { value: s, selected: (filters.status || '') === s }, s || 'any')));
  const device = h('input', { id: 'rf-deviceId', name: 'deviceId', type: 'text', list: 'rf-devices', value: filters.deviceId || '', placeholder: 'any device', autocomplete: 'off', spellcheck: 'false' });
  const limit = h('input', { id: 'rf-limit', name: 'limit', type: 'number', min: '1', max: '200', value: filters.limit || '', placeholder: '50' });
  const form = h('form', { class: 'filters toolbar', role: 'search', 'aria-label': 'Filter receipts' },
    field('deviceId', 'Device', device),
    h('datalist', { id: 'rf-devices' }, devices.map((d) => h('option', { value: d.deviceId }, d.name))),
    field('agentRunId', 'Run (agentRunId)', text('agentRunId', 'arun_…')),
    field('status', 'Status', status),
    field('actorUserId', 'Person (actorUserId)', text('actorUserId', 'user id')),
    field('actorApiKeyId', 'API key (actorApiKeyId)', text('actorApiKeyId', 'key id')),
    field('limit', 'Per page', limit),
    h('button', { type: 'submit', class: 'primary' }, 'Apply filters'),
    h('a', { href: '#/receipts', class: 'button' }, 'Clear'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const data = new FormData(form);
    const next = {};
    for (const n of filterNames) {
      const v = String(data.get(n) || '').trim();
      if (v) next[n] = v;
    }
    // A new filter starts again from the newest receipt.
    go(receiptsPath(next));
  });
  return form;
}

function reviewedText(rc) {
  if (!rc.reviewed) return h('span', { class: 'muted' }, 'not reviewed');
  return h('span', { class: 'reviewed' }, 'reviewed by ' + actorText(rc.reviewed.by).replace(/^person /, '') + ', ' + fmtTime(rc.reviewed.at),
    rc.reviewed.note ? h('span', { class: 'muted' }, ' — ' + rc.reviewed.note) : null);
}

// reviewControls is the review cell's form: "Mark reviewed" opens a note
// field (optional) and a save button; saving posts
// POST /v1/receipts/{key}/reviewed and shows the receipt's new review.
// uid gives element ids that are unique in the page whatever the
// idempotency keys hold.
let uidSeq = 0;
function uid(prefix) { return prefix + '-' + (++uidSeq); }

function reviewControls(rc, update) {
  const noteId = uid('note');
  const note = h('input', { id: noteId, type: 'text', maxlength: '2000', name: 'note', autocomplete: 'off' });
  const save = h('button', { type: 'submit', class: 'primary' }, 'Save review');
  const form = h('form', { class: 'review-form', hidden: true, 'aria-label': 'Review of ' + rc.idempotencyKey },
    h('label', { for: noteId }, 'Review note (optional)', note),
    h('span', { class: 'buttons' }, save,
      h('button', { type: 'button', on: { click: () => { form.hidden = true; open.hidden = false; open.focus(); } } }, 'Cancel')));
  const open = h('button', { type: 'button', class: 'review-open', 'aria-label': 'Mark ' + rc.idempotencyKey + ' reviewed',
    on: { click: () => { form.hidden = false; open.hidden = true; note.focus(); } } }, rc.reviewed ? 'Review again' : 'Mark reviewed');
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    save.disabled = true;
    try {
      const body = note.value.trim() ? { note: note.value.trim() } : undefined;
      const updated = await api.post('/v1/receipts/' + encodeURIComponent(rc.idempotencyKey) + '/reviewed', body);
      toast('Receipt ' + rc.idempotencyKey + ' marked reviewed.', 'ok');
      update(updated);
    } catch (err) {
      save.disabled = false;
      toast((err.code || 'error') + ': ' + err.message, 'error');
    }
  });
  return h('div', { class: 'review' }, open, form);
}

function receiptRow(rc, devicesById) {
  const row = h('tr', { 'data-key': rc.idempotencyKey, 'data-state': rc.state });
  // The frames open in a row of their own under the receipt, the whole
  // table wide, so before and after sit side by side.
  const framesRowId = uid('frames');
  let framesRow = null;
  const fill = (r) => {
    const d = devicesById.get(r.deviceId);
    const frames = h('button', { type: 'button', class: 'frames-toggle', 'aria-expanded': framesRow ? 'true' : 'false',
      'aria-controls': framesRowId, 'aria-label': 'Frames of ' + r.idempotencyKey }, 'Frames');
    frames.addEventListener('click', () => {
      if (framesRow) {
        framesRow.remove();
        framesRow = null;
      } else {
        framesRow = h('tr', { class: 'frames-row', id: framesRowId, 'data-key': r.idempotencyKey },
          h('td', { colspan: '8' }, framesPair(r, 200)));
        row.after(framesRow);
      }
      frames.setAttribute('aria-expanded', framesRow ? 'true' : 'false');
    });
    row.replaceChildren(
      cell('Time', h('time', { datetime: r.timestamp }, fmtTime(r.timestamp)),
        r.durationMs !== undefined ? h('div', { class: 'muted small' }, Math.round(r.durationMs) + ' ms') : null),
      cell('Device', h('a', { href: '#/devices/' + encodeURIComponent(r.deviceId) }, d ? d.name : r.deviceId)),
      cell('Action', h('code', { class: 'action' }, actionText(r.action, r.arguments)),
        h('div', { class: 'muted small mono' }, r.idempotencyKey)),
      cell('Actor', r.actor && r.actor.userId
        ? h('a', { href: '#' + receiptsPath({ actorUserId: r.actor.userId }), title: 'Receipts by this person' }, actorText(r.actor))
        : r.actor && r.actor.apiKeyId
          ? h('a', { href: '#' + receiptsPath({ actorApiKeyId: r.actor.apiKeyId }), title: 'Receipts by this key' }, actorText(r.actor))
          : '—'),
      cell('Run', r.agentRunId ? h('a', { href: '#/runs/' + encodeURIComponent(r.agentRunId), class: 'mono', title: r.agentRunId, 'aria-label': 'run ' + r.agentRunId }, shortId(r.agentRunId)) : h('span', { class: 'muted' }, '—')),
      cell('State', receiptState(r)),
      cell('Review', h('div', { class: 'review-state' }, reviewedText(r)), reviewControls(r, (u) => { row.dataset.state = u.state; fill(u); })),
      cell('Frames', frames));
  };
  fill(rc);
  return row;
}

// exportBox downloads GET /v1/receipts/export (the whole chain, oldest
// first, NDJSON) through a blob link, and says how many entries it held
// and whether the end line came (its absence means the export was cut
// short).
function exportBox() {
  const out = h('p', { class: 'export-result', role: 'status' });
  const btn = h('button', { type: 'button' }, 'Export the receipt chain (NDJSON)');
  btn.addEventListener('click', async () => {
    btn.disabled = true;
    out.replaceChildren('Exporting…');
    try {
      const r = await api.raw('/v1/receipts/export');
      if (!r.ok) {
        const body = await r.json().catch(() => ({}));
        const e = body.error || {};
        throw Object.assign(new Error(e.message || 'HTTP ' + r.status), { code: e.code || 'http_' + r.status });
      }
      const text = await r.text();
      const lines = text.split('\n').filter((l) => l !== '');
      let end = null;
      try { end = JSON.parse(lines[lines.length - 1]).end || null; } catch (e) { end = null; }
      const blob = new Blob([text], { type: 'application/x-ndjson' });
      const name = 'receipts-' + new Date().toISOString().replace(/[:.]/g, '-') + '.ndjson';
      const link = h('a', { href: URL.createObjectURL(blob), download: name, class: 'export-link' }, 'Download ' + name);
      out.replaceChildren(link, ' ',
        end ? h('span', { class: 'muted' }, end.entries + ' entries, head hash ' + String(end.headHash).slice(0, 16) + '…')
          : h('span', { class: 'error-text' }, 'the export was cut short (no end line); export again'));
      link.click();
    } catch (err) {
      out.replaceChildren(errorBox(err));
    } finally {
      btn.disabled = false;
    }
  });
  return h('div', { class: 'export toolbar' }, btn, out);
}

route('/receipts', async (main, _params, query) => {
  const filters = {};
  for (const n of filterNames) if (query.get(n)) filters[n] = query.get(n);
  const cursor = { before: query.get('before') || '', beforeKey: query.get('beforeKey') || '' };
  const devices = await listDevices();
  const devicesById = new Map(devices.map((d) => [d.deviceId, d]));

  main.append(h('h1', {}, 'Receipts'),
    h('p', { class: 'muted' }, 'Every action taken on a device, newest first, with who took it.'),
    filterForm(filters, devices), exportBox());

  const results = h('section', { 'aria-labelledby': 'receipts-results' });
  main.append(results);
  let page;
  try {
    page = await api.get('/v1/receipts', Object.assign({}, filters, cursor));
  } catch (err) {
    results.append(h('h2', { id: 'receipts-results' }, 'Results'), errorBox(err));
    return;
  }
  const n = page.receipts.length;
  results.append(h('h2', { id: 'receipts-results' }, cursor.before ? 'Older receipts' : 'Latest receipts'),
    h('p', { class: 'muted', role: 'status' }, n + (n === 1 ? ' receipt' : ' receipts') + ' on this page' +
      (cursor.before ? ', older than ' + fmtTime(cursor.before) : '') + '.'));
  if (n > 0) {
    results.append(h('div', { class: 'table-wrap' }, h('table', { class: 'receipts cards' },
      h('caption', { class: 'visually-hidden' }, 'Receipts'),
      h('thead', {}, h('tr', {}, ['Time', 'Device', 'Action', 'Actor', 'Run', 'State', 'Review', 'Frames'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, page.receipts.map((rc) => receiptRow(rc, devicesById))))));
  }
  const nav = h('nav', { class: 'pager toolbar', 'aria-label': 'Receipt pages' });
  if (cursor.before) nav.append(h('a', { href: '#' + receiptsPath(filters), class: 'button' }, 'Newest page'));
  if (page.nextBefore) {
    nav.append(h('a', { href: '#' + receiptsPath(filters, { before: page.nextBefore, beforeKey: page.nextBeforeKey }), class: 'button next-page', rel: 'next' }, 'Next page'));
  } else {
    nav.append(h('span', { class: 'muted' }, n > 0 ? 'This is the last page.' : 'No receipts match.'));
  }
  results.append(nav);
});
