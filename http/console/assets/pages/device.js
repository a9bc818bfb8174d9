// A device: its live screen to drive (click to tap, drag to swipe, a text
// box to type, key buttons, an element overlay whose boxes tap their
// element), its lease (take, renew, release) and its receipts as a
// timeline, newest first, with the frames before and after each action
// side by side. Everything goes through the /v1 routes any client uses:
// GET /v1/devices/{id}, POST|PATCH|DELETE /v1/devices/{id}/lease,
// GET /v1/leases, POST /v1/devices/{id}/actions, GET /v1/devices/{id}/snapshot,
// GET /v1/receipts?deviceId=… and GET /v1/frames/{id}.
import { api, h, route, liveScreen, toast, errorBox, fmtTime } from '/console/app.js';
import { framesPair, actionText, actorText, receiptState } from '/console/pages/receipts.js';
import { copilotPanel } from '/console/pages/copilot.js';

// How wide the live screen is streamed, and the frames in the timeline.
const screenWidth = 540;
const frameWidth = 200;
// Receipts per timeline page, and how often the page looks for changes
// made elsewhere (another person, a run, the lease running out).
const timelinePage = 20;
const refreshEvery = 5000;
// A pointer that moves less than this (in CSS pixels) between press and
// release is a tap; more is a swipe.
const tapSlop = 8;

// The keys the page offers, with their names on the buttons.
const keys = [
  ['BACK', 'Back'], ['HOME', 'Home'], ['APP_SWITCH', 'Recent apps'], ['ENTER', 'Enter'], ['DEL', 'Delete'],
  ['VOLUME_UP', 'Volume up'], ['VOLUME_DOWN', 'Volume down'], ['POWER', 'Power'],
];

// ---- The lease this tab holds on each device. The lease id is not a
// credential (acting also needs the bearer token), so it is kept in
// sessionStorage as well, for a reload of the same tab; it is checked
// against GET /v1/leases before it is used again.

const held = new Map();

function storageKey(deviceId) { return 'phonefleet.lease.' + deviceId; }

function rememberLease(deviceId, lease) {
  held.set(deviceId, lease);
  try { sessionStorage.setItem(storageKey(deviceId), JSON.stringify(lease)); } catch (e) { /* private mode: memory only */ }
}

function forgetLease(deviceId) {
  held.delete(deviceId);
  try { sessionStorage.removeItem(storageKey(deviceId)); } catch (e) { /* nothing stored */ }
}

function recalledLease(deviceId) {
  if (held.has(deviceId)) return held.get(deviceId);
  try {
    const l = JSON.parse(sessionStorage.getItem(storageKey(deviceId)) || 'null');
    return l && l.leaseId ? l : null;
  } catch (e) {
    return null;
  }
}

// currentLease returns the lease this tab took on the device if it is
// still the device's lease in force (it may have been released elsewhere
// or run out), else null.
async function currentLease(deviceId) {
  const mine = recalledLease(deviceId);
  if (!mine) return null;
  const page = await api.get('/v1/leases', { deviceId, limit: 200 });
  const now = page.leases.find((l) => l.leaseId === mine.leaseId);
  if (!now) {
    forgetLease(deviceId);
    return null;
  }
  rememberLease(deviceId, now);
  return now;
}

// ---- Small helpers.

