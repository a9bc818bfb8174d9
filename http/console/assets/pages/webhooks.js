// Webhooks: the organisation's subscriptions (subscribe, switch on or
// off, rotate the signing secret, delete, send a test) and, per
// subscription, its deliveries newest first with paging. A signing secret
// is shown once, in a dialog, when it is made or rotated.
import { api, h, route, toast, fmtTime, navigate, reload } from '/console/app.js';
import { secretDialog, confirmDialog, apiProblem, stacked } from '/console/pages/admin-common.js';

// The event names a webhook may subscribe to (spec 6), with what each means.
const EVENTS = [
  ['run.ended', 'a run ended'],
  ['run.needs_user_control', 'a run needs a person'],
  ['schedule.triggered', 'a schedule fired'],
  ['fulfilment.changed', 'an order changed'],
  ['receipt.checkpoint_signed', 'the receipts were signed (a checkpoint)'],
];

// The most subscriptions an organisation may have (spec 4.4).
const MAX_WEBHOOKS = 20;

// How often and how long a page with pending deliveries looks again.
const POLL_EVERY_MS = 1500;
const POLL_FOR_MS = 60000;

function path(id, tail) {
  return '/v1/webhooks/' + encodeURIComponent(id) + (tail || '');
}

function stateText(w) {
  if (w.enabled) return 'enabled';
  return w.disabledReason === 'person_left' ? 'disabled (the person who authorised it left)' : 'disabled';
}

function showSecret(title, intro, secret) {
  return secretDialog({ title, intro, label: 'Signing secret', secret });
}

// The actions on one webhook, shared by the list and the detail page.
// after() runs once an action changed something.
function actions(w, after, opts) {
  const o = opts || {};
  const busy = (fn) => async (ev) => {
    const b = ev.currentTarget;
    b.disabled = true;
    try { await fn(); } catch (e) { toast((e.code ? e.code + ': ' : '') + e.message, 'error'); } finally { b.disabled = false; }
  };
  const label = w.url;
  return h('div', { class: 'row-actions' },
    h('button', { type: 'button', 'aria-label': 'Send a test delivery to ' + label, disabled: !w.enabled,
      title: w.enabled ? null : 'switch it on first',
      on: { click: busy(async () => {
        const q = await api.post(path(w.webhookId, '/test'));
        toast('Test delivery ' + q.deliveryId + ' queued.', 'ok');
        if (o.onTest) await o.onTest(q); else navigate('/webhooks/' + encodeURIComponent(w.webhookId));
      }) } }, 'Send test'),
    h('button', { type: 'button', 'aria-label': (w.enabled ? 'Disable ' : 'Enable ') + label,
      on: { click: busy(async () => {
        if (w.enabled && !(await confirmDialog({ title: 'Disable this webhook?',
          message: 'Deliveries still queued for ' + label + ' are abandoned: they are marked failed and never retried.',
          confirm: 'Disable' }))) return;
        await api.patch(path(w.webhookId), { enabled: !w.enabled });
        toast('Webhook ' + (w.enabled ? 'disabled' : 'enabled') + '.', 'ok');
        await after();
      }) } }, w.enabled ? 'Disable' : 'Enable'),
    h('button', { type: 'button', 'aria-label': 'Rotate the signing secret of ' + label,
      on: { click: busy(async () => {
        if (!(await confirmDialog({ title: 'Rotate the signing secret?',
          message: 'The current secret of ' + label + ' stops signing at once, with no overlap: update your receiver with the new one.',
          confirm: 'Rotate' }))) return;
        const r = await api.post(path(w.webhookId, '/rotate'));
        await showSecret('New signing secret', 'Deliveries to ' + label + ' are now signed with this secret.', r.secret);
        await after();
      }) } }, 'Rotate secret'),
    h('button', { type: 'button', class: 'danger', 'aria-label': 'Delete the webhook ' + label,
      on: { click: busy(async () => {
        if (!(await confirmDialog({ title: 'Delete this webhook?',
          message: label + ' gets no more deliveries, and its delivery records are deleted.', confirm: 'Delete', danger: true }))) return;
        await api.del(path(w.webhookId));
        toast('Webhook deleted.', 'ok');
        if (o.onDelete) o.onDelete(); else await after();
      }) } }, 'Delete'));
}

