// The copilot panel of the device page (a chat with the copilot about this
// phone) and of the fleet page (about all the person's phones: the model
// lists them and names the one each call is for): its text streamed as the model produces it), each tool call and
// its receipt, approve/deny cards showing the exact action, its arguments
// and the frame it was decided on, a stop button, the monthly allowance
// gauge (hosted, metered deployments only) and direct commands (command
// mode, always served; the only way once the allowance is spent).
// Routes: POST /v1/copilot, GET /v1/copilot/threads,
// GET /v1/copilot/threads/{id}/stream, POST /v1/copilot/threads/{id}/stop,
// POST /v1/copilot/approvals, POST /v1/copilot/commands,
// GET /v1/copilot/allowance.
import { api, h, hosted, toast } from '/console/app.js';
import { actionText, frameImage } from '/console/pages/receipts.js';

// How wide a card's frame is drawn.
const cardFrameWidth = 180;
// How long to wait before reading the stream again after it dropped.
const reconnectMs = 1000;

function errText(e) { return (e.code || 'error') + ': ' + (e.message || String(e)); }

function parseArgs(raw) {
  if (raw && typeof raw === 'object') return raw;
  try { return JSON.parse(raw || '{}'); } catch (e) { return {}; }
}

// readEvents reads a text/event-stream with fetch (so the bearer token
// goes along in hosted mode, which EventSource cannot do), calling onEvent
// with each event; it resumes after the last id it saw (Last-Event-ID)
// when the connection drops, until signal aborts.
async function readEvents(path, signal, onEvent) {
  let last = '';
  while (!signal.aborted) {
    try {
      const headers = last ? { 'Last-Event-ID': last } : {};
      const r = await api.raw(path, { signal, headers });
      if (!r.ok || !r.body) throw new Error('HTTP ' + r.status);
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const ev = { id: '', event: 'message', data: '' };
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) continue;
            const i = line.indexOf(':');
            const k = i < 0 ? line : line.slice(0, i);
            const v = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
            if (k === 'id') ev.id = v;
            else if (k === 'event') ev.event = v;
            else if (k === 'data') ev.data += (ev.data ? '\n' : '') + v;
          }
          if (!ev.data) continue;
          if (ev.id) last = ev.id;
          let data = {};
          try { data = JSON.parse(ev.data); } catch (e) { /* not JSON: skipped */ }
          onEvent(ev.event, data, ev.id);
        }
      }
    } catch (e) {
      if (signal.aborted || e.name === 'AbortError') return;
    }
    await new Promise((res) => setTimeout(res, reconnectMs));
  }
}

