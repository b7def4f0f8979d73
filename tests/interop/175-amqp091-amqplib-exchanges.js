#!/usr/bin/env node
// AMQP 0-9-1 exchanges with amqplib (npm, tests/interop/node), and AMQP 1.0 reading what
// they routed (docs/amqp091.md, "Exchanges and bindings"):
// - assertExchange fanout and topic (durable), assertQueue, bindQueue with routing keys;
// - a confirm channel publishes 200 messages to the fanout (headers, message ids, content
//   type, persistent): every one acked; both bound queues hold all 200;
// - the topic exchange: `log.*` and `log.#` bindings get what they match, in order; a
//   mandatory publish that matches nothing comes back (basic.return 312) and is acked;
// - amqplib consumes one fanout queue: 200 in order with their properties, exchange and
//   routing keys;
// - a Proton (python3-qpid-proton) AMQP 1.0 receiver reads the other fanout queue: 200 in
//   order with message-id, content-type, durable, application-properties from the headers,
//   and the annotations x-exchange / x-routing-key.
// Exit 0 pass, 1 fail, 77 skip (amqplib or Proton missing).
'use strict';
const path = require('path');
const fs = require('fs');
const { execFileSync } = require('child_process');

const N = 200;
const h = require('./mqdnode')('175-amqp091-amqplib-exchanges', 180000);
const { tmp, log, end, check, freePort } = h;
const { SLOW } = require('./mqdnode');

const amqp = h.amqplib();
try {
  execFileSync('/usr/bin/python3', ['-c', 'import proton.utils']);
} catch (e) {
  console.log('SKIP: python3-qpid-proton is not installed');
  process.exit(77);
}

function confirmed(ch, ex, key, body, opts) {
  return new Promise((resolve, reject) => {
    ch.publish(ex, key, Buffer.from(body), opts, (err) => (err ? reject(err) : resolve()));
  });
}

async function setup(ch) {
  await ch.assertExchange('ex.js.fan', 'fanout', { durable: true });
  await ch.assertExchange('ex.js.topic', 'topic', { durable: true });
  for (const q of ['q.js.f1', 'q.js.f2', 'q.js.t1', 'q.js.t2']) await ch.assertQueue(q, { durable: true });
  await ch.bindQueue('q.js.f1', 'ex.js.fan', '');
  await ch.bindQueue('q.js.f2', 'ex.js.fan', '');
  await ch.bindQueue('q.js.t1', 'ex.js.topic', 'log.*');
  await ch.bindQueue('q.js.t2', 'ex.js.topic', 'log.#');
}

async function publishAll(url) {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  await setup(ch);
  const all = [];
  for (let i = 0; i < N; i++) {
    all.push(confirmed(ch, 'ex.js.fan', 'k-' + i, 'fan-' + i, {
      messageId: 'f-' + i, contentType: 'application/json', persistent: true,
      headers: { index: i, kind: 'fan' },
    }));
  }
  await Promise.all(all);
  const returned = [];
  ch.on('return', (m) => returned.push(m));
  const keys = ['log.info', 'log.a.b', 'log.warn', 'other', 'log'];
  for (const k of keys) await confirmed(ch, 'ex.js.topic', k, 't-' + k, { mandatory: true });
  await ch.checkExchange('ex.js.topic'); // a round trip: the return came before its ack
  check(returned.length === 1 && returned[0].fields.replyCode === 312 &&
    returned[0].fields.routingKey === 'other', 'returns: ' + JSON.stringify(returned.map((m) => m.fields)));
  await ch.close();
  await conn.close();
  return all.length;
}

async function getAll(ch, q) {
  const out = [];
  for (let i = 0; i < 1000; i++) {
    const m = await ch.get(q, { noAck: true });
    if (m === false) break;
    out.push(m.content.toString());
  }
  return out;
}

