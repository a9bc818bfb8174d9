// CLI sign-in: the page `phonefleet login` sends the person to
// (#/cli?code=BCDF-GHJK). It shows what the CLI asks for (the client, the
// computer, the scopes, of which the person may untick some) and approves
// or denies it through /v1/cli-sessions. Approving mints an API key for the
// signed-in person; the CLI receives it on its next poll, sealed to a key
// only the CLI holds, so the page never sees the key's token.
import { api, h, route, fmtTime, errorBox, navigate, toast } from '/console/app.js';

// What each scope allows (spec 5.4).
const SCOPE_TEXT = {
  'devices:read': 'list devices, watch screens, read outcomes',
  'devices:act': 'gestures and input on a leased device',
  'devices:lease': 'take and return exclusive use of a device',
  'runs:start': 'hand a device to an autonomous run, watch or end it',
  'orders:place': 'start a prepaid checkout',
  'apps:read': 'read the app library',
  'apps:write': 'save and publish builds to the app library',
  'apps:delete': 'delete versions from the app library',
};

const STATE_TEXT = {
  pending: 'waiting for your decision',
  approved: 'approved; the CLI has not collected its key yet',
  consumed: 'approved; the CLI has its key',
  denied: 'denied',
  expired: 'expired before anyone decided',
};

// codeForm asks for a code when the page is opened without one (or with
// one that names nothing).
function codeForm(value) {
  const input = h('input', { id: 'cli-code', name: 'code', type: 'text', value: value || '', autocomplete: 'off',
    autocapitalize: 'characters', spellcheck: 'false', placeholder: 'BCDF-GHJK', required: true, 'aria-describedby': 'cli-code-hint' });
  return h('form', { class: 'toolbar cli-code', on: { submit: (e) => {
    e.preventDefault();
    navigate('/cli?code=' + encodeURIComponent(input.value.trim()));
  } } },
  h('label', { for: 'cli-code' }, 'Code shown by phonefleet login', input),
  h('span', { id: 'cli-code-hint', class: 'muted small visually-hidden' }, 'Four letters, a hyphen and four letters.'),
  h('button', { type: 'submit' }, 'Look up'));
}

function facts(s) {
  const row = (name, value) => [h('dt', {}, name), h('dd', {}, value)];
  return h('dl', { class: 'cli-facts' },
    row('Code', h('code', { class: 'cli-code-value' }, s.userCode)),
    row('Client', s.clientName),
    row('Computer', s.host || '(not named)'),
    row('Key it gets', s.keyName),
    row('Asked at', fmtTime(s.createdAt)),
    s.state === 'pending' ? row('Expires', fmtTime(s.expiresAt)) : null,
    row('State', h('span', { class: 'cli-state cli-state-' + s.state, 'data-state': s.state }, STATE_TEXT[s.state] || s.state)),
    s.decidedBy ? row('Decided by', (s.decidedBy.userId || '') + ' at ' + fmtTime(s.decidedAt)) : null,
    s.keyId ? row('API key', h('a', { href: '#/keys' }, h('code', {}, s.keyId))) : null,
    s.grantedScopes.length ? row('Scopes granted', s.grantedScopes.map((sc) => h('code', { class: 'tag' }, sc))) : null);
}

// scopeChoice lists the scopes asked for: those the person holds ticked,
// the others shown but not offered.
function scopeChoice(s) {
  return h('fieldset', { class: 'scopes cli-scopes', 'aria-describedby': 'cli-scopes-hint' },
    h('legend', {}, 'What the key may do'),
    h('p', { id: 'cli-scopes-hint', class: 'muted small' },
      'The key carries the ticked scopes; untick any the CLI does not need. A key never carries a scope you do not hold.'),
    s.scopes.map((sc) => {
      const held = s.grantableScopes.includes(sc);
      return h('label', { class: 'check' + (held ? '' : ' muted') },
        h('input', { type: 'checkbox', name: 'scopes', value: sc, checked: held, disabled: !held }),
        h('span', {}, h('code', {}, sc), ' — ' + (SCOPE_TEXT[sc] || ''), held ? null : ' (you do not hold it)'));
    }));
}

function outcome(main, s, verb) {
  const done = s.state === 'denied'
    ? 'Denied. The CLI stops waiting and stores nothing.'
    : 'Approved. The CLI receives API key ' + s.keyId + ' on its next poll; go back to your terminal.';
  main.replaceChildren(
    h('h1', {}, 'Sign in a CLI'),
    h('p', { class: 'cli-outcome', role: 'status', 'data-outcome': verb }, done),
    facts(s));
  if (s.state !== 'denied') {
    main.append(h('p', {}, 'The key is listed with your ', h('a', { href: '#/keys' }, 'API keys'), '; revoke it there, or with phonefleet logout.'));
  }
}

function decision(main, s) {
  const box = scopeChoice(s);
  const status = h('div', { class: 'cli-error', 'aria-live': 'assertive' });
  const buttons = [];
  const act = async (verb) => {
    const body = { userCode: s.userCode };
    if (verb === 'approve') {
      body.scopes = [...box.querySelectorAll('input[name=scopes]:checked')].map((i) => i.value);
      if (body.scopes.length === 0) {
        status.replaceChildren(h('p', { class: 'error-text' }, 'Tick at least one scope, or deny the sign-in.'));
        return;
      }
    }
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const after = await api.post('/v1/cli-sessions/' + encodeURIComponent(s.sessionId) + '/' + verb, body);
      toast(verb === 'approve' ? 'CLI sign-in approved' : 'CLI sign-in denied', 'ok');
      outcome(main, after, verb);
    } catch (e) {
      status.replaceChildren(errorBox(e));
      buttons.forEach((b) => { b.disabled = false; });
    }
  };
  const approve = h('button', { type: 'button', class: 'primary', on: { click: () => act('approve') } }, 'Approve');
  const deny = h('button', { type: 'button', class: 'danger', on: { click: () => act('deny') } }, 'Deny');
  buttons.push(approve, deny);
  return h('section', { class: 'cli-decision', 'aria-labelledby': 'cli-decide' },
    h('h2', { id: 'cli-decide' }, 'Your decision'),
    h('p', { class: 'cli-warning' }, 'Approve only if you just ran phonefleet login yourself and your terminal shows the code ',
      h('strong', {}, h('code', {}, s.userCode)), '.'),
    box,
    h('div', { class: 'toolbar' }, approve, deny),
    status);
}

route('/cli', async (main, params, query) => {
  const code = (query.get('code') || '').trim();
  main.append(h('h1', {}, 'Sign in a CLI'));
  if (!code) {
    main.append(h('p', {}, 'Enter the code that phonefleet login printed in your terminal.'), codeForm(''));
    return;
  }
  let s;
  try {
    s = await api.get('/v1/cli-sessions/by-code/' + encodeURIComponent(code));
  } catch (e) {
    if (e.status === 401) throw e; // the core asks to sign in again
    main.append(errorBox(e),
      h('p', {}, 'Check the code in your terminal; a code lasts ten minutes. Run phonefleet login again for a new one.'),
      codeForm(code));
    return;
  }
  main.append(h('p', {}, 'A command-line client is asking to act as you, with an API key minted for you.'), facts(s));
  if (s.state === 'pending') {
    main.append(decision(main, s));
  } else if (s.state === 'expired') {
    main.append(h('p', {}, 'This code expired. Run phonefleet login again for a new one.'));
  }
});
