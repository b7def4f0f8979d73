#!/usr/bin/env node
// Event Hubs-style client with rhea: sends 20 messages to T (4 partitions) with the
// message annotation x-opt-partition-key (a key whose Kafka murmur2 partition is 0,
// computed here; murmur2 checked against "abc" -> 479470107), then reads them the way
// the Event Hubs SDKs do: address T/ConsumerGroups/$Default/Partitions/0 (capital D),
// filter keyed "apache.org:selector-filter:string" with a described value (descriptor
// symbol, "amqp.annotation.x-opt-offset > '-1'"), link property com.microsoft:epoch = 1.
// Checks x-opt-offset / x-opt-sequence-number / x-opt-enqueued-time /
// x-opt-partition-key / x-opt-partition-id from message_annotations and the attach echo.
// Then a second receiver (epoch 2, descriptor code 0x468C00000004, offset > '9') steals:
// the first is detached with amqp:link:stolen, the second reads offsets 10..19 (the
// filter moves a manual reader's position). A third on `$default` (lower case) with
// epoch 1 is refused with amqp:link:stolen (same group, lower epoch).
// Exit 0 pass, 1 fail, 77 skip.
'use strict';
const path = require('path');
const fs = require('fs');

const TOPIC = 'eh44';
const PARTS = 4;
const N = 20;
const HARD_TIMEOUT_MS = 90000;
const SEL = 'apache.org:selector-filter:string';

const h = require('./mqdnode')('44-rhea-eventhubs', HARD_TIMEOUT_MS);
const { rhea, tmp, log, end, check, murmur2, kafkaPartition, freePort, connect } = h;

function sendAll(port, key, cb) {
  const conn = connect(port, 'eh-sender');
  let sent = 0; let accepted = 0;
  const sender = conn.open_sender(TOPIC);
  sender.on('sendable', (ctx) => {
    while (ctx.sender.sendable() && sent < N) {
      ctx.sender.send({
        message_annotations: { 'x-opt-partition-key': key },
        application_properties: { index: sent },
        body: 'eh-' + String(sent).padStart(2, '0'),
      });
      sent++;
    }
  });
  sender.on('accepted', () => { if (++accepted === N) conn.close(); });
  sender.on('rejected', (ctx) => end(false, 'send rejected: ' + JSON.stringify(ctx.delivery.remote_state)));
  sender.on('released', () => end(false, 'send released'));
  conn.on('connection_close', () => cb(accepted));
}

function receiverOptions(group, epoch, filterValue) {
  return {
    source: {
      address: TOPIC + '/ConsumerGroups/' + group + '/Partitions/0',
      filter: { [SEL]: filterValue },
    },
    properties: { 'com.microsoft:epoch': rhea.types.wrap_long(epoch) },
    autoaccept: true,
    credit_window: 50,
  };
}

function checkMessage(m, n, key, where) {
  const ma = m.message_annotations || {};
  check(m.body === 'eh-' + String(n).padStart(2, '0'), where + ': body ' + JSON.stringify(m.body) + ' at position ' + n);
  check(ma['x-opt-partition-id'] === 0, where + ': x-opt-partition-id ' + ma['x-opt-partition-id']);
  check(ma['x-opt-offset'] === String(n), where + ': x-opt-offset ' + JSON.stringify(ma['x-opt-offset']) + ', want "' + n + '"');
  check(Number(ma['x-opt-sequence-number']) === n, where + ': x-opt-sequence-number ' + ma['x-opt-sequence-number']);
  check(ma['x-opt-partition-key'] === key, where + ': x-opt-partition-key ' + JSON.stringify(ma['x-opt-partition-key']));
  const enq = ma['x-opt-enqueued-time'];
  check(enq instanceof Date, where + ': x-opt-enqueued-time is not a timestamp: ' + JSON.stringify(enq));
  check(Math.abs(enq.getTime() - Date.now()) < 300000, where + ': x-opt-enqueued-time ' + enq);
}

