// Billing: where a purchase starts and ends. The organisation's status
// (GET /v1/admission), the price list with a buy form per row (POST
// /v1/checkout-sessions, then the browser goes to the provider's payment
// page), the phones bought (GET /v1/fulfilments, with Cancel, Return and
// Cancel renewal), the month's device time (GET /v1/usage), and, in a
// hosted deployment, the upcoming invoice and the billing portal. The
// payment page and the portal send the browser back here:
// #/billing?checkout=complete|cancelled&orderId=… and #/billing. Where the
// deployment asks for a recent identity check (reverification_required),
// the form offers to sign in again with a fresh check and comes back to
// #/billing?buy=<sku>:<billing>&model=…&region=…&quantity=… with that
// choice made, ready to buy.
import { api, h, route, toast, errorBox, fmtTime, reload, signInAgain, stepUpHeaders } from '/console/app.js';
import { confirmDialog, stacked } from '/console/pages/admin-common.js';

// POLL_TRIES and POLL_EVERY_MS: after a payment, the phones list is read
// again this many times, this far apart, until the order's phones show.
const POLL_TRIES = 6;
const POLL_EVERY_MS = 2500;
// USAGE_MONTHS is how many billing periods the usage picker offers.
const USAGE_MONTHS = 6;
const FULFILMENT_PAGE = 20;

const BILLING_NAMES = { subscription: 'monthly subscription', day: 'day pass', payg: 'pay as you go' };
const STATE_NAMES = { provisioned: 'provisioned', awaiting_provisioning: 'awaiting provisioning', cancelled: 'cancelled' };
const BLOCKED = {
  checkout_not_served: 'Purchases are served by hosted deployments only: this local deployment sells nothing. Its phones are the ones it runs.',
  instance_not_served: 'This sign-in is not served purchases by this deployment.',
  provisioned: 'Your organisation already has a subscription phone; a new subscription cannot be started.',
  no_payment_provider: 'No payment provider is configured: purchases are unavailable.',
  payment_in_progress: 'A payment is being confirmed; wait for it before buying again.',
};

// A notice survives one re-render (after a refusal that refreshed the page).
let notice = null;

let seq = 0;
const uid = (p) => p + (++seq);

// money renders an amount in the smallest unit of currency.
function money(amount, currency) {
  if (amount === undefined || amount === null) return '—';
  try {
    const f = new Intl.NumberFormat(undefined, { style: 'currency', currency: String(currency).toUpperCase() });
    return f.format(amount / 10 ** f.resolvedOptions().maximumFractionDigits);
  } catch (e) {
    return amount + ' ' + currency;
  }
}

// duration renders seconds as hours and minutes.
function duration(seconds) {
  const s = Math.round(seconds || 0);
  const hrs = Math.floor(s / 3600), min = Math.floor((s % 3600) / 60);
  if (hrs) return hrs + ' h ' + min + ' min';
  if (min) return min + ' min ' + (s % 60) + ' s';
  return s + ' s';
}

// optional runs a hosted-only read: null when the deployment does not
// serve it (404), the error otherwise.
async function optional(p) {
  try {
    return { value: await p };
  } catch (e) {
    if (e.status === 404) return { absent: true };
    return { error: e };
  }
}

