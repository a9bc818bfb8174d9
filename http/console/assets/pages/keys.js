// API keys: the keys the signed-in person may manage (an admin every key
// of the organisation, a member the keys they minted). Mint one (name,
// scopes, devices, lifetime), rotate it, narrow it, renew it, revoke it.
// A token is shown once, in a dialog, when the key is minted or rotated:
// the API never answers it again, and the page keeps it nowhere else.
import { api, h, route, toast, fmtTime, reload } from '/console/app.js';
import { secretDialog, confirmDialog, formDialog, apiProblem, stacked } from '/console/pages/admin-common.js';

// The eight scopes (spec 5.4), with what each allows.
const SCOPES = [
  ['devices:read', 'list devices, watch screens, read outcomes; every webhook route'],
  ['devices:act', 'gestures and input on a leased device'],
  ['devices:lease', 'take and return exclusive use of a device'],
  ['runs:start', 'hand a device to an autonomous run, watch or end it'],
  ['orders:place', 'start a prepaid checkout (admins only)'],
  ['apps:read', 'read the app library'],
  ['apps:write', 'save and publish builds to the app library'],
  ['apps:delete', 'delete versions from the app library (admins only)'],
];

const DEFAULT_DAYS = 90;
const MAX_DAYS = 365;

function path(id, tail) {
  return '/v1/api-keys/' + encodeURIComponent(id) + (tail || '');
}

async function allDevices() {
  const out = [];
  let after = '';
  do {
    const page = await api.get('/v1/devices', { limit: 200, after });
    out.push(...page.devices);
    after = page.nextAfter || '';
  } while (after);
  return out;
}

let seq = 0;

// scopeBoxes renders a fieldset of scope checkboxes: those of `offered`,
// with `checked` ticked, and a hint under the legend.
function scopeBoxes(legend, hint, offered, checked) {
  const id = 'scopes' + (++seq);
  return h('fieldset', { class: 'scopes', 'aria-describedby': id + '-hint' },
    h('legend', {}, legend),
    h('p', { class: 'muted small', id: id + '-hint' }, hint),
    SCOPES.filter(([s]) => offered.includes(s)).map(([s, what]) => h('label', { class: 'check' },
      h('input', { type: 'checkbox', name: 'scopes', value: s, checked: checked.includes(s) }),
      h('span', {}, h('code', {}, s), h('span', { class: 'muted' }, ' — ' + what)))));
}

// deviceChoice renders "every device" or "only these", over `devices`
// ({deviceId, name}); `only` is the ids ticked when the key is narrowed,
// null for every device. It returns the fieldset and a reader of the
// choice (null: every device).
function deviceChoice(devices, only, allowAll) {
  const id = 'devices' + (++seq);
  const all = h('input', { type: 'radio', name: id, value: 'all', checked: only === null });
  const some = h('input', { type: 'radio', name: id, value: 'some', checked: only !== null });
  const boxes = devices.map((d) => h('label', { class: 'check' },
    h('input', { type: 'checkbox', name: id + '-device', value: d.deviceId, checked: only !== null && only.includes(d.deviceId) }),
    h('span', {}, d.name || d.deviceId, ' ', h('code', { class: 'muted small' }, d.deviceId))));
  const list = h('div', { class: 'device-choices' }, boxes.length ? boxes : h('p', { class: 'muted' }, 'No devices to choose from.'));
  const fs = h('fieldset', { class: 'devices' }, h('legend', {}, 'Devices'),
    allowAll ? h('label', { class: 'check' }, all, h('span', {}, 'Every device of the organisation')) : null,
    h('label', { class: 'check' }, some, h('span', {}, 'Only these devices:')),
    list);
  const sync = () => { for (const b of list.querySelectorAll('input')) b.disabled = allowAll && all.checked; };
  all.addEventListener('change', sync);
  some.addEventListener('change', sync);
  sync();
  return {
    element: fs,
    value: () => (allowAll && all.checked ? null : [...list.querySelectorAll('input:checked')].map((b) => b.value)),
  };
}

function showToken(title, intro, token) {
  return secretDialog({ title, intro, label: 'Token', secret: token });
}