function subscribeForm(count) {
  const problem = h('div', { class: 'form-problem' });
  const url = h('input', { type: 'url', name: 'url', id: 'webhook-url', required: true, maxlength: 2000,
    placeholder: 'https://example.com/phonefleet', autocomplete: 'off', class: 'wide' });
  const boxes = EVENTS.map(([name, what], i) => h('label', { class: 'check' },
    h('input', { type: 'checkbox', name: 'events', value: name, checked: i === 0 }),
    h('span', {}, h('code', {}, name), h('span', { class: 'muted' }, ' — ' + what))));
  const submit = h('button', { type: 'submit', class: 'primary', disabled: count >= MAX_WEBHOOKS }, 'Subscribe');
  const form = h('form', { class: 'panel', id: 'webhook-create', 'aria-labelledby': 'webhook-create-title', on: { submit: async (ev) => {
    ev.preventDefault();
    problem.replaceChildren();
    const events = [...form.querySelectorAll('input[name=events]:checked')].map((b) => b.value);
    if (events.length === 0) {
      problem.replaceChildren(h('div', { class: 'error', role: 'alert' }, 'Choose at least one event.'));
      return;
    }
    submit.disabled = true;
    try {
      const created = await api.post('/v1/webhooks', { url: url.value.trim(), events });
      await showSecret('Webhook subscribed', 'Deliveries to ' + created.webhook.url +
        ' are signed with this secret (header Service-Signature). Keep it with your receiver.', created.secret);
      await reload();
    } catch (e) {
      problem.replaceChildren(apiProblem(e));
      submit.disabled = false;
    }
  } } },
  h('h2', { id: 'webhook-create-title' }, 'Subscribe an endpoint'),
  h('div', { class: 'field' }, h('label', { for: 'webhook-url' }, 'Endpoint URL (https)'), url),
  h('fieldset', {}, h('legend', {}, 'Events'), boxes),
  problem,
  h('div', { class: 'form-actions' }, submit,
    count >= MAX_WEBHOOKS ? h('span', { class: 'muted' }, 'The organisation has ' + MAX_WEBHOOKS + ' webhooks, the most it may have.') : null));
  return form;
}

route('/webhooks', async (main) => {
  const { webhooks } = await api.get('/v1/webhooks');
  main.append(h('h1', {}, 'Webhooks'),
    h('p', { class: 'muted' }, 'Signed deliveries of run, schedule, order and receipt checkpoint events to your https endpoints. ' +
      'A signing secret is shown once, when it is made or rotated.'));
  main.append(h('h2', { id: 'webhooks-title' }, 'Subscriptions ', h('span', { class: 'muted' }, '(' + webhooks.length + ' of ' + MAX_WEBHOOKS + ')')));
  if (webhooks.length === 0) main.append(h('p', {}, 'No webhooks yet.'));
  else main.append(webhookTable(webhooks));
  main.append(subscribeForm(webhooks.length));
});

function webhookTable(webhooks) {
  return h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'webhook-list', 'aria-labelledby': 'webhooks-title' },
    h('thead', {}, h('tr', {},
      ['Endpoint', 'Events', 'State', 'Secret', 'Created', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, webhooks.map((w) => h('tr', { 'data-webhook-id': w.webhookId },
      h('th', { scope: 'row' }, h('a', { href: '#/webhooks/' + encodeURIComponent(w.webhookId), class: 'url' }, w.url)),
      h('td', {}, w.events.map((e) => h('code', { class: 'tag' }, e))),
      h('td', {}, h('span', { class: 'badge ' + (w.enabled ? 'ok' : 'off') }, stateText(w))),
      h('td', {}, h('code', {}, '…' + w.secretHint), w.secretRotatedAt ? h('div', { class: 'muted small' }, 'rotated ' + fmtTime(w.secretRotatedAt)) : null),
      h('td', {}, fmtTime(w.createdAt)),
      h('td', {}, actions(w, reload))))))));
}

// ---- One webhook and its deliveries.

// pretty indents a delivered body; a preview cut short (it ends in …) is
// shown as it is.
function pretty(body) {
  try { return JSON.stringify(JSON.parse(body), null, 2); } catch (e) { return body; }
}

