#!/usr/bin/env node
// Issue 20's acceptance beyond 75-77, with the unmodified @azure/event-hubs SDK (loopback
// default: sas_required off) on a 2-partition hub, and the $management operations the
// checkpoint store (examples/eventhubs) uses. Checks:
// - equal epochs (owner level 0, what the SDK uses with a checkpoint store): a second
//   consumer of partition 1 at owner level 0 takes it over; the first gets
//   ReceiverDisconnectedError and none of the 3 events sent after the takeover, the
//   second reads all 4 (Azure: a receiver with epoch e1 is disconnected when one with
//   e2 >= e1 attaches);
// - consumer group "$Default" as the SDK spells it, in $management: after a consumer
//   read the 5 events of partition 0, READ of "HUB/$Default" reports group "$default"
//   with committed offset 5 on partition 0, and QUERY lists the group once;
// - enqueuedOn at the exact enqueued time of the last event of a first batch (a Date,
//   and the same as a number of ms) starts after it: exactly the 2 events of the batch
//   sent 50 ms later;
// - com.mqd:ownership CLAIM is a compare-and-set: of two concurrent claims with the same
//   etag one gets 200 and the other 412, a claim without etag of a claimed partition
//   gets 412, an unknown hub 404 with Azure's wording, a partition it lacks 404, a claim
//   without owner, with a partition that is no number, a 300-byte topic or no group 400; QUERY
//   lists each claimed partition once; the records and the checkpoint group survive a
//   restart of mqd with the same etags and offsets (a store open across the restart
//   connects again by itself); com.mqd:consumergroup COMMIT of a
//   group a link reads is refused with 409;
// - after that restart with sas_required = on, the store signs its own put-token: with a
//   manage key it checkpoints (listCheckpoints then gives partition 0 at 1, 1 at 2), a
//   listen-only key claims a partition but its COMMIT gets 401, a wrong key fails at
//   put-token (401);
// - enableIdempotentRetries: mqd does not offer idempotent publishing, and the SDK
//   reports isIdempotentPublishingEnabled false and stores the event once (plainly).
// Exit 0 pass, 1 fail, 77 skip (SDK not installed).
'use strict';
const path = require('path');
const fs = require('fs');
const mqdnode = require('./mqdnode');

const HUB = 'eh91';
const SLOW = mqdnode.SLOW;
const h = mqdnode('91-eh-sdk-more', 240000 * SLOW);
const { tmp, log, end, check, freePort } = h;
const { eh, sleep, retry, connStr, collect, sendTo, takeover, bodies } = mqdnode.eventHubs(HUB, h);
const { MqdCheckpointStore } = require(path.join(__dirname, '..', '..', 'examples', 'eventhubs', 'mqd-checkpoint-store.js'));

// A $management call through the store's link: { status, body, desc }.
async function mgmt(store, type, op, name, props) {
  try {
    return { status: 200, body: await store._call(type, op, name, props || {}) };
  } catch (e) {
    if (!e.statusCode) throw e;
    return { status: e.statusCode, desc: e.message };
  }
}

async function epochs(cs, p, store) {
  await sendTo(p, '1', [{ body: 'before' }]);
  // with a checkpoint store the SDK attaches at owner level 0 (no checkpoint yet: the
  // startPosition applies)
  const c1 = new eh.EventHubConsumerClient('$Default', cs, store, retry), c2 = new eh.EventHubConsumerClient('$Default', cs, store, retry);
  const opts = { startPosition: eh.earliestEventPosition, maxWaitTimeInSeconds: 1 };
  const { r1, e1, r2, e2, s1, s2 } = await takeover(c1, c2, opts, opts, p);
  log('equal epochs: first ' + bodies(r1) + ' errors ' + JSON.stringify(e1) + '; second ' + bodies(r2) + ' errors ' + JSON.stringify(e2));
  check(e1.includes('ReceiverDisconnectedError'), 'the first owner-level-0 consumer got ' + JSON.stringify(e1) + ', want ReceiverDisconnectedError');
  check(bodies(r1) === '["before"]', 'the first consumer read ' + bodies(r1));
  check(bodies(r2) === '["before","after-1","after-2","after-3"]', 'the second consumer read ' + bodies(r2));
  check(e2.length === 0, 'second consumer errors ' + JSON.stringify(e2));
  await s1.close(); await s2.close(); await c1.close(); await c2.close();
}

