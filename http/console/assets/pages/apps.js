// Apps: the app store's catalog (what each phone can install, and why
// not), installing a catalog version on chosen phones with each phone's
// progress shown live, and the apps on each phone (the inventory), which
// a refresh reads again from the phones.
import { api, h, route, toast, fmtTime, reload } from '/console/app.js';
import { apiProblem } from '/console/pages/admin-common.js';

// How often a request in progress is read again.
const POLL_MS = 700;

const REASONS = {
  install_unsupported: 'this phone cannot install apps',
  os_too_old: 'Android too old',
  abi_unsupported: 'no code for this phone\'s CPU',
  insufficient_storage: 'not enough storage',
  inventory_not_read: 'not read yet: refresh the inventory',
};

function newKey(prefix) {
  return prefix + '-' + (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2));
}

// poll reads path until the request has finished, calling show with each
// answer; it stops when the page is left.
async function poll(main, path, show) {
  for (;;) {
    const r = await api.get(path);
    show(r);
    if (r.state === 'finished' || !main.isConnected) return r;
    await new Promise((res) => setTimeout(res, POLL_MS));
  }
}

function stateBadge(state) {
  const kind = { installed: 'ok', read: 'ok', failed: 'bad', queued: 'off', installing: 'busy', reading: 'busy' }[state] || 'off';
  return h('span', { class: 'badge ' + kind }, state);
}