function mintForm(devices) {
  const problem = h('div', { class: 'form-problem' });
  const name = h('input', { type: 'text', id: 'key-name', name: 'name', maxlength: 100, autocomplete: 'off', placeholder: 'e.g. CI runner', class: 'wide' });
  const days = h('input', { type: 'number', id: 'key-days', name: 'expiresInDays', min: 1, max: MAX_DAYS, required: true, value: String(DEFAULT_DAYS) });
  const scopes = scopeBoxes('Scopes', 'A key never holds a scope you do not hold yourself.', SCOPES.map(([s]) => s), ['devices:read']);
  const where = deviceChoice(devices, null, true);
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Mint key');
  const form = h('form', { class: 'panel', id: 'key-mint', 'aria-labelledby': 'key-mint-title', on: { submit: async (ev) => {
    ev.preventDefault();
    problem.replaceChildren();
    const chosen = [...scopes.querySelectorAll('input:checked')].map((b) => b.value);
    const deviceIds = where.value();
    if (chosen.length === 0) { problem.replaceChildren(h('div', { class: 'error', role: 'alert' }, 'Choose at least one scope.')); return; }
    if (deviceIds !== null && deviceIds.length === 0) { problem.replaceChildren(h('div', { class: 'error', role: 'alert' }, 'Choose at least one device, or every device.')); return; }
    submit.disabled = true;
    try {
      const body = { name: name.value.trim(), scopes: chosen, expiresInDays: parseInt(days.value, 10) };
      if (deviceIds !== null) body.deviceIds = deviceIds;
      const minted = await api.post('/v1/api-keys', body);
      await showToken('API key minted', 'Use it as the bearer token of ' + (minted.key.name ? '"' + minted.key.name + '"' : 'the new key') +
        ' (Authorization: Bearer …). Only a hash of its secret is stored.', minted.token);
      await reload();
    } catch (e) {
      problem.replaceChildren(apiProblem(e));
      submit.disabled = false;
    }
  } } },
  h('h2', { id: 'key-mint-title' }, 'Mint a key'),
  h('div', { class: 'field' }, h('label', { for: 'key-name' }, 'Name'), name),
  scopes,
  where.element,
  h('div', { class: 'field' }, h('label', { for: 'key-days' }, 'Expires in (days, 1 to ' + MAX_DAYS + ')'), days),
  problem,
  h('div', { class: 'form-actions' }, submit));
  return form;
}

function devicesText(k, names) {
  if (k.deviceIds === null) return 'every device';
  return k.deviceIds.map((id) => names.get(id) || id).join(', ');
}

function keyActions(k, devices) {
  if (k.state !== 'active') return h('span', { class: 'muted' }, '—');
  const label = k.name || k.tokenPrefix;
  const busy = (fn) => async (ev) => {
    const b = ev.currentTarget;
    b.disabled = true;
    try { await fn(); } catch (e) { toast((e.code ? e.code + ': ' : '') + e.message, 'error'); } finally { b.disabled = false; }
  };
  return h('div', { class: 'row-actions' },
    h('button', { type: 'button', 'aria-label': 'Rotate ' + label, on: { click: busy(async () => {
      if (!(await confirmDialog({ title: 'Rotate this key?', confirm: 'Rotate',
        message: label + ' gets a new token. The current token keeps working for a grace window (24 hours by default), so callers can switch.' }))) return;
      const r = await api.post(path(k.id, '/rotate'));
      await showToken('New token', 'The new token of ' + label + '.' + (r.key.previousSecretValidUntil
        ? ' The previous one works until ' + fmtTime(r.key.previousSecretValidUntil) + '.' : ''), r.token);
      await reload();
    }) } }, 'Rotate'),
    h('button', { type: 'button', 'aria-label': 'Narrow ' + label, on: { click: busy(async () => {
      const scopes = scopeBoxes('Scopes it keeps', 'Untick the scopes it should lose.', k.scopes, k.scopes);
      const offered = k.deviceIds === null ? devices : devices.filter((d) => k.deviceIds.includes(d.deviceId));
      // A device of the key that is no longer listed is still offered, by id.
      if (k.deviceIds !== null) for (const id of k.deviceIds) if (!offered.some((d) => d.deviceId === id)) offered.push({ deviceId: id, name: id });
      const where = deviceChoice(offered, k.deviceIds, k.deviceIds === null);
      const done = await formDialog({ title: 'Narrow ' + label, submitLabel: 'Narrow',
        intro: 'A key can only lose scopes and devices; to widen it, mint a new one.',
        fields: [scopes, where.element],
        submit: async () => {
          const body = {};
          const kept = [...scopes.querySelectorAll('input:checked')].map((b) => b.value);
          if (kept.length === 0) throw new Error('Keep at least one scope (or revoke the key).');
          if (kept.length !== k.scopes.length) body.scopes = kept;
          const ids = where.value();
          if (ids !== null) {
            if (ids.length === 0) throw new Error('Keep at least one device (or revoke the key).');
            if (k.deviceIds === null || ids.length !== k.deviceIds.length) body.deviceIds = ids;
          }
          if (Object.keys(body).length === 0) throw new Error('Nothing to narrow: untick a scope or a device.');
          return api.patch(path(k.id), body);
        } });
      if (done) { toast(label + ' narrowed.', 'ok'); await reload(); }
    }) } }, 'Narrow'),
    h('button', { type: 'button', 'aria-label': 'Renew ' + label, on: { click: busy(async () => {
      const id = 'renew' + (++seq);
      const days = h('input', { type: 'number', id, min: 1, max: MAX_DAYS, required: true, value: String(DEFAULT_DAYS) });
      const done = await formDialog({ title: 'Renew ' + label, submitLabel: 'Renew',
        intro: 'It expires ' + fmtTime(k.expiresAt) + '. Renewing sets a new expiry counted from now.',
        fields: [h('div', { class: 'field' }, h('label', { for: id }, 'Expires in (days, 1 to ' + MAX_DAYS + ')'), days)],
        submit: () => api.patch(path(k.id), { expiresInDays: parseInt(days.value, 10) }) });
      if (done) { toast(label + ' renewed until ' + fmtTime(done.expiresAt) + '.', 'ok'); await reload(); }
    }) } }, 'Renew'),
    h('button', { type: 'button', class: 'danger', 'aria-label': 'Revoke ' + label, on: { click: busy(async () => {
      if (!(await confirmDialog({ title: 'Revoke this key?', confirm: 'Revoke', danger: true,
        message: label + ' is refused from its next request on. What it started is not recalled: cancel its runs, release its leases.' }))) return;
      await api.del(path(k.id));
      toast(label + ' revoked.', 'ok');
      await reload();
    }) } }, 'Revoke'));
}