async function defaultGroup(cs, p, store) {
  await sendTo(p, '0', [0, 1, 2, 3, 4].map((i) => ({ body: 'd' + i })));
  const c = new eh.EventHubConsumerClient('$Default', cs, retry);
  const got = await collect(c, '0', { startPosition: eh.earliestEventPosition }, 5);
  check(bodies(got) === '["d0","d1","d2","d3","d4"]', '$Default read ' + bodies(got));
  await c.close();
  await sleep(500);
  const rd = await mgmt(store, 'com.mqd:consumergroup', 'READ', HUB + '/$Default');
  const q = await mgmt(store, 'com.mqd:consumergroup', 'QUERY', HUB);
  log('READ ' + HUB + '/$Default: ' + JSON.stringify(rd) + '; QUERY: ' + JSON.stringify(q.body));
  check(rd.status === 200 && rd.body.group.toLowerCase() === '$default', 'READ $Default: ' + JSON.stringify(rd));
  const committed = rd.body.partitions.map((x) => x.committed);
  check(committed[0] === 5, 'committed offsets of $Default ' + JSON.stringify(committed) + ', want 5 on partition 0');
  const named = q.body.filter((g) => g.group.toLowerCase() === '$default');
  check(named.length === 1, 'QUERY lists $default ' + named.length + ' times: ' + JSON.stringify(q.body));
}

async function enqueuedTime(cs, p) {
  await sendTo(p, '0', [{ body: 't0' }, { body: 't1' }]);
  await sleep(50 * SLOW);
  await sendTo(p, '0', [{ body: 't2' }, { body: 't3' }]);
  const c = new eh.EventHubConsumerClient('$Default', cs, retry);
  const all = (await collect(c, '0', { startPosition: eh.earliestEventPosition }, 9)).filter((e) => /^t/.test(e.body));
  check(bodies(all) === '["t0","t1","t2","t3"]', 'time events ' + bodies(all));
  const at = all[1].enqueuedTimeUtc;
  check(all[2].enqueuedTimeUtc.getTime() > at.getTime(), 'batches share an enqueued time: ' + at.getTime());
  for (const [what, pos] of [['Date', { enqueuedOn: at }], ['ms', { enqueuedOn: at.getTime() }]]) {
    const got = await collect(c, '0', { startPosition: pos }, 2);
    log('enqueuedOn ' + what + ' ' + at.getTime() + ': ' + bodies(got));
    check(bodies(got) === '["t2","t3"]', 'enqueuedOn (' + what + ') at the last event of the first batch: ' + bodies(got));
  }
  await c.close();
}

async function ownership(store) {
  const n = HUB + '/$Default';
  const first = await mgmt(store, 'com.mqd:ownership', 'CLAIM', n, { partition: 0, owner: 'p1' });
  check(first.status === 200 && first.body.owner === 'p1' && first.body.partition === 0, 'first claim ' + JSON.stringify(first));
  const etag = first.body.etag;
  const race = await Promise.all(['p2', 'p3'].map((o) => mgmt(store, 'com.mqd:ownership', 'CLAIM', n, { partition: 0, owner: o, etag })));
  log('two claims with etag ' + etag + ': ' + JSON.stringify(race.map((r) => r.status)));
  check(race.filter((r) => r.status === 200).length === 1 && race.filter((r) => r.status === 412).length === 1,
    'two claims with the same etag: ' + JSON.stringify(race));
  const winner = race.find((r) => r.status === 200).body;
  check(winner.etag !== etag, 'the etag did not change: ' + winner.etag);
  const noEtag = await mgmt(store, 'com.mqd:ownership', 'CLAIM', n, { partition: 0, owner: 'p4' });
  check(noEtag.status === 412, 'a claim without etag of a claimed partition: ' + JSON.stringify(noEtag));
  const p1 = await mgmt(store, 'com.mqd:ownership', 'CLAIM', HUB + '/$DEFAULT', { partition: 1, owner: 'p1' });
  check(p1.status === 200, 'claim of partition 1 (group spelled $DEFAULT): ' + JSON.stringify(p1));
  const noHub = await mgmt(store, 'com.mqd:ownership', 'QUERY', 'nohub91/$Default');
  check(noHub.status === 404 && noHub.desc === "The messaging entity 'nohub91' could not be found.", 'unknown hub: ' + JSON.stringify(noHub));
  const noPart = await mgmt(store, 'com.mqd:ownership', 'CLAIM', n, { partition: 2, owner: 'p1' });
  check(noPart.status === 404, 'partition 2 of a 2-partition hub: ' + JSON.stringify(noPart));
  // bad requests: 400 and nothing stored
  for (const [what, name, props] of [['no owner', n, { partition: 1 }], ['partition not a number', n, { partition: 'x', owner: 'p9' }],
    ['a 300-byte topic', 'x'.repeat(300) + '/$Default', { partition: 0, owner: 'p9' }], ['no group', HUB, { partition: 0, owner: 'p9' }]]) {
    const bad = await mgmt(store, 'com.mqd:ownership', 'CLAIM', name, props);
    check(bad.status === 400, 'CLAIM with ' + what + ': ' + JSON.stringify(bad));
  }
  const q = await mgmt(store, 'com.mqd:ownership', 'QUERY', n);
  check(q.status === 200 && JSON.stringify(q.body.map((r) => [r.partition, r.owner])) === JSON.stringify([[0, winner.owner], [1, 'p1']]),
    'ownership list ' + JSON.stringify(q));
  // checkpoints: a group of their own; a group a link reads refuses COMMIT
  const ck = await mgmt(store, 'com.mqd:consumergroup', 'COMMIT', HUB + '/$default.checkpoints', { partition: 1, offset: 3 });
  check(ck.status === 200 && JSON.stringify(ck.body.partitions.map((x) => x.committed)) === '[0,3]', 'COMMIT ' + JSON.stringify(ck));
  return { etags: q.body.map((r) => r.etag), owners: q.body.map((r) => r.owner) };
}

