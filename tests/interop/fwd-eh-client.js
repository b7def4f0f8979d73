#!/usr/bin/env node
// The @azure/event-hubs client of test 162 (the test starts the cluster and creates the
// hub): the unmodified SDK through the emulator connection string with SAS key `root`.
//   node fwd-eh-client.js PRODUCER_PORT CONSUMER_PORT HUB KEY NKEYS
// On PRODUCER_PORT (one node): batches by partition id (5 events to each of the hub's
// partitions, and one array of 3 to partition 5), by partition key (4 events per key
// k0..k<NKEYS-1>), the k0 batch sent twice with the same message ids (a retry: kept once),
// every one with a messageId; a wrong key refused by $cbs there; getEventHubProperties and
// getPartitionProperties (polled until they count what was sent, at most 5 s).
// On CONSUMER_PORT (another node): every partition read from the earliest position with
// consumer group $Default. Prints one JSON line (the test checks it):
// {"sent": n, "hub": {...}, "parts": {pid: {...}}, "parts_ms": ms, "refused": code,
//  "events": {pid: [[seq, offset, body, partitionKey, messageId], ...]}, "error": null}
'use strict';
const mqdnode = require('./mqdnode'); // also gives Node 18 the Web Crypto the SDK needs

const [pPort, cPort, HUB, KEY, nkStr] = process.argv.slice(2);
const NKEYS = Number(nkStr);
const out = { sent: 0, hub: null, parts: {}, parts_ms: null, refused: null, events: {}, error: null };
const h = { log: (...a) => console.error(...a), check: (ok, what) => { if (!ok) throw new Error(what); } };
const { eh, retry, connStr, collect, sleep, SLOW } = mqdnode.eventHubs(HUB, h);

async function produce(producer, nparts) {
  for (let p = 0; p < nparts; p++) {
    const b = await producer.createBatch({ partitionId: String(p) });
    for (let i = 0; i < 5; i++) h.check(b.tryAdd({ body: 'pid:' + p + ':' + i, messageId: 'pid-' + p + '-' + i }), 'tryAdd pid');
    await producer.sendBatch(b);
    out.sent += 5;
  }
  await producer.sendBatch([0, 1, 2].map((i) => ({ body: 'arr:' + i, messageId: 'arr-' + i })), { partitionId: String(nparts - 1) });
  out.sent += 3;
  const keyed = async (k) => {
    const b = await producer.createBatch({ partitionKey: 'k' + k });
    for (let j = 0; j < 4; j++) h.check(b.tryAdd({ body: 'key:k' + k + ':' + j, messageId: 'key-k' + k + '-' + j }), 'tryAdd key');
    await producer.sendBatch(b);
  };
  for (let k = 0; k < NKEYS; k++) {
    await keyed(k);
    out.sent += 4;
  }
  await keyed(0); // the retry of a batch: the same message ids, kept once
}

async function main() {
  const producer = new eh.EventHubProducerClient(connStr(pPort, 'root', KEY), retry);
  out.hub = await producer.getEventHubProperties();
  const nparts = out.hub.partitionIds.length;
  await produce(producer, nparts);
  const t0 = Date.now();
  for (;;) { // the node's copy learns the leader's high watermark with its next fetch
    let n = 0;
    for (let p = 0; p < nparts; p++) {
      out.parts[p] = await producer.getPartitionProperties(String(p));
      n += out.parts[p].lastEnqueuedSequenceNumber + 1;
    }
    if (n >= out.sent || Date.now() - t0 > 5000 * SLOW) break;
    await sleep(100);
  }
  out.parts_ms = Date.now() - t0;
  await producer.close();
  const bad = new eh.EventHubProducerClient(connStr(pPort, 'root', 'not-the-key'), retry);
  try {
    await bad.getEventHubProperties();
  } catch (e) {
    out.refused = e.code;
  } finally {
    await bad.close();
  }
  const consumer = new eh.EventHubConsumerClient('$Default', connStr(cPort, 'root', KEY), retry);
  const all = await collect(consumer, null, { startPosition: eh.earliestEventPosition }, out.sent,
    (e, ctx) => ({ p: ctx.partitionId, e }));
  await consumer.close();
  for (const { p, e } of all) {
    (out.events[p] = out.events[p] || []).push([e.sequenceNumber, e.offset, e.body, e.partitionKey || null, e.messageId || null]);
  }
}

const hard = setTimeout(() => { out.error = 'timed out'; console.log(JSON.stringify(out)); process.exit(1); }, 150000 * SLOW);
main().then(() => {
  clearTimeout(hard);
  console.log(JSON.stringify(out));
  process.exit(0);
}, (e) => {
  clearTimeout(hard);
  out.error = (e && e.code) + ' ' + (e && (e.stack || e.message));
  console.log(JSON.stringify(out));
  process.exit(0);
});