function progressTable(req, names) {
  return h('table', { class: 'app-progress', 'aria-label': 'Progress per phone' },
    h('thead', {}, h('tr', {}, ['Phone', 'State', 'Why'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, req.devices.map((d) => h('tr', { 'data-device-id': d.deviceId, 'data-state': d.state },
      h('th', { scope: 'row' }, names[d.deviceId] || d.deviceId),
      h('td', {}, stateBadge(d.state)),
      h('td', {}, d.state === 'failed' ? [h('code', {}, d.reason || d.code), ' ', d.message || ''] :
        d.receiptIdempotencyKey ? h('span', { class: 'muted small' }, 'receipt ', h('code', {}, d.receiptIdempotencyKey)) : '')))));
}

function catalogSection(catalog, names) {
  const rows = [];
  for (const app of catalog.apps) {
    for (const v of app.versions) {
      rows.push(h('tr', { 'data-package': app.package, 'data-version': v.version },
        h('th', { scope: 'row' }, app.title, h('div', { class: 'muted small' }, h('code', {}, app.package))),
        h('td', {}, v.version),
        h('td', {}, 'API ' + v.minSdk + '+', v.abis.length ? h('div', { class: 'muted small' }, v.abis.join(', ')) : null),
        h('td', {}, h('ul', { class: 'plain' }, v.devices.map((d) => h('li', { 'data-device-id': d.deviceId, 'data-installable': String(d.installable) },
          names[d.deviceId] || d.deviceId, ': ',
          d.installed ? h('span', { class: 'badge ok' }, 'installed' + (d.installedVersion ? ' ' + d.installedVersion : '')) :
            d.installable ? h('span', { class: 'badge ok' }, 'can install') :
              h('span', { class: 'badge bad', title: d.message || '' }, REASONS[d.reason] || d.reason)))))));
    }
  }
  return h('section', { 'aria-labelledby': 'apps-catalog-title' },
    h('h2', { id: 'apps-catalog-title' }, 'Catalog'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'app-catalog' },
      h('thead', {}, h('tr', {}, ['App', 'Version', 'Needs', 'Your phones'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows))));
}

function installForm(main, catalog, devices, names, refreshed) {
  const problem = h('div', { class: 'form-problem' });
  const progress = h('div', { class: 'app-install-progress', 'aria-live': 'polite' });
  const choice = h('select', { id: 'app-version', name: 'version' }, catalog.apps.flatMap((a) => a.versions.map((v) =>
    h('option', { value: a.package + '@' + v.version }, a.title + ' ' + v.version))));
  const boxes = h('fieldset', { class: 'app-devices' }, h('legend', {}, 'Phones'));
  function eligibility() {
    const [pkg, version] = choice.value.split('@');
    const app = catalog.apps.find((a) => a.package === pkg);
    const v = app && app.versions.find((x) => x.version === version);
    const by = {};
    for (const d of (v ? v.devices : [])) by[d.deviceId] = d;
    return by;
  }
  function drawBoxes() {
    const by = eligibility();
    boxes.replaceChildren(h('legend', {}, 'Phones'), ...devices.map((d) => {
      const e = by[d.deviceId] || {};
      const id = 'app-dev-' + d.deviceId;
      return h('div', { class: 'check' },
        h('input', { type: 'checkbox', id, name: 'devices', value: d.deviceId }),
        h('label', { for: id }, d.name),
        e.installable === false ? h('span', { class: 'muted small' }, ' — ', REASONS[e.reason] || e.reason) : null);
    }));
  }
  choice.addEventListener('change', drawBoxes);
  drawBoxes();
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Install');
  return h('form', { class: 'panel', id: 'app-install', 'aria-labelledby': 'app-install-title', on: { submit: async (ev) => {
    ev.preventDefault();
    problem.replaceChildren();
    const chosen = [...boxes.querySelectorAll('input:checked')].map((b) => b.value);
    if (chosen.length === 0) {
      problem.replaceChildren(h('div', { class: 'error', role: 'alert' }, 'Choose at least one phone.'));
      return;
    }
    const [pkg, version] = choice.value.split('@');
    submit.disabled = true;
    try {
      const first = await api.post('/v1/app-store/installations', { requestKey: newKey('console'), package: pkg, version, devices: chosen });
      const done = await poll(main, '/v1/app-store/installations/' + encodeURIComponent(first.installationId), (r) =>
        progress.replaceChildren(h('h3', {}, r.title + ' ' + r.version + ' — ' + (r.state === 'finished' ? 'finished' : 'in progress')),
          progressTable(r, names)));
      const failed = done.devices.filter((d) => d.state === 'failed').length;
      toast(done.title + ' ' + done.version + ': ' + (done.devices.length - failed) + ' installed, ' + failed + ' failed.', failed ? 'error' : 'ok');
      await refreshed();
    } catch (e) {
      problem.replaceChildren(apiProblem(e));
    } finally {
      submit.disabled = false;
    }
  } } },
  h('h2', { id: 'app-install-title' }, 'Install'),
  h('div', { class: 'field' }, h('label', { for: 'app-version' }, 'App and version'), choice),
  boxes, problem,
  h('div', { class: 'form-actions' }, submit),
  progress);
}

function inventorySection(main, inventory) {
  const status = h('p', { class: 'muted', 'aria-live': 'polite' });
  const refresh = h('button', { type: 'button', id: 'app-refresh', on: { click: async () => {
    refresh.disabled = true;
    try {
      const key = newKey('console-refresh');
      await api.post('/v1/app-library/inventory/refreshes', { requestKey: key });
      const done = await poll(main, '/v1/app-library/requests/' + encodeURIComponent(key), (r) => {
        status.textContent = 'Reading the phones: ' + r.devices.filter((d) => d.state === 'read' || d.state === 'failed').length +
          ' of ' + r.devices.length + ' done.';
      });
      const failed = done.devices.filter((d) => d.state === 'failed');
      if (failed.length) toast(failed.length + ' phone(s) could not be read: ' + failed.map((d) => d.reason || d.code).join(', '), 'error');
      await reload();
    } catch (e) {
      toast((e.code ? e.code + ': ' : '') + e.message, 'error');
      refresh.disabled = false;
    }
  } } }, 'Refresh inventory');
  return h('section', { 'aria-labelledby': 'apps-inventory-title' },
    h('h2', { id: 'apps-inventory-title' }, 'On each phone'),
    h('div', { class: 'form-actions' }, refresh), status,
    inventory.devices.map((d) => inventoryPanel(d)));
}

function appRow(a) {
  const kind = a.managed ? h('span', { class: 'badge ok' }, 'managed ' + (a.managedVersion || '')) :
    h('span', { class: 'badge off' }, a.system ? 'system' : 'not managed');
  return h('tr', { 'data-package': a.package, 'data-managed': String(a.managed) },
    h('th', { scope: 'row' }, h('code', {}, a.package)),
    h('td', {}, a.version || '—'),
    h('td', {}, kind));
}

function inventoryPanel(d) {
  const panel = h('div', { class: 'panel app-inventory', 'data-device-id': d.deviceId }, h('h3', {}, d.name));
  if (d.apps === null) {
    panel.append(h('p', { class: 'muted' }, 'Not read yet.'));
    return panel;
  }
  const table = h('table', { 'aria-label': 'Apps on ' + d.name },
    h('thead', {}, h('tr', {}, ['App', 'Version', 'Kind'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, d.apps.map(appRow)));
  panel.append(h('p', { class: 'muted small' }, 'Read ', h('time', { datetime: d.readAt }, fmtTime(d.readAt))),
    h('div', { class: 'table-wrap' }, table));
  return panel;
}

route('/apps', async (main) => {
  const [catalog, inventory] = await Promise.all([api.get('/v1/app-store/catalog'), api.get('/v1/app-library/inventory')]);
  const names = {};
  for (const d of inventory.devices) names[d.deviceId] = d.name;
  let catalogPart = catalogSection(catalog, names);
  let inventoryPart = inventorySection(main, inventory);
  // refreshed shows the catalog and the phones' apps as they are after an
  // install, keeping the form and its progress.
  async function refreshed() {
    const [c, inv] = await Promise.all([api.get('/v1/app-store/catalog'), api.get('/v1/app-library/inventory')]);
    const nextCatalog = catalogSection(c, names), nextInventory = inventorySection(main, inv);
    catalogPart.replaceWith(nextCatalog);
    inventoryPart.replaceWith(nextInventory);
    catalogPart = nextCatalog;
    inventoryPart = nextInventory;
  }
  main.append(h('h1', {}, 'Apps'),
    h('p', { class: 'muted' }, 'Install the deployment\'s managed apps on your phones. Each install takes the phone\'s lease ' +
      '(waiting while someone holds it), checks the app\'s file against its SHA-256 and leaves a receipt.'),
    catalogPart,
    inventory.devices.length ? installForm(main, catalog, inventory.devices, names, refreshed) : h('p', {}, 'No phones yet.'),
    inventoryPart);
});
