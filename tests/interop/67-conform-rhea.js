#!/usr/bin/env node
// AMQP 1.0 conformance with rhea (issue 17 point 4; the table is docs/conformance.md):
// (a) 3.2.1 header as delivered: 3 messages (durable/priority 9/ttl 1 h; no header;
//     durable false/priority 0/ttl 30 min) plus one past its absolute_expiry_time and one
//     with it an hour ahead. A receiver (manual settlement, credit 4) gets exactly the 4
//     live ones in order (not the expired one), fields as sent, delivery_count absent
//     (first delivery) and modifies them with delivery_failed; the next receiver gets the
//     4 with delivery_count 1 and first_acquirer false, fields unchanged, and releases
//     them; the third gets delivery_count 1 still and accepts.
// (b) 2.6.7 drain: 2 messages, a receiver with credit 10 and drain: 2 messages in order,
//     then mqd's flow: receiver_drained with credit 0 and delivery_count 10.
// (c) 2.6.1: two connections of one container id each attach a receiver named 'L': the
//     first is detached with amqp:link:stolen; the second receives the 3 messages sent.
// Exit 0 pass, 1 fail, 77 skip.
'use strict';
const path = require('path');
const fs = require('fs');

const HARD_TIMEOUT_MS = 120000;
const h = require('./mqdnode')('67-conform-rhea', HARD_TIMEOUT_MS);
const { log, end, check, freePort, connect } = h;

function sendAll(port, address, msgs, cb) {
  const conn = connect(port, 'c67-sender-' + address);
  let sent = 0; let accepted = 0;
  const sender = conn.open_sender(address);
  sender.on('sendable', (ctx) => {
    while (ctx.sender.sendable() && sent < msgs.length) ctx.sender.send(msgs[sent++]);
  });
  sender.on('accepted', () => { if (++accepted === msgs.length) conn.close(); });
  sender.on('rejected', (ctx) => end(false, 'send rejected: ' + JSON.stringify(ctx.delivery.remote_state)));
  conn.on('connection_close', () => cb(accepted));
}

// Receives until `n` arrived (plus a 1 s linger for extras), settling each with `settle`.
function receiveN(port, id, n, source, settle, cb) {
  const conn = connect(port, id);
  const rcv = conn.open_receiver({ source, autoaccept: false, credit_window: 0 });
  rcv.add_credit(n); // exactly n: a modified or released message comes straight back otherwise
  const got = [];
  rcv.on('message', (ctx) => {
    const m = ctx.message;
    got.push({ body: m.body, dc: m.delivery_count, fa: m.first_acquirer, durable: m.durable,
      priority: m.priority, ttl: m.ttl });
    settle(ctx.delivery);
    if (got.length === n) setTimeout(() => conn.close(), 1000);
  });
  rcv.on('receiver_error', (ctx) => end(false, id + ': receiver error ' + JSON.stringify(ctx.receiver.error)));
  conn.on('connection_close', () => cb(got));
}

const HDR = 'c67-hdr';
const LIVE = ['h-0', 'h-1', 'h-2', 'h-future'];
// rhea gives an absent header field as undefined: compare what the producer set
const WANT = {
  'h-0': { durable: true, priority: 9, ttl: 3600000 },
  'h-1': { durable: undefined, priority: undefined, ttl: undefined },
  'h-2': { durable: false, priority: 0, ttl: 1800000 },
  'h-future': { durable: undefined, priority: undefined, ttl: undefined },
};

function checkRound(what, got, dc, fa) {
  log(what + ': ' + JSON.stringify(got));
  check(got.map((x) => x.body).join() === LIVE.join(), what + ': got ' + JSON.stringify(got.map((x) => x.body)) +
    ', want ' + LIVE.join());
  for (const x of got) {
    const w = WANT[x.body];
    check(x.durable === w.durable && x.priority === w.priority && x.ttl === w.ttl, what + ' ' + x.body +
      ': durable/priority/ttl ' + [x.durable, x.priority, x.ttl].join('/') + ', want as sent ' +
      [w.durable, w.priority, w.ttl].join('/'));
    check(x.dc === dc && x.fa === fa, what + ' ' + x.body + ': delivery_count ' + x.dc + ' first_acquirer ' +
      x.fa + ', want ' + dc + ' and ' + fa);
  }
}

