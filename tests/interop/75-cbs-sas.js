#!/usr/bin/env node
// The $cbs node and SAS keys (issue 20 points 1-2), with raw rhea put-token requests as
// the Event Hubs SDKs send them, against a broker with sas_required = on:
// - replies carry status-code (int) and status-description, correlation-id = the
//   request's message-id: jwt -> 400; wrong signature, expired se, unknown key name,
//   audience outside the key's scope -> 401; a right token -> 200;
// - without a token a sender to the hub is refused with amqp:unauthorized-access; a
//   listen-only key's token lets a receiver attach but no sender; a manage key's token
//   lets a sender attach and store (counted by a receiver);
// - when the token expires the sender is detached with amqp:unauthorized-access; a link
//   whose token was renewed by a newer put-token before expiry stays and keeps sending;
// - `mqd-passwd --sas root` prints a [sas_key root] section with a new 32-byte base64 key
//   (two runs differ) that the broker takes as printed and that signs the root tokens;
// - an empty transfer to $cbs is rejected with amqp:not-found and $cbs answers on;
// - $cbs is never a topic: no topics/$cbs nor cbs-* reply topic on disk, and a send to
//   `$cbs` through the anonymous relay is rejected; management CREATE of $cbs, $CBS and
//   $management answers 400 (and of an ordinary name 201, with the SAS manage right of
//   a namespace-wide token; with a token for another hub 401).
// Exit 0 pass, 1 fail, 77 skip.
'use strict';
const path = require('path');
const fs = require('fs');

const HUB = 'eh75';
const SLOW = Math.max(1, Number(process.env.MQD_TEST_SLOW || 1));
const h = require('./mqdnode')('75-cbs-sas', 120000 * SLOW);
const { tmp, log, end, check, freePort, connect } = h;
const token = h.sasToken;

const KEYS = { root: null, listen: 'listen-key-75', other: 'other-key-75' };