// refusal explains an API refusal of a purchase or an action in words,
// beside its code and message.
function refusal(e) {
  const body = (e.body && e.body.error) || {};
  const why = {
    not_found: 'Purchases are served by hosted deployments only.',
    quote_changed: 'The price changed since the list was read: the list has been refreshed; check the price and buy again.',
    checkout_unavailable: 'Purchases are unavailable right now' + (body.retryable ? '; try again shortly.' : '.'),
    checkout_customer_balance: 'Your billing account holds a balance that blocks checkout; open the billing portal or contact support.',
    admission_unavailable: 'The organisation\'s status cannot be read right now; try again shortly.',
    wrong_state: body.state === 'provisioned' ? 'Your organisation already has a subscription phone.'
      : body.state === 'no_billing_account' ? 'There is no billing account yet: it is made by the first checkout.'
        : 'Not possible in its state' + (body.state ? ' (' + (STATE_NAMES[body.state] || body.state) + ').' : '.'),
    reverification_required: 'This purchase needs a recent identity check (within the last ' + (body.maxAgeMinutes || 10) +
      ' minutes): confirm it\'s you by signing in again, then press Buy again. Nothing was charged.',
    permission_denied: 'Only an organisation admin can do this.',
    payment_in_progress: 'A payment of an earlier attempt is being confirmed; wait for it.',
    checkout_in_progress: 'An earlier payment page is still open and could not be closed; finish or wait for it.',
    out_of_stock: 'None is free now and this one is not sold on backorder.',
    idempotency_conflict: body.retryable ? 'The same purchase is still being started; try again in a moment.' : 'This purchase was already started differently; reload the page.',
    invalid_argument: body.field ? 'Check ' + body.field + '.' : '',
  }[e.code];
  return h('div', { class: 'error', role: 'alert' },
    h('strong', {}, e.code || 'error'), ': ', e.message || String(e), why ? h('span', { class: 'why' }, ' ' + why) : null);
}

function section(title, id, ...children) {
  return h('section', { class: 'billing-section', 'aria-labelledby': id },
    h('h2', { id }, title), ...children);
}

// ---- The organisation's status.

