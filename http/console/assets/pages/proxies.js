// Proxies: managed network egress for phones. The catalog's products
// (buy one: a quote, then an order paid on the provider's page), the
// organisation's orders (pay, cancel at the period's end), its proxies
// (show the credentials once, assign to a device, take a device off,
// rotate the credentials, shown once) and the operations, with their
// state and reason. Operations are performed in the background: the page
// looks again while one is pending.
import { api, h, route, toast, fmtTime, reload, signInAgain, stepUpHeaders } from '/console/app.js';
import { secretDialog, confirmDialog, formDialog, stacked } from '/console/pages/admin-common.js';

const POLL_EVERY_MS = 1000;
const POLL_FOR_MS = 60000;

function money(amount, currency) {
  return (amount / 100).toFixed(2) + ' ' + String(currency || '').toUpperCase();
}

function busy(fn) {
  return async (ev) => {
    const b = ev.currentTarget;
    b.disabled = true;
    try { await fn(); } catch (e) { toast((e.code ? e.code + ': ' : '') + e.message, 'error'); } finally { b.disabled = false; }
  };
}

function credentialsText(c) { return 'username: ' + c.username + '\npassword: ' + c.password; }

// buy asks for a quote, confirms its price, then orders with the quote
// (one Idempotency-Key per purchase, kept for its retries) and sends the
// browser to the provider's payment page.
async function buy(p) {
  const q = await api.post('/v1/proxy-quotes', { productId: p.productId });
  if (!(await confirmDialog({ title: 'Buy ' + p.name + '?',
    message: 'A proxy in ' + q.product.country + ' for ' + money(q.amount, q.currency) + ' a ' + q.period +
      ', billed until you cancel. You pay on the payment provider\'s page; the proxy is issued once the payment is confirmed.',
    confirm: 'Continue to payment' }))) return;
  const key = 'console-proxy-' + q.quoteId + '-' + Date.now();
  try {
    const o = await api.post('/v1/proxy-orders', { productId: p.productId, quoteId: q.quoteId },
      Object.assign({ 'Idempotency-Key': key }, stepUpHeaders()));
    toast('Order ' + o.orderId + ' started: pay on the provider\'s page.', 'ok');
    await reload();
  } catch (e) {
    if (e.code === 'reverification_required' &&
      await confirmDialog({ title: 'Confirm it is you', message: 'Buying a proxy needs an identity check within the last ' +
        ((e.body && e.body.error && e.body.error.maxAgeMinutes) || 10) + ' minutes. Sign in again, then buy again.', confirm: 'Sign in again' })) {
      await signInAgain();
      return;
    }
    if (e.code === 'quote_changed') {
      toast('The price changed since the quote; look at the new price and buy again.', 'error');
      await reload();
      return;
    }
    throw e;
  }
}

function productsTable(products) {
  return h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'proxy-products', 'aria-labelledby': 'proxy-products-title' },
    h('thead', {}, h('tr', {}, ['Product', 'Kind', 'Country', 'Protocol', 'Price', ''].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, products.map((p) => h('tr', { 'data-product-id': p.productId },
      h('th', { scope: 'row' }, p.name),
      h('td', {}, p.kind), h('td', {}, p.country), h('td', {}, p.protocol),
      h('td', {}, money(p.monthlyPrice, p.currency) + ' / month'),
      h('td', {}, h('button', { type: 'button', class: 'primary', 'aria-label': 'Buy ' + p.name, on: { click: busy(() => buy(p)) } }, 'Buy'))))))));
}

// orderPayment says why an order ended and what the provider reported of
// its payment: a refund (full or partial) and a dispute.
function orderPayment(o) {
  const bits = [];
  if (o.endedReason) bits.push('ended: ' + o.endedReason.replace(/_/g, ' '));
  if (o.refund) bits.push((o.refund.full ? 'refunded ' : 'partly refunded: ') + money(o.refund.amountRefunded, o.refund.currency) +
    ' of ' + money(o.refund.amount, o.refund.currency));
  if (o.dispute) bits.push('dispute ' + o.dispute.status.replace(/_/g, ' '));
  return bits.length ? h('div', { class: 'muted small proxy-order-payment' }, bits.join(' · ')) : null;
}