function phase1(port, key, cb) {
  const conn = connect(port, 'eh-r1');
  const r1 = conn.open_receiver(receiverOptions('$Default', 1,
    rhea.types.wrap_described("amqp.annotation.x-opt-offset > '-1'", SEL)));
  let n = 0;
  let stolen = null;
  let r2conn = null;
  r1.on('receiver_open', (ctx) => {
    const src = ctx.receiver.remote.attach && ctx.receiver.remote.attach.source;
    const f = src && src.filter;
    log('r1 attached; echoed filter-set: ' + JSON.stringify(f));
    check(f && Object.prototype.hasOwnProperty.call(f, SEL),
      'attach echo: remote source filter-set ' + JSON.stringify(f) + ' lacks ' + SEL);
  });
  r1.on('message', (ctx) => {
    checkMessage(ctx.message, n, key, 'r1 message ' + n);
    n++;
    if (n === N) {
      log('r1: all ' + N + ' received; attaching r2 with epoch 2');
      r2conn = phase2(port, key, (n2) => cb(n, stolen, n2, r2conn));
    } else if (n > N) {
      end(false, 'r1 received more than ' + N);
    }
  });
  r1.on('receiver_error', (ctx) => { stolen = ctx.receiver.error; log('r1 detached with error: ' + JSON.stringify(stolen)); });
  r1.on('receiver_close', (ctx) => {
    if (!stolen) stolen = ctx.receiver.error || 'no error condition';
    log('r1 closed by broker: ' + JSON.stringify(ctx.receiver.error));
    conn.close();
  });
}

function phase2(port, key, cb) {
  const conn = connect(port, 'eh-r2');
  const r2 = conn.open_receiver(receiverOptions('$Default', 2,
    rhea.types.wrap_described("amqp.annotation.x-opt-offset > '9'", 0x468C00000004)));
  let n = 0;
  let reported = false;
  r2.on('message', (ctx) => {
    checkMessage(ctx.message, 10 + n, key, 'r2 message ' + n);
    n++;
    if (n === N - 10 && !reported) {
      reported = true;
      setTimeout(() => cb(n), 1000); // linger for extras
    }
  });
  r2.on('receiver_error', (ctx) => end(false, 'r2 detached: ' + JSON.stringify(ctx.receiver.error)));
  setTimeout(() => { if (!reported) { reported = true; cb(n); } }, 15000);
  return conn;
}

function phase3(port, cb) {
  const conn = connect(port, 'eh-r3');
  const r3 = conn.open_receiver(receiverOptions('$default', 1,
    rhea.types.wrap_described("amqp.annotation.x-opt-offset > '-1'", SEL)));
  let got = 0;
  let done = false;
  const finish = (err) => { if (!done) { done = true; conn.close(); cb(err, got); } };
  r3.on('message', () => { got++; });
  r3.on('receiver_error', (ctx) => finish(ctx.receiver.error));
  r3.on('receiver_close', (ctx) => finish(ctx.receiver.error || 'closed without error'));
  setTimeout(() => finish(null), 5000);
}

freePort((port) => {
  check(murmur2('abc') === 479470107, "murmur2('abc') = " + murmur2('abc'));
  check(murmur2('21') === -973932308 && murmur2('foobar') === -790332482, 'murmur2 known values');
  let key = null;
  for (let i = 0; i < 100 && key === null; i++) if (kafkaPartition('eh-key-' + i, PARTS) === 0) key = 'eh-key-' + i;
  check(key !== null, 'no key maps to partition 0');
  log('partition key ' + key + ' -> partition 0 of ' + PARTS + ' (murmur2)');
  const dataDir = path.join(tmp, 'data');
  fs.mkdirSync(dataDir);
  const argv = ['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', dataDir,
    '--set', 'topic.' + TOPIC + '.partitions=' + PARTS];
  h.startBroker(argv, port, () => {
    sendAll(port, key, (accepted) => {
      log('sent and accepted: ' + accepted);
      if (accepted !== N) return end(false, 'only ' + accepted + ' of ' + N + ' accepted');
      phase1(port, key, (n1, stolen, n2, r2conn) => {
        log('r1 received ' + n1 + ', detach condition ' + JSON.stringify(stolen) + '; r2 received ' + n2);
        check(n1 === N, 'r1 received ' + n1 + ' of ' + N);
        check(stolen && stolen.condition === 'amqp:link:stolen',
          'r1 (epoch 1) was not detached with amqp:link:stolen when r2 (epoch 2) attached: ' + JSON.stringify(stolen));
        check(n2 === N - 10, 'r2 (filter offset > 9) received ' + n2 + ', want ' + (N - 10));
        phase3(port, (err, got) => {
          log('r3 ($default, epoch 1): error ' + JSON.stringify(err) + ', received ' + got);
          check(got === 0, 'r3 with a lower epoch received ' + got + ' messages');
          check(err && err.condition === 'amqp:link:stolen',
            'r3 ($default, epoch 1 < 2) not refused with amqp:link:stolen: ' + JSON.stringify(err));
          r2conn.close();
          setTimeout(() => end(true), 200);
        });
      });
    });
  });
});
