// The fleet: every device's live screen with its status, holder and lease,
// and the fleet copilot.
import { api, h, route, liveScreen, fmtTime } from '/console/app.js';
import { copilotPanel } from '/console/pages/copilot.js';

function holderText(lease) {
  if (!lease || !lease.holder) return 'free';
  const a = lease.holder;
  if (a.runId) return 'run ' + a.runId;
  if (a.apiKeyId) return 'key ' + a.apiKeyId;
  return a.userId || 'someone';
}

async function fleetPage(main) {
  const devices = [];
  let after = '';
  do {
    const page = await api.get('/v1/devices', { limit: 200, after });
    devices.push(...page.devices);
    after = page.nextAfter || '';
  } while (after);
  main.append(h('h1', {}, 'Fleet'),
    h('p', { class: 'muted' }, devices.length + (devices.length === 1 ? ' device' : ' devices')));
  if (devices.length === 0) {
    main.append(h('p', {}, 'No devices yet.'));
    return;
  }
  main.append(h('ul', { class: 'fleet', 'aria-label': 'Devices' }, devices.map((d) =>
    h('li', { class: 'device-card', 'data-device-id': d.deviceId },
      h('a', { href: '#/devices/' + encodeURIComponent(d.deviceId), 'aria-label': 'Open ' + d.name },
        liveScreen(d.deviceId, { maxWidth: 270, fps: 2, label: d.name })),
      h('div', { class: 'device-meta' },
        h('a', { href: '#/devices/' + encodeURIComponent(d.deviceId), class: 'device-name' }, d.name),
        h('span', { class: 'status status-' + d.status }, d.status),
        h('span', { class: 'holder' }, d.leased ? 'leased by ' + holderText(d.lease) : 'free'),
        d.leased && d.lease ? h('span', { class: 'muted' }, 'until ' + fmtTime(d.lease.expiresAt)) : null)))));
  // A chat with the copilot about the whole fleet.
  main.append(copilotPanel(null, null));
}

// The fleet is #/fleet; #/devices, the parent of every #/devices/<id>,
// shows it too.
route('/fleet', fleetPage);
route('/devices', fleetPage);