route('/keys', async (main) => {
  const [{ keys }, devices] = await Promise.all([
    api.get('/v1/api-keys'),
    // The device list only helps choose; a key can be minted without it.
    allDevices().catch(() => []),
  ]);
  const names = new Map(devices.map((d) => [d.deviceId, d.name]));
  main.append(h('h1', {}, 'API keys'),
    h('p', { class: 'muted' }, 'Keys for MCP clients, the CLI and headless callers. A key\'s token is shown once, when it is minted or rotated.'),
    h('h2', { id: 'keys-title' }, 'Keys ', h('span', { class: 'muted' }, '(' + keys.length + ')')));
  if (keys.length === 0) main.append(h('p', {}, 'No keys yet.'));
  else main.append(keyTable(keys, devices, names));
  main.append(mintForm(devices));
});

function keyTable(keys, devices, names) {
  return h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'api-keys', 'aria-labelledby': 'keys-title' },
    h('thead', {}, h('tr', {}, ['Name', 'Token starts', 'Scopes', 'Devices', 'State', 'Minted by', 'Created', 'Expires', 'Actions']
      .map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, keys.map((k) => h('tr', { 'data-key-id': k.id, 'data-state': k.state, class: k.state === 'active' ? '' : 'inactive' },
      h('th', { scope: 'row' }, k.name || h('span', { class: 'muted' }, '(no name)')),
      h('td', {}, h('code', {}, k.tokenPrefix + '…')),
      h('td', {}, k.scopes.map((s) => h('code', { class: 'tag' }, s))),
      h('td', {}, devicesText(k, names)),
      h('td', {}, h('span', { class: 'badge ' + ({ active: 'ok', expired: 'off', revoked: 'bad' }[k.state] || '') }, k.state),
        k.revokedAt ? h('div', { class: 'muted small' }, 'revoked ' + fmtTime(k.revokedAt)) : null,
        k.rotatedAt ? h('div', { class: 'muted small' }, 'rotated ' + fmtTime(k.rotatedAt) +
          (k.previousSecretValidUntil && k.state === 'active' ? '; old token until ' + fmtTime(k.previousSecretValidUntil) : '')) : null),
      h('td', {}, k.mintedBy.userId, h('div', { class: 'muted small' }, k.mintedBy.role)),
      h('td', {}, fmtTime(k.createdAt)),
      h('td', {}, fmtTime(k.expiresAt)),
      h('td', {}, keyActions(k, devices))))))));
}