function ordersTable(orders) {
  return h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'proxy-orders', 'aria-labelledby': 'proxy-orders-title' },
    h('thead', {}, h('tr', {}, ['Order', 'Product', 'State', 'Price', 'Created', ''].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, orders.map((o) => h('tr', { 'data-order-id': o.orderId, 'data-state': o.state },
      h('th', { scope: 'row' }, h('code', { class: 'small' }, o.orderId)),
      h('td', {}, o.productName),
      h('td', {}, h('span', { class: 'badge ' + ({ paid: 'ok', failed: 'bad', ended: 'off', awaiting_payment: 'wait' }[o.state] || '') },
        o.state.replace('_', ' ') + (o.cancelAtPeriodEnd ? ' (ends at the period\'s end)' : '')), orderPayment(o)),
      h('td', {}, money(o.monthlyPrice, o.currency) + ' / month'),
      h('td', {}, fmtTime(o.createdAt)),
      h('td', {}, o.state === 'awaiting_payment' && o.checkoutUrl ? h('a', { href: o.checkoutUrl, class: 'button' }, 'Pay') : null,
        o.state === 'paid' && !o.cancelAtPeriodEnd ? h('button', { type: 'button', 'aria-label': 'Cancel the order ' + o.orderId,
          on: { click: busy(async () => {
            if (!(await confirmDialog({ title: 'Cancel this proxy?', message: 'It stops renewing; the proxy serves until the period already paid ends.',
              confirm: 'Cancel at the period\'s end', danger: true }))) return;
            await api.post('/v1/proxy-orders/' + encodeURIComponent(o.orderId) + '/cancel');
            toast('The proxy stops at the end of its period.', 'ok');
            await reload();
          }) } }, 'Cancel') : null,
        o.state === 'paid' && o.cancelAtPeriodEnd ? h('button', { type: 'button', 'aria-label': 'Renew the order ' + o.orderId,
          on: { click: busy(async () => {
            const op = await api.post('/v1/proxy-operations', { proxyId: o.proxyId, kind: 'renew' },
              Object.assign({ 'Idempotency-Key': 'console-op-renew-' + o.orderId + '-' + Date.now() }, stepUpHeaders()));
            toast('Renewing: ' + op.operationId + '.', 'ok');
            await reload();
          }) } }, 'Renew') : null)))))));
}

async function operation(body) {
  return api.post('/v1/proxy-operations', body, { 'Idempotency-Key': 'console-op-' + body.kind + '-' + body.proxyId + '-' + Date.now() });
}

function proxyActions(p, devices) {
  if (p.state !== 'active') return null;
  const label = p.country + ' proxy ' + p.proxyId;
  return h('div', { class: 'row-actions' },
    p.credentialsRevealed ? null : h('button', { type: 'button', 'aria-label': 'Show the credentials of the ' + label,
      on: { click: busy(async () => {
        const c = await api.post('/v1/proxies/' + encodeURIComponent(p.proxyId) + '/credentials');
        await secretDialog({ title: 'Proxy credentials', intro: 'Devices and clients authenticate to ' + p.endpoint.host + ':' + p.endpoint.port +
          ' with these (Proxy-Authorization Basic).', label: 'Credentials', secret: credentialsText(c) });
        await reload();
      }) } }, 'Show credentials'),
    h('button', { type: 'button', 'aria-label': 'Assign the ' + label + ' to a device', disabled: devices.length === 0,
      on: { click: busy(async () => {
        const select = h('select', { id: 'proxy-assign-device', name: 'device', required: true },
          devices.map((d) => h('option', { value: d.deviceId }, (d.name || d.deviceId) + ' (' + d.backend + ')')));
        const op = await formDialog({ title: 'Assign the proxy', intro: 'The device\'s network settings are set to use ' +
          p.endpoint.host + ':' + p.endpoint.port + '.', submitLabel: 'Assign',
        fields: h('div', { class: 'field' }, h('label', { for: 'proxy-assign-device' }, 'Device'), select),
        submit: () => operation({ proxyId: p.proxyId, kind: 'assign', deviceIds: [select.value] }) });
        if (op) { toast('Assigning: ' + op.operationId + '.', 'ok'); await reload(); }
      }) } }, 'Assign'),
    h('button', { type: 'button', 'aria-label': 'Rotate the credentials of the ' + label,
      on: { click: busy(async () => {
        if (!(await confirmDialog({ title: 'Rotate the credentials?', message: 'The current credentials are refused once the rotation is done; ' +
          'the devices behind this proxy are moved to the new ones.', confirm: 'Rotate' }))) return;
        const op = await operation({ proxyId: p.proxyId, kind: 'rotate' });
        await secretDialog({ title: 'New proxy credentials', intro: 'They replace the old ones once operation ' + op.operationId + ' is done.',
          label: 'Credentials', secret: credentialsText(op.credentials) });
        await reload();
      }) } }, 'Rotate'));
}

