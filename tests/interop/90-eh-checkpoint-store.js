#!/usr/bin/env node
// examples/eventhubs/mqd-checkpoint-store.js with the unmodified @azure/event-hubs SDK:
// two EventHubConsumerClient processes (children of this test, started together) on a
// 4-partition hub, consumer group $Default, balanced load balancing (1 s loop).
// Round 1 (owners A, B):
// - the ownership list ($management com.mqd:ownership QUERY, read every 250 ms) never
//   names a partition twice nor an owner other than A, B or "" (abandoned), and ends with
//   A and B owning 2 partitions each, stable over 3 reads; then each partition is being
//   read only by its owner (a newcomer at owner level 0 takes a partition from its
//   old reader: amqp:link:stolen, as Azure does for equal epochs);
// - 40 events sent after that (10 per partition) are received exactly 40 times, each by
//   its partition's owner; the children checkpoint the event of sequence number 5 of
//   each partition, and the checkpoint group $default.checkpoints then has committed
//   offset 6 on all 4 partitions (mqd's own group offsets, read with $management READ).
// - both children stop (client.close abandons: every owner "" afterwards).
// Round 2 (owners A2, B2, new processes): balance again, 2 + 2; they resume after the
// last checkpoint: the events they get again are exactly those not checkpointed
// (sequence numbers 6..9 of each partition: 16 distinct, each partition session starts
// at 6, and <= 16 in all when no partition changed hands while they balanced), then 20
// new events are received exactly 20 times. Both rounds start the two processes
// together, after warming up, so that neither claims 3 partitions first.
// Exit 0 pass, 1 fail, 77 skip (SDK not installed).
'use strict';
const path = require('path');
const fs = require('fs');
const readline = require('readline');
const { spawn } = require('child_process');

const HUB = 'eh90';
const NPART = 4;
const CKPT_SEQ = 5; // the children checkpoint the event with this sequence number
const mqdnode = require('./mqdnode');
const { SLOW, sleep } = mqdnode;
const nodeModules = path.join(__dirname, 'node', 'node_modules');
const storePath = path.join(__dirname, '..', '..', 'examples', 'eventhubs', 'mqd-checkpoint-store.js');

// ---- child: one consumer process; JSON lines on stdout; stops on SIGTERM ----
async function child(port, id) {
  const { eh, connStr } = mqdnode.eventHubs(HUB, null);
  const { MqdCheckpointStore } = require(storePath);
  const out = (o) => process.stdout.write(JSON.stringify(Object.assign({ id }, o)) + '\n');
  const store = new MqdCheckpointStore(connStr(port), { rhea: require(path.join(nodeModules, 'rhea')) });
  const client = new eh.EventHubConsumerClient('$Default', connStr(port), store, {
    identifier: id,
    retryOptions: { maxRetries: 3, timeoutInMs: 15000 * SLOW },
    loadBalancingOptions: { strategy: 'balanced', updateIntervalInMs: 1000, partitionOwnershipExpirationIntervalInMs: 60000 * SLOW },
  });
  // warm up (connection, $cbs, management link) so that both processes' first
  // load-balancing loops run together once the parent says "go": one that started
  // seconds earlier would claim 3 partitions and have one taken away again
  await client.getPartitionIds();
  await store.listOwnership('ns', HUB, '$Default');
  out({ ev: 'ready' });
  await new Promise((r) => process.stdin.once('data', r));
  const sub = client.subscribe({
    processInitialize: async (ctx) => out({ ev: 'init', p: ctx.partitionId }),
    processClose: async (reason, ctx) => out({ ev: 'close', p: ctx.partitionId, reason }),
    processError: async (err, ctx) => out({ ev: 'error', p: ctx.partitionId, code: err.code || err.name, msg: String(err.message).slice(0, 200) }),
    processEvents: async (events, ctx) => {
      for (const e of events) {
        out({ ev: 'event', p: ctx.partitionId, seq: e.sequenceNumber, body: e.body });
        if (e.sequenceNumber === CKPT_SEQ) {
          await ctx.updateCheckpoint(e);
          out({ ev: 'ckpt', p: ctx.partitionId, seq: e.sequenceNumber });
        }
      }
    },
  }, { startPosition: eh.earliestEventPosition, maxBatchSize: 10, maxWaitTimeInSeconds: 1 });
  process.on('SIGTERM', async () => {
    await sub.close();
    await client.close();
    await store.close();
    out({ ev: 'stopped' });
    process.exit(0);
  });
}

