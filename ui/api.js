// The console's calls to /api/ (same origin; the session cookie is HttpOnly and goes by
// itself; a POST carries the session's CSRF token, which the login reply gave us).
let csrf = null;

export class ApiError extends Error {
  constructor(status, description) {
    super(description || `HTTP ${status}`);
    this.status = status;
  }
}

export function setCsrf(token) { csrf = token; }

async function handle(r) {
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) throw new ApiError(r.status, body && body.description);
  return body;
}

export async function get(path) {
  const r = await fetch('/api/' + path, { credentials: 'same-origin',
                                          headers: { Accept: 'application/json' } });
  return handle(r);
}

export async function post(path, body) {
  const r = await fetch('/api/' + path, {
    method: 'POST', credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': csrf || '' },
    body: JSON.stringify(body || {}),
  });
  return handle(r);
}

export const enc = encodeURIComponent;
