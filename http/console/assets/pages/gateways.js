// Gateways: the computers at the organisation's sites that serve their
// phones to the service (an admin's page). The list says whether each
// gateway's tunnel is open (since when, through which instance of the
// service) or when it was last seen, the version it runs and its state.
// Adding a gateway makes a one-time enrollment code, shown once in a
// dialog with the command to run on the site's computer; revoking one
// closes its tunnel and its phones go offline. A member is told the page
// is an admin's rather than shown controls the API would refuse.
import { api, h, route, toast, fmtTime, reload } from '/console/app.js';
import { secretDialog, confirmDialog, apiProblem, stacked } from '/console/pages/admin-common.js';

// How long an enrollment code works, in hours (the API takes 60 seconds
// to a day; an hour by default).
const DEFAULT_HOURS = 1;
const MAX_HOURS = 24;

// How often the shown list is read again, so a gateway that connects or
// drops shows up without a click.
const REFRESH_MS = 5000;

function path(id) {
  return '/v1/gateways/' + encodeURIComponent(id);
}

// command is what the site's computer runs to enroll with code: the
// service's address is this console's own origin.
function command(code) {
  return 'GATEWAY_URL=' + location.origin + ' GATEWAY_ENROLL_CODE=' + code + ' phonefleet gateway';
}

function when(iso) {
  return h('time', { datetime: iso }, fmtTime(iso));
}

function connectionCell(g) {
  if (g.connected) {
    return h('td', {},
      h('span', { class: 'badge ok' }, 'connected'),
      h('div', { class: 'muted small' }, 'since ', when(g.connectedAt)),
      h('div', { class: 'muted small' }, 'through instance ', h('code', {}, g.instance)));
  }
  return h('td', {},
    h('span', { class: 'badge off' }, g.lastSeenAt ? 'disconnected' : 'never connected'),
    g.lastSeenAt ? h('div', { class: 'muted small' }, 'last seen ', when(g.lastSeenAt)) : null);
}

function stateCell(g) {
  if (g.state !== 'revoked') return h('td', {}, h('span', { class: 'badge ok' }, g.state));
  const by = g.revokedBy ? ' by ' + g.revokedBy.id + (g.revokedBy.kind === 'user' ? '' : ' (' + g.revokedBy.kind + ')') : '';
  return h('td', {}, h('span', { class: 'badge bad' }, 'revoked'),
    g.revokedAt ? h('div', { class: 'muted small' }, 'revoked ', when(g.revokedAt), by) : null);
}

function revokeButton(g) {
  if (g.state !== 'active') return h('span', { class: 'muted' }, '—');
  return h('button', { type: 'button', class: 'danger', 'aria-label': 'Revoke ' + g.name, 'data-action': 'revoke', on: { click: async (ev) => {
    const b = ev.currentTarget;
    b.disabled = true;
    try {
      if (!(await confirmDialog({ title: 'Revoke ' + g.name + '?', confirm: 'Revoke', danger: true,
        message: 'The gateway "' + g.name + '" is disconnected at once and its credential is refused from then on: ' +
          'the phones it serves go offline. To bring the site back, add it again with a new code.' }))) return;
      await api.del(path(g.gatewayId));
      toast(g.name + ' revoked.', 'ok');
      await reload();
    } catch (e) {
      toast((e.code ? e.code + ': ' : '') + e.message, 'error');
    } finally {
      b.disabled = false;
    }
  } } }, 'Revoke');
}

function row(g) {
  return h('tr', { 'data-gateway-id': g.gatewayId, 'data-state': g.state, 'data-connected': String(g.connected),
    class: g.state === 'active' ? '' : 'inactive' },
  h('th', { scope: 'row' }, g.name),
  connectionCell(g),
  h('td', {}, g.version ? h('code', {}, g.version) : h('span', { class: 'muted' }, '—')),
  stateCell(g),
  h('td', {}, when(g.enrolledAt)),
  h('td', {}, revokeButton(g)));
}

function summaryText(list) {
  if (list.length === 0) return 'No gateways yet: add one below, then run the command it gives on the site\'s computer.';
  const active = list.filter((g) => g.state === 'active').length;
  const connected = list.filter((g) => g.connected).length;
  return list.length + (list.length === 1 ? ' gateway' : ' gateways') + ' · ' + active + ' active · ' + connected + ' connected';
}

