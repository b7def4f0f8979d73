#!/usr/bin/env node
// Event Hubs batched sends (ARCHITECTURE §1 "Batched sends"): transfers with
// message-format 0x80013700 whose data sections each hold one encoded message, sent
// with rhea's sender.send(buffer, tag, format) the way the Event Hubs SDKs do.
// Checks, on a 4-partition topic:
// - each batch is accepted once, and its N inner messages are N records, in order, with
//   consecutive x-opt-offset, their own bodies/properties/application-properties, and
//   x-opt-partition-key = the outer key (replacing an inner message's own key, other
//   inner annotations kept), all in the partition that key maps to (Kafka murmur2);
// - batches interleaved with normal sends on the same link and on a second link keep
//   every message and the order of the wire;
// - a batch larger than a frame (a multi-frame delivery) is split the same way;
// - a batch with a data section that is not a message, and one whose body is not data
//   sections, are rejected with amqp:decode-error and store nothing;
// - a format-0 message whose body is data sections holding encoded messages is stored
//   as ONE message (no content sniffing);
// - an un-keyed batch lands whole in one partition, without x-opt-partition-key;
// - on a topic with duplicate detection each inner message is checked by its own
//   message-id: a batch resent whole, or one that overlaps an earlier one, is accepted
//   and stores only the messages not seen before;
// - the same over a TLS listener (mqd runs TLS, so its frame peek sees plaintext there
//   too): a keyed batch of 3 is 3 records (skipped if the openssl CLI is missing).
// Exit 0 pass, 1 fail, 77 skip.
'use strict';
const path = require('path');
const fs = require('fs');

const TOPIC = 'eh47';
const PARTS = 4;
const HARD_TIMEOUT_MS = 90000;
const SEL = 'apache.org:selector-filter:string';
const BATCH = 0x80013700;

const h = require('./mqdnode')('47-eh-batch', HARD_TIMEOUT_MS);
const { rhea, tmp, log, end, check, kafkaPartition, freePort, connect } = h;

function inner(tagName, i, extra) {
  const m = {
    message_id: tagName + '-' + i,
    subject: 'subj-' + tagName,
    application_properties: { batch: tagName, index: i },
    body: tagName + '-' + i,
  };
  return Object.assign(m, extra || {});
}

function batchBuffer(key, msgs, rawSections) {
  const outer = { body: rhea.message.data_sections(rawSections || msgs.map((m) => rhea.message.encode(m))) };
  if (key !== null) outer.message_annotations = { 'x-opt-partition-key': key };
  return rhea.message.encode(outer);
}

// What each partition must hold, in order: {body, batch, index, keyed, ...}.
function expectFrom(tagName, msgs) {
  return msgs.map((m, i) => ({ body: m.body, batch: tagName, index: i, id: m.message_id }));
}