if (process.argv[2] === 'child') {
  child(Number(process.argv[3]), process.argv[4]).catch((e) => { console.log(JSON.stringify({ ev: 'fatal', msg: e.stack })); process.exit(1); });
  return;
}

// ---- the test ----
const h = mqdnode('90-eh-checkpoint-store', 300000 * SLOW);
const { tmp, log, end, check, freePort } = h;
const { eh, connStr, retry } = mqdnode.eventHubs(HUB, h);
const { MqdCheckpointStore } = require(storePath);
const kids = new Map(); // id -> { proc, active: Set, events: [], ckpts: [], errors: [] }
// a failing test exits at once: its consumer processes must not outlive it
process.on('exit', () => { for (const k of kids.values()) if (k.exit === undefined) try { process.kill(k.proc.pid, 'SIGKILL'); } catch (e) { /* gone */ } });

function startChild(port, id) {
  const proc = spawn(process.execPath, [__filename, 'child', String(port), id], { stdio: ['pipe', 'pipe', 'inherit'] });
  const k = { proc, active: new Set(), events: [], ckpts: [], errors: [], stopped: false, ready: false, sess: {}, inits: 0 };
  kids.set(id, k);
  readline.createInterface({ input: proc.stdout }).on('line', (line) => {
    let m;
    try { m = JSON.parse(line); } catch (e) { return log(id + ': ' + line); }
    if (m.ev === 'ready') k.ready = true;
    else if (m.ev === 'init') { k.active.add(m.p); k.sess[m.p] = (k.sess[m.p] || 0) + 1; k.inits++; }
    else if (m.ev === 'close') { k.active.delete(m.p); log(id + ': close ' + m.p + ' (' + m.reason + ')'); }
    else if (m.ev === 'event') k.events.push(Object.assign(m, { sess: k.sess[m.p] }));
    else if (m.ev === 'ckpt') k.ckpts.push(m);
    else if (m.ev === 'error') { k.errors.push(m.code); log(id + ': error on ' + m.p + ': ' + m.code + ' ' + m.msg); }
    else if (m.ev === 'fatal') end(false, id + ': ' + m.msg);
  });
  proc.on('exit', (code) => { k.exit = code; if (!k.stopped) end(false, 'consumer ' + id + ' exited with ' + code); });
  return k;
}

function stopChild(id) {
  const k = kids.get(id);
  k.stopped = true;
  return new Promise((resolve) => {
    if (k.exit !== undefined) return resolve();
    const killer = setTimeout(() => k.proc.kill('SIGKILL'), 20000 * SLOW);
    k.proc.once('exit', () => { clearTimeout(killer); resolve(); });
    k.proc.kill('SIGTERM');
  });
}

let reads = 0;
// Reads the ownership list; checks no partition is named twice and every owner is known.
async function owners(store, allowed) {
  const rows = await store.listOwnership('ns', HUB, '$Default');
  reads++;
  const seen = new Set();
  for (const r of rows) {
    check(!seen.has(r.partitionId), 'read ' + reads + ': partition ' + r.partitionId + ' listed twice: ' + JSON.stringify(rows));
    seen.add(r.partitionId);
    check(allowed.includes(r.ownerId), 'read ' + reads + ': unknown owner ' + JSON.stringify(r.ownerId));
    check(typeof r.etag === 'string' && r.etag.length > 0 && Number.isFinite(r.lastModifiedTimeInMs), 'read ' + reads + ': row ' + JSON.stringify(r));
  }
  return rows;
}

