// Runs: the list of the organisation's runs (GET /v1/runs, its filters in
// the page's address, paged with nextBefore) with a form to start one, and
// a run's page (#/runs/{runId or agentRunId}): what it is, its controls
// (pause, resume, cancel; for a parked run, take control of its device and
// hand it back), its steps as a timeline — each an action receipt of the
// run (GET /v1/receipts?agentRunId=…) with its frames before and after —
// and every frame it saw (GET /v1/runs/{id}/frames); a run replaying a
// script shows its divergence report (GET /v1/runs/{id}/divergence): the
// first step where it diverged, why, and the original's frame beside the
// replay's. A run that has not
// ended is watched: the page reads it again every two seconds and redraws
// what changed.
import { api, h, route, toast, errorBox, fmtTime, navigate, reload } from '/console/app.js';
import { actionText, actorText, cell, frameImage, framesPair, listDevices, receiptState } from '/console/pages/receipts.js';

const runStates = ['queued', 'running', 'paused', 'awaiting_user', 'succeeded', 'failed', 'cancelled'];
const terminal = new Set(['succeeded', 'failed', 'cancelled']);
// How often a run that has not ended is read again.
const watchEveryMs = 2000;

function stateBadge(state) {
  return h('span', { class: 'run-state run-state-' + state }, state.replace('_', ' '));
}

function go(path) {
  if (location.hash === '#' + path) reload(); else navigate(path);
}

function runLink(run, text) {
  return h('a', { href: '#/runs/' + encodeURIComponent(run.runId) }, text);
}

// ---- The list.

const listFilters = ['state', 'deviceId', 'starterUserId', 'starterApiKeyId', 'limit'];

function runsPath(filters, before) {
  const q = new URLSearchParams();
  for (const n of listFilters) if (filters[n]) q.set(n, filters[n]);
  if (before) q.set('before', before);
  const s = q.toString();
  return '/runs' + (s ? '?' + s : '');
}

// started is the answer of the last start from this page, shown once on
// the list (an external run's vrxBaseUrl is its credential: kept in
// memory, shown this once).
let started = null;

function startForm(devices) {
  const goal = h('textarea', { id: 'start-goal', name: 'goal', rows: 3, required: true, maxlength: '4000',
    placeholder: 'open com.android.settings\nkey back\nfinish succeeded' });
  const device = h('select', { id: 'start-device', name: 'deviceId' },
    h('option', { value: '' }, 'any free device'),
    devices.map((d) => h('option', { value: d.deviceId }, d.name + ' (' + (d.leased ? 'leased' : d.status) + ')')));
  const executor = h('select', { id: 'start-executor', name: 'executor' },
    h('option', { value: 'builtin' }, 'builtin (the service drives it)'),
    h('option', { value: 'external' }, 'external (your worker drives it)'));
  const maxSteps = h('input', { id: 'start-maxSteps', name: 'maxSteps', type: 'number', min: '1', max: '1000', placeholder: '50' });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Start run');
  const form = h('form', { class: 'start-run', 'aria-labelledby': 'start-run-h' },
    h('h2', { id: 'start-run-h' }, 'Start a run'),
    h('label', { for: 'start-goal', class: 'wide' }, 'Goal (in words, or one step a line)', goal),
    h('div', { class: 'toolbar' },
      h('label', { for: 'start-device' }, 'Device', device),
      h('label', { for: 'start-executor' }, 'Executor', executor),
      h('label', { for: 'start-maxSteps' }, 'Max steps', maxSteps),
      submit));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    submit.disabled = true;
    const body = { goal: goal.value, executor: executor.value };
    if (device.value) body.deviceId = device.value;
    if (maxSteps.value) body.maxSteps = Number(maxSteps.value);
    try {
      const run = await api.post('/v1/runs', body);
      toast('Run ' + run.runId + ' started.', 'ok');
      if (run.executor === 'external') {
        started = run;
        go('/runs');
      } else {
        navigate('/runs/' + encodeURIComponent(run.runId));
      }
    } catch (err) {
      submit.disabled = false;
      form.querySelector('.form-error')?.remove();
      form.append(h('div', { class: 'form-error' }, errorBox(err)));
    }
  });
  return form;
}