function sendPhase(port, key, cb) {
  const conn = connect(port, 'eh-batch-sender');
  const s1 = conn.open_sender({ target: TOPIC, name: 'batch-link-1' });
  const s2 = conn.open_sender({ target: TOPIC, name: 'batch-link-2' });
  const b1 = [0, 1, 2, 3, 4].map((i) => inner('b1', i));
  // an inner message with its own key and annotation: the outer key wins, the rest stays
  b1[0].message_annotations = { 'x-opt-partition-key': 'inner-key', 'x-custom': 'kept' };
  const b2 = [0, 1, 2].map((i) => inner('b2', i));
  const b3 = [0, 1, 2, 3].map((i) => inner('b3', i));
  const m1 = { message_annotations: { 'x-opt-partition-key': key }, application_properties: { batch: 'm1', index: 0 }, body: 'm1' };
  const m2 = { message_annotations: { 'x-opt-partition-key': key }, application_properties: { batch: 'm2', index: 0 }, body: 'm2' };
  // format 0, body = data sections that hold encoded messages: one message
  const f0 = {
    message_annotations: { 'x-opt-partition-key': key },
    application_properties: { batch: 'f0', index: 0 },
    body: rhea.message.data_sections([rhea.message.encode(inner('f0x', 0)), rhea.message.encode(inner('f0x', 1))]),
  };
  // bigger than a frame: a multi-frame delivery (40 x 4 KiB)
  const big = [];
  for (let i = 0; i < 40; i++) big.push(inner('big', i, { body: 'big-' + i + '-' + 'x'.repeat(4096) }));
  const bad1 = batchBuffer(key, null, [rhea.message.encode(inner('bad', 0)), Buffer.from('not a message')]);
  const bad2 = rhea.message.encode({ message_annotations: { 'x-opt-partition-key': key }, body: 'an amqp-value' });
  const expected = [].concat(expectFrom('b1', b1), expectFrom('b3', b3),
    [{ body: 'm1', batch: 'm1', index: 0 }], [{ body: 'm2', batch: 'm2', index: 0 }],
    expectFrom('b2', b2), [{ batch: 'f0', index: 0 }], expectFrom('big', big));
  const outcomes = {};
  let ready = 0; let sent = false; let settled = 0;
  const TOTAL = 9;
  function track(name, link, d) {
    d.__name = name;
    outcomes[name] = 'pending';
  }
  function onSettle(ctx, what) {
    const n = ctx.delivery.__name;
    check(n !== undefined, 'settlement of an unknown delivery');
    check(outcomes[n] === 'pending', n + ' settled twice (' + outcomes[n] + ', ' + what + ')');
    const st = ctx.delivery.remote_state;
    outcomes[n] = what === 'rejected' ? 'rejected:' + (st && st.error && st.error.condition) : what;
    log(n + ': ' + what + (what === 'rejected' ? ' ' + JSON.stringify(st && st.error) : ''));
    if (++settled === TOTAL) {
      conn.close();
    }
  }
  for (const s of [s1, s2]) {
    s.on('accepted', (ctx) => onSettle(ctx, 'accepted'));
    s.on('rejected', (ctx) => onSettle(ctx, 'rejected'));
    s.on('released', (ctx) => onSettle(ctx, 'released'));
    s.on('modified', (ctx) => onSettle(ctx, 'modified'));
    s.on('sendable', () => {
      if (sent || !s1.sendable() || !s2.sendable() || s1.credit < 8 || s2.credit < 8) return;
      sent = true;
      track('b1', s1, s1.send(batchBuffer(key, b1), undefined, BATCH));
      track('b3', s2, s2.send(batchBuffer(key, b3), undefined, BATCH));
      track('m1', s1, s1.send(m1));
      track('m2', s2, s2.send(m2));
      track('b2', s1, s1.send(batchBuffer(key, b2), undefined, BATCH));
      track('bad1', s1, s1.send(bad1, undefined, BATCH));
      track('bad2', s2, s2.send(bad2, undefined, BATCH));
      track('f0', s1, s1.send(f0));
      track('big', s2, s2.send(batchBuffer(key, big), undefined, BATCH));
    });
  }
  conn.on('connection_close', () => cb(outcomes, expected, { b1 }));
}

function sendUnkeyed(port, cb) {
  const conn = connect(port, 'eh-batch-sender-2');
  const s = conn.open_sender({ target: TOPIC, name: 'batch-link-3' });
  const b4 = [0, 1, 2, 3, 4, 5].map((i) => inner('b4', i));
  let done = null;
  s.once('sendable', () => { s.send(batchBuffer(null, b4), undefined, BATCH); });
  s.on('accepted', () => { done = 'accepted'; conn.close(); });
  s.on('rejected', (ctx) => { done = 'rejected ' + JSON.stringify(ctx.delivery.remote_state); conn.close(); });
  conn.on('connection_close', () => cb(done, expectFrom('b4', b4)));
}