// copilotPanel returns the panel for deviceId, or for the fleet when
// deviceId is null (no direct commands there: a command is for one phone);
// afterAction is called when the copilot or a command acted on the phone
// (the page refreshes its receipts).
export function copilotPanel(deviceId, afterAction) {
  const fleet = deviceId === null;
  const log = h('ol', { class: 'copilot-log', 'aria-label': 'Conversation with the copilot', 'aria-live': 'polite' });
  const note = h('p', { class: 'muted small copilot-note', role: 'status' });
  const gauge = h('div', { class: 'copilot-gauge', hidden: true });
  const chatInput = h('input', { id: 'copilot-message', type: 'text', name: 'message', maxlength: '4000', autocomplete: 'off' });
  const sendBtn = h('button', { type: 'submit', class: 'primary copilot-send' }, 'Send');
  const stopBtn = h('button', { type: 'button', class: 'danger copilot-stop', disabled: true }, 'Stop');
  const newBtn = h('button', { type: 'button', class: 'copilot-new', disabled: true }, 'New thread');
  const every = h('input', { id: 'copilot-every', type: 'checkbox', name: 'approveEveryAction' });
  const chatForm = h('form', { class: 'copilot-chat', 'aria-label': 'Ask the copilot' },
    h('label', { for: 'copilot-message' }, 'Ask the copilot', chatInput),
    h('label', { for: 'copilot-every', class: 'checkbox' }, every, 'Ask me before every action'),
    h('div', { class: 'toolbar' }, sendBtn, stopBtn, newBtn));
  const cmdInput = h('input', { id: 'copilot-command', type: 'text', name: 'command', maxlength: '1000', autocomplete: 'off',
    placeholder: 'tap "Save" · type "hello" · open Notes · back · home · swipe up · screenshot' });
  const cmdForm = h('form', { class: 'copilot-commands', 'aria-label': 'Direct commands' },
    h('label', { for: 'copilot-command' }, 'Direct command', cmdInput),
    h('div', { class: 'toolbar' }, h('button', { type: 'submit', class: 'copilot-run' }, 'Run')));

  const newThreadNote = 'A new thread starts with your next message.';
  let threadId = '';
  let stream = null;
  let working = false;
  const bubbles = new Map(); // turnId:step → text element
  const calls = new Map(); // callId → item
  const cards = new Map(); // approvalId → card

  const setWorking = (w) => {
    working = w;
    stopBtn.disabled = !w;
    sendBtn.disabled = w;
    panel.dataset.working = String(w);
  };
  const add = (el) => { log.append(el); log.scrollTop = log.scrollHeight; return el; };

  function onEvent(type, d) {
    switch (type) {
      case 'copilot.message_posted':
        add(h('li', { class: 'copilot-msg user' }, h('span', { class: 'who' }, 'You'), h('p', {}, d.text)));
        setWorking(true);
        break;
      case 'copilot.text_streamed': {
        const key = d.turnId + ':' + d.step;
        let p = bubbles.get(key);
        if (!p) {
          p = h('p', { class: 'copilot-text' });
          add(h('li', { class: 'copilot-msg assistant', 'data-turn': d.turnId }, h('span', { class: 'who' }, 'Copilot'), p));
          bubbles.set(key, p);
        }
        p.textContent += d.text;
        break;
      }
      case 'copilot.tool_called': {
        const args = parseArgs(d.arguments);
        delete args.deviceId;
        const it = add(h('li', { class: 'copilot-call', 'data-call': d.callId, 'data-state': 'pending', 'data-device': d.deviceId || '' },
          fleet && d.deviceId ? h('span', { class: 'muted call-device' }, d.deviceId + ' · ') : null,
          h('code', {}, d.tool === 'list_devices' ? 'list devices' : actionText(d.tool, args)), ' ', h('span', { class: 'call-state' }, '…')));
        calls.set(d.callId, it);
        break;
      }
      case 'copilot.tool_completed': {
        const it = calls.get(d.callId);
        if (!it) break;
        it.dataset.state = d.state;
        const said = d.receiptState ? 'receipt ' + d.receiptState : (d.frameId ? 'looked' : d.state);
        it.querySelector('.call-state').textContent = d.error ? said + ' — ' + d.error.code + ': ' + d.error.message : said;
        if (d.receiptState && afterAction) afterAction();
        break;
      }
      case 'copilot.approval_requested':
        cards.set(d.approvalId, add(approvalCard(d)));
        break;
      case 'copilot.approval_granted':
      case 'copilot.approval_denied':
      case 'copilot.approval_expired':
      case 'copilot.approval_refused': {
        const card = cards.get(d.approvalId);
        if (!card) break;
        const state = type.slice('copilot.approval_'.length);
        card.dataset.state = state;
        card.querySelectorAll('button').forEach((b) => { b.disabled = true; });
        card.querySelector('.approval-state').textContent = state + (d.reason ? ' (' + d.reason + ')' : '');
        break;
      }
      case 'copilot.turn_ended': {
        setWorking(false);
        const text = d.outcome + (d.reason && d.reason !== d.outcome ? ' — ' + d.reason : '');
        add(h('li', { class: 'copilot-end', 'data-outcome': d.outcome, 'data-reason': d.reason || '' },
          h('span', {}, text), d.detail && d.outcome !== 'completed' ? h('span', { class: 'muted' }, ': ' + d.detail) : null));
        // What the turn spent shows on the gauge.
        loadAllowance();
        break;
      }
      default:
        break;
    }
  }

  // approvalCard shows what exactly would run: the action, its arguments,
  // the frame it was decided on, and why it asks.
  function reasonText(reason) {
    switch (reason) {
      case 'every_action': return '(you asked to approve every action)';
      case 'sensitive_field': return '(it types into a password field)';
      case 'payment_screen': return '(it comes after a payment screen)';
      default: return '(the deployment\'s policy asks)';
    }
  }

  function approvalCard(d) {
    const args = parseArgs(d.arguments);
    const approve = h('button', { type: 'button', class: 'primary approval-approve' }, 'Approve');
    const deny = h('button', { type: 'button', class: 'danger approval-deny' }, 'Deny');
    const card = h('li', { class: 'approval-card', 'data-approval': d.approvalId, 'data-state': 'pending' },
      h('p', {}, h('strong', {}, 'Approve this action?'), ' ',
        h('span', { class: 'muted' }, reasonText(d.reason))),
      h('p', {}, fleet ? h('span', { class: 'muted approval-device' }, 'on ' + d.deviceId + ' · ') : null,
        h('code', { class: 'approval-action' }, actionText(d.action, args))),
      h('pre', { class: 'approval-args' }, JSON.stringify(args, null, 2)),
      d.frame ? frameImage(d.frame, 'the screen it was decided on', cardFrameWidth) : null,
      h('p', { class: 'muted small' }, 'Lease fencing token ', h('code', {}, String(d.fencingToken)),
        ' · digest ', h('code', { class: 'approval-digest' }, (d.digest || '').slice(0, 12) + '…')),
      h('div', { class: 'toolbar' }, approve, deny, h('span', { class: 'approval-state', role: 'status' }, 'waiting for you')));
    const decide = async (decision) => {
      approve.disabled = deny.disabled = true;
      try {
        const r = await api.post('/v1/copilot/approvals', { approvalId: d.approvalId, decision, digest: d.digest });
        toast('Approval ' + r.state + '.', 'ok');
      } catch (e) {
        toast('Could not decide: ' + errText(e), 'error');
        const state = e.body && e.body.error && e.body.error.state;
        if (!state) { approve.disabled = deny.disabled = false; }
      }
      if (afterAction) afterAction();
    };
    approve.addEventListener('click', () => decide('approve'));
    deny.addEventListener('click', () => decide('deny'));
    return card;
  }

  function follow(id) {
    if (stream) stream.abort();
    threadId = id;
    panel.dataset.threadId = id;
    newBtn.disabled = false;
    if (note.textContent === newThreadNote) note.textContent = '';
    // The approval choice is made when a thread starts.
    every.closest('label').hidden = true;
    log.replaceChildren();
    bubbles.clear(); calls.clear(); cards.clear();
    stream = new AbortController();
    const ctrl = stream;
    // Stop reading once the panel has left the document.
    const watch = new MutationObserver(() => { if (!panel.isConnected) { watch.disconnect(); ctrl.abort(); } });
    queueMicrotask(() => watch.observe(document.body, { childList: true, subtree: true }));
    readEvents('/v1/copilot/threads/' + encodeURIComponent(id) + '/stream', ctrl.signal, onEvent);
  }

  chatForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const message = chatInput.value.trim();
    if (!message) { chatInput.focus(); return; }
    sendBtn.disabled = true;
    try {
      const body = threadId ? { threadId, message } : { message, approveEveryAction: every.checked };
      if (!threadId && !fleet) body.deviceId = deviceId;
      const r = await api.post('/v1/copilot', body);
      chatInput.value = '';
      if (r.threadId !== threadId) follow(r.threadId);
    } catch (err) {
      toast('The copilot did not take the message: ' + errText(err), 'error');
      if (err.code === 'service_unavailable') note.textContent = 'This deployment has no copilot model; direct commands still work.';
      sendBtn.disabled = working;
    }
  });
  // A new thread: the next message starts one about this phone or the fleet (the
  // approval choice is offered again); the old thread stays in the list.
  newBtn.addEventListener('click', () => {
    if (stream) stream.abort();
    stream = null;
    threadId = '';
    delete panel.dataset.threadId;
    newBtn.disabled = true;
    every.checked = false;
    every.closest('label').hidden = false;
    log.replaceChildren();
    bubbles.clear(); calls.clear(); cards.clear();
    setWorking(false);
    note.textContent = newThreadNote;
    chatInput.focus();
  });
  stopBtn.addEventListener('click', async () => {
    if (!threadId) return;
    stopBtn.disabled = true;
    try {
      await api.post('/v1/copilot/threads/' + encodeURIComponent(threadId) + '/stop');
      toast('Stopped.', 'ok');
    } catch (err) {
      toast('Could not stop: ' + errText(err), 'error');
      stopBtn.disabled = !working;
    }
  });
  cmdForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const command = cmdInput.value.trim();
    if (!command) { cmdInput.focus(); return; }
    const item = add(h('li', { class: 'copilot-command', 'data-state': 'running' }, h('code', {}, command), ' ', h('span', { class: 'call-state' }, '…')));
    try {
      const r = await api.post('/v1/copilot/commands', { deviceId, command });
      const states = (r.receipts || []).map((rc) => rc.action + ' ' + rc.state);
      item.dataset.state = 'done';
      item.querySelector('.call-state').textContent = states.length ? states.join(', ') : (r.frameId ? 'screen observed' : 'done');
      cmdInput.value = '';
    } catch (err) {
      item.dataset.state = 'failed';
      item.querySelector('.call-state').textContent = errText(err);
    }
    if (afterAction) afterAction();
  });

  // The allowance gauge: drawn only when the deployment meters the
  // copilot.
  // gauge.dataset.allowance says what the last look found: 'unserved'
  // (local), 'unavailable' (the read refused), 'unmetered' or 'shown'.
  async function loadAllowance() {
    // A local deployment does not mount the read (spec 4.2: 404): it is
    // not asked, so a normal page logs no failed request.
    if (!hosted()) { gauge.hidden = true; gauge.dataset.allowance = 'unserved'; return; }
    let a;
    try {
      a = await api.get('/v1/copilot/allowance');
    } catch (e) {
      gauge.hidden = true;
      gauge.dataset.allowance = 'unavailable';
      return;
    }
    if (!a.metered) { gauge.hidden = true; gauge.dataset.allowance = 'unmetered'; return; }
    gauge.dataset.allowance = 'shown';
    const pct = Math.round(a.usedFraction * 1000) / 10;
    const bar = h('div', { class: 'gauge-bar' });
    bar.style.width = pct + '%';
    gauge.className = 'copilot-gauge' + (a.exhausted ? ' exhausted' : a.nearLimit ? ' near-limit' : '');
    gauge.dataset.usedFraction = String(a.usedFraction);
    gauge.replaceChildren(
      h('div', { class: 'gauge-track', role: 'meter', 'aria-label': 'Copilot allowance used', 'aria-valuemin': '0', 'aria-valuemax': '1',
        'aria-valuenow': String(a.usedFraction) }, bar),
      h('p', { class: 'small' }, a.used.toLocaleString() + ' of ' + a.included.toLocaleString() + ' tokens this month (from ' + a.period + ')',
        a.exhausted ? ' — spent: direct commands only until it renews.' : a.nearLimit ? ' — nearly spent.' : ''));
    gauge.hidden = false;
    chatForm.hidden = a.exhausted;
    if (a.exhausted) note.textContent = fleet ? 'The copilot allowance is spent: use direct commands on a phone\'s page.'
      : 'The copilot allowance is spent: use direct commands below.';
  }

  const panel = h('section', { class: 'device-copilot' + (fleet ? ' fleet-copilot' : ''), 'aria-labelledby': 'copilot-heading' },
    h('h2', { id: 'copilot-heading' }, fleet ? 'Fleet copilot' : 'Copilot'),
    fleet ? h('p', { class: 'muted small' }, 'Ask about all your phones: the copilot lists them and says which one it acts on.') : null,
    gauge, log, note, chatForm, fleet ? null : cmdForm);

  // The latest thread about this phone (or the fleet: deviceId null), if
  // any, is followed.
  (async () => {
    try {
      const list = await api.get('/v1/copilot/threads', { limit: 100 });
      const t = (list.threads || []).find((x) => x.deviceId === deviceId);
      if (t) follow(t.threadId);
    } catch (e) {
      note.textContent = 'Could not read the copilot threads: ' + errText(e);
    }
  })();
  loadAllowance();
  return panel;
}