function startedBox(run) {
  return h('section', { class: 'notice', 'aria-labelledby': 'started-h' },
    h('h2', { id: 'started-h' }, 'Run started for your worker'),
    h('p', {}, 'Your worker drives ', runLink(run, run.runId), ' through its device surface. This address carries the run\'s credential and is shown this once:'),
    h('label', { for: 'started-vrx' }, 'Device surface (vrxBaseUrl)',
      h('input', { id: 'started-vrx', type: 'text', readonly: true, value: run.vrxBaseUrl, class: 'mono wide', spellcheck: 'false' })));
}

function listFilterForm(filters, devices) {
  const state = h('select', { id: 'runs-state', name: 'state' },
    ['', ...runStates].map((s) => h('option', { value: s, selected: (filters.state || '') === s }, s ? s.replace('_', ' ') : 'any')));
  const text = (name, hint, list) => h('input', { id: 'runs-' + name, name, type: 'text', value: filters[name] || '', placeholder: hint, list, autocomplete: 'off', spellcheck: 'false' });
  const form = h('form', { class: 'filters toolbar', role: 'search', 'aria-label': 'Filter runs' },
    h('label', { for: 'runs-state' }, 'State', state),
    h('label', { for: 'runs-deviceId' }, 'Device', text('deviceId', 'any device', 'runs-devices')),
    h('datalist', { id: 'runs-devices' }, devices.map((d) => h('option', { value: d.deviceId }, d.name))),
    h('label', { for: 'runs-starterUserId' }, 'Started by person', text('starterUserId', 'user id')),
    h('label', { for: 'runs-starterApiKeyId' }, 'Started by key', text('starterApiKeyId', 'key id')),
    h('label', { for: 'runs-limit' }, 'Per page', h('input', { id: 'runs-limit', name: 'limit', type: 'number', min: '1', max: '200', value: filters.limit || '', placeholder: '50' })),
    h('button', { type: 'submit', class: 'primary' }, 'Apply filters'),
    h('a', { href: '#/runs', class: 'button' }, 'Clear'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const data = new FormData(form);
    const next = {};
    for (const n of listFilters) {
      const v = String(data.get(n) || '').trim();
      if (v) next[n] = v;
    }
    go(runsPath(next));
  });
  return form;
}

