// The console's router: hash routes (#/topic/NAME, ...) so the URL shows where you are,
// every page is a real link (it opens in a new tab too) and Back works.
import { get, post, setCsrf, ApiError } from './api.js';
import * as pages from './pages.js';
import { scramAvailable, scramLogin } from './scram.js';

const { h } = pages;
const main = document.getElementById('main');
const status = document.getElementById('status');
let session = null;
let timers = [];
let generation = 0;

const routes = [
  [/^$/, pages.overview, 'Overview'],
  [/^topics$/, pages.topics, 'Topics'],
  [/^topic\/([^/]+)$/, pages.topic, 'Topic'],
  [/^groups$/, pages.groups, 'Groups'],
  [/^group\/([^/]+)\/([^/]+)$/, pages.group, 'Group'],
  [/^connections$/, pages.connections, 'Connections'],
  [/^users$/, pages.users, 'Users'],
  [/^cluster$/, pages.cluster, 'Cluster'],
  [/^browse(?:\/([^/]+)(?:\/([^/]+))?)?$/, pages.browse, 'Messages'],
];

function stopPolling() {
  for (const t of timers) clearTimeout(t);
  timers = [];
}

// A broker that does not answer (the fetch itself failed, or a proxy's 502-504) is shown
// by a banner, and the page's values are greyed as stale until a poll succeeds again.
let downSince = null;
function brokerDown(e) {
  const banner = document.getElementById('banner');
  if (!downSince) downSince = new Date();
  banner.textContent = `The broker does not answer since ${downSince.toLocaleTimeString()} ` +
    `(${e.message}): the values below are from before then and may be stale.`;
  banner.hidden = false;
  main.classList.add('stale');
}
function brokerUp() {
  if (!downSince) return;
  downSince = null;
  document.getElementById('banner').hidden = true;
  main.classList.remove('stale');
}
const unreachable = (e) => !(e instanceof ApiError) || (e.status >= 502 && e.status <= 504);

function showError(e) {
  if (e instanceof ApiError && e.status === 401) { session = null; return login(); }
  status.textContent = `Error: ${e.message}${e.status ? ` (${e.status})` : ''}`;
}

function markNav(path) {
  const top = path.split('/')[0];
  const match = { '': '#/', topics: '#/topics', topic: '#/topics', groups: '#/groups', group: '#/groups',
                  connections: '#/connections', browse: '#/browse', users: '#/users',
                  cluster: '#/cluster' }[top];
  for (const a of document.querySelectorAll('nav a')) {
    if (a.getAttribute('href') === match) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

async function route() {
  stopPolling();
  const gen = ++generation;
  if (!session) return login();
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, qs] = raw.split('?');
  const query = new URLSearchParams(qs || '');
  markNav(path);
  const hit = routes.map(([re, fn, title]) => [path.match(re), fn, title]).find(([m]) => m);
  main.replaceChildren();
  status.textContent = '';
  if (!hit) { main.append(h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '#/' }, 'Overview'))); return; }
  const [m, fn, title] = hit;
  document.title = `${title} · mqd console`;
  const args = m.slice(1).map((x) => (x === undefined ? undefined : decodeURIComponent(x)));
  const ctx = {
    session, query,
    // runs fn now and every ms while this page is shown; errors go to the status line
    every: async (fn2, ms) => {
      const tick = async () => {
        if (gen !== generation) return;
        try {
          await fn2();
          brokerUp();
          status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
        } catch (e) { if (unreachable(e)) brokerDown(e); else showError(e); }
        if (gen === generation) timers.push(setTimeout(tick, ms));
      };
      await tick();
    },
  };
  try { await fn(main, ctx, ...args); } catch (e) { showError(e); }
}

function setSession(s) {
  session = s;
  setCsrf(s ? s.csrf : null);
  const who = document.getElementById('who');
  who.textContent = s ? `${s.user} (${s.manage ? 'manage' : 'monitor'})` : '';
  if (s && s.mechanism) who.dataset.mechanism = s.mechanism;
  document.getElementById('logout').hidden = !s;
}

function login() {
  stopPolling();
  setSession(null);
  document.title = 'Log in · mqd console';
  const user = h('input', { id: 'login-user', name: 'username', autocomplete: 'username', required: true });
  const pw = h('input', { id: 'login-password', name: 'password', type: 'password', autocomplete: 'current-password', required: true });
  const err = h('p', { class: 'error', id: 'login-error', role: 'alert' });
  const form = h('form', { class: 'login', id: 'login-form', onsubmit: async (e) => {
    e.preventDefault();
    err.textContent = '';
    try {
      let body;
      if (scramAvailable()) {
        body = await scramLogin(user.value, pw.value); // the password stays here
      } else {
        // no Web Crypto (not a secure context): the password goes in the POST body, never
        // in the URL, and the broker takes it only with allow_plain_without_tls = on
        const r = await fetch('/api/login', { method: 'POST', credentials: 'same-origin',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ user: user.value, password: pw.value }) });
        body = await r.json();
        if (!r.ok) throw new ApiError(r.status, body.description);
      }
      pw.value = '';
      setSession(body);
      route();
    } catch (ex) { err.textContent = `Login failed: ${ex.message}`; }
  } }, h('label', {}, 'User', user), h('label', {}, 'Password', pw), h('button', { type: 'submit', id: 'login-submit' }, 'Log in'), err);
  main.replaceChildren(h('h1', {}, 'Log in to mqd'), form);
  user.focus();
}

document.getElementById('logout').addEventListener('click', async () => {
  try { await post('logout'); } catch (e) { /* the session may be gone already */ }
  login();
});
window.addEventListener('hashchange', () => { main.focus(); route(); });

(async () => {
  try { setSession(await get('session')); } catch (e) { setSession(null); }
  route();
})();
