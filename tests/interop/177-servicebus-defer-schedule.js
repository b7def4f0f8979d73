#!/usr/bin/env node
// The unmodified @azure/service-bus SDK (7.9.5, tests/interop/node) against mqd's deferral
// and scheduled messages (issue 39 point 3, docs/servicebus.md), sas_required = on, queue
// sb177 with one partition:
// - deferral: 4 sent, a peek-lock receiver gets 4, defers m1 and m2 (modified with
//   undeliverable-here), completes m0 and abandons m3 (modified without it: back to the
//   queue, as before); a second receiver then gets only m3 and, after
//   completing it, nothing more: the deferred two go to no receiver; peek shows them;
// - the broker restarts (SIGTERM): still no receiver gets them; receiveDeferredMessages
//   ([seq1, seq2]) answers both with bodies, sequence numbers and lock tokens; renewing
//   a lock works; completeMessage of m1 (through update-disposition); abandonMessage of
//   m2 keeps it deferred (received again by sequence number), deadLetterMessage then
//   moves it to the dead-letter queue with reason and description; receiving m1 again
//   by sequence number is refused (MessageNotFound); peek shows nothing; a send-only key
//   may not receive deferred messages (UnauthorizedAccess);
// - scheduled messages: scheduleMessages of s-a 3 s ahead (and a plain send of s-b with
//   scheduledEnqueueTimeUtc at the same time), s-c 60 s ahead cancelled by its sequence
//   number, s-d 12 s ahead: nothing is received before 3 s, then exactly s-a and s-b; the
//   broker restarts; s-d is still not received before its time, then it is, alone (s-c
//   never); peek shows the scheduled ones (state "scheduled", the deferred ones "deferred");
//   a listen-only key may not schedule (UnauthorizedAccess); cancelling a sequence
//   number that is not a scheduled message is refused (MessageNotFound).
// Exit 0 pass, 1 fail, 77 skip (SDK not installed).
'use strict';
const path = require('path');
const fs = require('fs');
const mqdnode = require('./mqdnode');

const Q = 'sb177';
const SLOW = mqdnode.SLOW;
const h = mqdnode('177-servicebus-defer-schedule', 240000 * SLOW);
const { tmp, log, end, check, freePort } = h;
let sb, Long;
try {
  sb = require(path.join(__dirname, 'node', 'node_modules', '@azure', 'service-bus'));
  Long = require(path.join(__dirname, 'node', 'node_modules', 'long'));
} catch (e) {
  console.log('SKIP: @azure/service-bus not installed (cd tests/interop/node && npm ci): ' + e.message);
  process.exit(77);
}
const KEYS = { root: 'root-key-177', sendonly: 'send-key-177', listenonly: 'listen-key-177' };
const opts = { retryOptions: { maxRetries: 0, timeoutInMs: 15000 * SLOW } };
const cs = (port, k) => 'Endpoint=sb://127.0.0.1:' + port + ';SharedAccessKeyName=' + k + ';SharedAccessKey=' + KEYS[k] + ';UseDevelopmentEmulator=true';
const bodies = (l) => l.map((m) => m.body);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const lockOpts = { receiveMode: 'peekLock', maxAutoLockRenewalDurationInMs: 0 };

async function refused(what, want, fn) {
  try {
    await fn();
  } catch (e) {
    log(what + ': ' + e.code + ' ' + String(e.message).slice(0, 160));
    check(e.code === want, what + ': error ' + e.code + ' (' + e.message + '), want ' + want);
    return e;
  }
  check(false, what + ': not refused');
}

function restart(argv, port) {
  return new Promise((resolve) => h.restartBroker(argv, port, resolve));
}

async function receiveAll(r, want, ms) {
  const got = [];
  const until = Date.now() + ms;
  while (got.length < want && Date.now() < until) {
    const l = await r.receiveMessages(want - got.length, { maxWaitTimeInMs: Math.max(200, Math.min(1000, until - Date.now())) });
    got.push(...l);
  }
  return got;
}