function statusBlock(adm) {
  const f = adm.fulfilments;
  const facts = [
    ['Subscription', adm.provisioned ? 'provisioned' : 'none'],
    ['Pay as you go', adm.paygAccess ? 'the shared pool is open to you' : 'not set up'],
    ['Phones', f.provisioned + ' provisioned, ' + f.awaitingProvisioning + ' awaiting, ' + f.cancelled + ' cancelled'],
    ['Purchases', adm.checkoutAvailable ? 'available' : (BLOCKED[adm.checkoutBlocked] || adm.checkoutBlocked)],
  ];
  if (adm.openCheckout) facts.push(['Open payment page', 'order ' + adm.openCheckout.orderId + ', payable until ' + fmtTime(adm.openCheckout.expiresAt)]);
  return h('dl', { class: 'billing-facts' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// ---- The price list and its buy forms.

// rowKey names a price-list row in the address (?buy=…).
const rowKey = (row) => row.sku + ':' + row.billing;

// reverifyBox is the refusal of a purchase needing a recent identity
// check, with the button that signs in again with a fresh check; choice is
// the form's state, put in the address the sign-in comes back to.
function reverifyBox(e, choice) {
  const b = h('button', { type: 'button', class: 'primary reverify' }, 'Confirm it\'s you (sign in again)');
  b.addEventListener('click', () => {
    b.disabled = true;
    const q = new URLSearchParams(Object.entries(choice).filter(([, v]) => v !== undefined && v !== null && v !== ''));
    history.replaceState(null, '', '#/billing?' + q.toString());
    signInAgain().catch((err) => { b.disabled = false; toast(err.message, 'error'); });
  });
  const body = (e.body && e.body.error) || {};
  return h('div', { class: 'error reverify-box', role: 'alert' },
    h('p', {}, h('strong', {}, 'Confirm it\'s you to buy. '), 'This purchase needs an identity check within the last ' +
      (body.maxAgeMinutes || 10) + ' minutes: sign in again, then press Buy again. Nothing was charged.'),
    h('p', { class: 'small' }, h('code', {}, e.code), ': ', e.message), b);
}

// buyForm renders the form of one price-list row; resume is the choice to
// restore after a fresh identity check (the address's query), or null.
function buyForm(row, resume) {
  const id = uid('buy');
  const listed = row.models.filter((m) => m.listed && m.quoteId);
  const status = h('div', { class: 'buy-status', 'aria-live': 'polite' });
  const fields = [];
  let model = null, region = null, quantity = null, qtyLabel = null, addOns = [];
  if (row.models.length) {
    model = h('select', { id: id + '-model', name: 'model' }, row.models.map((m) =>
      h('option', { value: m.id, disabled: !(m.listed && m.quoteId) },
        m.name + ' — ' + money(m.unitAmount, row.currency) + (m.listed && m.quoteId ? '' : ' (not available yet)'))));
    if (listed.length) model.value = listed[0].id;
    region = h('select', { id: id + '-region', name: 'region' });
    quantity = h('input', { id: id + '-qty', name: 'quantity', type: 'number', min: '1', value: '1', inputmode: 'numeric' });
    qtyLabel = h('label', { for: id + '-qty' }, 'Quantity', quantity);
    const regionLabel = h('label', { for: id + '-region' }, 'Region', region);
    const sync = () => {
      const m = row.models.find((x) => x.id === model.value);
      region.replaceChildren(...(m ? m.regions : []).map((r) => h('option', { value: r.code },
        r.code + (r.shipsNow ? ' — ships now' : r.backorderable ? ' — on backorder' : ' — sold out'))));
      if (m && m.defaultRegion) region.value = m.defaultRegion;
      regionLabel.hidden = !m || m.regions.length === 0;
      quantity.max = String(m ? m.maxQuantity : 1);
      qtyLabel.hidden = !m || m.maxQuantity <= 1;
    };
    model.addEventListener('change', sync);
    if (resume && listed.some((m) => m.id === resume.get('model'))) model.value = resume.get('model');
    sync();
    if (resume && [...region.options].some((o) => o.value === resume.get('region'))) region.value = resume.get('region');
    if (resume && resume.get('quantity')) quantity.value = resume.get('quantity');
    fields.push(h('label', { for: id + '-model' }, 'Model', model), regionLabel, qtyLabel);
    if (row.sku === 'cloud_phone') {
      addOns = [['usFixedIp', 'US fixed IP'], ['preinstallApps', 'Preinstall apps']].map(([k, text]) => {
        const box = h('input', { type: 'checkbox', name: k, id: id + '-' + k });
        fields.push(h('label', { class: 'check', for: id + '-' + k }, box, text));
        return [k, box];
      });
    }
  }
  const button = h('button', { type: 'submit', class: 'primary', 'aria-label': 'Buy ' + row.name + ', ' + (BILLING_NAMES[row.billing] || row.billing),
    disabled: row.models.length > 0 && listed.length === 0 }, 'Buy');
  const form = h('form', { class: 'buy-form', 'data-sku': row.sku, 'data-billing': row.billing }, fields, button, status);
  if (resume) {
    form.dataset.resumed = 'true';
    status.replaceChildren(h('p', { class: 'reverified', role: 'status' }, 'You confirmed it\'s you: press Buy to continue.'));
  }

  // The Idempotency-Key is kept for retries of one purchase: it changes
  // when the choice changes, and after an answer that ends the attempt.
  let key = null;
  form.addEventListener('input', () => { key = null; });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { sku: row.sku, billing: row.billing };
    if (model) {
      const m = row.models.find((x) => x.id === model.value);
      if (!m) return;
      body.model = m.id;
      body.quoteId = m.quoteId;
      if (m.regions.length) body.region = region.value;
      if (m.maxQuantity > 1) body.quantity = parseInt(quantity.value, 10) || 1;
      if (addOns.length) body.addOns = Object.fromEntries(addOns.map(([k, box]) => [k, box.checked]));
    } else if (row.quoteId) {
      body.quoteId = row.quoteId;
    }
    if (!key) key = crypto.randomUUID();
    // What the address keeps for a fresh identity check to come back to.
    const choice = { buy: rowKey(row), model: body.model, region: body.region, quantity: body.quantity };
    button.disabled = true;
    status.replaceChildren(h('p', { class: 'muted' }, 'Opening the payment page…'));
    try {
      const s = await api.post('/v1/checkout-sessions', body, Object.assign({ 'Idempotency-Key': key }, stepUpHeaders()));
      key = null;
      status.replaceChildren(h('p', {}, 'Order ', h('code', {}, s.orderId), ': ',
        h('a', { href: s.checkoutUrl, class: 'checkout-link', rel: 'noopener' }, 'continue to the payment page'),
        ' (until ' + fmtTime(s.expiresAt) + ').'));
      location.assign(s.checkoutUrl);
    } catch (e) {
      button.disabled = false;
      const body = (e.body && e.body.error) || {};
      if (!(body.retryable || e.status === undefined)) key = null;
      if (e.code === 'quote_changed') {
        notice = refusal(e);
        await reload();
        return;
      }
      if (e.code === 'reverification_required') {
        status.replaceChildren(reverifyBox(e, choice));
        return;
      }
      status.replaceChildren(refusal(e));
    }
  });
  return form;
}

function priceTable(list, adm, query) {
  const sells = adm.checkoutBlocked !== 'checkout_not_served';
  const head = ['Plan', 'Price', 'Ships now', 'Models and regions'];
  if (sells) head.push('Buy');
  const rows = list.skus.map((row) => {
    const isDefault = list.default && list.default.sku === row.sku && list.default.billing === row.billing;
    const price = row.unitAmount !== undefined ? money(row.unitAmount, row.currency)
      : row.models.length ? 'by model' : 'unavailable now';
    const models = row.models.length === 0 ? h('span', { class: 'muted' }, '—') : h('ul', { class: 'models' }, row.models.map((m) =>
      h('li', {}, h('strong', {}, m.name), ' ', money(m.unitAmount, row.currency),
        m.listed ? '' : ' (not listed yet)', m.shipsNow ? ' — ships now' : m.backorderable ? ' — on backorder' : ' — sold out',
        m.regions.length ? h('span', { class: 'muted' }, ' · regions: ' + m.regions.map((r) =>
          r.code + (r.shipsNow ? '' : r.backorderable ? ' (backorder)' : ' (sold out)')).join(', ')) : null,
        m.maxQuantity > 1 ? h('span', { class: 'muted' }, ' · up to ' + m.maxQuantity) : null)));
    return h('tr', { 'data-sku': row.sku, 'data-billing': row.billing },
      h('th', { scope: 'row' }, row.name, h('div', { class: 'muted small' }, BILLING_NAMES[row.billing] || row.billing,
        isDefault ? ' · default' : '')),
      h('td', { class: 'price' }, price),
      h('td', {}, row.shipsNow ? 'yes' : row.backorderable ? 'no — on backorder' : 'no'),
      h('td', {}, models),
      sells ? h('td', {}, buyForm(row, query && query.get('buy') === rowKey(row) ? query : null)) : null);
  });
  return h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'price-list' },
    h('caption', { class: 'visually-hidden' }, 'Price list, in ' + list.currency.toUpperCase()),
    h('thead', {}, h('tr', {}, head.map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows))));
}