async function consumeFanout(url) {
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  await ch.prefetch(50);
  let n = 0;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('consumed only ' + n)), 60000 * SLOW);
    ch.consume('q.js.f1', (msg) => {
      try {
        const i = n++;
        check(msg.content.toString() === 'fan-' + i, 'message ' + i + ': ' + msg.content.toString());
        const p = msg.properties;
        check(p.messageId === 'f-' + i && p.contentType === 'application/json' && p.deliveryMode === 2,
          'message ' + i + ': ' + JSON.stringify(p));
        check(p.headers.index === i && p.headers.kind === 'fan', 'headers ' + JSON.stringify(p.headers));
        check(msg.fields.routingKey === 'k-' + i && msg.fields.exchange === 'ex.js.fan',
          'exchange and routing key ' + JSON.stringify(msg.fields));
        ch.ack(msg);
        if (n === N) { clearTimeout(timer); resolve(); }
      } catch (e) { clearTimeout(timer); reject(e); }
    }, { noAck: false });
  });
  const t1 = await getAll(ch, 'q.js.t1');
  const t2 = await getAll(ch, 'q.js.t2');
  check(JSON.stringify(t1) === JSON.stringify(['t-log.info', 't-log.warn']), 'q.js.t1: ' + JSON.stringify(t1));
  check(JSON.stringify(t2) === JSON.stringify(['t-log.info', 't-log.a.b', 't-log.warn', 't-log']),
    'q.js.t2: ' + JSON.stringify(t2));
  const more = await getAll(ch, 'q.js.f1');
  check(more.length === 0, 'q.js.f1 after consuming: ' + more.length);
  await ch.close();
  await conn.close();
  return n;
}

const PROTON = `
import json, sys
from proton.utils import BlockingConnection
url, q, n, t = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
c = BlockingConnection(url, timeout=t, user="alice", password="alice-pw", allowed_mechs="PLAIN")
r = c.create_receiver(q)
out = []
for _ in range(n):
    m = r.receive(timeout=t)
    r.accept()
    body = m.body
    body = bytes(body).decode() if isinstance(body, (bytes, memoryview)) else str(body)
    out.append({"body": body, "id": m.id, "ct": str(m.content_type), "durable": m.durable,
                "props": dict(m.properties or {}),
                "ann": {str(k): str(v) for k, v in (m.annotations or {}).items()}})
c.close()
print(json.dumps(out))
`;

function protonRead(port, q, n) {
  const out = execFileSync('/usr/bin/python3', ['-c', PROTON, 'amqp://127.0.0.1:' + port, q, String(n),
    String(20 * SLOW)], { timeout: 120000 * SLOW });
  return JSON.parse(out.toString());
}

freePort((port) => {
  const dataDir = path.join(tmp, 'data');
  fs.mkdirSync(dataDir);
  const conf = path.join(tmp, 'mqd.conf');
  fs.writeFileSync(conf, 'allow_anonymous = off\n' + h.passwd('alice', 'alice-pw') +
    '[acl]\nallow alice send,receive,create,manage q.*\nallow alice create,manage ex.*\n');
  const argv = ['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', dataDir, '-c', conf];
  const url = 'amqp://alice:alice-pw@127.0.0.1:' + port;
  h.startBroker(argv, port, async () => {
    try {
      const n = await publishAll(url);
      log('published and confirmed to the fanout: ' + n);
      const c = await consumeFanout(url);
      log('amqplib consumed ' + c + ' from q.js.f1; topic queues as bound');
      const got = protonRead(port, 'q.js.f2', N);
      check(got.length === N, 'Proton read ' + got.length);
      got.forEach((m, i) => {
        check(m.body === 'fan-' + i && m.id === 'f-' + i && m.ct === 'application/json' && m.durable === true,
          'Proton message ' + i + ': ' + JSON.stringify(m));
        check(m.props.index === i && m.props.kind === 'fan', 'Proton properties ' + JSON.stringify(m.props));
        check(m.ann['x-exchange'] === 'ex.js.fan' && m.ann['x-routing-key'] === 'k-' + i,
          'Proton annotations ' + JSON.stringify(m.ann));
      });
      log('Proton read the fanout copy: ' + got.length + ' with properties');
      end(true);
    } catch (e) {
      end(false, e.stack || String(e));
    }
  });
});