async function deferral(port, argv) {
  let c = new sb.ServiceBusClient(cs(port, 'root'), opts);
  await c.createSender(Q).sendMessages([0, 1, 2, 3].map((i) => ({ body: 'm' + i, messageId: 'id-' + i, applicationProperties: { i } })));
  const a = c.createReceiver(Q, lockOpts);
  const got = await receiveAll(a, 4, 5000 * SLOW);
  check(bodies(got).join() === 'm0,m1,m2,m3', 'first receiver got ' + bodies(got));
  const seqs = got.map((m) => m.sequenceNumber);
  check(seqs.map(String).join() === '0,1,2,3', 'sequence numbers ' + seqs.map(String));
  await a.deferMessage(got[1]);
  await a.deferMessage(got[2]);
  await a.completeMessage(got[0]);
  await a.abandonMessage(got[3]);
  const b = c.createReceiver(Q, lockOpts);
  const again = await receiveAll(b, 3, 2500 * SLOW);
  check(bodies(again).join() === 'm3', 'after defer/abandon a second receiver got ' + bodies(again));
  check(again[0].messageId === 'id-3' && again[0].applicationProperties.i === 3, 'abandoned m3 came back as ' + JSON.stringify(again[0].applicationProperties));
  await b.completeMessage(again[0]);
  const none = (await a.receiveMessages(3, { maxWaitTimeInMs: 1500 * SLOW })).concat(await b.receiveMessages(3, { maxWaitTimeInMs: 1500 * SLOW }));
  check(none.length === 0, 'deferred messages redelivered: ' + bodies(none));
  const peeked = await c.createReceiver(Q).peekMessages(10, { fromSequenceNumber: Long.ZERO });
  check(bodies(peeked).join() === 'm1,m2', 'peek of the deferred got ' + bodies(peeked));
  check(peeked.every((m) => m.state === 'deferred'), 'peeked states ' + peeked.map((m) => m.state));
  log('defer m1, m2; m0 completed, m3 abandoned and received again; the deferred go to no receiver');
  await c.close();

  await restart(argv, port);
  c = new sb.ServiceBusClient(cs(port, 'root'), opts);
  const r = c.createReceiver(Q, lockOpts);
  const after = await r.receiveMessages(3, { maxWaitTimeInMs: 2000 * SLOW });
  check(after.length === 0, 'after the restart the deferred were delivered: ' + bodies(after));
  const d = await r.receiveDeferredMessages([seqs[1], seqs[2]]);
  check(bodies(d).join() === 'm1,m2', 'receiveDeferredMessages got ' + bodies(d));
  check(d.every((m) => m.state === 'deferred'), 'received deferred states ' + d.map((m) => m.state));
  check(d.map((m) => String(m.sequenceNumber)).join() === '1,2', 'deferred sequence numbers ' + d.map((m) => String(m.sequenceNumber)));
  check(d.every((m, i) => typeof m.lockToken === 'string' && m.lockToken.length === 36 && m.applicationProperties.i === i + 1 && m.messageId === 'id-' + (i + 1)),
    'deferred lock tokens/properties ' + JSON.stringify(d.map((m) => [m.lockToken, m.messageId, m.applicationProperties])));
  const until = await r.renewMessageLock(d[0]);
  check(until instanceof Date && until.getTime() > Date.now(), 'renew of a deferred message answered ' + until);
  await r.completeMessage(d[0]);
  await r.abandonMessage(d[1]);
  const d2 = await r.receiveDeferredMessages([seqs[2]]);
  check(bodies(d2).join() === 'm2', 'abandoned deferred m2 received again: ' + bodies(d2));
  await r.deadLetterMessage(d2[0], { deadLetterReason: 'later-failed', deadLetterErrorDescription: 'deferred, then bad' });
  const dlq = c.createReceiver(Q, { subQueueType: 'deadLetter', receiveMode: 'receiveAndDelete' });
  const dead = await receiveAll(dlq, 1, 3000 * SLOW);
  check(bodies(dead).join() === 'm2' && dead[0].deadLetterReason === 'later-failed' && dead[0].deadLetterErrorDescription === 'deferred, then bad',
    'dead-lettered deferred: ' + JSON.stringify(dead.map((m) => [m.body, m.deadLetterReason, m.deadLetterErrorDescription])));
  await refused('receive a completed deferred message', 'MessageNotFound', () => r.receiveDeferredMessages([seqs[1]]));
  const empty = await c.createReceiver(Q).peekMessages(10, { fromSequenceNumber: Long.ZERO });
  check(empty.length === 0, 'peek after settling the deferred got ' + bodies(empty));
  const more = await r.receiveMessages(3, { maxWaitTimeInMs: 1000 * SLOW });
  check(more.length === 0, 'a settled deferred message came back: ' + bodies(more));
  const c2 = new sb.ServiceBusClient(cs(port, 'sendonly'), opts);
  await refused('send-only key receives deferred', 'UnauthorizedAccess', () => c2.createReceiver(Q, lockOpts).receiveDeferredMessages([Long.fromNumber(0)]));
  await c2.close();
  log('after a restart: receiveDeferredMessages, renew, complete, abandon keeps it deferred, dead-letter; rights');
  await c.close();
}