// ---- Phones bought.

function fulfilmentsBlock() {
  const box = h('div', { class: 'fulfilments' });
  const state = { filter: '', cursor: '', trail: [] };
  const filter = h('select', { id: 'ful-state', on: { change: () => { state.filter = filter.value; state.cursor = ''; state.trail = []; box.refresh(); } } },
    h('option', { value: '' }, 'every state'),
    Object.entries(STATE_NAMES).map(([v, t]) => h('option', { value: v }, t)));
  const list = h('div', { class: 'ful-list' });
  box.append(h('div', { class: 'toolbar' }, h('label', { for: 'ful-state' }, 'Show', filter)), list);

  const act = (f, what, verb, message, title, confirm) => h('button', { type: 'button', class: what === 'cancel' || what === 'return' ? 'danger' : '',
    'aria-label': verb + ' ' + f.fulfilmentId, 'data-action': what,
    on: { click: async () => {
      if (!(await confirmDialog({ title, message, confirm, danger: true }))) return;
      try {
        await api.post('/v1/fulfilments/' + encodeURIComponent(f.fulfilmentId) + '/' + what);
        toast(verb + ': done.', 'ok');
        await box.refresh();
      } catch (e) {
        list.prepend(refusal(e));
      }
    } } }, verb);

  const details = (f, cell) => h('button', { type: 'button', 'aria-expanded': 'false', 'aria-label': 'Details of ' + f.fulfilmentId,
    on: { click: async (ev) => {
      const b = ev.currentTarget;
      const open = cell.querySelector('.ful-details');
      if (open) { open.remove(); b.setAttribute('aria-expanded', 'false'); return; }
      b.setAttribute('aria-expanded', 'true');
      const out = h('div', { class: 'ful-details' }, h('p', { class: 'loading' }, 'Loading…'));
      cell.append(out);
      const id = encodeURIComponent(f.fulfilmentId);
      const [hist, ren] = await Promise.all([
        api.get('/v1/fulfilments/' + id + '/estimate-history').catch((e) => e),
        api.get('/v1/fulfilments/' + id + '/renewal-status').catch((e) => e)]);
      out.replaceChildren(
        h('h3', {}, 'Delivery estimates'),
        hist instanceof Error ? errorBox(hist) : hist.estimates.length === 0 ? h('p', { class: 'muted' }, 'None: it was provisioned when paid.')
          : h('ol', {}, hist.estimates.map((x) => h('li', {}, 'by ' + fmtTime(x.estimatedBy) + ' (' + x.reason.replace(/_/g, ' ') + ', given ' + fmtTime(x.givenAt) + ')'))),
        h('h3', {}, 'Renewal'),
        ren instanceof Error ? errorBox(ren) : h('p', {}, ren.renews ? 'Renews ' + fmtTime(ren.nextRenewalAt) + '.'
          : ren.renewalCancelled ? 'Renewal cancelled' + (ren.endsAt ? '; ends ' + fmtTime(ren.endsAt) : '') + '.'
            : ren.endsAt ? 'Does not renew; ends ' + fmtTime(ren.endsAt) + '.' : 'Does not renew.'));
    } } }, 'Details');

  box.refresh = async () => {
    let page;
    try {
      page = await api.get('/v1/fulfilments', { state: state.filter, limit: FULFILMENT_PAGE, cursor: state.cursor });
    } catch (e) {
      list.replaceChildren(errorBox(e));
      return [];
    }
    box.rows = page.fulfilments;
    if (page.fulfilments.length === 0) {
      list.replaceChildren(h('p', { class: 'muted' }, state.filter ? 'No phone in this state.' : 'No phone bought yet.'));
      return page.fulfilments;
    }
    const rows = page.fulfilments.map((f) => {
      const actions = h('td', { class: 'ful-actions' });
      const live = f.state !== 'cancelled';
      actions.append(...[
        live ? act(f, 'cancel', 'Cancel', 'The phone leaves your organisation at once. This cannot be undone.', 'Cancel this phone?', 'Cancel the phone') : null,
        f.state === 'provisioned' ? act(f, 'return', 'Return', 'The phone is returned and leaves your organisation at once. This cannot be undone.', 'Return this phone?', 'Return the phone') : null,
        live && f.billing === 'subscription' && !f.renewalCancelled
          ? act(f, 'cancel-renewal', 'Cancel renewal', 'The phone stays until the end of its paid period, then ends.', 'Stop this phone renewing?', 'Stop renewing') : null,
        details(f, actions)].filter(Boolean));
      const plan = [f.sku.replace(/_/g, ' '), BILLING_NAMES[f.billing] || f.billing, f.model, f.region].filter(Boolean).join(' · ');
      return h('tr', { 'data-fulfilment-id': f.fulfilmentId, 'data-order-id': f.orderId, 'data-state': f.state },
        h('th', { scope: 'row' }, h('code', {}, f.fulfilmentId), h('div', { class: 'muted small' }, plan)),
        h('td', {}, h('span', { class: 'ful-state ful-state-' + f.state }, STATE_NAMES[f.state] || f.state),
          f.cancelledReason ? h('div', { class: 'muted small' }, f.cancelledReason.replace(/_/g, ' ') + ', ' + fmtTime(f.cancelledAt)) : null),
        h('td', {}, f.deviceId ? h('a', { href: '#/devices/' + encodeURIComponent(f.deviceId), class: 'device-link' }, f.deviceId) : '—'),
        h('td', {}, f.state === 'awaiting_provisioning' ? 'by ' + fmtTime(f.estimatedBy) : f.provisionedAt ? 'delivered ' + fmtTime(f.provisionedAt) : '—'),
        h('td', {}, f.billing !== 'subscription' ? (f.endsAt ? 'ends ' + fmtTime(f.endsAt) : '—')
          : f.state === 'cancelled' ? '—' : f.renewalCancelled ? 'cancelled; ends ' + fmtTime(f.endsAt) : 'renews monthly'),
        h('td', {}, money(f.unitAmount, f.currency), h('div', { class: 'muted small' }, 'paid ' + fmtTime(f.createdAt))),
        actions);
    });
    const pager = h('div', { class: 'toolbar pager' },
      state.trail.length ? h('button', { type: 'button', on: { click: () => { state.cursor = state.trail.pop(); box.refresh(); } } }, 'Previous page') : null,
      page.nextCursor ? h('button', { type: 'button', on: { click: () => { state.trail.push(state.cursor); state.cursor = page.nextCursor; box.refresh(); } } }, 'Next page') : null);
    list.replaceChildren(h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'fulfilment-list' },
      h('caption', { class: 'visually-hidden' }, 'Phones bought, newest first'),
      h('thead', {}, h('tr', {}, ['Phone', 'State', 'Device', 'Delivery', 'Renewal', 'Price', 'Actions'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows)))), pager);
    return page.fulfilments;
  };
  return box;
}

