#!/usr/bin/env node
// AMQP 0-9-1 with amqplib (npm, tests/interop/node) on mqd's listener, against a user
// made by mqd-passwd (docs/amqp091.md):
// - a confirm channel publishes 1,000 messages (sendToQueue, default exchange) with
//   headers, message ids and content types; every one is acked by the broker;
// - a consumer with prefetch 20 and manual acks gets all 1,000 in order with their
//   properties; never more than 20 unacked at once;
// - nack with requeue: the message comes back with redelivered = true;
// - a publish to a queue the user may not send to closes the channel with 403.
// Exit 0 pass, 1 fail, 77 skip (amqplib not installed: npm ci in tests/interop/node).
'use strict';
const path = require('path');
const fs = require('fs');

const N = 1000;
const PREFETCH = 20;
const h = require('./mqdnode')('142-amqp091-amqplib', 120000);
const { tmp, log, end, check, freePort } = h;

const amqp = h.amqplib();

async function publishAll(url) {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  await ch.assertQueue('q.js', { durable: true });
  let acked = 0;
  const all = [];
  for (let i = 0; i < N; i++) {
    all.push(new Promise((resolve, reject) => {
      ch.sendToQueue('q.js', Buffer.from('js-' + i), {
        messageId: 'id-' + i, contentType: 'text/plain', persistent: true,
        headers: { index: i, even: i % 2 === 0, name: 'n' + i },
      }, (err) => { if (err) reject(err); else { acked++; resolve(); } });
    }));
  }
  await Promise.all(all);
  await ch.close();
  await conn.close();
  return acked;
}

async function consumeAll(url) {
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  await ch.prefetch(PREFETCH);
  let n = 0; let unacked = 0; let maxUnacked = 0;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('consumed only ' + n)), 60000);
    ch.consume('q.js', (msg) => {
      try {
        unacked++;
        maxUnacked = Math.max(maxUnacked, unacked);
        const i = n;
        check(msg.content.toString() === 'js-' + i, 'message ' + i + ': body ' + msg.content.toString());
        const p = msg.properties;
        check(p.messageId === 'id-' + i && p.contentType === 'text/plain' && p.deliveryMode === 2,
          'message ' + i + ': properties ' + JSON.stringify(p));
        check(p.headers.index === i && p.headers.even === (i % 2 === 0) && p.headers.name === 'n' + i,
          'message ' + i + ': headers ' + JSON.stringify(p.headers));
        check(!msg.fields.redelivered, 'message ' + i + ' redelivered');
        n++;
        // ack later, so that the prefetch window fills
        const last = n === N;
        setImmediate(() => {
          unacked--;
          ch.ack(msg);
          if (last) { clearTimeout(timer); resolve(); }
        });
      } catch (e) { clearTimeout(timer); reject(e); }
    }, { noAck: false });
  });
  await ch.close();
  await conn.close();
  return { n, maxUnacked };
}

async function nackRequeue(url) {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  await ch.assertQueue('q.js2', { durable: true });
  await new Promise((res, rej) => ch.sendToQueue('q.js2', Buffer.from('again'), {}, (e) => (e ? rej(e) : res())));
  const m1 = await ch.get('q.js2', { noAck: false });
  check(m1 && m1.content.toString() === 'again' && !m1.fields.redelivered, 'first get: ' + JSON.stringify(m1 && m1.fields));
  ch.nack(m1, false, true);
  const m2 = await ch.get('q.js2', { noAck: false });
  check(m2 && m2.content.toString() === 'again' && m2.fields.redelivered, 'after nack: ' + JSON.stringify(m2 && m2.fields));
  ch.ack(m2);
  const m3 = await ch.get('q.js2', { noAck: true });
  check(m3 === false, 'queue not empty after ack');
  await ch.close();
  await conn.close();
}

async function refused(url) {
  const conn = await amqp.connect(url);
  conn.on('error', () => {});
  const ch = await conn.createChannel();
  const closed = new Promise((resolve) => ch.on('error', (e) => resolve(e)));
  ch.sendToQueue('q.js', Buffer.from('not allowed'));
  const err = await Promise.race([closed, new Promise((r) => setTimeout(() => r(null), 10000))]);
  check(err && err.code === 403, 'publish without send right: ' + (err ? err.message : 'not refused'));
  await conn.close();
}

freePort((port) => {
  const dataDir = path.join(tmp, 'data');
  fs.mkdirSync(dataDir);
  const conf = path.join(tmp, 'mqd.conf');
  fs.writeFileSync(conf, 'allow_anonymous = off\n' + h.passwd('alice', 'alice-pw') + h.passwd('bob', 'bob-pw') +
    '[acl]\nallow alice send,receive,create q.*\nallow bob receive q.*\n');
  const argv = ['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', dataDir, '-c', conf];
  const url = 'amqp://alice:alice-pw@127.0.0.1:' + port;
  h.startBroker(argv, port, async () => {
    try {
      const acked = await publishAll(url);
      log('published and confirmed: ' + acked);
      check(acked === N, 'confirmed ' + acked + ' of ' + N);
      const { n, maxUnacked } = await consumeAll(url);
      log('consumed ' + n + ', at most ' + maxUnacked + ' unacked');
      check(n === N, 'consumed ' + n);
      check(maxUnacked <= PREFETCH, maxUnacked + ' unacked with prefetch ' + PREFETCH);
      await nackRequeue(url);
      log('nack requeue redelivered');
      await refused('amqp://bob:bob-pw@127.0.0.1:' + port);
      log('bob refused with 403');
      end(true);
    } catch (e) {
      end(false, e.stack || String(e));
    }
  });
});