async function main(port, restart) {
  const cs = connStr(port);
  const store = new MqdCheckpointStore(cs, { rhea: h.rhea });
  check((await mgmt(store, 'com.mqd:topic', 'CREATE', HUB, { partitions: 2 })).status === 200, 'create hub');
  const p = new eh.EventHubProducerClient(cs, retry);
  await epochs(cs, p, store);
  await defaultGroup(cs, p, store);
  await enqueuedTime(cs, p);
  // a live reader of $default: COMMIT into it is refused
  const c = new eh.EventHubConsumerClient('$Default', cs, retry);
  const sub = c.subscribe('1', { processEvents: async () => {}, processError: async () => {} }, { startPosition: eh.latestEventPosition });
  await sleep(2000 * SLOW);
  const busy = await mgmt(store, 'com.mqd:consumergroup', 'COMMIT', HUB + '/$Default', { partition: 0, offset: 1 });
  check(busy.status === 409, 'COMMIT of a group a link reads: ' + JSON.stringify(busy));
  await sub.close(); await c.close();
  const before = await ownership(store);
  await p.close();
  await store.close();
  // a store whose connection the restart cuts connects again on its next call
  const rootCs = connStr(port, 'root', SAS.root);
  const keep = new MqdCheckpointStore(rootCs, { rhea: h.rhea });
  check((await keep.listOwnership('ns', HUB, '$Default')).length === 2, 'ownership before the restart');
  // the records survive a restart of mqd
  await restart();
  await sleep(200);
  const kept = await keep.listOwnership('ns', HUB, '$Default');
  check(JSON.stringify(kept.map((r) => r.etag)) === JSON.stringify(before.etags), 'the store across the restart: ' + JSON.stringify(kept));
  await keep.close();
  const s2 = new MqdCheckpointStore(rootCs, { rhea: h.rhea });
  const q = await mgmt(s2, 'com.mqd:ownership', 'QUERY', HUB + '/$Default');
  const g = await mgmt(s2, 'com.mqd:consumergroup', 'READ', HUB + '/$default.checkpoints');
  log('after the restart: ' + JSON.stringify(q.body) + ', checkpoints ' + JSON.stringify(g.body && g.body.partitions.map((x) => x.committed)));
  check(JSON.stringify(q.body.map((r) => r.etag)) === JSON.stringify(before.etags) &&
    JSON.stringify(q.body.map((r) => r.owner)) === JSON.stringify(before.owners), 'ownership after the restart ' + JSON.stringify(q));
  check(g.status === 200 && JSON.stringify(g.body.partitions.map((x) => x.committed)) === '[0,3]', 'checkpoint group after the restart ' + JSON.stringify(g));
  const next = await mgmt(s2, 'com.mqd:ownership', 'CLAIM', HUB + '/$Default', { partition: 1, owner: 'p5', etag: before.etags[1] });
  check(next.status === 200 && Number(next.body.etag) > Math.max(...before.etags.map(Number)), 'claim after the restart ' + JSON.stringify(next));
  await s2.close();
  await withSas(port, cs);
  end(true, 'equal-epoch takeover, $Default committed 5, enqueuedOn exact, CLAIM race 1x200 1x412, records kept over a ' +
    'restart, the store under sas_required = on, no idempotent publishing');
}

