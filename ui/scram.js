// SCRAM-SHA-256 (RFC 5802, 7677) with Web Crypto: the password stays in the browser; the
// broker gets a proof and proves in turn that it knows the user's credentials. Web Crypto
// exists only in secure contexts (HTTPS, or http://127.0.0.1 / localhost); elsewhere the
// caller falls back to sending the password, which the broker accepts only with
// allow_plain_without_tls = on.
const te = new TextEncoder();
const b64 = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)));
const unb64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

export const scramAvailable = () => !!(window.isSecureContext && crypto && crypto.subtle);

async function hmac(keyBytes, text) {
  const key = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return new Uint8Array(await crypto.subtle.sign('HMAC', key, te.encode(text)));
}

async function post(body) {
  const r = await fetch('/api/login/scram', { method: 'POST', credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const doc = await r.json();
  if (!r.ok) { const e = new Error(doc.description || `HTTP ${r.status}`); e.status = r.status; throw e; }
  return doc;
}

// Logs in; resolves to the session reply ({user, csrf, monitor, manage, mechanism}).
export async function scramLogin(user, password) {
  const nonce = b64(crypto.getRandomValues(new Uint8Array(18)));
  const bare = `n=${user.replace(/=/g, '=3D').replace(/,/g, '=2C')},r=${nonce}`;
  const one = await post({ client_first: `n,,${bare}` });
  const attrs = Object.fromEntries(one.server_first.split(',').map((kv) => [kv[0], kv.slice(2)]));
  if (!attrs.r || !attrs.r.startsWith(nonce)) throw new Error('the server changed our nonce');
  const base = await crypto.subtle.importKey('raw', te.encode(password), 'PBKDF2', false, ['deriveBits']);
  const salted = new Uint8Array(await crypto.subtle.deriveBits(
    { name: 'PBKDF2', hash: 'SHA-256', salt: unb64(attrs.s), iterations: Number(attrs.i) }, base, 256));
  const clientKey = await hmac(salted, 'Client Key');
  const storedKey = new Uint8Array(await crypto.subtle.digest('SHA-256', clientKey));
  const without = `c=biws,r=${attrs.r}`;
  const authMessage = `${bare},${one.server_first},${without}`;
  const sig = await hmac(storedKey, authMessage);
  const proof = clientKey.map((b, i) => b ^ sig[i]);
  const two = await post({ exchange: one.exchange, client_final: `${without},p=${b64(proof)}` });
  const serverSig = await hmac(await hmac(salted, 'Server Key'), authMessage);
  if (two.server_final !== `v=${b64(serverSig)}`) throw new Error('the server could not prove it knows the credentials');
  return two;
}
