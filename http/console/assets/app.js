// The console's core: configuration, sign-in, the API client, the router,
// a DOM helper and live screens. Pages import it and register a route.
// Nothing here is fetched from outside the service.

const config = JSON.parse(document.getElementById('console-config').textContent);

// ---- Sign-in (hosted mode): authorization code + PKCE; the token is kept
// in this module's memory only. The verifier and state live in
// sessionStorage for the one redirect to the authorization server and back.

let token = null;
let tokenExpires = 0;

function b64url(bytes) {
  let s = '';
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function randomString(n) {
  const a = new Uint8Array(n);
  crypto.getRandomValues(a);
  return b64url(a);
}

async function authServer() {
  const base = config.issuer.replace(/\/$/, '');
  // RFC 8414 puts the well-known segment before an issuer's path; OpenID
  // Connect appends it. A document naming another issuer is not used
  // (RFC 8414 3.3: no mix-up with another server).
  const iss = new URL(base);
  const path = iss.pathname.replace(/\/$/, '');
  for (const u of [iss.origin + '/.well-known/oauth-authorization-server' + path, base + '/.well-known/openid-configuration']) {
    try {
      const r = await fetch(u);
      if (!r.ok) continue;
      const meta = await r.json();
      if (String(meta.issuer || '').replace(/\/$/, '') === base) return meta;
    } catch (e) { /* try the next document */ }
  }
  throw new Error('the authorization server ' + base + ' publishes no metadata');
}

function redirectURI() { return location.origin + '/'; }

// signIn sends the browser to the authorization server and back to the
// current address. fresh asks for a fresh identity check (OpenID Connect
// max_age=0 and prompt=login): the new token's auth_time is the moment the
// person confirmed who they are.
async function signIn(fresh) {
  const meta = await authServer();
  const verifier = randomString(48);
  const challenge = b64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
  const state = randomString(16);
  sessionStorage.setItem('pkce', JSON.stringify({ verifier, state, hash: location.hash }));
  const u = new URL(meta.authorization_endpoint);
  u.search = new URLSearchParams({
    response_type: 'code', client_id: config.clientId, redirect_uri: redirectURI(),
    code_challenge: challenge, code_challenge_method: 'S256', state, resource: config.resource,
    scope: 'openid profile',
  });
  if (fresh) {
    u.searchParams.set('max_age', '0');
    u.searchParams.set('prompt', 'login');
  }
  location.assign(u.toString());
}

// signInAgain signs the person in again with a fresh identity check and
// comes back to the current hash (what a purchase needing reverification
// asks for, spec 4.1, 2.3). In local mode there is no one to ask: it
// re-renders the page.
export function signInAgain() {
  if (config.mode !== 'hosted') return reload();
  return signIn(true);
}

// stepUpHeaders are the headers proving a recent identity check (spec 9.2,
// x-service-step-up): the person's current token, whose auth_time says
// when they last authenticated. None in local mode.
export function stepUpHeaders() {
  if (config.mode !== 'hosted' || !token) return {};
  return { 'x-service-step-up': token };
}

// finishSignIn exchanges the code the authorization server sent back.
async function finishSignIn() {
  const q = new URLSearchParams(location.search);
  const code = q.get('code');
  if (!code && !q.get('error')) return false;
  const saved = JSON.parse(sessionStorage.getItem('pkce') || 'null');
  sessionStorage.removeItem('pkce');
  history.replaceState(null, '', '/' + (saved && saved.hash ? saved.hash : '#/fleet'));
  if (!saved || saved.state !== q.get('state')) throw new Error('the sign-in answer does not match this page; sign in again');
  const meta = await authServer();
  // RFC 9207: an answer naming another issuer, or none where this server
  // promises to name itself, may be another server's (a mix-up); its code
  // is never sent anywhere.
  const iss = q.get('iss');
  if ((iss !== null && iss.replace(/\/$/, '') !== String(meta.issuer).replace(/\/$/, '')) ||
      (iss === null && meta.authorization_response_iss_parameter_supported)) {
    throw new Error('the sign-in answer does not come from ' + meta.issuer + '; sign in again');
  }
  if (!code) throw new Error('the authorization server did not sign you in: ' + (q.get('error_description') || q.get('error')));
  const r = await fetch(meta.token_endpoint, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code', code, redirect_uri: redirectURI(), client_id: config.clientId,
      code_verifier: saved.verifier, resource: config.resource,
    }),
  });
  const body = await r.json().catch(() => ({}));
  if (!r.ok || !body.access_token) throw new Error('the authorization server refused the sign-in: ' + (body.error || r.status));
  token = body.access_token;
  tokenExpires = Date.now() + 1000 * (body.expires_in || 3600);
  return true;
}