const DTOPIC = 'eh47d';
function sendDedup(port, cb) {
  const conn = connect(port, 'eh-batch-dedup');
  const s = conn.open_sender({ target: DTOPIC, name: 'batch-link-dedup' });
  const mk = (ids) => batchBuffer(null, ids.map((i) => inner('d', i)));
  const results = [];
  s.once('sendable', () => {
    s.send(mk([0, 1, 2]), undefined, BATCH);
    s.send(mk([1, 2, 3, 4]), undefined, BATCH); // overlaps
    s.send(mk([0, 1, 2]), undefined, BATCH);    // resent whole
  });
  const done = (what) => { results.push(what); if (results.length === 3) conn.close(); };
  s.on('accepted', () => done('accepted'));
  s.on('rejected', (ctx) => done('rejected ' + JSON.stringify(ctx.delivery.remote_state)));
  s.on('released', () => done('released'));
  conn.on('connection_close', () => {
    const rconn = connect(port, 'eh-batch-dedup-reader');
    const got = [];
    let last = Date.now();
    const r = rconn.open_receiver({
      source: {
        address: DTOPIC + '/ConsumerGroups/$Default/Partitions/0',
        filter: { [SEL]: rhea.types.wrap_described("amqp.annotation.x-opt-offset > '-1'", SEL) },
      },
      autoaccept: true,
      credit_window: 100,
    });
    r.on('message', (ctx) => { got.push(ctx.message); last = Date.now(); });
    const poll = setInterval(() => {
      if (Date.now() - last > 1500) { clearInterval(poll); rconn.close(); cb(results, got); }
    }, 200);
  });
}

const TTOPIC = 'eh47t';
function tlsPhase(tport, cb) {
  if (!tport) return cb(null);
  const container = rhea.create_container({ id: 'eh-batch-tls' });
  const conn = container.connect({ host: '127.0.0.1', port: tport, transport: 'tls', rejectUnauthorized: false, reconnect: false });
  conn.on('connection_error', (ctx) => end(false, 'tls: connection error ' + JSON.stringify(ctx.connection.error)));
  conn.on('error', (e) => end(false, 'tls: ' + e));
  const s = conn.open_sender({ target: TTOPIC, name: 'batch-link-tls' });
  let outcome = null;
  s.once('sendable', () => s.send(batchBuffer('tls-key', [0, 1, 2].map((i) => inner('t', i))), undefined, BATCH));
  s.on('accepted', () => { outcome = 'accepted'; open(); });
  s.on('rejected', (ctx) => end(false, 'tls batch rejected: ' + JSON.stringify(ctx.delivery.remote_state)));
  const got = [];
  function open() {
    let last = Date.now();
    const r = conn.open_receiver({
      source: {
        address: TTOPIC + '/ConsumerGroups/$Default/Partitions/0',
        filter: { [SEL]: rhea.types.wrap_described("amqp.annotation.x-opt-offset > '-1'", SEL) },
      },
      autoaccept: true,
      credit_window: 100,
    });
    r.on('message', (ctx) => { got.push(ctx.message); last = Date.now(); });
    const poll = setInterval(() => {
      if (Date.now() - last > 1500) { clearInterval(poll); conn.close(); cb(outcome, got); }
    }, 200);
  }
}

function readAll(port, cb) {
  const conn = connect(port, 'eh-batch-reader');
  const got = [[], [], [], []];
  let last = Date.now();
  for (let p = 0; p < PARTS; p++) {
    const r = conn.open_receiver({
      source: {
        address: TOPIC + '/ConsumerGroups/$Default/Partitions/' + p,
        filter: { [SEL]: rhea.types.wrap_described("amqp.annotation.x-opt-offset > '-1'", SEL) },
      },
      autoaccept: true,
      credit_window: 100,
    });
    r.on('message', (ctx) => { got[p].push(ctx.message); last = Date.now(); });
    r.on('receiver_error', (ctx) => end(false, 'reader ' + p + ' detached: ' + JSON.stringify(ctx.receiver.error)));
  }
  const poll = setInterval(() => {
    if (Date.now() - last > 2000) {
      clearInterval(poll);
      conn.close();
      cb(got);
    }
  }, 200);
}