route('/runs', async (main, _params, query) => {
  const filters = {};
  for (const n of listFilters) if (query.get(n)) filters[n] = query.get(n);
  const before = query.get('before') || '';
  const devices = await listDevices();
  const byId = new Map(devices.map((d) => [d.deviceId, d]));
  main.append(h('h1', {}, 'Runs'));
  if (started) {
    main.append(startedBox(started));
    started = null;
  }
  main.append(startForm(devices));
  const results = h('section', { 'aria-labelledby': 'runs-h' }, h('h2', { id: 'runs-h' }, before ? 'Older runs' : 'Latest runs'),
    listFilterForm(filters, devices));
  main.append(results);
  let page;
  try {
    page = await api.get('/v1/runs', Object.assign({ before }, filters));
  } catch (err) {
    results.append(errorBox(err));
    return;
  }
  if (page.runs.length === 0) {
    results.append(h('p', {}, before ? 'No older runs.' : 'No runs match.'));
  } else {
    results.append(h('div', { class: 'table-wrap' }, h('table', { class: 'runs cards' },
      h('caption', { class: 'visually-hidden' }, 'Runs'),
      h('thead', {}, h('tr', {}, ['Goal', 'State', 'Device', 'Steps', 'Executor', 'Started by', 'Started', 'Ended'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, page.runs.map((r) => h('tr', { 'data-run-id': r.runId, 'data-state': r.state },
        cell('Goal', runLink(r, goalTitle(r.goal)), h('div', { class: 'muted small mono' }, r.runId)),
        cell('State', stateBadge(r.state), r.reason ? h('div', { class: 'muted small' }, r.reason) : null),
        cell('Device', h('a', { href: '#/devices/' + encodeURIComponent(r.deviceId) }, byId.get(r.deviceId)?.name || r.deviceId)),
        cell('Steps', r.stepSeq + ' / ' + r.maxSteps),
        cell('Executor', r.executor),
        cell('Started by', actorText(r.starter)),
        cell('Started', fmtTime(r.createdAt)),
        cell('Ended', r.endedAt ? fmtTime(r.endedAt) : h('span', { class: 'muted' }, '—'))))))));
  }
  const nav = h('nav', { class: 'pager toolbar', 'aria-label': 'Run pages' });
  if (before) nav.append(h('a', { href: '#' + runsPath(filters), class: 'button' }, 'Newest page'));
  if (page.nextBefore) nav.append(h('a', { href: '#' + runsPath(filters, page.nextBefore), class: 'button next-page', rel: 'next' }, 'Next page'));
  if (nav.children.length) results.append(nav);
});

// goalTitle is a goal's first line, shortened for a table.
function goalTitle(goal) {
  const first = String(goal || '').split('\n')[0];
  const more = String(goal || '').includes('\n') ? ' …' : '';
  return (first.length > 80 ? first.slice(0, 80) + '…' : first) + more;
}

// ---- One run.

// runReceipts reads the run's action receipts, oldest first (its steps).
async function runReceipts(agentRunId) {
  const all = [];
  let cursor = {};
  for (let i = 0; i < 10; i++) {
    const page = await api.get('/v1/receipts', Object.assign({ agentRunId, limit: 200 }, cursor));
    all.push(...page.receipts);
    if (!page.nextBefore) break;
    cursor = { before: page.nextBefore, beforeKey: page.nextBeforeKey };
  }
  return all.reverse();
}

// runFrames reads the frames the run saw, oldest first, up to max.
async function runFrames(runId, max) {
  const all = [];
  let after = '';
  let more = false;
  do {
    const page = await api.get('/v1/runs/' + encodeURIComponent(runId) + '/frames', { after, limit: 200 });
    all.push(...page.frames);
    after = page.nextAfter || '';
    more = !!after;
  } while (after && all.length < max);
  return { frames: all, more, after };
}

function detailRow(term, ...value) {
  return [h('dt', {}, term), h('dd', {}, ...value)];
}

function summary(run, device) {
  const rows = [
    detailRow('State', stateBadge(run.state)),
    detailRow('Device', h('a', { href: '#/devices/' + encodeURIComponent(run.deviceId) }, device ? device.name : run.deviceId),
      device ? h('span', { class: 'muted' }, ' — ' + (device.leased && device.lease ? 'held by ' + holderText(device.lease.holder, run) : 'free')) : null),
    detailRow('Steps', run.stepSeq + ' of at most ' + run.maxSteps),
    detailRow('Executor', run.executor + (run.hasScript ? ' (replaying a script)' : '')),
    detailRow('Started by', actorText(run.starter)),
    detailRow('Started', fmtTime(run.createdAt)),
    detailRow('Deadline', fmtTime(run.deadlineAt)),
  ];
  if (run.state === 'awaiting_user') {
    rows.push(detailRow('Needs a person', run.parkedReason || 'no reason given'),
      detailRow('Waits until', fmtTime(run.parkDeadlineAt)));
  }
  if (run.endedAt) rows.push(detailRow('Ended', fmtTime(run.endedAt)));
  if (run.reason) rows.push(detailRow('Reason', run.reason));
  if (run.detail) rows.push(detailRow('Detail', run.detail));
  if (run.successCheck) rows.push(detailRow('Success check', Object.entries(run.successCheck).map(([k, v]) => k + ' ' + JSON.stringify(v)).join(', ')));
  if (run.scheduleId) rows.push(detailRow('Schedule', h('code', {}, run.scheduleId)));
  rows.push(detailRow('Ids', h('code', {}, run.runId), ' ', h('code', {}, run.agentRunId)));
  return h('dl', { class: 'run-summary' }, rows);
}

function holderText(holder, run) {
  if (!holder) return 'someone';
  if (holder.runId) return holder.runId === run.runId ? 'this run' : 'run ' + holder.runId;
  return actorText(holder);
}

// handLeaseToDevicePage leaves the lease the person just took where the
// device page looks for the lease this tab holds (pages/device.js keeps
// it in sessionStorage under phonefleet.lease.<deviceId> and checks it
// against GET /v1/leases before using it), so "Drive it on the device
// page" opens the device ready to drive.
function handLeaseToDevicePage(deviceId, lease) {
  try { sessionStorage.setItem('phonefleet.lease.' + deviceId, JSON.stringify(lease)); } catch (e) { /* private mode: the device page can take it again */ }
}

// controls returns the buttons the run's state allows. Each posts its
// transition and redraws the page; a refusal is shown as the API gave it.
function controls(run, device, refresh) {
  const box = h('div', { class: 'run-controls toolbar' });
  const out = h('div', { class: 'control-result', role: 'status' });
  const act = (name, label, fn, cls) => h('button', { type: 'button', class: cls, 'data-control': name, on: { click: async (e) => {
    const b = e.currentTarget;
    b.disabled = true;
    out.replaceChildren();
    try {
      await fn();
      await refresh();
      // The buttons were redrawn: put the keyboard back on the first.
      if (!box.isConnected) document.querySelector('.run-controls button')?.focus({ preventScroll: true });
    } catch (err) {
      b.disabled = false;
      out.replaceChildren(errorBox(err));
    }
  } } }, label);
  const path = '/v1/runs/' + encodeURIComponent(run.runId);
  const transition = (verb, done) => async () => {
    await api.post(path + '/' + verb);
    toast(done, 'ok');
  };
  if (run.state === 'queued' || run.state === 'running') {
    box.append(act('pause', 'Pause', transition('pause', 'Run paused.')));
  }
  if (run.state === 'paused') {
    box.append(act('resume', 'Resume', transition('resume', 'Run resumed.'), 'primary'));
  }
  if (run.state === 'awaiting_user') {
    // While the device is free the person may take it; once a person (or
    // a key) holds it, the device page is where it is driven. Handing back
    // is resuming: the run takes the device over from the caller.
    const holder = device && device.leased && device.lease ? device.lease.holder : null;
    if (!holder) {
      box.append(act('take-control', 'Take control of the device', async () => {
        // The person leases the device until the run stops waiting (at
        // least a minute, at most an hour).
        const left = Math.round((new Date(run.parkDeadlineAt) - Date.now()) / 1000);
        const lease = await api.post('/v1/devices/' + encodeURIComponent(run.deviceId) + '/lease', { ttlSeconds: Math.min(3600, Math.max(60, left)) });
        handLeaseToDevicePage(run.deviceId, lease);
        toast('You hold ' + (device ? device.name : run.deviceId) + ' now; hand it back to the run when done.', 'ok');
      }, 'primary'));
    } else if (!holder.runId) {
      box.append(h('a', { href: '#/devices/' + encodeURIComponent(run.deviceId), class: 'button primary drive-link' }, 'Drive it on the device page'));
    }
    box.append(act('hand-back', 'Hand back to the run', transition('resume', 'Device handed back; the run continues.')));
  }
  if (!terminal.has(run.state)) {
    // Cancelling asks once more, in the page.
    const confirm = h('span', { class: 'confirm', hidden: true },
      h('span', {}, 'End this run cancelled?'),
      act('cancel', 'Yes, cancel the run', transition('cancel', 'Run cancelled.'), 'danger'),
      h('button', { type: 'button', 'data-control': 'cancel-keep', on: { click: () => { confirm.hidden = true; ask.hidden = false; ask.focus(); } } }, 'Keep it'));
    const ask = h('button', { type: 'button', class: 'danger', 'data-control': 'cancel-ask', on: { click: () => { ask.hidden = true; confirm.hidden = false; confirm.querySelector('button').focus(); } } }, 'Cancel run…');
    box.append(ask, confirm);
  }
  if (box.children.length === 0) box.append(h('p', { class: 'muted' }, 'This run has ended.'));
  box.append(h('button', { type: 'button', 'data-control': 'script', on: { click: () => downloadScript(run, out) } }, 'Export script'));
  return h('div', {}, box, out);
}

// downloadScript offers GET /v1/runs/{id}/script (the run's steps as a
// replayable script) as a JSON download.
async function downloadScript(run, out) {
  try {
    const script = await api.get('/v1/runs/' + encodeURIComponent(run.runId) + '/script');
    const name = run.runId + '-script.json';
    const link = h('a', { href: URL.createObjectURL(new Blob([JSON.stringify(script, null, 2)], { type: 'application/json' })), download: name, class: 'script-link' }, 'Download ' + name);
    out.replaceChildren(link, h('span', { class: 'muted' }, ' ' + script.steps.length + ' steps; send it as script in POST /v1/runs to replay.'));
    link.click();
  } catch (err) {
    out.replaceChildren(errorBox(err));
  }
}

function stepsList(receipts) {
  if (receipts.length === 0) return h('p', { class: 'muted' }, 'No steps yet.');
  return h('ol', { class: 'timeline' }, receipts.map((rc, i) =>
    h('li', { class: 'step', 'data-action': rc.action, 'data-state': rc.state, 'data-key': rc.idempotencyKey },
      h('h3', {}, h('span', { class: 'step-no' }, 'Step ' + (i + 1) + ': '), h('code', { class: 'action' }, actionText(rc.action, rc.arguments))),
      h('p', { class: 'step-meta' }, receiptState(rc), ' · ', h('time', { datetime: rc.timestamp }, fmtTime(rc.timestamp)),
        rc.durationMs !== undefined ? ' · ' + Math.round(rc.durationMs) + ' ms' : ''),
      framesPair(rc, 160))));
}

// divergenceBox shows a replay's divergence report: none yet (or none at
// all, for a replay that succeeded), or the step, its reason and detail,
// and the original's and the replay's frames side by side.
function divergenceBox(rep) {
  const box = h('div', { class: 'divergence', 'data-diverged': rep.divergence ? 'true' : 'false' });
  const d = rep.divergence;
  if (!d) {
    box.append(h('p', {}, terminal.has(rep.state)
      ? 'The replay followed the script: no step diverged (' + rep.steps + ' steps taken).'
      : 'No step has diverged so far (' + rep.steps + ' steps taken).'));
    return box;
  }
  const side = (s, who) => {
    const caption = who + (s.effect ? ' — effect ' + s.effect : '');
    return s.frameId ? frameImage(s.frameId, caption, 240) : h('p', { class: 'muted' }, who + ': no frame');
  };
  box.append(
    h('p', { class: 'divergence-step' }, h('strong', {}, 'Diverged at step ' + d.step), d.action ? [' (', h('code', {}, d.action), ')'] : '',
      ': ', h('span', { class: 'divergence-reason' }, d.reason)),
    d.detail ? h('p', { class: 'muted divergence-detail' }, d.detail) : '',
    h('div', { class: 'frames-pair divergence-frames' }, side(d.expected, 'original'), side(d.actual, 'replay')));
  return box;
}

function framesGallery(run, result, stepOf, loadMore) {
  if (result.frames.length === 0) return h('p', { class: 'muted' }, 'No frames yet.');
  const list = h('ol', { class: 'frame-gallery' }, result.frames.map((f) => {
    const step = f.actionId ? stepOf.get(f.actionId) : undefined;
    const what = f.kind === 'observed' ? 'observed' : f.kind + (step ? ' step ' + step : ' an action');
    return h('li', { 'data-frame-id': f.frameId, 'data-kind': f.kind }, frameImage(f.frameId, what + ', ' + fmtTime(f.at), 120));
  }));
  const box = h('div', {}, list);
  if (result.more) box.append(h('button', { type: 'button', on: { click: loadMore } }, 'More frames'));
  return box;
}

route('/runs/:id', async (main, params) => {
  const id = params.id;
  let run = await api.get('/v1/runs/' + encodeURIComponent(id));
  const title = h('h1', {}, 'Run: ', h('span', { class: 'goal-title' }, goalTitle(run.goal)));
  const summaryBox = h('section', { 'aria-label': 'Run summary' });
  const controlBox = h('section', { 'aria-labelledby': 'run-control-h' });
  const stepsBox = h('div', {});
  const framesBox = h('div', {});
  const replayBox = h('section', { 'aria-labelledby': 'run-replay-h', class: 'run-replay', hidden: !run.hasScript });
  const stepsCount = h('span', { class: 'muted' });
  const framesCount = h('span', { class: 'muted' });
  let frameLimit = 200;
  main.append(h('p', {}, h('a', { href: '#/runs' }, '← All runs')), title,
    h('pre', { class: 'goal' }, run.goal),
    summaryBox, controlBox, replayBox,
    h('section', { 'aria-labelledby': 'run-steps-h', class: 'run-steps' }, h('h2', { id: 'run-steps-h' }, 'Steps ', stepsCount),
      h('p', { class: 'muted' }, 'Each step is one action receipt of the run, with the screen before and after it (',
        h('a', { href: '#/receipts?agentRunId=' + encodeURIComponent(run.agentRunId) }, 'the run\'s receipts'), ').'),
      stepsBox),
    h('section', { 'aria-labelledby': 'run-frames-h', class: 'run-frames' }, h('h2', { id: 'run-frames-h' }, 'Frames ', framesCount), framesBox));

  let last = '';
  let pendingSteps = false;
  // draw redraws the page when the run (read by the caller) or who holds
  // its device changed, or a step was still pending: then the steps and
  // frames are read again too.
  const draw = async (force) => {
    const device = await api.get('/v1/devices/' + encodeURIComponent(run.deviceId)).catch(() => null);
    const holder = device && device.leased && device.lease ? JSON.stringify(device.lease.holder) : '';
    const sig = [run.state, run.stepSeq, run.updatedAt, holder].join('|');
    if (!force && sig === last && !pendingSteps) return;
    last = sig;
    const [receipts, frames, report] = await Promise.all([
      runReceipts(run.agentRunId).catch((e) => e),
      runFrames(run.runId, frameLimit).catch((e) => e),
      run.hasScript ? api.get('/v1/runs/' + encodeURIComponent(run.runId) + '/divergence').catch((e) => e) : null,
    ]);
    if (report) {
      replayBox.replaceChildren(h('h2', { id: 'run-replay-h' }, 'Replay'),
        report instanceof Error ? errorBox(report) : divergenceBox(report));
    }
    summaryBox.replaceChildren(summary(run, device));
    // Keep the keyboard in the controls when they are redrawn under it.
    const hadFocus = controlBox.contains(document.activeElement);
    controlBox.replaceChildren(h('h2', { id: 'run-control-h' }, 'Control'), controls(run, device, refresh));
    if (hadFocus) controlBox.querySelector('button')?.focus({ preventScroll: true });
    if (receipts instanceof Error) {
      stepsBox.replaceChildren(errorBox(receipts));
      pendingSteps = false;
    } else {
      pendingSteps = receipts.some((r) => r.state === 'pending' && !r.outcomeUnknown);
      stepsCount.textContent = '(' + receipts.length + ')';
      stepsBox.replaceChildren(stepsList(receipts));
    }
    if (frames instanceof Error) {
      framesBox.replaceChildren(errorBox(frames));
    } else {
      const stepOf = new Map();
      if (!(receipts instanceof Error)) receipts.forEach((r, i) => stepOf.set(r.actionId, i + 1));
      framesCount.textContent = '(' + frames.frames.length + (frames.more ? '+' : '') + ')';
      framesBox.replaceChildren(framesGallery(run, frames, stepOf, () => { frameLimit += 200; draw(true); }));
    }
  };
  // refresh reads the run again and redraws (after an action, and while
  // the run is watched).
  const refresh = async () => {
    run = await api.get('/v1/runs/' + encodeURIComponent(id));
    await draw(true);
  };
  await draw(true);

  // Watch a run that has not ended until it ends or the page is left (the
  // router shows the page as soon as this function returns, so a page not
  // in the document at the first tick was left or replaced).
  const tick = async () => {
    if (!main.isConnected) return;
    if (terminal.has(run.state) && !pendingSteps) return;
    try {
      run = await api.get('/v1/runs/' + encodeURIComponent(id));
      if (main.isConnected) await draw(false);
    } catch (err) {
      if (main.isConnected) summaryBox.replaceChildren(errorBox(err));
    }
    setTimeout(tick, watchEveryMs);
  };
  setTimeout(tick, watchEveryMs);
});