function proxiesTable(proxies, devices) {
  return h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'proxy-list', 'aria-labelledby': 'proxies-title' },
    h('thead', {}, h('tr', {}, ['Proxy', 'Country', 'Endpoint', 'State', 'Devices', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, proxies.map((p) => h('tr', { 'data-proxy-id': p.proxyId },
      h('th', { scope: 'row' }, h('code', { class: 'small' }, p.proxyId), h('div', { class: 'muted small' }, p.kind + ', ' + p.protocol)),
      h('td', {}, p.country),
      h('td', {}, h('code', {}, p.endpoint.host + ':' + p.endpoint.port), h('div', { class: 'muted small' }, 'user ' + p.username)),
      h('td', {}, h('span', { class: 'badge ' + (p.state === 'active' ? 'ok' : 'off') }, p.state)),
      h('td', { class: 'proxy-devices' }, p.devices.length === 0 ? '—' : p.devices.map((d) => h('div', { 'data-device-id': d },
        h('a', { href: '#/devices/' + encodeURIComponent(d) }, d), ' ',
        p.state === 'active' ? h('button', { type: 'button', class: 'small', 'aria-label': 'Take ' + d + ' off the proxy',
          on: { click: busy(async () => {
            const op = await operation({ proxyId: p.proxyId, kind: 'unassign', deviceIds: [d] });
            toast('Taking ' + d + ' off: ' + op.operationId + '.', 'ok');
            await reload();
          }) } }, 'Unassign') : null))),
      h('td', {}, proxyActions(p, devices))))))));
}

function operationsTable(ops) {
  return h('div', { class: 'table-wrap' }, stacked(h('table', { class: 'proxy-operations', 'aria-labelledby': 'proxy-operations-title' },
    h('thead', {}, h('tr', {}, ['Operation', 'Kind', 'Devices', 'State', 'Requested', 'By'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, ops.map((o) => h('tr', { 'data-operation-id': o.operationId, 'data-state': o.state },
      h('th', { scope: 'row' }, h('code', { class: 'small' }, o.operationId)),
      h('td', {}, o.kind),
      h('td', {}, o.deviceIds.join(', ') || '—'),
      h('td', {}, h('span', { class: 'badge ' + ({ succeeded: 'ok', failed: 'bad', pending: 'wait' }[o.state] || '') }, o.state),
        o.reason ? h('div', { class: 'muted small' }, (o.code ? o.code + ': ' : '') + o.reason) : null),
      h('td', {}, fmtTime(o.requestedAt)),
      h('td', {}, o.requestedBy.kind + ' ' + o.requestedBy.id)))))));
}

route('/proxies', async (main) => {
  const [products, orders, proxies, ops, devices] = await Promise.all([
    api.get('/v1/proxy-products'), api.get('/v1/proxy-orders'), api.get('/v1/proxies'),
    api.get('/v1/proxy-operations', { limit: 20 }), api.get('/v1/devices').catch(() => ({ devices: [] }))]);
  main.append(h('h1', {}, 'Proxies'),
    h('p', { class: 'muted' }, 'Managed network egress for your phones: buy a proxy in a country, assign it to devices, rotate its credentials. ' +
      'Credentials are shown once, when you first ask and on each rotation.'));
  main.append(h('h2', { id: 'proxy-products-title' }, 'Products'));
  main.append(products.products.length ? productsTable(products.products) : h('p', {}, 'This deployment sells no proxies.'));
  main.append(h('h2', { id: 'proxies-title' }, 'Proxies'));
  main.append(proxies.proxies.length ? proxiesTable(proxies.proxies, devices.devices || []) : h('p', { id: 'no-proxies' }, 'No proxies yet: a paid order issues one.'));
  main.append(h('h2', { id: 'proxy-operations-title' }, 'Operations'));
  main.append(ops.operations.length ? operationsTable(ops.operations) : h('p', {}, 'No operations yet.'));
  main.append(h('h2', { id: 'proxy-orders-title' }, 'Orders'));
  main.append(orders.orders.length ? ordersTable(orders.orders) : h('p', {}, 'No orders yet.'));
  if (ops.operations.some((o) => o.state === 'pending')) {
    const until = Date.now() + POLL_FOR_MS;
    const shown = main;
    setTimeout(function again() {
      if (!shown.isConnected || Date.now() > until) return;
      reload();
    }, POLL_EVERY_MS);
  }
});