// ---- Usage.

function periods(now) {
  const out = [];
  for (let i = 0; i < USAGE_MONTHS; i++) {
    const d = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - i, 1));
    out.push(d.toISOString().slice(0, 10));
  }
  return out;
}

function usageBlock() {
  const box = h('div', { class: 'usage' });
  const pick = h('select', { id: 'usage-period', on: { change: () => box.refresh() } }, periods(new Date()).map((p, i) =>
    h('option', { value: p }, new Date(p + 'T00:00:00Z').toLocaleDateString(undefined, { month: 'long', year: 'numeric', timeZone: 'UTC' }) + (i === 0 ? ' (this month)' : ''))));
  const out = h('div', { class: 'usage-report' });
  box.append(h('div', { class: 'toolbar' }, h('label', { for: 'usage-period' }, 'Billing period (UTC)', pick)), out);
  box.refresh = async () => {
    try {
      const u = await api.get('/v1/usage', { period: pick.value });
      out.replaceChildren(
        h('p', { class: 'usage-total' }, h('strong', {}, duration(u.totalSeconds)), ' of device time — ',
          duration(u.leaseSeconds) + ' under leases, ' + duration(u.runSeconds) + ' under runs; as of ' + fmtTime(u.asOf) + '.'),
        u.devices.length === 0 ? h('p', { class: 'muted' }, 'No device time in this period.')
          : h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'usage-list' },
            h('caption', { class: 'visually-hidden' }, 'Device time per device'),
            h('thead', {}, h('tr', {}, ['Device', 'Total', 'Leases', 'Runs'].map((t) => h('th', { scope: 'col' }, t)))),
            h('tbody', {}, u.devices.map((d) => h('tr', {},
              h('th', { scope: 'row' }, h('a', { href: '#/devices/' + encodeURIComponent(d.deviceId) }, d.deviceId)),
              h('td', {}, duration(d.seconds)), h('td', {}, duration(d.leaseSeconds)), h('td', {}, duration(d.runSeconds)))))))));
    } catch (e) {
      out.replaceChildren(errorBox(e));
    }
  };
  return box;
}

