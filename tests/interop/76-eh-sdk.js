#!/usr/bin/env node
// The unmodified @azure/event-hubs SDK (pinned in tests/interop/node/package-lock.json)
// against mqd with sas_required = on, through the emulator connection string
//   Endpoint=sb://127.0.0.1:PORT;SharedAccessKeyName=K;SharedAccessKey=KEY;UseDevelopmentEmulator=true;EntityPath=HUB
// Checks, on a 2-partition hub:
// - batches sent with a partition id (3 events: string, object, binary with application
//   properties), with a partition key (2 events, in the partition Kafka's murmur2 picks)
//   and with neither (1 event) are all accepted;
// - getEventHubProperties() names the hub and partitions ["0","1"];
//   getPartitionProperties() gives each partition's beginning/last sequence numbers and
//   last offset matching what was sent (6 events in all);
// - subscribe from earliest with consumer group "$Default" reads the 6 events: contents,
//   body types, properties and per-partition order, offset as a string, sequence number
//   as a number and enqueued time as a Date within the test's run; from sequence number 1
//   inclusive on partition 0 it reads 2 events, exclusive 1;
// - refused with the SDK's UnauthorizedError (status 401 from $cbs): a wrong key, an
//   expired token (a SharedAccessSignature the test signs with a past se), a token for
//   another hub (a key scoped to this hub); a listen-only key reads the hub's
//   properties but cannot send (UnauthorizedError).
// Exit 0 pass, 1 fail, 77 skip (SDK not installed).
'use strict';
const path = require('path');
const fs = require('fs');
const mqdnode = require('./mqdnode');

const HUB = 'eh76';
const SLOW = mqdnode.SLOW;
const h = mqdnode('76-eh-sdk', 180000 * SLOW);
const { tmp, log, end, check, freePort, kafkaPartition } = h;
const { eh, retry, connStr, collect } = mqdnode.eventHubs(HUB, h);

const KEYS = { root: 'root-key-76', listen: 'listen-key-76', hubonly: 'hubonly-key-76' };
const tagged = (e, ctx) => ({ p: ctx.partitionId, e }); // what collect keeps: the partition too

function sasConnStr(port, keyName, key, se) {
  const sas = h.sasToken('sb://127.0.0.1:' + port + '/' + HUB, keyName, key, se);
  return 'Endpoint=sb://127.0.0.1:' + port + ';SharedAccessSignature=' + sas + ';UseDevelopmentEmulator=true;EntityPath=' + HUB;
}

async function refused(what, why, fn) {
  try {
    await fn();
  } catch (e) {
    log(what + ': ' + e.code + ' ' + (e.message || '').slice(0, 120));
    check(e.code === 'UnauthorizedError', what + ': error code ' + e.code + ' (' + e.message + '), want UnauthorizedError');
    check(String(e.message).includes(why), what + ': message ' + e.message + ', want it to say ' + why);
    return;
  }
  check(false, what + ': not refused');
}