// Waits until a and b own 2 partitions each, the same over 3 reads, and each partition
// is being read by its owner alone; returns partition -> owner.
async function balanced(store, a, b) {
  const deadline = Date.now() + 90000 * SLOW;
  let stable = 0, last = '';
  let map = null;
  while (Date.now() < deadline) {
    const rows = await owners(store, [a, b, '']);
    const cnt = { [a]: 0, [b]: 0 };
    for (const r of rows) if (r.ownerId) cnt[r.ownerId]++;
    const key = JSON.stringify(rows.map((r) => r.partitionId + '=' + r.ownerId));
    if (rows.length === NPART && cnt[a] === 2 && cnt[b] === 2) {
      stable = key === last ? stable + 1 : 1;
      last = key;
      if (stable >= 3) {
        map = Object.fromEntries(rows.map((r) => [r.partitionId, r.ownerId]));
        break;
      }
    } else {
      stable = 0;
    }
    await sleep(250);
  }
  check(map, 'no balance of ' + a + ' and ' + b + ' after ' + reads + ' reads: ' + last);
  log('balanced after ' + reads + ' reads: ' + JSON.stringify(map));
  let readers = '';
  while (Date.now() < deadline) {
    readers = JSON.stringify(Object.keys(map).map((p) => [p, [a, b].filter((id) => kids.get(id).active.has(p))]));
    if (Object.keys(map).every((p) => kids.get(map[p]).active.has(p) && !kids.get(map[p] === a ? b : a).active.has(p))) break;
    await sleep(250);
  }
  check(Object.keys(map).every((p) => kids.get(map[p]).active.has(p) && !kids.get(map[p] === a ? b : a).active.has(p)),
    'partition readers do not match the owners ' + JSON.stringify(map) + ': ' + readers);
  await owners(store, [a, b]);
  return map;
}

// Starts two consumers and lets them go at once, when both are warmed up.
async function startPair(port, a, b) {
  for (const id of [a, b]) startChild(port, id);
  const deadline = Date.now() + 60000 * SLOW;
  while (!(kids.get(a).ready && kids.get(b).ready) && Date.now() < deadline) await sleep(50);
  check(kids.get(a).ready && kids.get(b).ready, 'consumers ' + a + ', ' + b + ' not ready');
  for (const id of [a, b]) kids.get(id).proc.stdin.write('go\n');
}

async function send(producer, round, perPart) {
  for (let p = 0; p < NPART; p++) {
    const batch = await producer.createBatch({ partitionId: String(p) });
    for (let i = 0; i < perPart; i++) check(batch.tryAdd({ body: round + '-' + p + '-' + i }), 'tryAdd');
    await producer.sendBatch(batch);
  }
}

// Waits for `want` events across ids (and 2 s more for any extra); returns them.
async function received(ids, pred, want) {
  const all = () => ids.flatMap((id) => kids.get(id).events.filter(pred));
  const deadline = Date.now() + 60000 * SLOW;
  while (all().length < want && Date.now() < deadline) await sleep(100);
  await sleep(2000 * SLOW);
  return all();
}

function exactlyOnce(what, evs, want, owner) {
  const bodies = evs.map((e) => e.body);
  check(evs.length === want && new Set(bodies).size === want, what + ': ' + evs.length + ' events, ' + new Set(bodies).size + ' distinct, want ' + want);
  for (const e of evs) check(owner[e.p] === e.id, what + ': event ' + e.body + ' read by ' + e.id + ', partition ' + e.p + ' is owned by ' + owner[e.p]);
}