// newKey is a fresh idempotency key: one per action, reused only to retry
// the same action after a network failure.
function newKey() {
  if (crypto.randomUUID) return 'console-' + crypto.randomUUID();
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return 'console-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

function holderText(holder) {
  if (!holder) return 'nobody';
  if (holder.runId) return 'run ' + holder.runId;
  if (holder.apiKeyId) return 'API key ' + holder.apiKeyId;
  return holder.userId || 'someone';
}

// inWords says how far away a time is: "in 4 min", "in 30 s", "now".
function inWords(iso) {
  const s = Math.round((new Date(iso).getTime() - Date.now()) / 1000);
  if (s <= 0) return 'now';
  if (s < 90) return 'in ' + s + ' s';
  return 'in ' + Math.round(s / 60) + ' min';
}

function errText(e) { return (e.code || 'error') + ': ' + (e.message || String(e)); }

// notFound reports whether an API error is the answer for a device the
// caller cannot see (unknown, or another organisation's: the same answer).
function notFound(e) {
  const reason = e && e.body && e.body.error && e.body.error.reason;
  return e && (e.status === 404 || (e.code === 'device_unavailable' && reason === 'not_found'));
}

// microseconds orders receipt timestamps, which carry microseconds that
// Date drops.
function microseconds(iso) {
  const m = /\.(\d+)/.exec(iso || '');
  const frac = m ? (m[1] + '000000').slice(0, 6) : '000000';
  return Math.floor(new Date(iso).getTime() / 1000) * 1e6 + parseInt(frac, 10);
}

// newer reports whether receipt a comes before receipt b in the feed's
// order (timestamp, then key, newest first).
function newer(a, b) {
  const ta = microseconds(a.timestamp);
  const tb = microseconds(b.timestamp);
  if (ta !== tb) return ta > tb;
  return a.idempotencyKey > b.idempotencyKey;
}

// whileShown runs fn every ms milliseconds while el is in the document,
// and stops for good once it has left it.
function whileShown(el, ms, fn) {
  let seen = false;
  const timer = setInterval(() => {
    if (el.isConnected) {
      seen = true;
      fn();
    } else if (seen) {
      clearInterval(timer);
    }
  }, ms);
}

// ---- The page.

route('/devices/:id', async (main, params) => {
  const deviceId = params.id;
  let device;
  try {
    device = await api.get('/v1/devices/' + encodeURIComponent(deviceId));
  } catch (e) {
    if (!notFound(e)) throw e;
    main.append(h('h1', {}, 'Device not found'), errorBox(e),
      h('p', {}, h('a', { href: '#/fleet' }, 'Back to the fleet')));
    return;
  }
  let lease = await currentLease(deviceId);
  let size = { width: device.width, height: device.height };
  if (!size.width || !size.height) {
    const s = await api.get('/v1/devices/' + encodeURIComponent(deviceId) + '/snapshot', { elements: 'none' });
    size = { width: s.width, height: s.height };
  }

  main.classList.add('device-page');
  main.dataset.deviceId = deviceId;
  // The screen's shape, for the live screen and the frames (style.css).
  main.style.setProperty('--screen-ratio', String(size.width / size.height));

  // ---- The screen: the live stream, the overlay, click and drag.
  const img = liveScreen(deviceId, { maxWidth: screenWidth, label: device.name });
  img.draggable = false;
  const overlay = h('div', { class: 'element-overlay', hidden: true, role: 'group', 'aria-label': 'Elements on the screen' });
  const wrap = h('div', { class: 'screen-wrap', 'data-device-id': deviceId }, img, overlay);
  wrap.style.aspectRatio = size.width + ' / ' + size.height;
  const screenHint = h('p', { class: 'muted small screen-hint', id: 'screen-hint' });

  // toDevice converts a point in the page to the device's pixels.
  const toDevice = (clientX, clientY) => {
    const r = img.getBoundingClientRect();
    const fx = Math.min(Math.max((clientX - r.left) / r.width, 0), 1);
    const fy = Math.min(Math.max((clientY - r.top) / r.height, 0), 1);
    return {
      x: Math.min(size.width - 1, Math.round(fx * size.width)),
      y: Math.min(size.height - 1, Math.round(fy * size.height)),
    };
  };
  const mark = (clientX, clientY) => {
    const r = wrap.getBoundingClientRect();
    const dot = h('span', { class: 'tap-mark', 'aria-hidden': 'true' });
    dot.style.left = (100 * (clientX - r.left) / r.width) + '%';
    dot.style.top = (100 * (clientY - r.top) / r.height) + '%';
    wrap.append(dot);
    setTimeout(() => dot.remove(), 600);
  };
  let press = null;
  wrap.addEventListener('pointerdown', (e) => {
    if (e.button !== 0) return;
    e.preventDefault();
    press = { x: e.clientX, y: e.clientY, at: performance.now(), id: e.pointerId };
    try { wrap.setPointerCapture(e.pointerId); } catch (err) { /* the pointer is gone already */ }
  });
  wrap.addEventListener('pointercancel', () => { press = null; });
  wrap.addEventListener('pointerup', (e) => {
    if (!press || e.pointerId !== press.id) return;
    const p = press;
    press = null;
    const from = toDevice(p.x, p.y);
    mark(e.clientX, e.clientY);
    if (Math.hypot(e.clientX - p.x, e.clientY - p.y) < tapSlop) {
      act('tap', from);
      return;
    }
    const to = toDevice(e.clientX, e.clientY);
    const durationMs = Math.min(Math.max(Math.round(performance.now() - p.at), 100), 3000);
    act('swipe', { x1: from.x, y1: from.y, x2: to.x, y2: to.y, durationMs });
  });

  // ---- The element overlay: a button over each element of a fresh UI
  // snapshot; pressing one taps that element by its ref.
  const overlayToggle = h('button', { type: 'button', class: 'overlay-toggle', 'aria-pressed': 'false' }, 'Show elements');
  let overlayLoads = 0;
  const drawOverlay = async () => {
    const mine = ++overlayLoads;
    let snap;
    try {
      snap = await api.get('/v1/devices/' + encodeURIComponent(deviceId) + '/snapshot', { elements: 'interactive' });
    } catch (e) {
      if (mine === overlayLoads) toast('Could not read the screen\'s elements: ' + errText(e), 'error');
      return;
    }
    if (mine !== overlayLoads || overlay.hidden) return;
    const w = snap.width || size.width;
    const hgt = snap.height || size.height;
    overlay.dataset.frameId = snap.frameId;
    overlay.replaceChildren(...(snap.elements || []).map((el) => {
      const [l, t, r, b] = el.bounds;
      const name = el.text || el.desc || (el.id ? el.id.replace(/^.*:id\//, '') : '') || el.class || el.ref;
      const box = h('button', { type: 'button', class: 'element-box', 'data-ref': el.ref, 'data-element-id': el.id || '',
        title: name, 'aria-label': 'Tap ' + name + (el.class ? ' (' + el.class + ')' : '') });
      box.style.left = (100 * l / w) + '%';
      box.style.top = (100 * t / hgt) + '%';
      box.style.width = (100 * Math.max(r - l, 1) / w) + '%';
      box.style.height = (100 * Math.max(b - t, 1) / hgt) + '%';
      box.addEventListener('pointerdown', (e) => e.stopPropagation());
      box.addEventListener('click', () => act('tap', { ref: el.ref }, name));
      return box;
    }));
    overlay.dataset.loaded = String(overlayLoads);
  };
  overlayToggle.addEventListener('click', () => {
    const on = overlay.hidden;
    overlay.hidden = !on;
    overlayToggle.setAttribute('aria-pressed', String(on));
    overlayToggle.textContent = on ? 'Hide elements' : 'Show elements';
    if (on) drawOverlay(); else overlay.replaceChildren();
  });

  // ---- Acting: every control ends here.
  const controls = [];
  const typeInput = h('input', { id: 'type-text', type: 'text', name: 'text', maxlength: '1000', autocomplete: 'off', spellcheck: 'false' });
  const typeForm = h('form', { class: 'type-form', 'aria-label': 'Type text on the phone' },
    h('label', { for: 'type-text' }, 'Text to type', typeInput),
    h('button', { type: 'submit', class: 'type-send' }, 'Send'));
  typeForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const text = typeInput.value;
    if (!text) { typeInput.focus(); return; }
    if (await act('type_text', { text })) typeInput.value = '';
  });
  controls.push(typeInput, typeForm.querySelector('button'));
  const keyButtons = keys.map(([key, label]) =>
    h('button', { type: 'button', class: 'key', 'data-key': key, on: { click: () => act('key', { key }, label) } }, label));
  controls.push(...keyButtons);

  async function post(body) {
    const path = '/v1/devices/' + encodeURIComponent(deviceId) + '/actions';
    try {
      return await api.post(path, body);
    } catch (e) {
      // A network failure leaves the outcome unknown: ask again with the
      // same key, which answers the recorded outcome instead of acting twice.
      if (e instanceof TypeError) return api.post(path, body);
      throw e;
    }
  }

  // act performs one action under this tab's lease and says how it went;
  // it answers whether the action committed.
  async function act(action, args, label) {
    const what = label ? action + ' ' + label : actionText(action, args);
    if (!lease) {
      toast('Take the lease to act on this phone.', 'error');
      return false;
    }
    wrap.classList.add('acting');
    let ok = false;
    try {
      const rc = await post({ action, arguments: args, idempotencyKey: newKey(), leaseId: lease.leaseId });
      ok = rc.state === 'committed';
      const said = rc.result && rc.result.description ? ' — ' + rc.result.description : '';
      toast(what + ': ' + rc.state + said, ok ? 'ok' : 'error');
    } catch (e) {
      toast(what + ' failed: ' + errText(e), 'error');
      if (e.code === 'lease_mismatch' || e.code === 'lease_required') {
        forgetLease(deviceId);
        lease = null;
        refreshDevice();
      }
    } finally {
      wrap.classList.remove('acting');
    }
    refreshTimeline();
    if (!overlay.hidden) drawOverlay();
    return ok;
  }

  // ---- The lease panel.
  const leasePanel = h('div', { class: 'lease-panel', role: 'status', 'aria-live': 'polite' });
  const ttl = h('select', { id: 'lease-ttl', name: 'ttl' },
    [[300, '5 minutes'], [900, '15 minutes'], [3600, '1 hour']].map(([v, t]) => h('option', { value: String(v) }, t)));
  const reset = h('input', { id: 'lease-reset', type: 'checkbox', name: 'resetOnRelease' });
  const takeBtn = h('button', { type: 'button', class: 'primary lease-take' }, 'Take lease');
  const renewBtn = h('button', { type: 'button', class: 'lease-renew' }, 'Renew');
  const releaseBtn = h('button', { type: 'button', class: 'danger lease-release' }, 'Release');
  const leaseOptions = h('div', { class: 'lease-options toolbar' },
    h('label', { for: 'lease-ttl' }, 'Lease length', ttl),
    h('label', { for: 'lease-reset', class: 'checkbox' }, reset, 'Reset the phone when released'));

  // busy runs a button's work with the button disabled, then shows the
  // lease's state again (which decides what is enabled).
  const busy = async (btn, fn) => {
    btn.disabled = true;
    try {
      await fn();
    } finally {
      btn.disabled = false;
      renderLease();
    }
  };
  takeBtn.addEventListener('click', () => busy(takeBtn, async () => {
    try {
      lease = await api.post('/v1/devices/' + encodeURIComponent(deviceId) + '/lease',
        { ttlSeconds: parseInt(ttl.value, 10), resetOnRelease: reset.checked });
      rememberLease(deviceId, lease);
      toast('You hold the lease until ' + fmtTime(lease.expiresAt) + '.', 'ok');
    } catch (e) {
      toast('Could not take the lease: ' + errText(e), 'error');
    }
    await refreshDevice();
    // The pressed button is hidden now: keep the keyboard's place.
    if (lease) renewBtn.focus();
  }));
  renewBtn.addEventListener('click', () => busy(renewBtn, async () => {
    if (!lease) return;
    try {
      lease = await api.patch('/v1/devices/' + encodeURIComponent(deviceId) + '/lease',
        { leaseId: lease.leaseId, ttlSeconds: parseInt(ttl.value, 10) });
      rememberLease(deviceId, lease);
      toast('Lease renewed until ' + fmtTime(lease.expiresAt) + '.', 'ok');
    } catch (e) {
      toast('Could not renew the lease: ' + errText(e), 'error');
      if (e.code === 'lease_mismatch') { forgetLease(deviceId); lease = null; }
    }
    await refreshDevice();
  }));
  releaseBtn.addEventListener('click', () => busy(releaseBtn, async () => {
    if (!lease) return;
    try {
      await api.del('/v1/devices/' + encodeURIComponent(deviceId) + '/lease', { leaseId: lease.leaseId });
      toast('Lease released.', 'ok');
      forgetLease(deviceId);
      lease = null;
    } catch (e) {
      toast('Could not release the lease: ' + errText(e), 'error');
      if (e.code === 'lease_mismatch') { forgetLease(deviceId); lease = null; }
    }
    await refreshDevice();
    if (!lease) takeBtn.focus();
  }));

  const statusLine = h('p', { class: 'device-status' });

  function renderLease() {
    const mine = !!lease;
    const d = device;
    statusLine.replaceChildren(
      h('span', { class: 'status status-' + d.status }, d.status), ' · ',
      h('span', { class: 'muted' }, (d.model || 'unknown model') + ', ' + d.backend + ', ' + size.width + '×' + size.height));
    const rows = [['Holder', mine ? 'you' : (d.leased && d.lease ? holderText(d.lease.holder) : 'free — nobody holds the lease')]];
    const expires = mine ? lease.expiresAt : (d.leased && d.lease ? d.lease.expiresAt : null);
    if (expires) rows.push(['Expires', h('span', {}, h('time', { datetime: expires }, fmtTime(expires)), ' (' + inWords(expires) + ')')]);
    if (mine) rows.push(['Lease', h('code', {}, lease.leaseId)]);
    leasePanel.dataset.lease = mine ? 'mine' : (d.leased ? 'other' : 'free');
    leasePanel.replaceChildren(h('dl', { class: 'facts' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])));
    takeBtn.hidden = mine;
    takeBtn.disabled = d.leased && !mine;
    renewBtn.hidden = !mine;
    releaseBtn.hidden = !mine;
    reset.disabled = mine;
    for (const c of controls) c.disabled = !mine;
    wrap.classList.toggle('driving', mine);
    screenHint.textContent = mine
      ? 'Click the screen to tap, drag on it to swipe; with "Show elements", each box taps its element.'
      : (d.leased ? 'Someone else holds this phone: you can watch it.' : 'Take the lease to drive this phone.');
  }

  async function refreshDevice() {
    try {
      device = await api.get('/v1/devices/' + encodeURIComponent(deviceId));
      if (lease && (!device.leased || new Date(lease.expiresAt).getTime() <= Date.now())) lease = await currentLease(deviceId);
    } catch (e) {
      if (notFound(e)) { main.replaceChildren(h('h1', {}, 'Device not found'), errorBox(e)); return; }
    }
    renderLease();
  }

  // ---- The receipts timeline.
  const timeline = h('ol', { class: 'receipt-timeline', 'aria-label': 'Receipts of this phone, newest first' });
  const shown = new Map(); // idempotencyKey → { rc, el, sig }
  const cursor = { before: '', beforeKey: '', loaded: false };
  const moreBtn = h('button', { type: 'button', class: 'timeline-more', hidden: true }, 'More');
  const timelineNote = h('p', { class: 'muted timeline-note', role: 'status' });

  const signature = (rc) => [rc.state, rc.outcomeUnknown, rc.frames && rc.frames.after, rc.reviewed && rc.reviewed.at].join('|');

  function receiptItem(rc) {
    const by = rc.agentRunId
      ? h('span', {}, actorText(rc.actor), ' in run ', h('a', { href: '#/runs/' + encodeURIComponent(rc.agentRunId), class: 'mono' }, rc.agentRunId))
      : actorText(rc.actor);
    const result = rc.result ? h('p', { class: 'receipt-result' }, rc.result.description) : null;
    return h('li', { class: 'receipt', 'data-key': rc.idempotencyKey, 'data-state': rc.state, 'data-action': rc.action },
      h('div', { class: 'receipt-text' },
        h('div', { class: 'receipt-head' },
          h('code', { class: 'action' }, actionText(rc.action, rc.arguments)),
          h('span', { class: 'receipt-state' }, receiptState(rc))),
        h('p', { class: 'muted small' }, h('time', { datetime: rc.timestamp }, fmtTime(rc.timestamp)), ' · by ', by,
          rc.durationMs !== undefined ? ' · ' + (Math.round(rc.durationMs * 10) / 10) + ' ms' : ''),
        result),
      framesPair(rc, frameWidth));
  }

  // place shows rc in the timeline, in the feed's order, replacing the
  // item it had when its state changed.
  function place(rc) {
    const had = shown.get(rc.idempotencyKey);
    const sig = signature(rc);
    if (had && had.sig === sig) return;
    const el = receiptItem(rc);
    if (had) {
      had.el.replaceWith(el);
    } else {
      let next = null;
      for (const item of timeline.children) {
        const other = shown.get(item.dataset.key);
        if (other && newer(rc, other.rc)) { next = item; break; }
      }
      timeline.insertBefore(el, next);
    }
    shown.set(rc.idempotencyKey, { rc, el, sig });
  }

  function setCursor(page) {
    cursor.before = page.nextBefore || '';
    cursor.beforeKey = page.nextBeforeKey || '';
    moreBtn.hidden = !cursor.before;
  }

  function noteCount() {
    timelineNote.textContent = shown.size === 0
      ? 'No actions on this phone yet.'
      : shown.size + (shown.size === 1 ? ' receipt' : ' receipts') + ' shown' + (cursor.before ? '; older ones under More.' : '.');
  }

  let refreshing = null;
  // refreshTimeline reads the newest page and merges it in. When none of
  // it was shown before (more than a page happened meanwhile), the
  // timeline starts again from it, so no gap is hidden.
  function refreshTimeline() {
    if (refreshing) return refreshing.then(() => refreshTimeline());
    refreshing = (async () => {
      try {
        const page = await api.get('/v1/receipts', { deviceId, limit: timelinePage });
        const overlap = page.receipts.some((rc) => shown.has(rc.idempotencyKey));
        if (!cursor.loaded || (!overlap && page.nextBefore)) {
          shown.clear();
          timeline.replaceChildren();
          setCursor(page);
          cursor.loaded = true;
        }
        page.receipts.forEach(place);
        noteCount();
      } catch (e) {
        timelineNote.textContent = 'Could not read the receipts: ' + errText(e);
      } finally {
        refreshing = null;
      }
    })();
    return refreshing;
  }

  moreBtn.addEventListener('click', () => busy(moreBtn, async () => {
    try {
      const page = await api.get('/v1/receipts', { deviceId, limit: timelinePage, before: cursor.before, beforeKey: cursor.beforeKey });
      page.receipts.forEach(place);
      setCursor(page);
      noteCount();
    } catch (e) {
      toast('Could not read older receipts: ' + errText(e), 'error');
    }
  }));

  // ---- Layout.
  main.append(
    h('h1', {}, device.name),
    h('p', { class: 'muted device-id' }, h('code', {}, deviceId)),
    h('div', { class: 'device-layout' },
      h('section', { class: 'device-screen', 'aria-labelledby': 'screen-heading' },
        h('h2', { id: 'screen-heading' }, 'Live screen'),
        wrap, screenHint),
      h('div', { class: 'device-side' },
        h('section', { class: 'device-lease', 'aria-labelledby': 'lease-heading' },
          h('h2', { id: 'lease-heading' }, 'Status and lease'),
          statusLine, leasePanel, leaseOptions,
          h('div', { class: 'toolbar' }, takeBtn, renewBtn, releaseBtn)),
        h('section', { class: 'device-controls', 'aria-labelledby': 'controls-heading' },
          h('h2', { id: 'controls-heading' }, 'Drive'),
          typeForm,
          h('div', { class: 'keys toolbar', role: 'group', 'aria-label': 'Keys' }, keyButtons),
          h('div', { class: 'toolbar' }, overlayToggle)),
        copilotPanel(deviceId, () => { refreshDevice(); refreshTimeline(); }),
        h('section', { class: 'device-timeline', 'aria-labelledby': 'timeline-heading' },
          h('div', { class: 'timeline-top' },
            h('h2', { id: 'timeline-heading' }, 'Receipts'),
            h('button', { type: 'button', class: 'timeline-refresh', on: { click: () => refreshTimeline() } }, 'Refresh')),
          timelineNote, timeline, moreBtn))));
  screenHint.setAttribute('aria-live', 'polite');
  renderLease();
  refreshTimeline();
  whileShown(main, refreshEvery, () => { refreshDevice(); refreshTimeline(); });
});