function addForm() {
  const problem = h('div', { class: 'form-problem' });
  const name = h('input', { type: 'text', id: 'gateway-name', name: 'name', required: true, maxlength: 100, autocomplete: 'off',
    placeholder: 'e.g. lab-1', class: 'wide', 'aria-describedby': 'gateway-name-hint' });
  const hours = h('input', { type: 'number', id: 'gateway-hours', name: 'hours', min: 1, max: MAX_HOURS, step: 1, required: true,
    value: String(DEFAULT_HOURS) });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Create enrollment code');
  const form = h('form', { class: 'panel', id: 'gateway-add', 'aria-labelledby': 'gateway-add-title', on: { submit: async (ev) => {
    ev.preventDefault();
    problem.replaceChildren();
    submit.disabled = true;
    try {
      const label = name.value.trim();
      const c = await api.post('/v1/gateways/enrollment-codes', { name: label, ttlSeconds: parseInt(hours.value, 10) * 3600 });
      await secretDialog({
        title: 'Enrollment code for ' + label,
        intro: ['Run this on the site\'s computer. Its code ', h('code', {}, c.code),
          ' works once, until ', when(c.expiresAt),
          ': at its first start the gateway exchanges it for a credential of its own and keeps that.'],
        label: 'Command for the site\'s computer',
        secret: command(c.code),
      });
      await reload();
    } catch (e) {
      problem.replaceChildren(apiProblem(e));
      submit.disabled = false;
    }
  } } },
  h('h2', { id: 'gateway-add-title' }, 'Add a gateway'),
  h('div', { class: 'field' }, h('label', { for: 'gateway-name' }, 'Name'), name,
    h('span', { class: 'muted small', id: 'gateway-name-hint' }, 'Its phones are named after it: ', h('code', {}, '<name>/sim-1'), '.')),
  h('div', { class: 'field' }, h('label', { for: 'gateway-hours' }, 'The code works for (hours, 1 to ' + MAX_HOURS + ')'), hours),
  problem,
  h('div', { class: 'form-actions' }, submit));
  return form;
}

// denied is the page a member sees: gateways are an admin's.
function denied(main, e) {
  main.append(h('h1', {}, 'Gateways'),
    h('div', { class: 'error gateways-denied', role: 'alert' },
      h('strong', {}, e.code), ': ', e.message,
      h('div', { class: 'why' }, 'Gateways are managed by the organisation\'s admins: ask one to add your site or to revoke a gateway.')));
}

route('/gateways', async (main) => {
  let list;
  try {
    list = (await api.get('/v1/gateways')).gateways;
  } catch (e) {
    if (e.code !== 'permission_denied') throw e;
    denied(main, e);
    return;
  }
  const body = h('tbody', {});
  const table = h('table', { class: 'gateways', 'aria-labelledby': 'gateways-title', 'aria-describedby': 'gateways-summary' },
    h('thead', {}, h('tr', {}, ['Name', 'Connection', 'Version', 'State', 'Enrolled', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))),
    body);
  const wrap = h('div', { class: 'table-wrap' }, table);
  const summary = h('p', { id: 'gateways-summary', 'aria-live': 'polite' });
  let shown = '';

  // show puts list on the page when it differs from what is shown; a
  // focused button keeps its focus on the rebuilt row.
  function show(next) {
    const text = JSON.stringify(next);
    if (text === shown) return;
    shown = text;
    list = next;
    const focused = document.activeElement;
    const focusRow = focused && body.contains(focused) ? focused.closest('tr').getAttribute('data-gateway-id') : null;
    body.replaceChildren(...list.map(row));
    stacked(table);
    wrap.hidden = list.length === 0;
    summary.textContent = summaryText(list);
    if (focusRow) {
      const again = [...body.querySelectorAll('tr')].find((tr) => tr.getAttribute('data-gateway-id') === focusRow);
      const b = again && again.querySelector('button');
      if (b) b.focus(); else document.getElementById('main').focus();
    }
  }
  // The list is read again every REFRESH_MS while the page is shown and no
  // dialog is open.
  function schedule() {
    setTimeout(async () => {
      if (!main.isConnected) return;
      if (!document.querySelector('dialog[open]')) {
        try { show((await api.get('/v1/gateways')).gateways); } catch (e) { /* the next look tries again */ }
      }
      schedule();
    }, REFRESH_MS);
  }

  show(list);
  main.append(h('h1', {}, 'Gateways'),
    h('p', { class: 'muted' }, 'A gateway is a computer at a site that serves its phones to the service through an outbound tunnel. ' +
      'Its phones join the fleet while its tunnel is open and go offline when it drops. The list refreshes itself.'),
    h('h2', { id: 'gateways-title' }, 'Enrolled gateways'),
    summary,
    wrap,
    addForm());
  schedule();
});