// ---- The upcoming invoice and the portal (hosted only).

function invoiceBlock(inv) {
  if (inv.error) return errorBox(inv.error);
  const v = inv.value;
  if (!v.nextInvoiceAt && v.lines.length === 0) return h('p', { class: 'muted' }, 'Nothing is upcoming.');
  return h('div', {},
    h('p', {}, h('strong', {}, money(v.amountDue, v.currency)), ' due ' + fmtTime(v.nextInvoiceAt),
      v.total !== v.amountDue ? ' (' + money(v.total, v.currency) + ' before your balance)' : '',
      v.periodStart ? '; for ' + fmtTime(v.periodStart) + ' – ' + fmtTime(v.periodEnd) : '', '.'),
    h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'invoice-lines' },
      h('caption', { class: 'visually-hidden' }, 'Upcoming invoice lines'),
      h('thead', {}, h('tr', {}, ['Line', 'Quantity', 'Amount', 'Order'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, v.lines.map((l) => h('tr', {}, h('th', { scope: 'row' }, l.description), h('td', {}, String(l.quantity)),
        h('td', {}, money(l.amount, l.currency)), h('td', {}, l.orderId ? h('code', {}, l.orderId) : '—'))))))));
}

function portalButton() {
  const status = h('div', { 'aria-live': 'polite' });
  const b = h('button', { type: 'button', class: 'portal', on: { click: async () => {
    b.disabled = true;
    status.replaceChildren();
    try {
      const s = await api.post('/v1/billing/portal-sessions');
      location.assign(s.url);
    } catch (e) {
      status.replaceChildren(refusal(e));
    } finally {
      b.disabled = false;
    }
  } } }, 'Open billing portal');
  return h('div', { class: 'portal-box' }, h('p', { class: 'muted' }, 'Payment methods, invoices and subscriptions are managed at the payment provider.'), b, status);
}