// hosted tells whether this is a hosted deployment: a local one does not
// mount the hosted-only routes (they answer 404), so pages do not ask them.
export function hosted() { return config.mode === 'hosted'; }

export function signedIn() { return config.mode !== 'hosted' || (token && Date.now() < tokenExpires); }

// ---- The API client.

export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || ('HTTP ' + status));
    this.status = status;
    this.code = e.code || 'http_' + status;
    this.body = body;
  }
}

function authHeaders(extra) {
  const h = Object.assign({}, extra || {});
  if (config.mode === 'hosted' && token) h.Authorization = 'Bearer ' + token;
  return h;
}

async function request(method, path, body, headers) {
  const opts = { method, headers: authHeaders(headers) };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  if (r.status === 401 && config.mode === 'hosted') {
    token = null;
    renderSignIn();
  }
  const text = await r.text();
  let parsed = null;
  if (text) {
    try { parsed = JSON.parse(text); } catch (e) { parsed = { raw: text }; }
  }
  if (!r.ok) throw new ApiError(r.status, parsed);
  return parsed;
}

function withQuery(path, query) {
  if (!query) return path;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? path + (path.includes('?') ? '&' : '?') + s : path;
}

export const api = {
  get: (path, query) => request('GET', withQuery(path, query)),
  post: (path, body, headers) => request('POST', path, body, headers),
  patch: (path, body) => request('PATCH', path, body),
  put: (path, body) => request('PUT', path, body),
  del: (path, query) => request('DELETE', withQuery(path, query)),
  raw: (path, opts) => fetch(path, Object.assign({}, opts, { headers: authHeaders(opts && opts.headers) })),
};

// ---- DOM.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'text') el.textContent = v;
    else if (k === 'class') el.className = v;
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
}

export function toast(message, kind) {
  const box = document.getElementById('toasts');
  const el = h('div', { class: 'toast ' + (kind || 'info'), role: kind === 'error' ? 'alert' : 'status' }, message);
  box.append(el);
  while (box.children.length > 3) box.firstElementChild.remove(); // the latest few, not a wall
  setTimeout(() => el.remove(), 6000);
}

// errorBox renders an API error where a page's content would be.
export function errorBox(err) {
  return h('div', { class: 'error', role: 'alert' },
    h('strong', {}, err.code || 'error'), ': ', err.message || String(err));
}

// ---- Live screens: the MJPEG stream read with fetch (so the bearer token
// goes along in hosted mode), each part shown as a blob URL.

export function liveScreen(deviceId, opts) {
  const o = Object.assign({ maxWidth: 270, fps: 5 }, opts || {});
  const img = h('img', { class: 'screen', alt: 'live screen of ' + (o.label || deviceId), 'data-device-id': deviceId });
  const ctrl = new AbortController();
  let url = null;
  const stop = () => { ctrl.abort(); if (url) URL.revokeObjectURL(url); };
  // Stop when the element leaves the document.
  const watch = new MutationObserver(() => { if (!img.isConnected) { watch.disconnect(); stop(); } });
  queueMicrotask(() => watch.observe(document.body, { childList: true, subtree: true }));
  (async () => {
    try {
      const r = await api.raw(withQuery('/v1/devices/' + encodeURIComponent(deviceId) + '/stream',
        { maxWidth: o.maxWidth, fps: o.fps }), { signal: ctrl.signal });
      if (!r.ok || !r.body) { img.alt = 'no live screen (' + r.status + ')'; img.classList.add('unavailable'); return; }
      const reader = r.body.getReader();
      let buf = new Uint8Array(0);
      const headEnd = new TextEncoder().encode('\r\n\r\n');
      const find = (hay, needle, from) => {
        outer: for (let i = from; i <= hay.length - needle.length; i++) {
          for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
          return i;
        }
        return -1;
      };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const next = new Uint8Array(buf.length + value.length);
        next.set(buf); next.set(value, buf.length); buf = next;
        for (;;) {
          const he = find(buf, headEnd, 0);
          if (he < 0) break;
          const head = new TextDecoder().decode(buf.subarray(0, he));
          const m = /Content-Length:\s*(\d+)/i.exec(head);
          if (!m) { buf = buf.subarray(he + 4); continue; }
          const n = parseInt(m[1], 10);
          if (buf.length < he + 4 + n) break;
          const jpeg = buf.slice(he + 4, he + 4 + n);
          buf = buf.subarray(he + 4 + n);
          const old = url;
          url = URL.createObjectURL(new Blob([jpeg], { type: 'image/jpeg' }));
          img.src = url;
          if (old) URL.revokeObjectURL(old);
        }
      }
    } catch (e) {
      if (e.name !== 'AbortError') { img.alt = 'live screen stopped: ' + e.message; img.classList.add('unavailable'); }
    }
  })();
  return img;
}

