// Operators: every projection (read model) the service runs, with its
// live version, state, how far it trails the event feed, and a rebuild
// under way with its progress; refreshed on demand and every few seconds.
import { api, h, route, toast, fmtTime } from '/console/app.js';
import { stacked } from '/console/pages/admin-common.js';

const REFRESH_MS = 5000;

const numbers = new Intl.NumberFormat();

function stateBadge(p) {
  const kind = { live: 'ok', rebuilding: 'wait', failing: 'bad', new: 'off' }[p.state] || '';
  return h('span', { class: 'badge ' + kind }, p.state);
}

function rebuildCell(p) {
  const b = p.rebuild;
  if (!b) return h('span', { class: 'muted' }, '—');
  const pct = Math.floor(b.progress * 1000) / 10;
  const id = 'rebuild-' + p.name;
  return h('div', { class: 'rebuild' },
    h('label', { for: id, class: 'rebuild-label' }, 'Version ' + b.version + ': ' + pct + '%'),
    h('progress', { id, max: 1, value: b.progress }, pct + '%'),
    h('div', { class: 'muted small' }, numbers.format(b.lag) + ' events to go' + (b.startedAt ? '; started ' + fmtTime(b.startedAt) : '')));
}

function row(p) {
  return h('tr', { 'data-projection': p.name, 'data-state': p.state },
    h('th', { scope: 'row' }, h('code', {}, p.name)),
    h('td', { class: 'num' }, String(p.version)),
    h('td', {}, stateBadge(p), p.lastError ? h('details', {}, h('summary', {}, 'Last error'), h('pre', { class: 'payload' }, p.lastError)) : null),
    h('td', { class: 'num' }, numbers.format(p.lag)),
    h('td', {}, fmtTime(p.updatedAt)),
    h('td', {}, rebuildCell(p)));
}

function summaryText(list) {
  const count = (s) => list.filter((p) => p.state === s).length;
  const parts = [list.length + (list.length === 1 ? ' projection' : ' projections')];
  for (const s of ['failing', 'rebuilding', 'new']) if (count(s)) parts.push(count(s) + ' ' + s);
  const behind = list.filter((p) => p.lag > 0).length;
  parts.push(behind ? behind + ' behind the feed' : 'every live version caught up');
  return parts.join(' · ');
}

route('/operators', async (main) => {
  const body = h('tbody', {});
  const table = h('table', { class: 'projections', 'aria-labelledby': 'projections-title', 'aria-describedby': 'projections-summary' },
    h('thead', {}, h('tr', {}, ['Projection', 'Version', 'State', 'Lag (events)', 'Updated', 'Rebuild']
      .map((c, i) => h('th', { scope: 'col', class: i === 1 || i === 3 ? 'num' : null }, c)))),
    body);
  const summary = h('p', { id: 'projections-summary' });
  const stamp = h('span', { class: 'muted small' });
  const auto = h('input', { type: 'checkbox', id: 'projections-auto', checked: true });
  let timer = null;

  async function load() {
    const { projections } = await api.get('/v1/operators/projections');
    body.replaceChildren(...projections.map(row));
    stacked(table);
    summary.textContent = summaryText(projections);
    stamp.textContent = 'as of ' + fmtTime(new Date().toISOString());
  }
  // schedule refreshes every REFRESH_MS while the box is ticked and the
  // page is shown.
  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      if (!main.isConnected || !auto.checked) return;
      try { await load(); } catch (e) { /* shown on the next manual refresh */ }
      schedule();
    }, REFRESH_MS);
  }
  auto.addEventListener('change', () => { if (auto.checked) schedule(); else clearTimeout(timer); });

  await load();
  main.append(h('h1', {}, 'Operators'),
    h('p', { class: 'muted' }, 'The service\'s read models (projections): the live version answering reads, its state, ' +
      'how many events it trails the feed by, and a rebuild under way beside it.'),
    h('div', { class: 'toolbar' },
      h('button', { type: 'button', on: { click: async (ev) => {
        const b = ev.currentTarget;
        b.disabled = true;
        try { await load(); schedule(); } catch (e) { toast((e.code ? e.code + ': ' : '') + e.message, 'error'); } finally { b.disabled = false; }
      } } }, 'Refresh'),
      h('label', { class: 'check', for: 'projections-auto' }, auto, h('span', {}, 'Refresh every ' + REFRESH_MS / 1000 + ' seconds')),
      stamp),
    h('h2', { id: 'projections-title' }, 'Projections'),
    summary,
    h('div', { class: 'table-wrap' }, table));
  schedule();
});