// The store signs its own put-token from the connection string's key: with a manage key
// it checkpoints; a listen key claims partitions but cannot COMMIT (401); a wrong key gets
// no further than put-token (401).
async function withSas(port, cs) {
  const withKey = (name, key) => connStr(port, name, key);
  const root = new MqdCheckpointStore(withKey('root', SAS.root), { rhea: h.rhea });
  await root.updateCheckpoint({ eventHubName: HUB, consumerGroup: '$Default', partitionId: '0', sequenceNumber: 1, offset: '1' });
  const cps = await root.listCheckpoints('ns', HUB, '$Default');
  log('sas root: checkpoints ' + JSON.stringify(cps));
  check(JSON.stringify(cps.map((c) => [c.partitionId, c.sequenceNumber])) === '[["0",1],["1",2]]', 'checkpoints with the root key ' + JSON.stringify(cps));
  await root.close();
  const listen = new MqdCheckpointStore(withKey('listen', SAS.listen), { rhea: h.rhea });
  const own = await listen.listOwnership('ns', HUB, '$Default');
  const won = await listen.claimOwnership([Object.assign({}, own[0], { ownerId: 'listener' })]);
  check(won.length === 1 && won[0].ownerId === 'listener', 'claim with a listen key ' + JSON.stringify(won));
  const ck = await mgmt(listen, 'com.mqd:consumergroup', 'COMMIT', HUB + '/$default.checkpoints', { partition: 0, offset: 1 });
  check(ck.status === 401, 'COMMIT with a listen key: ' + JSON.stringify(ck));
  await listen.close();
  const wrong = new MqdCheckpointStore(withKey('root', 'not-the-key'), { rhea: h.rhea });
  let err = '';
  try { await wrong.listOwnership('ns', HUB, '$Default'); } catch (e) { err = e.message; }
  log('sas wrong key: ' + err);
  check(/put-token: 401/.test(err), 'a wrong key: ' + JSON.stringify(err));
  await wrong.close();
  // idempotent publishing is not offered: the SDK says so and sends plainly
  const p = new eh.EventHubProducerClient(withKey('root', SAS.root), Object.assign({ enableIdempotentRetries: true }, retry));
  const b = await p.createBatch({ partitionId: '0' });
  b.tryAdd({ body: 'idem' });
  await p.sendBatch(b);
  const pub = await p.getPartitionPublishingProperties('0');
  const pp = await p.getPartitionProperties('0');
  await p.close();
  log('idempotent retries: ' + JSON.stringify(pub) + ', partition 0 last ' + pp.lastEnqueuedSequenceNumber);
  check(pub.isIdempotentPublishingEnabled === false && pp.lastEnqueuedSequenceNumber === 9, 'idempotent producer ' + JSON.stringify(pub) + ' ' + JSON.stringify(pp));
}
const SAS = { root: 'root-key-91', listen: 'listen-key-91' };

freePort((port) => {
  fs.mkdirSync(path.join(tmp, 'data'));
  const argv = ['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', path.join(tmp, 'data')];
  // the restart turns sas_required on (same data dir)
  const conf = path.join(tmp, 'mqd.conf');
  fs.writeFileSync(conf, ['listen = 127.0.0.1:' + port, 'data_dir = ' + path.join(tmp, 'data'), 'sas_required = on',
    '[sas_key root]', 'key = ' + SAS.root, 'rights = manage', '[sas_key listen]', 'key = ' + SAS.listen, 'rights = listen', ''].join('\n'));
  const restart = () => new Promise((resolve) => h.restartBroker(['--foreground', '-c', conf], port, resolve));
  h.startBroker(argv, port, () => main(port, restart).catch((e) => end(false, 'exception: ' + (e && e.code) + ' ' + (e && e.stack))));
});