// the root key comes from `mqd-passwd --sas root`, as a user makes one
function sasSection(name) {
  const out = require('child_process').execFileSync(path.join(path.dirname(h.bin), 'mqd-passwd'), ['--sas', name]).toString();
  const m = /^\[sas_key (\S+)\]\nkey = ([A-Za-z0-9+/]{43}=)\nrights = send,listen,manage\nscope = \*\n$/.exec(out);
  check(m && m[1] === name, 'mqd-passwd --sas output: ' + JSON.stringify(out));
  return { text: out, key: m[2] };
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => Math.floor(Date.now() / 1000);

// A $cbs client on conn: put(aud, tok, type) -> {status, desc, corr, id}.
function cbsClient(conn, tag, node) {
  const replyTo = 'cbs-' + tag;
  const sender = conn.open_sender({ target: node || '$cbs', name: replyTo + '-s' });
  const receiver = conn.open_receiver({ source: node || '$cbs', target: replyTo, name: replyTo + '-r' });
  const waiting = new Map();
  receiver.on('message', (ctx) => {
    const m = ctx.message;
    const w = waiting.get(String(m.correlation_id));
    if (w) { waiting.delete(String(m.correlation_id)); w(m); }
  });
  let seq = 0;
  const ready = Promise.all([new Promise((r) => sender.once('sendable', r)), new Promise((r) => receiver.once('receiver_open', r))]);
  return {
    ready,
    request: (props, body) => new Promise((resolve) => {
      const id = tag + '-' + (++seq);
      const t = setTimeout(() => resolve({ timeout: true }), 10000 * SLOW);
      waiting.set(id, (m) => { clearTimeout(t); resolve(m); });
      sender.send({ message_id: id, reply_to: replyTo, application_properties: props, body });
    }),
    put: (aud, tok, type) => new Promise((resolve) => {
      const id = tag + '-' + (++seq);
      const t = setTimeout(() => resolve({ status: 'timeout' }), 10000 * SLOW);
      waiting.set(id, (m) => {
        clearTimeout(t);
        const ap = m.application_properties || {};
        resolve({ status: ap['status-code'], desc: ap['status-description'], corr: m.correlation_id, id });
      });
      sender.send({ message_id: id, reply_to: replyTo, body: tok,
        application_properties: { operation: 'put-token', type: type || 'servicebus.windows.net:sastoken', name: aud, expiration: Date.now() + 3600000 } });
    }),
  };
}

// Attaches; resolves {open: link} if it stays open for a moment, or {error: condition}.
function attach(conn, opts, sending) {
  return new Promise((resolve) => {
    const l = sending ? conn.open_sender(opts) : conn.open_receiver(opts);
    let done = false;
    const fin = (v) => { if (!done) { done = true; resolve(v); } };
    l.once(sending ? 'sender_close' : 'receiver_close', (ctx) => fin({ error: (l.remote.detach && l.remote.detach.error) || (ctx.sender || ctx.receiver || {}).error || {} }));
    l.once(sending ? 'sender_error' : 'receiver_error', () => fin({ error: l.error || (l.remote.detach && l.remote.detach.error) || {} }));
    l.once(sending ? 'sender_open' : 'receiver_open', () => setTimeout(() => fin({ open: l }), 500 * SLOW));
  });
}
const cond = (e) => (e && (e.condition || (e.value && e.value[0]))) || String(JSON.stringify(e));

function sendN(l, n, tag) {
  return new Promise((resolve) => {
    let acc = 0, rej = 0;
    const t = setTimeout(() => resolve({ acc, rej, timeout: true }), 10000 * SLOW);
    const on = (ok) => { if (ok) acc++; else rej++; if (acc + rej === n) { clearTimeout(t); resolve({ acc, rej }); } };
    l.on('accepted', () => on(true));
    l.on('rejected', () => on(false));
    for (let i = 0; i < n; i++) l.send({ body: tag + '-' + i });
  });
}

async function main(port) {
  const aud = 'sb://127.0.0.1:' + port + '/' + HUB;
  const conn = connect(port, 'cbs75-a');
  const cbs = cbsClient(conn, 'a');
  await cbs.ready;

  // refusals
  const cases = [
    ['jwt', aud, 'eyJhbGciOi.x.y', 'jwt', 400],
    ['wrong signature', aud, token(aud, 'root', 'not-the-key', now() + 600), null, 401],
    ['expired', aud, token(aud, 'root', KEYS.root, now() - 5), null, 401],
    ['unknown key name', aud, token(aud, 'nobody', KEYS.root, now() + 600), null, 401],
    ['outside scope', aud, token(aud, 'other', KEYS.other, now() + 600), null, 401],
    ['malformed', aud, 'SharedAccessSignature sr=x', null, 401],
  ];
  for (const [what, a, tok, type, want] of cases) {
    const r = await cbs.put(a, tok, type);
    log(what + ': ' + r.status + ' ' + r.desc);
    check(r.status === want, what + ': status ' + r.status + ' (' + r.desc + '), want ' + want);
    check(typeof r.desc === 'string' && r.desc.length > 0, what + ': no status-description');
    check(r.corr === r.id, what + ': correlation-id ' + r.corr + ' != message-id ' + r.id);
  }

  // an empty transfer to $cbs is rejected (Proton's decoder asserts on an empty buffer:
  // before the guard it aborted the broker), and the node keeps answering
  const raw = await attach(conn, { target: '$cbs', name: 'cbs-raw' }, true);
  check(raw.open, 'raw $cbs sender: ' + JSON.stringify(raw.error));
  const empty = await new Promise((resolve) => {
    const t = setTimeout(() => resolve('timeout'), 10000 * SLOW);
    raw.open.once('rejected', (ctx) => { clearTimeout(t); resolve(ctx.delivery.remote_state && ctx.delivery.remote_state.error); });
    raw.open.once('accepted', () => { clearTimeout(t); resolve('accepted'); });
    raw.open.send(Buffer.alloc(0), '1', 0);
  });
  log('empty transfer to $cbs: ' + JSON.stringify(empty));
  check(empty !== 'timeout' && empty !== 'accepted' && cond(empty) === 'amqp:not-found', 'empty transfer to $cbs: ' + JSON.stringify(empty));
  const again = await cbs.put(aud, 'eyJ.x.y', 'jwt');
  check(again.status === 400, '$cbs after an empty transfer: ' + again.status);

  // no token yet: a sender to the hub is refused
  let a = await attach(conn, { target: HUB, name: 'snd-before' }, true);
  check(a.error && cond(a.error) === 'amqp:unauthorized-access', 'sender without a token: ' + JSON.stringify(a));

  // listen-only key: receiver yes, sender no
  // (tokens are kept per audience: this one's is the partition's, the root one's the hub's)
  const paud = aud + '/ConsumerGroups/$default/Partitions/0';
  let r = await cbs.put(paud, token(paud, 'listen', KEYS.listen, now() + 600));
  check(r.status === 200, 'listen key token: ' + r.status + ' ' + r.desc);
  a = await attach(conn, { target: HUB, name: 'snd-listen' }, true);
  check(a.error && cond(a.error) === 'amqp:unauthorized-access', 'sender with a listen-only token: ' + JSON.stringify(a));
  const rcv = await attach(conn, { source: HUB + '/ConsumerGroups/$default/Partitions/0', name: 'rcv', credit_window: 100 }, false);
  check(rcv.open, 'receiver with a listen token: ' + JSON.stringify(rcv.error));
  const got = [];
  rcv.open.on('message', (ctx) => got.push(ctx.message.body));

  // manage key, short expiry: sender stores, then is detached at expiry
  const se = now() + 3;
  r = await cbs.put(aud, token(aud, 'root', KEYS.root, se));
  check(r.status === 200, 'root key token: ' + r.status + ' ' + r.desc);
  a = await attach(conn, { target: HUB + '/Partitions/0', name: 'snd-root' }, true);
  check(a.open, 'sender with a manage token: ' + JSON.stringify(a.error));
  const sr = await sendN(a.open, 5, 'root');
  check(sr.acc === 5 && sr.rej === 0, 'sends with a manage token: ' + JSON.stringify(sr));
  const detached = await new Promise((resolve) => {
    const t = setTimeout(() => resolve(null), (se - now() + 10 * SLOW) * 1000);
    a.open.once('sender_close', (ctx) => { clearTimeout(t); resolve({ at: Date.now() / 1000, error: ctx.sender.remote.detach && ctx.sender.remote.detach.error }); });
  });
  check(detached !== null, 'sender not detached after its token expired');
  check(cond(detached.error) === 'amqp:unauthorized-access', 'expiry detach condition: ' + JSON.stringify(detached.error));
  check(detached.at >= se - 1, 'detached before expiry: at ' + detached.at + ' se ' + se);
  log('detached at +' + (detached.at - se).toFixed(2) + 's after se: ' + JSON.stringify(detached.error));

  // renewal: a second connection renews before expiry and keeps its sender
  const conn2 = connect(port, 'cbs75-b');
  const cbs2 = cbsClient(conn2, 'b');
  await cbs2.ready;
  const se2 = now() + 3;
  r = await cbs2.put(aud, token(aud, 'root', KEYS.root, se2));
  check(r.status === 200, 'token b: ' + r.status);
  a = await attach(conn2, { target: HUB + '/Partitions/0', name: 'snd-renew' }, true);
  check(a.open, 'renewing sender: ' + JSON.stringify(a.error));
  let closed = false;
  a.open.once('sender_close', () => { closed = true; });
  r = await cbs2.put(aud, token(aud, 'root', KEYS.root, now() + 600));
  check(r.status === 200, 'renewal: ' + r.status);
  await sleep((se2 - now() + 2 * SLOW) * 1000);
  check(!closed, 'a renewed link was detached');
  const sr2 = await sendN(a.open, 3, 'renewed');
  check(sr2.acc === 3, 'sends after renewal: ' + JSON.stringify(sr2));

  // the receiver (listen token, still valid) saw all 8, in order
  const deadline = Date.now() + 10000 * SLOW;
  while (got.length < 8 && Date.now() < deadline) await sleep(50);
  const want = ['root-0', 'root-1', 'root-2', 'root-3', 'root-4', 'renewed-0', 'renewed-1', 'renewed-2'];
  check(JSON.stringify(got) === JSON.stringify(want), 'received ' + JSON.stringify(got));

  // $cbs is not a topic
  const relay = await attach(conn2, { target: null, name: 'relay' }, true);
  check(relay.open, 'relay sender: ' + JSON.stringify(relay.error));
  const rr = await new Promise((resolve) => {
    relay.open.once('rejected', (ctx) => resolve(ctx.delivery.remote_state && ctx.delivery.remote_state.error));
    relay.open.once('accepted', () => resolve('accepted'));
    relay.open.send({ to: '$cbs', body: 'x' });
  });
  check(rr !== 'accepted' && cond(rr) === 'amqp:not-found', 'relay send to $cbs: ' + JSON.stringify(rr));
  const topics = fs.readdirSync(path.join(tmp, 'data', 'topics'));
  log('topics on disk: ' + JSON.stringify(topics));
  check(!topics.some((t) => t.toLowerCase() === '$cbs' || t.startsWith('cbs-')), 'a $cbs topic exists: ' + JSON.stringify(topics));
  check(topics.includes(HUB), 'hub topic missing: ' + JSON.stringify(topics));

  // conn2's root token is for the hub eh75: it manages that hub only (issue 32 point 2)
  const mg = cbsClient(conn2, 'm', '$management');
  await mg.ready;
  const other = await mg.request({ operation: 'CREATE', type: 'com.mqd:topic', name: 'eh75c' }, { partitions: 1 });
  const otherSt = other.application_properties && other.application_properties.statusCode;
  log('CREATE eh75c with a token for eh75: ' + otherSt);
  check(otherSt === 401, 'a token for hub eh75 created another hub: ' + otherSt);
  // a namespace-wide token (no path) of the unscoped root key covers every hub
  const ns = 'sb://127.0.0.1:' + port;
  r = await cbs2.put(ns, token(ns, 'root', KEYS.root, now() + 600));
  check(r.status === 200, 'namespace-wide root token: ' + r.status + ' ' + r.desc);
  // no management CREATE makes a reserved name
  const created = {};
  for (const name of ['$cbs', '$CBS', '$management', 'eh75b']) {
    const m = await mg.request({ operation: 'CREATE', type: 'com.mqd:topic', name }, { partitions: 1 });
    created[name] = m.application_properties && m.application_properties.statusCode;
  }
  log('management CREATE: ' + JSON.stringify(created));
  check(created.$cbs === 400 && created.$CBS === 400 && created.$management === 400 && created.eh75b === 201,
    'management CREATE of reserved names: ' + JSON.stringify(created));
  conn.close();
  conn2.close();
  end(true, '6 refusals with their status, 8 messages, expiry detach, renewal kept, reserved names');
}

freePort((port) => {
  const root = sasSection('root'), again = sasSection('root');
  check(root.key !== again.key && Buffer.from(root.key, 'base64').length === 32, 'mqd-passwd --sas keys: ' + root.key + ' ' + again.key);
  KEYS.root = root.key;
  const conf = path.join(tmp, 'mqd.conf');
  fs.writeFileSync(conf, [
    'listen = 127.0.0.1:' + port, 'data_dir = ' + path.join(tmp, 'data'), 'sas_required = on',
    '[topic ' + HUB + ']', 'partitions = 2',
    root.text,
    '[sas_key listen]', 'key = ' + KEYS.listen, 'rights = listen', 'scope = ' + HUB,
    '[sas_key other]', 'key = ' + KEYS.other, 'rights = send,listen', 'scope = otherhub', ''].join('\n'));
  fs.mkdirSync(path.join(tmp, 'data'));
  h.startBroker(['--foreground', '-c', conf], port, () => main(port).catch((e) => end(false, 'exception: ' + (e && e.stack))));
});