async function main(port) {
  const store = new MqdCheckpointStore(connStr(port), { rhea: h.rhea });
  // the hub comes from its [topic] section in mqd.conf (declared topics are created at start)
  const producer = new eh.EventHubProducerClient(connStr(port), retry);
  check((await producer.getEventHubProperties()).partitionIds.length === NPART, 'hub partitions');

  // round 1
  await startPair(port, 'A', 'B');
  let own = await balanced(store, 'A', 'B');
  await send(producer, 'r1', 10);
  const r1 = await received(['A', 'B'], () => true, 40);
  exactlyOnce('round 1', r1, 40, own);
  const ckdeadline = Date.now() + 20000 * SLOW;
  while (kids.get('A').ckpts.length + kids.get('B').ckpts.length < NPART && Date.now() < ckdeadline) await sleep(100);
  const g = await store._call('com.mqd:consumergroup', 'READ', HUB + '/$Default.checkpoints', {});
  const committed = g.partitions.map((p) => p.committed);
  log('checkpoint group: ' + JSON.stringify(committed) + ', checkpoints ' + (kids.get('A').ckpts.length + kids.get('B').ckpts.length));
  check(JSON.stringify(committed) === JSON.stringify([6, 6, 6, 6]), 'checkpoint group offsets ' + JSON.stringify(committed));
  const cps = await store.listCheckpoints('ns', HUB, '$Default');
  check(cps.length === NPART && cps.every((c) => c.sequenceNumber === CKPT_SEQ && c.offset === String(CKPT_SEQ)), 'listCheckpoints ' + JSON.stringify(cps));
  await Promise.all(['A', 'B'].map(stopChild));
  const after = await owners(store, ['']);
  check(after.length === NPART && after.every((r) => r.ownerId === ''), 'ownership after both stopped: ' + JSON.stringify(after));

  // round 2: new processes resume after the checkpoints
  await startPair(port, 'A2', 'B2');
  own = await balanced(store, 'A2', 'B2');
  const notCheckpointed = 40 - NPART * (CKPT_SEQ + 1);
  const again = await received(['A2', 'B2'], (e) => e.body.startsWith('r1-'), notCheckpointed);
  const inits = kids.get('A2').inits + kids.get('B2').inits;
  log('redelivered ' + again.length + ' (not checkpointed: ' + notCheckpointed + ') in ' + inits + ' partition sessions: ' +
    JSON.stringify(again.map((e) => e.id + '/' + e.p + ':' + e.seq)));
  check(again.every((e) => e.seq > CKPT_SEQ), 'redelivered an event at or before its checkpoint: ' + JSON.stringify(again.map((e) => e.p + ':' + e.seq)));
  check(new Set(again.map((e) => e.body)).size === notCheckpointed, 'redelivered ' + new Set(again.map((e) => e.body)).size +
    ' distinct events, want the ' + notCheckpointed + ' not checkpointed');
  // a partition that changed hands while the two balanced is read again from its
  // checkpoint by its new owner (Event Hubs' at-least-once): each partition session
  // starts right after the checkpoint, and with one session per partition (the usual
  // case) nothing comes twice
  const firsts = {};
  for (const e of again) if (!(e.id + '/' + e.p + '/' + e.sess in firsts)) firsts[e.id + '/' + e.p + '/' + e.sess] = e.seq;
  check(Object.values(firsts).every((q) => q === CKPT_SEQ + 1), 'partition sessions started at ' + JSON.stringify(firsts));
  if (inits === NPART) check(again.length <= notCheckpointed, 'redelivered ' + again.length + ' > ' + notCheckpointed + ' not checkpointed');
  else log('NOTE: ' + (inits - NPART) + ' partition handoffs in round 2: ' + again.length + ' redeliveries');
  await send(producer, 'r2', 5);
  const r2 = await received(['A2', 'B2'], (e) => e.body.startsWith('r2-'), 20);
  exactlyOnce('round 2', r2, 20, own);
  await Promise.all(['A2', 'B2'].map(stopChild));
  await producer.close();
  await store.close();
  const errs = [...kids.values()].flatMap((k) => k.errors);
  end(true, 'balanced 2+2 twice in ' + reads + ' ownership reads, 40 + 20 events exactly once, ' + again.length +
    ' redelivered after the restart (not checkpointed: ' + notCheckpointed + '), consumer errors ' + JSON.stringify(errs));
}

freePort((port) => {
  const conf = path.join(tmp, 'mqd.conf');
  fs.writeFileSync(conf, ['listen = 127.0.0.1:' + port, 'data_dir = ' + path.join(tmp, 'data'),
    '[topic ' + HUB + ']', 'partitions = ' + NPART, ''].join('\n'));
  fs.mkdirSync(path.join(tmp, 'data'));
  h.startBroker(['--foreground', '-c', conf], port,
  () => main(port).catch((e) => end(false, 'exception: ' + (e && e.code) + ' ' + (e && e.stack))));
});