function checkPartition(msgs, want, p, key, where) {
  check(msgs.length === want.length, where + ': partition ' + p + ' holds ' + msgs.length + ' messages, want ' +
    want.length + ': ' + JSON.stringify(msgs.map((m) => m.application_properties)));
  for (let i = 0; i < want.length; i++) {
    const m = msgs[i];
    const w = want[i];
    const ma = m.message_annotations || {};
    const ap = m.application_properties || {};
    const at = where + ' message ' + i + ' (' + w.batch + '/' + w.index + ')';
    check(ap.batch === w.batch && ap.index === w.index, at + ': application-properties ' + JSON.stringify(ap));
    if (w.body !== undefined) check(m.body === w.body, at + ': body ' + JSON.stringify(m.body));
    if (w.id !== undefined) {
      check(m.message_id === w.id, at + ': message-id ' + JSON.stringify(m.message_id));
      check(m.subject === 'subj-' + w.batch, at + ': subject ' + JSON.stringify(m.subject));
    }
    check(ma['x-opt-offset'] === String(i), at + ': x-opt-offset ' + JSON.stringify(ma['x-opt-offset']) + ', want "' + i + '"');
    check(Number(ma['x-opt-sequence-number']) === i, at + ': x-opt-sequence-number ' + ma['x-opt-sequence-number']);
    check(ma['x-opt-partition-id'] === p, at + ': x-opt-partition-id ' + ma['x-opt-partition-id']);
    check(ma['x-opt-enqueued-time'] instanceof Date, at + ': x-opt-enqueued-time ' + JSON.stringify(ma['x-opt-enqueued-time']));
    if (key === null) check(ma['x-opt-partition-key'] === undefined, at + ': x-opt-partition-key ' + JSON.stringify(ma['x-opt-partition-key']));
    else check(ma['x-opt-partition-key'] === key, at + ': x-opt-partition-key ' + JSON.stringify(ma['x-opt-partition-key']) + ', want ' + key);
    if (w.batch === 'b1' && w.index === 0) check(ma['x-custom'] === 'kept', at + ': x-custom ' + JSON.stringify(ma['x-custom']));
    if (w.batch === 'f0') {
      const b = m.body;
      check(b && b.typecode === 0x75 && Array.isArray(b.content) && b.content.length === 2,
        at + ': the format-0 message with data sections was not stored as one message: ' + JSON.stringify(b).slice(0, 300));
    }
  }
}

function makeCert() {
  try {
    require('child_process').execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes',
      '-keyout', path.join(tmp, 'server.key'), '-out', path.join(tmp, 'server.crt'), '-days', '2',
      '-subj', '/CN=127.0.0.1'], { stdio: 'ignore' });
    return true;
  } catch (e) {
    log('no openssl CLI: the TLS phase is skipped');
    return false;
  }
}