function caseHeader(port, cb) {
  const now = Date.now();
  const msgs = [
    { body: 'h-0', durable: true, priority: 9, ttl: 3600000 },
    { body: 'h-1' },
    { body: 'h-2', durable: false, priority: 0, ttl: 1800000 },
    { body: 'h-past', absolute_expiry_time: new Date(now - 60000) },
    { body: 'h-future', absolute_expiry_time: new Date(now + 3600000) },
  ];
  sendAll(port, HDR, msgs, (accepted) => {
    check(accepted === msgs.length, 'header: accepted ' + accepted + ' of ' + msgs.length);
    receiveN(port, 'c67-r1', 4, HDR, (d) => d.modified({ delivery_failed: true }), (first) => {
      checkRound('first deliveries', first, undefined, undefined);
      receiveN(port, 'c67-r2', 4, HDR, (d) => d.release(), (second) => {
        checkRound('after modified(delivery_failed)', second, 1, false);
        receiveN(port, 'c67-r3', 4, HDR, (d) => d.accept(), (third) => {
          checkRound('after released', third, 1, false);
          cb();
        });
      });
    });
  });
}

function caseDrain(port, cb) {
  const topic = 'c67-drain';
  sendAll(port, topic, [{ body: 'd-0' }, { body: 'd-1' }], () => {
    const conn = connect(port, 'c67-drainer');
    const rcv = conn.open_receiver({ source: topic, autoaccept: true, credit_window: 0 });
    const got = [];
    rcv.on('receiver_open', () => { rcv.add_credit(10); rcv.drain_credit(); });
    rcv.on('message', (ctx) => got.push(ctx.message.body));
    rcv.on('receiver_drained', (ctx) => {
      const r = ctx.receiver;
      log('drain: got ' + JSON.stringify(got) + ', then flow credit ' + r.credit + ' delivery_count ' + r.delivery_count);
      check(got.join() === 'd-0,d-1', 'drain: got ' + JSON.stringify(got) + ' before the drained flow');
      check(r.credit === 0 && r.delivery_count === 10, 'drain: the flow said credit ' + r.credit +
        ' delivery_count ' + r.delivery_count + ', want 0 and 10');
      conn.close();
    });
    conn.on('connection_close', () => cb());
  });
}

function caseStolen(port, cb) {
  const topic = 'c67-steal';
  const c1 = connect(port, 'c67-app');
  const r1 = c1.open_receiver({ name: 'L', source: topic, autoaccept: true });
  let stolen = null;
  r1.on('receiver_error', (ctx) => { stolen = ctx.receiver.error; });
  r1.on('receiver_open', () => {
    const c2 = connect(port, 'c67-app'); // the same container id
    const r2 = c2.open_receiver({ name: 'L', source: topic, autoaccept: true });
    const got = [];
    let done = false;
    const verdict = () => {
      if (done) return;
      done = true;
      log('stolen: old L detached with ' + JSON.stringify(stolen) + '; new L got ' + JSON.stringify(got));
      check(stolen && stolen.condition === 'amqp:link:stolen', 'the first receiver L: ' + JSON.stringify(stolen) +
        ', want detached with amqp:link:stolen');
      check(got.join() === 's-0,s-1,s-2', 'the new receiver L got ' + JSON.stringify(got));
      let open = 2;
      for (const c of [c1, c2]) {
        c.on('connection_close', () => { if (--open === 0) cb(); });
        c.close();
      }
    };
    r2.on('receiver_open', () => {
      sendAll(port, topic, [0, 1, 2].map((i) => ({ body: 's-' + i })), () => {});
      setTimeout(verdict, 8000 * Number(process.env.MQD_TEST_SLOW || 1)); // bounded without a steal
    });
    r2.on('receiver_error', (ctx) => end(false, 'the new receiver L was detached: ' + JSON.stringify(ctx.receiver.error)));
    r2.on('message', (ctx) => {
      got.push(ctx.message.body);
      if (got.length === 3) setTimeout(verdict, 500);
    });
  });
}

freePort((port) => {
  const dataDir = path.join(h.tmp, 'data');
  fs.mkdirSync(dataDir);
  const argv = ['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', dataDir,
    '--set', 'link_stealing=container']; // cross-connection stealing is opt-in
  h.startBroker(argv, port, () => {
    caseHeader(port, () => caseDrain(port, () => caseStolen(port, () => end(true))));
  });
});
