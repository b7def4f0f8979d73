#!/usr/bin/env node
// The unmodified @azure/service-bus SDK (7.9.5, pinned in tests/interop/node/package-lock.json)
// against mqd's Service Bus entity management node `<queue>/$management` (issue 39 point 3),
// with sas_required = on and the emulator connection string, on a 1-partition queue sb157:
// - peekMessages from sequence number 0: the 6 sent, in order, sequence numbers 0..5,
//   bodies and application properties intact; peeking twice consumes nothing;
//   continuation: peek 2 from 0, then peekMessages(10) without a start gives the other 4;
// - peek-lock receive of 2; renewMessageLock of each answers a Date after now; complete
//   the first: renewing its lock then fails with MessageLockLost; peek now shows 5 (the
//   completed one is gone, the held one still there);
// - deadLetterMessage(m, {deadLetterReason, deadLetterErrorDescription}): the dead-letter
//   receiver (subQueueType deadLetter) gets the message with the reason and description
//   kept; peek then shows 4; a peek-lock receiver gets exactly those 4, in order;
// - authorization on the entity: a send-only key's peekMessages is refused
//   (UnauthorizedAccess); peeking an entity with 2 partitions is refused with a message
//   that says why; a peek of an emptied queue gives [];
// - left out, refused clearly: acceptSession (SessionCannotBeLocked: mqd does not apply
//   the session filter). Deferral and scheduled messages: test 177.
// Exit 0 pass, 1 fail, 77 skip (SDK not installed).
'use strict';
const path = require('path');
const fs = require('fs');
const mqdnode = require('./mqdnode');

const Q = 'sb157';
const SLOW = mqdnode.SLOW;
const h = mqdnode('157-servicebus-mgmt', 180000 * SLOW);
const { tmp, log, end, check, freePort } = h;
let sb, Long;
try {
  sb = require(path.join(__dirname, 'node', 'node_modules', '@azure', 'service-bus'));
  Long = require(path.join(__dirname, 'node', 'node_modules', 'long'));
} catch (e) {
  console.log('SKIP: @azure/service-bus not installed (cd tests/interop/node && npm ci): ' + e.message);
  process.exit(77);
}
const KEYS = { root: 'root-key-157', sendonly: 'send-key-157' };
const opts = { retryOptions: { maxRetries: 0, timeoutInMs: 15000 * SLOW } };
const cs = (port, k) => 'Endpoint=sb://127.0.0.1:' + port + ';SharedAccessKeyName=' + k + ';SharedAccessKey=' + KEYS[k] + ';UseDevelopmentEmulator=true';
const bodies = (l) => l.map((m) => m.body);

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