async function main(port) {
  let key = null, other = null;
  for (let i = 0; i < 100 && (key === null || other === null); i++) {
    if (key === null && kafkaPartition('k' + i, 2) === 1) key = 'k' + i;
  }
  check(key !== null, 'no key maps to partition 1');
  const cs = connStr(port, 'root', KEYS.root);
  const t0 = Date.now();
  const producer = new eh.EventHubProducerClient(cs, retry);
  let b = await producer.createBatch({ partitionId: '0' });
  check(b.tryAdd({ body: 'p0-string' }) && b.tryAdd({ body: { n: 1, s: 'obj' } }) &&
    b.tryAdd({ body: Buffer.from([0, 1, 2, 255]), properties: { color: 'red', n: 7 } }), 'tryAdd partition 0');
  await producer.sendBatch(b);
  b = await producer.createBatch({ partitionKey: key });
  check(b.tryAdd({ body: 'keyed-0' }) && b.tryAdd({ body: 'keyed-1' }), 'tryAdd keyed');
  await producer.sendBatch(b);
  b = await producer.createBatch();
  check(b.tryAdd({ body: 'free-0' }), 'tryAdd unkeyed');
  await producer.sendBatch(b);

  const props = await producer.getEventHubProperties();
  log('hub: ' + JSON.stringify(props));
  check(props.name === HUB && JSON.stringify(props.partitionIds) === '["0","1"]', 'hub properties ' + JSON.stringify(props));
  const pp = [await producer.getPartitionProperties('0'), await producer.getPartitionProperties('1')];
  log('partitions: ' + JSON.stringify(pp));
  for (let i = 0; i < 2; i++) {
    check(pp[i].eventHubName === HUB && pp[i].partitionId === String(i) && pp[i].beginningSequenceNumber === 0 &&
      pp[i].isEmpty === false && pp[i].lastEnqueuedOffset === String(pp[i].lastEnqueuedSequenceNumber),
    'partition ' + i + ' properties ' + JSON.stringify(pp[i]));
  }
  const n0 = pp[0].lastEnqueuedSequenceNumber + 1, n1 = pp[1].lastEnqueuedSequenceNumber + 1;
  check(n0 + n1 === 6 && n0 >= 3 && n1 >= 2, 'partition counts ' + n0 + ' + ' + n1);

  const consumer = new eh.EventHubConsumerClient('$Default', cs, retry);
  const all = await collect(consumer, null, { startPosition: eh.earliestEventPosition }, 6, tagged);
  const per = { 0: [], 1: [] };
  for (const { p, e } of all) per[p].push(e);
  const bodies = (l) => l.map((e) => (Buffer.isBuffer(e.body) ? 'buf:' + e.body.toString('hex') : typeof e.body === 'object' ? JSON.stringify(e.body) : e.body));
  log('partition 0: ' + JSON.stringify(bodies(per[0])) + ' partition 1: ' + JSON.stringify(bodies(per[1])));
  check(all.length === 6, 'subscribe from earliest read ' + all.length + ' events, want 6');
  const p0 = bodies(per[0]).filter((x) => x !== 'free-0'), p1 = bodies(per[1]).filter((x) => x !== 'free-0');
  check(JSON.stringify(p0) === JSON.stringify(['p0-string', '{"n":1,"s":"obj"}', 'buf:000102ff']), 'partition 0 contents ' + JSON.stringify(p0));
  check(JSON.stringify(p1) === JSON.stringify(['keyed-0', 'keyed-1']), 'partition 1 contents ' + JSON.stringify(p1));
  const third = per[0].find((e) => Buffer.isBuffer(e.body));
  check(third && third.properties && third.properties.color === 'red' && third.properties.n === 7, 'application properties ' + JSON.stringify(third && third.properties));
  for (const p of [0, 1]) {
    per[p].forEach((e, i) => check(e.sequenceNumber === i && e.offset === String(i), 'partition ' + p + ' event ' + i + ': seq ' + e.sequenceNumber + ' offset ' + JSON.stringify(e.offset)));
    // the x-opt-* types the SDK decodes: offset a string, sequence number a number, enqueued time a Date
    per[p].forEach((e) => check(typeof e.offset === 'string' && Number.isInteger(e.sequenceNumber) && e.enqueuedTimeUtc instanceof Date &&
      e.enqueuedTimeUtc.getTime() >= t0 - 1000 && e.enqueuedTimeUtc.getTime() <= Date.now() + 1000, 'annotation types ' + JSON.stringify(e)));
  }
  per[1].filter((e) => String(e.body).startsWith('keyed')).forEach((e) => check(e.partitionKey === key, 'partition key ' + e.partitionKey));

  const inc = await collect(consumer, '0', { startPosition: { sequenceNumber: 1, isInclusive: true } }, 2, tagged);
  const exc = await collect(consumer, '0', { startPosition: { sequenceNumber: 1, isInclusive: false } }, 1, tagged);
  log('from seq 1 inclusive: ' + JSON.stringify(inc.map((x) => x.e.sequenceNumber)) + ', exclusive: ' + JSON.stringify(exc.map((x) => x.e.sequenceNumber)));
  check(JSON.stringify(inc.map((x) => x.e.sequenceNumber)) === JSON.stringify(n0 === 3 ? [1, 2] : [1, 2, 3]), 'inclusive start');
  check(JSON.stringify(exc.map((x) => x.e.sequenceNumber)) === JSON.stringify(n0 === 3 ? [2] : [2, 3]), 'exclusive start');
  await consumer.close();
  await producer.close();

  // refusals
  await refused('wrong key', 'invalid signature', async () => {
    const p = new eh.EventHubProducerClient(connStr(port, 'root', 'not-the-key'), retry);
    try { await p.getEventHubProperties(); } finally { await p.close(); }
  });
  await refused('expired token', 'expired', async () => {
    const p = new eh.EventHubProducerClient(sasConnStr(port, 'root', KEYS.root, Math.floor(Date.now() / 1000) - 60), retry);
    try { await p.getEventHubProperties(); } finally { await p.close(); }
  });
  await refused('token for another hub', 'outside the scope', async () => {
    const p = new eh.EventHubProducerClient(connStr(port, 'hubonly', KEYS.hubonly, 'otherhub'), retry);
    try { await p.getEventHubProperties(); } finally { await p.close(); }
  });
  // a key scoped to this hub works for it
  const scoped = new eh.EventHubProducerClient(connStr(port, 'hubonly', KEYS.hubonly), retry);
  const sp = await scoped.getEventHubProperties();
  check(sp.name === HUB, 'scoped key on its hub: ' + JSON.stringify(sp));
  await scoped.close();
  const lp = new eh.EventHubProducerClient(connStr(port, 'listen', KEYS.listen), retry);
  const lprops = await lp.getEventHubProperties();
  check(lprops.name === HUB, 'listen key reads properties: ' + JSON.stringify(lprops));
  await refused('listen-only key sends', 'not allowed to send', async () => {
    const bb = await lp.createBatch({ partitionId: '0' });
    bb.tryAdd({ body: 'must-not-arrive' });
    await lp.sendBatch(bb);
  });
  await lp.close();
  const after = new eh.EventHubProducerClient(cs, retry);
  const p0after = await after.getPartitionProperties('0');
  await after.close();
  check(p0after.lastEnqueuedSequenceNumber === pp[0].lastEnqueuedSequenceNumber, 'a refused send stored something: ' + JSON.stringify(p0after));
  end(true, '6 events in ' + n0 + '+' + n1 + ', start positions, 4 refusals');
}

freePort((port) => {
  const conf = path.join(tmp, 'mqd.conf');
  fs.writeFileSync(conf, [
    'listen = 127.0.0.1:' + port, 'data_dir = ' + path.join(tmp, 'data'), 'sas_required = on',
    '[topic ' + HUB + ']', 'partitions = 2',
    '[sas_key root]', 'key = ' + KEYS.root, 'rights = manage',
    '[sas_key listen]', 'key = ' + KEYS.listen, 'rights = listen',
    '[sas_key hubonly]', 'key = ' + KEYS.hubonly, 'rights = send,listen', 'scope = ' + HUB, ''].join('\n'));
  fs.mkdirSync(path.join(tmp, 'data'));
  h.startBroker(['--foreground', '-c', conf], port, () => main(port).catch((e) => end(false, 'exception: ' + (e && e.code) + ' ' + (e && e.stack))));
});