// ---- The page.

function returnBanner(query) {
  const what = query.get('checkout');
  const order = query.get('orderId') || '';
  if (what === 'complete') {
    return h('div', { class: 'banner ok checkout-return', role: 'status', 'data-order-id': order },
      h('strong', {}, 'Payment received. '), 'Your phone appears when it is provisioned',
      order ? [' (order ', h('code', {}, order), ')'] : '', '.', h('span', { class: 'banner-progress' }));
  }
  if (what === 'cancelled') {
    return h('div', { class: 'banner checkout-return', role: 'status', 'data-order-id': order },
      h('strong', {}, 'Checkout cancelled. '), 'Nothing was charged', order ? [' for order ', h('code', {}, order)] : '', '.');
  }
  return null;
}

// follow reads the phones again a few times after a payment, until the
// order's phones are listed (the payment confirmation may arrive after the
// browser does), and says what became of them in the banner.
async function follow(banner, fuls, order) {
  const progress = banner.querySelector('.banner-progress');
  for (let i = 0; i <= POLL_TRIES; i++) {
    if (!banner.isConnected && i > 0) return;
    const mine = (i === 0 ? fuls.rows || [] : await fuls.refresh()).filter((f) => !order || f.orderId === order);
    if (mine.length) {
      const ready = mine.filter((f) => f.state === 'provisioned');
      const awaiting = mine.find((f) => f.state === 'awaiting_provisioning');
      progress.replaceChildren(h('span', {}, ' ', ready.length ? ['Provisioned: ', ready.map((f, j) => [j ? ', ' : '',
        h('a', { href: '#/devices/' + encodeURIComponent(f.deviceId) }, f.deviceId)]), '.']
        : awaiting ? 'It is awaiting provisioning, by ' + fmtTime(awaiting.estimatedBy) + '.' : ''));
      return;
    }
    if (i === POLL_TRIES) {
      progress.textContent = ' The payment is still being confirmed; this list shows the phone once it is.';
      return;
    }
    await new Promise((r) => setTimeout(r, POLL_EVERY_MS));
  }
}

route('/billing', async (main, params, query) => {
  const [adm, list] = await Promise.all([api.get('/v1/admission'), api.get('/v1/skus')]);
  const hosted = adm.checkoutBlocked !== 'checkout_not_served';
  const inv = hosted ? await optional(api.get('/v1/billing/upcoming')) : { absent: true };
  const banner = returnBanner(query);
  const fuls = fulfilmentsBlock();
  const usage = usageBlock();
  const shown = notice;
  notice = null;
  main.append(...[h('h1', {}, 'Billing'), banner, shown,
    section('Status', 'billing-status', statusBlock(adm),
      hosted ? null : h('p', { class: 'hosted-only' }, BLOCKED.checkout_not_served)),
    section('Price list', 'billing-prices', priceTable(list, adm, query)),
    section('Phones bought', 'billing-fulfilments', fuls),
    section('Usage', 'billing-usage', usage),
    inv.absent ? null : section('Upcoming invoice', 'billing-invoice', invoiceBlock(inv), portalButton())].filter(Boolean));
  await Promise.all([fuls.refresh(), usage.refresh()]);
  // Back from a fresh identity check: the chosen row's Buy has the focus.
  const resumed = main.querySelector('form.buy-form[data-resumed] button[type=submit]');
  if (resumed) requestAnimationFrame(() => { resumed.scrollIntoView({ block: 'center' }); resumed.focus(); });
  if (banner && query.get('checkout') === 'complete') follow(banner, fuls, query.get('orderId')).catch((e) => toast(e.message, 'error'));
});