async function main(port) {
  const c = new sb.ServiceBusClient(cs(port, 'root'), opts);
  const s = c.createSender(Q);
  const sent = [0, 1, 2, 3, 4, 5].map((i) => ({ body: 'm' + i, messageId: 'id-' + i, applicationProperties: { i } }));
  await s.sendMessages(sent);

  // peek: everything, twice, nothing consumed; continuation
  const peeker = c.createReceiver(Q);
  for (const round of [1, 2]) {
    const p = await peeker.peekMessages(10, { fromSequenceNumber: Long.ZERO });
    check(JSON.stringify(bodies(p)) === JSON.stringify(bodies(sent)), 'peek ' + round + ' got ' + JSON.stringify(bodies(p)));
    check(p.map((m) => m.sequenceNumber.toNumber()).join() === '0,1,2,3,4,5', 'peek sequence numbers ' + p.map((m) => String(m.sequenceNumber)));
    check(p.every((m, i) => m.applicationProperties.i === i && m.messageId === 'id-' + i), 'peeked properties ' + JSON.stringify(p.map((m) => [m.messageId, m.applicationProperties])));
    check(p.every((m) => m.lockToken === undefined), 'a peeked message has a lock token');
  }
  const first2 = await peeker.peekMessages(2, { fromSequenceNumber: Long.ZERO });
  const rest = await peeker.peekMessages(10);
  check(bodies(first2).join() === 'm0,m1' && bodies(rest).join() === 'm2,m3,m4,m5', 'peek continuation: ' + bodies(first2) + ' then ' + bodies(rest));
  log('peek: 6 in order twice, continuation 2 + 4');

  // peek-lock, renew, complete, lock lost
  const r = c.createReceiver(Q, { receiveMode: 'peekLock', maxAutoLockRenewalDurationInMs: 0 });
  const got = await r.receiveMessages(2, { maxWaitTimeInMs: 5000 * SLOW });
  check(bodies(got).join() === 'm0,m1', 'peek-lock receive got ' + bodies(got));
  for (const m of got) {
    const until = await r.renewMessageLock(m);
    check(until instanceof Date && until.getTime() > Date.now(), 'renewMessageLock answered ' + until);
  }
  await r.completeMessage(got[0]);
  await refused('renew after complete', 'MessageLockLost', () => r.renewMessageLock(got[0]));
  const p5 = await peeker.peekMessages(10, { fromSequenceNumber: Long.ZERO });
  check(bodies(p5).join() === 'm1,m2,m3,m4,m5', 'peek after completing m0 (m1 held) got ' + bodies(p5));
  log('renew-lock of 2 held, complete, lock lost after; peek shows the 5 left');

  // dead-letter reason and description
  await r.deadLetterMessage(got[1], { deadLetterReason: 'bad-input', deadLetterErrorDescription: 'field x is missing' });
  const dlq = c.createReceiver(Q, { subQueueType: 'deadLetter', receiveMode: 'receiveAndDelete' });
  const dead = await dlq.receiveMessages(5, { maxWaitTimeInMs: 3000 * SLOW });
  check(bodies(dead).join() === 'm1', 'dead-letter queue got ' + JSON.stringify(bodies(dead)));
  check(dead[0].deadLetterReason === 'bad-input' && dead[0].deadLetterErrorDescription === 'field x is missing',
    'dead-lettered reason/description: ' + dead[0].deadLetterReason + ' / ' + dead[0].deadLetterErrorDescription);
  check(dead[0].messageId === 'id-1' && dead[0].applicationProperties.i === 1, 'dead-lettered properties ' + JSON.stringify(dead[0].applicationProperties));
  const p4 = await peeker.peekMessages(10, { fromSequenceNumber: Long.ZERO });
  check(bodies(p4).join() === 'm2,m3,m4,m5', 'peek after dead-lettering got ' + bodies(p4));
  const all = await r.receiveMessages(10, { maxWaitTimeInMs: 3000 * SLOW });
  check(bodies(all).join() === 'm2,m3,m4,m5', 'the receiver then got ' + bodies(all));
  for (const m of all) await r.completeMessage(m);
  const none = await peeker.peekMessages(10, { fromSequenceNumber: Long.ZERO });
  check(none.length === 0, 'peek of the emptied queue got ' + bodies(none));
  log('dead-letter reason and description kept; the other 4 received; empty peek []');

  // authorization and a multi-partition entity
  const c2 = new sb.ServiceBusClient(cs(port, 'sendonly'), opts);
  await refused('send-only key peeks', 'UnauthorizedAccess', () => c2.createReceiver(Q).peekMessages(1, { fromSequenceNumber: Long.ZERO }));
  const s2 = c.createSender('sb157wide');
  await s2.sendMessages({ body: 'w' });
  const e = await refused('peek on 2 partitions', 'GeneralError', () => c.createReceiver('sb157wide').peekMessages(1, { fromSequenceNumber: Long.ZERO }));
  check(String(e.message).includes('single-partition'), 'multi-partition refusal says ' + e.message);
  // what is left out answers clearly (docs/servicebus.md)
  await refused('acceptSession', 'SessionCannotBeLocked', () => c.acceptSession(Q, 'session-1'));
  await c2.close();
  await c.close();
  end(true, 'peek, renew-lock, lock lost, dead-letter properties, rights, refusals');
}

freePort((port) => {
  const conf = path.join(tmp, 'mqd.conf');
  fs.writeFileSync(conf, [
    'listen = 127.0.0.1:' + port, 'data_dir = ' + path.join(tmp, 'data'), 'sas_required = on',
    '[topic ' + Q + ']', 'partitions = 1',
    '[topic sb157wide]', 'partitions = 2',
    '[sas_key root]', 'key = ' + KEYS.root, 'rights = manage',
    '[sas_key sendonly]', 'key = ' + KEYS.sendonly, 'rights = send', ''].join('\n'));
  fs.mkdirSync(path.join(tmp, 'data'));
  h.startBroker(['--foreground', '-c', conf], port, () => main(port).catch((e) => end(false, 'exception: ' + (e && e.code) + ' ' + (e && e.stack))));
});
