#!/usr/bin/env node
// The unmodified @azure/event-hubs SDK against mqd with its loopback default
// (sas_required = auto: off; the connection string's key is not checked, put-token
// answers 202), on a 2-partition hub, consumer group "$Default". Checks:
// - start positions on partition 0 (8 events e0..e7 sent in two batches): offset 2
//   inclusive -> e2..e7, offset 2 exclusive -> e3..e7, sequence number 5 inclusive ->
//   e5..e7 (with an `identifier`, sent as link property com.microsoft:receiver-name),
//   enqueuedOn between the batches -> e5..e7, latest -> only an event sent after
//   the subscription started;
// - getEventHubProperties / getPartitionProperties of an unknown hub fail at once with
//   MessagingEntityNotFoundError ("The messaging entity 'X' could not be found.", 404);
// - every put-token of the SDK is answered 202 (the broker's log) and none refused;
// - a 200 KiB binary event round-trips byte for byte (1 event on partition 1);
// - epochs (ownerLevel): a second consumer of partition 1 with ownerLevel 2 takes over
//   from one with ownerLevel 1; the first gets ReceiverDisconnectedError (amqp:link:stolen) and
//   no event sent after the takeover, the second reads every event of the partition (the big one + 3 more).
// Exit 0 pass, 1 fail, 77 skip (SDK not installed).
'use strict';
const path = require('path');
const fs = require('fs');
const mqdnode = require('./mqdnode');

const HUB = 'eh77';
const SLOW = mqdnode.SLOW;
const h = mqdnode('77-eh-sdk-positions', 180000 * SLOW);
const { tmp, log, end, check, freePort } = h;
const { eh, sleep, retry, connStr, collect, sendTo, takeover, bodies } = mqdnode.eventHubs(HUB, h);
const range = (a, b) => JSON.stringify(Array.from({ length: b - a + 1 }, (_, i) => 'e' + (a + i)));

async function main(port) {
  const cs = connStr(port);
  const p = new eh.EventHubProducerClient(cs, retry);
  await sendTo(p, '0', [0, 1, 2, 3, 4].map((i) => ({ body: 'e' + i })));
  await sleep(100 * SLOW);
  const mid = new Date();
  await sleep(100 * SLOW);
  await sendTo(p, '0', [5, 6, 7].map((i) => ({ body: 'e' + i })));
  const c = new eh.EventHubConsumerClient('$Default', cs, retry);
  const cases = [
    ['offset 2 inclusive', { offset: 2, isInclusive: true }, range(2, 7), 6],
    ['offset 2 exclusive', { offset: 2 }, range(3, 7), 5],
    ['sequence number 5 inclusive', { sequenceNumber: 5, isInclusive: true }, range(5, 7), 3, { identifier: 'reader-77' }],
    ['enqueuedOn between the batches', { enqueuedOn: mid }, range(5, 7), 3],
  ];
  for (const [what, pos, want, n, extra] of cases) {
    const got = await collect(c, '0', Object.assign({ startPosition: pos }, extra || {}), n);
    log(what + ': ' + bodies(got));
    check(bodies(got) === want, what + ': ' + bodies(got) + ', want ' + want);
  }
  const late = collect(c, '0', { startPosition: eh.latestEventPosition }, 1);
  await sleep(3000 * SLOW);
  await sendTo(p, '0', [{ body: 'late' }]);
  const lat = await late;
  log('latest: ' + bodies(lat));
  check(bodies(lat) === '["late"]', 'latest: ' + bodies(lat));

  const big = Buffer.alloc(200 * 1024);
  for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) & 0xff;
  await sendTo(p, '1', [{ body: big, properties: { size: big.length } }]);
  const bg = await collect(c, '1', { startPosition: eh.earliestEventPosition }, 1);
  check(bg.length === 1 && Buffer.isBuffer(bg[0].body) && Buffer.compare(bg[0].body, big) === 0 &&
    bg[0].properties.size === 204800, '200 KiB event: ' + bg.length + ' events, ' + (bg[0] && bg[0].body.length) + ' bytes');
  await c.close();

  // epochs: ownerLevel 2 takes partition 1 from ownerLevel 1
  const c1 = new eh.EventHubConsumerClient('$Default', cs, retry), c2 = new eh.EventHubConsumerClient('$Default', cs, retry);
  const { r1, e1, r2, e2, s1, s2 } = await takeover(c1, c2,
    { startPosition: eh.earliestEventPosition, ownerLevel: 1, maxWaitTimeInSeconds: 1 },
    { startPosition: eh.earliestEventPosition, ownerLevel: 2, maxWaitTimeInSeconds: 1 }, p);
  log('epoch 1: ' + r1.length + ' events, errors ' + JSON.stringify(e1) + '; epoch 2: ' + r2.length + ' events, errors ' + JSON.stringify(e2));
  check(e1.includes('ReceiverDisconnectedError'), 'the epoch 1 consumer got ' + JSON.stringify(e1) + ', want ReceiverDisconnectedError (amqp:link:stolen)');
  check(r1.length === 1, 'the epoch 1 consumer read ' + r1.length + ' events (after the takeover too)');
  check(r2.length === 4 && Buffer.isBuffer(r2[0].body) && JSON.stringify(r2.slice(1).map((e) => e.body)) === '["after-1","after-2","after-3"]',
    'the epoch 2 consumer read ' + r2.length + ' events');
  check(e2.length === 0, 'epoch 2 errors ' + JSON.stringify(e2));
  await s1.close(); await s2.close();
  await c1.close(); await c2.close(); await p.close();

  // an unknown hub: MessagingEntityNotFoundError at once (Azure's wording, status 404)
  const nf = new eh.EventHubProducerClient(cs.replace('EntityPath=' + HUB, 'EntityPath=nohub77'), retry);
  for (const [what, fn] of [['hub', () => nf.getEventHubProperties()], ['partition', () => nf.getPartitionProperties('0')]]) {
    const t0 = Date.now();
    let code = null, msg = '';
    try { await fn(); } catch (e) { code = e.code; msg = e.message; }
    log('unknown ' + what + ': ' + code + ' ' + msg + ' after ' + (Date.now() - t0) + ' ms');
    check(code === 'MessagingEntityNotFoundError' && /The messaging entity 'nohub77' could not be found/.test(msg),
      'unknown hub (' + what + '): ' + code + ' ' + msg);
    check(Date.now() - t0 < 5000 * SLOW, 'unknown hub (' + what + ') took ' + (Date.now() - t0) + ' ms');
  }
  await nf.close();
  const logText = fs.readFileSync(h.logPath, 'utf8');
  const accepted = (logText.match(/\$cbs put-token .*: 202/g) || []).length;
  check(accepted >= 4 && !/put-token refused/.test(logText), 'put-token answers in the log: ' + accepted + ' x 202');
  end(true, '4 start positions, latest, 200 KiB, epoch takeover, ' + accepted + ' put-token 202');
}

freePort((port) => {
  fs.mkdirSync(path.join(tmp, 'data'));
  h.startBroker(['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', path.join(tmp, 'data'),
    '--set', 'topic.' + HUB + '.partitions=2'], port, () => main(port).catch((e) => end(false, 'exception: ' + (e && e.code) + ' ' + (e && e.stack))));
});