function deliveryRow(d) {
  return h('tr', { 'data-delivery-id': d.deliveryId, 'data-status': d.status },
    h('th', { scope: 'row' }, h('code', { class: 'small' }, d.deliveryId), h('div', {}, h('code', { class: 'tag' }, d.event))),
    h('td', {}, h('span', { class: 'badge ' + ({ delivered: 'ok', failed: 'bad', pending: 'wait' }[d.status] || '') }, d.status)),
    h('td', { class: 'num' }, String(d.attempts)),
    h('td', { class: 'num' }, d.responseStatus === null ? '—' : String(d.responseStatus)),
    h('td', {}, d.error ? h('code', {}, d.error) : '—'),
    h('td', {}, fmtTime(d.createdAt)),
    h('td', {}, fmtTime(d.lastAttemptAt)),
    h('td', {}, d.nextAttemptAt ? fmtTime(d.nextAttemptAt) : '—'),
    h('td', {}, h('details', {}, h('summary', {}, 'Payload'), h('pre', { class: 'payload' }, pretty(d.payloadPreview)))));
}

route('/webhooks/:id', async (main, params) => {
  const id = params.id;
  const w = await api.get(path(id));
  const deliveries = h('tbody', {});
  const more = h('div', { class: 'more' });
  const summary = h('p', { class: 'muted', id: 'deliveries-summary' });
  const table = h('table', { class: 'deliveries', 'aria-labelledby': 'deliveries-title', 'aria-describedby': 'deliveries-summary' },
    h('thead', {}, h('tr', {}, ['Delivery', 'Status', 'Attempts', 'Response', 'Error', 'Occurred', 'Last attempt', 'Next attempt', 'Body']
      .map((c, i) => h('th', { scope: 'col', class: i === 2 || i === 3 ? 'num' : null }, c)))),
    deliveries);
  let polling = 0;

  // load reads the newest page again (fresh), or the page after the rows
  // shown (older).
  async function load(before) {
    const page = await api.get(path(id, '/deliveries'), { limit: 20, nextBefore: before });
    if (!before) deliveries.replaceChildren();
    deliveries.append(...page.deliveries.map(deliveryRow));
    stacked(table);
    const n = deliveries.children.length;
    summary.textContent = n === 0 ? 'No deliveries yet: send a test.' : n + (n === 1 ? ' delivery shown' : ' deliveries shown') + ', newest first.';
    more.replaceChildren();
    if (page.nextBefore) {
      more.append(h('button', { type: 'button', on: { click: async (ev) => {
        const b = ev.currentTarget;
        b.disabled = true;
        try { await load(page.nextBefore); } catch (e) { b.disabled = false; toast(e.code + ': ' + e.message, 'error'); }
      } } }, 'Older deliveries'));
    }
  }

  // watch looks again while a delivery is pending and the page is shown,
  // for a bounded time: a receiver that answers shows up without a click.
  function watch() {
    const mine = ++polling;
    const until = Date.now() + POLL_FOR_MS;
    const tick = async () => {
      if (mine !== polling || !main.isConnected || Date.now() > until) return;
      if (!deliveries.querySelector('tr[data-status=pending]')) return;
      try { await load(); } catch (e) { return; }
      setTimeout(tick, POLL_EVERY_MS);
    };
    setTimeout(tick, POLL_EVERY_MS);
  }

  const refresh = async () => { await load(); watch(); };
  main.append(
    h('p', {}, h('a', { href: '#/webhooks' }, '← All webhooks')),
    h('h1', {}, 'Webhook ', h('span', { class: 'url' }, w.url)),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Id'), h('dd', {}, h('code', {}, w.webhookId)),
      h('dt', {}, 'Events'), h('dd', {}, w.events.map((e) => h('code', { class: 'tag' }, e))),
      h('dt', {}, 'State'), h('dd', {}, h('span', { class: 'badge ' + (w.enabled ? 'ok' : 'off') }, stateText(w))),
      h('dt', {}, 'Signing secret'), h('dd', {}, h('code', {}, '…' + w.secretHint),
        w.secretRotatedAt ? ' (rotated ' + fmtTime(w.secretRotatedAt) + ')' : ''),
      h('dt', {}, 'Created'), h('dd', {}, fmtTime(w.createdAt))),
    actions(w, reload, { onTest: refresh, onDelete: () => navigate('/webhooks') }),
    h('div', { class: 'section-head' },
      h('h2', { id: 'deliveries-title' }, 'Deliveries'),
      h('button', { type: 'button', on: { click: async (ev) => {
        const b = ev.currentTarget;
        b.disabled = true;
        try { await refresh(); } catch (e) { toast(e.code + ': ' + e.message, 'error'); } finally { b.disabled = false; }
      } } }, 'Refresh')),
    summary,
    h('div', { class: 'table-wrap' }, table),
    more);
  await load();
  watch();
});