freePort((port) => freePort((tport) => {
  if (!makeCert()) tport = null;
  let key = null;
  const P = 2;
  for (let i = 0; i < 100 && key === null; i++) if (kafkaPartition('batch-key-' + i, PARTS) === P) key = 'batch-key-' + i;
  check(key !== null, 'no key maps to partition ' + P);
  log('partition key ' + key + ' -> partition ' + P + ' of ' + PARTS + ' (murmur2)');
  const dataDir = path.join(tmp, 'data');
  fs.mkdirSync(dataDir);
  const argv = ['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', dataDir,
    '--set', 'topic.' + TOPIC + '.partitions=' + PARTS,
    '--set', 'topic.' + DTOPIC + '.partitions=1', '--set', 'topic.' + DTOPIC + '.dedup_window_ms=600000',
    '--set', 'topic.' + TTOPIC + '.partitions=1'];
  if (tport) {
    argv.push('--listen', 'amqps://127.0.0.1:' + tport, '--set', 'tls_cert=' + path.join(tmp, 'server.crt'),
      '--set', 'tls_key=' + path.join(tmp, 'server.key'));
  }
  h.startBroker(argv, port, () => {
    sendPhase(port, key, (outcomes, expected) => {
      log('outcomes: ' + JSON.stringify(outcomes));
      for (const n of ['b1', 'b2', 'b3', 'm1', 'm2', 'f0', 'big']) check(outcomes[n] === 'accepted', n + ': ' + outcomes[n]);
      for (const n of ['bad1', 'bad2']) check(outcomes[n] === 'rejected:amqp:decode-error', n + ': ' + outcomes[n] + ', want rejected with amqp:decode-error');
      sendUnkeyed(port, (done, b4want) => {
        check(done === 'accepted', 'un-keyed batch: ' + done);
        readAll(port, (got) => {
          log('partition sizes: ' + got.map((g) => g.length).join(' '));
          let unkeyedIn = -1;
          for (let p = 0; p < PARTS; p++) {
            const idx = got[p].findIndex((m) => (m.application_properties || {}).batch === 'b4');
            if (idx >= 0) { check(unkeyedIn < 0, 'the un-keyed batch is split over partitions'); unkeyedIn = p; }
          }
          check(unkeyedIn >= 0, 'the un-keyed batch is nowhere');
          log('un-keyed batch in partition ' + unkeyedIn);
          const keyed = unkeyedIn === P ? got[P].slice(0, expected.length) : got[P];
          checkPartition(keyed, expected, P, key, 'keyed');
          const unkeyed = unkeyedIn === P ? got[P].slice(expected.length) : got[unkeyedIn];
          // the offsets of the un-keyed batch start after what its partition held before
          const base = unkeyedIn === P ? expected.length : 0;
          check(unkeyed.length === b4want.length, 'un-keyed batch: ' + unkeyed.length + ' messages, want ' + b4want.length);
          for (let i = 0; i < unkeyed.length; i++) {
            const m = unkeyed[i];
            const ma = m.message_annotations || {};
            check(m.body === 'b4-' + i && m.message_id === 'b4-' + i, 'un-keyed message ' + i + ': ' + JSON.stringify(m.body));
            check(ma['x-opt-offset'] === String(base + i), 'un-keyed message ' + i + ': x-opt-offset ' + ma['x-opt-offset']);
            check(ma['x-opt-partition-key'] === undefined, 'un-keyed message ' + i + ': x-opt-partition-key ' + ma['x-opt-partition-key']);
          }
          for (let p = 0; p < PARTS; p++) {
            if (p !== P && p !== unkeyedIn) check(got[p].length === 0, 'partition ' + p + ' holds ' + got[p].length + ' messages');
          }
          sendDedup(port, (results, got) => {
            log('dedup topic: outcomes ' + JSON.stringify(results) + ', stored ' + got.map((m) => m.message_id).join(' '));
            check(results.length === 3 && results.every((r) => r === 'accepted'), 'dedup batches: ' + JSON.stringify(results));
            check(got.length === 5, 'dedup topic holds ' + got.length + ' messages, want 5 (d-0..d-4)');
            for (let i = 0; i < 5; i++) {
              check(got[i].message_id === 'd-' + i, 'dedup message ' + i + ': ' + got[i].message_id);
              check((got[i].message_annotations || {})['x-opt-offset'] === String(i), 'dedup message ' + i + ' offset');
            }
            tlsPhase(tport, (outcome, tgot) => {
              if (tport) {
                log('tls: ' + outcome + ', stored ' + tgot.map((m) => m.message_id).join(' '));
                check(tgot.length === 3, 'tls: the batch of 3 is ' + tgot.length + ' records');
                for (let i = 0; i < 3; i++) {
                  const ma = tgot[i].message_annotations || {};
                  check(tgot[i].message_id === 't-' + i && ma['x-opt-offset'] === String(i) &&
                    ma['x-opt-partition-key'] === 'tls-key', 'tls message ' + i + ': ' + JSON.stringify(tgot[i]));
                }
              }
              end(true);
            });
          });
        });
      });
    });
  });
}));