async function scheduled(port, argv) {
  let c = new sb.ServiceBusClient(cs(port, 'root'), opts);
  const s = c.createSender(Q);
  const t0 = Date.now();
  const at = (ms) => new Date(t0 + ms * SLOW);
  const [sa] = await s.scheduleMessages([{ body: 's-a', messageId: 's-a' }], at(3000));
  await s.sendMessages({ body: 's-b', messageId: 's-b', scheduledEnqueueTimeUtc: at(3000) });
  const [sc] = await s.scheduleMessages([{ body: 's-c', messageId: 's-c' }], at(60000));
  const [sd] = await s.scheduleMessages([{ body: 's-d', messageId: 's-d' }], at(12000));
  log('scheduled: s-a ' + sa + ', s-c ' + sc + ', s-d ' + sd);
  check(Long.isLong(sa) && sc.greaterThan(sa) && sd.greaterThan(sc), 'schedule sequence numbers ' + [sa, sc, sd]);
  await s.cancelScheduledMessages([sc]);
  await refused('cancel a message that is not scheduled', 'MessageNotFound', () => s.cancelScheduledMessages([Long.fromNumber(0)]));
  const c3 = new sb.ServiceBusClient(cs(port, 'listenonly'), opts);
  await refused('listen-only key schedules', 'UnauthorizedAccess', () => c3.createSender(Q).scheduleMessages([{ body: 'no' }], at(1000)));
  await c3.close();
  const sp = await c.createReceiver(Q).peekMessages(10, { fromSequenceNumber: Long.ZERO });
  check(bodies(sp).join() === 's-a,s-b,s-d' && sp.every((m) => m.state === 'scheduled'),
    'peek of the scheduled got ' + JSON.stringify(sp.map((m) => [m.body, m.state])));
  const r = c.createReceiver(Q, lockOpts);
  const early = await r.receiveMessages(5, { maxWaitTimeInMs: 1500 * SLOW });
  check(Date.now() < t0 + 3000 * SLOW, 'the machine was too slow to check before the time');
  check(early.length === 0, 'received before the scheduled time: ' + bodies(early));
  await sleep(Math.max(0, t0 + 3000 * SLOW - Date.now()));
  const due = await receiveAll(r, 2, 5000 * SLOW);
  check(bodies(due).sort().join() === 's-a,s-b', 'at the scheduled time got ' + bodies(due));
  check(due.every((m) => m.enqueuedTimeUtc instanceof Date && m.state === 'active'), 'due: ' + JSON.stringify(due.map((m) => [m.enqueuedTimeUtc, m.state])));
  for (const m of due) await r.completeMessage(m);
  log('s-a (scheduleMessages) and s-b (scheduledEnqueueTimeUtc) received at their time, not before; s-c cancelled');
  await c.close();

  await restart(argv, port);
  c = new sb.ServiceBusClient(cs(port, 'root'), opts);
  const r2 = c.createReceiver(Q, lockOpts);
  const before = await r2.receiveMessages(5, { maxWaitTimeInMs: 1500 * SLOW });
  check(Date.now() < t0 + 12000 * SLOW, 'the restart took too long to check s-d before its time');
  check(before.length === 0, 'after the restart, before s-d\'s time, got ' + bodies(before));
  await sleep(Math.max(0, t0 + 12000 * SLOW - Date.now()));
  const last = await receiveAll(r2, 2, 4000 * SLOW);
  check(bodies(last).join() === 's-d', 'after s-d\'s time got ' + bodies(last));
  await r2.completeMessage(last[0]);
  const peeked = await c.createReceiver(Q).peekMessages(10, { fromSequenceNumber: Long.ZERO });
  check(peeked.length === 0, 'the cancelled s-c is still on the queue: ' + bodies(peeked));
  log('s-d stayed hidden over a restart until its time; s-c never delivered');
  await c.close();
}

freePort((port) => {
  const conf = path.join(tmp, 'mqd.conf');
  fs.writeFileSync(conf, [
    'listen = 127.0.0.1:' + port, 'data_dir = ' + path.join(tmp, 'data'), 'sas_required = on',
    '[topic ' + Q + ']', 'partitions = 1',
    '[sas_key root]', 'key = ' + KEYS.root, 'rights = manage',
    '[sas_key sendonly]', 'key = ' + KEYS.sendonly, 'rights = send',
    '[sas_key listenonly]', 'key = ' + KEYS.listenonly, 'rights = listen', ''].join('\n'));
  fs.mkdirSync(path.join(tmp, 'data'));
  const argv = ['--foreground', '-c', conf];
  h.startBroker(argv, port, () => deferral(port, argv)
    .then(() => scheduled(port, argv))
    .then(() => end(true, 'deferral and scheduled messages, over restarts, with rights'))
    .catch((e) => end(false, 'exception: ' + (e && e.code) + ' ' + (e && e.stack))));
});