// ---- The router: #/path?query → the page registered for it.

const routes = [];

export function route(pattern, render) {
  const names = [];
  const re = new RegExp('^' + pattern.replace(/:[a-zA-Z]+/g, (m) => { names.push(m.slice(1)); return '([^/]+)'; }) + '$');
  routes.push({ re, names, render, pattern });
}

function current() {
  const raw = location.hash.replace(/^#/, '') || '/fleet';
  const [p, q] = raw.split('?');
  return { path: p, query: new URLSearchParams(q || '') };
}

let rendering = 0;

async function render() {
  const main = document.getElementById('main');
  const { path, query } = current();
  for (const a of document.querySelectorAll('nav a')) {
    const here = path === a.getAttribute('href').slice(1) || path.startsWith(a.getAttribute('href').slice(1) + '/');
    if (here) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  if (!signedIn()) { renderSignIn(); return; }
  const mine = ++rendering;
  for (const r of routes) {
    const m = r.re.exec(path);
    if (!m) continue;
    const params = {};
    r.names.forEach((n, i) => { params[n] = decodeURIComponent(m[i + 1]); });
    main.replaceChildren(h('p', { class: 'loading' }, 'Loading…'));
    try {
      const view = h('div', { class: 'page' });
      await r.render(view, params, query);
      if (mine === rendering) main.replaceChildren(view);
    } catch (e) {
      // A 401 has already asked to sign in again; keep that on screen.
      if (!signedIn()) renderSignIn();
      else if (mine === rendering) main.replaceChildren(errorBox(e));
    }
    document.title = 'phonefleet — ' + (main.querySelector('h1') ? main.querySelector('h1').textContent : 'console');
    main.focus({ preventScroll: true });
    telemetry('page_view', r.pattern);
    return;
  }
  main.replaceChildren(h('h1', {}, 'Not found'), h('p', {}, 'Nothing in the console is at ' + path + '.'));
}

function renderSignIn() {
  const main = document.getElementById('main');
  main.replaceChildren(h('div', { class: 'signin' },
    h('h1', {}, 'Sign in'),
    h('p', {}, 'Sign in with your organisation\'s account to see its phones.'),
    h('button', { type: 'button', on: { click: () => signIn().catch((e) => toast(e.message, 'error')) } }, 'Sign in')));
}

// Reload re-renders the current page (after an action).
export function reload() { return render(); }

// navigate goes to a console path ('/devices/dev_…').
export function navigate(path) { location.hash = '#' + path; }

// ---- Telemetry: page views and client errors, batched to
// POST /v1/console/events; best effort, never in the way.

const pending = [];
let flushTimer = null;

export function telemetry(type, page, message) {
  if (!signedIn()) return;
  pending.push({ type, page: String(page || '').slice(0, 200), message: message ? String(message).slice(0, 1000) : undefined, at: new Date().toISOString() });
  if (!flushTimer) flushTimer = setTimeout(flush, 2000);
}

async function flush() {
  flushTimer = null;
  const batch = pending.splice(0, 20);
  if (batch.length === 0) return;
  try { await api.post('/v1/console/events', { events: batch }); } catch (e) { /* telemetry never breaks a page */ }
  if (pending.length) flushTimer = setTimeout(flush, 2000);
}

window.addEventListener('error', (e) => telemetry('client_error', current().path, e.message));
window.addEventListener('unhandledrejection', (e) => telemetry('client_error', current().path, e.reason && e.reason.message));

// ---- Start: once every page module has registered its route.

export async function start() {
  document.getElementById('mode').textContent = config.mode === 'hosted' ? '' : 'local mode';
  try {
    if (config.mode === 'hosted') await finishSignIn();
  } catch (e) {
    toast(e.message, 'error');
  }
  window.addEventListener('hashchange', render);
  await render();
}
