#!/usr/bin/env node
// rhea interop: 1,000 messages sent with rhea to a one-partition topic and received
// with rhea: order, bodies, application properties intact; mqd's x-opt-* annotations
// present (offset == index). Exit 0 pass, 1 fail, 77 skip (rhea not installed:
// run `npm ci` in tests/interop/node). Consumer groups (T/ConsumerGroups/...) are
// not tested yet: they come with a later issue.
'use strict';
const path = require('path');
const fs = require('fs');

const N = 1000;
const TOPIC = 'rhea-order';
const HARD_TIMEOUT_MS = 120000;

const h = require('./mqdnode')('12-rhea', HARD_TIMEOUT_MS);
const { rhea, tmp, log, end, check, freePort } = h;


function sendAll(port, cb) {
  const container = rhea.create_container({ id: 'rhea-sender' });
  const conn = container.connect({ host: '127.0.0.1', port, reconnect: false });
  let sent = 0; let accepted = 0;
  const sender = conn.open_sender(TOPIC);
  sender.on('sendable', (ctx) => {
    while (ctx.sender.sendable() && sent < N) {
      ctx.sender.send({
        message_id: 'id-' + sent,
        subject: 'subject-' + sent,
        content_type: 'text/plain',
        application_properties: { index: sent, name: 'n' + sent, even: sent % 2 === 0, ratio: sent / 8 },
        body: 'rhea-' + String(sent).padStart(4, '0'),
      });
      sent++;
    }
  });
  sender.on('accepted', () => { if (++accepted === N) { conn.close(); } });
  sender.on('rejected', (ctx) => end(false, 'send rejected: ' + JSON.stringify(ctx.delivery.remote_state)));
  sender.on('released', () => end(false, 'send released'));
  conn.on('connection_close', () => cb(accepted));
  conn.on('disconnected', (ctx) => { if (accepted < N) end(false, 'sender disconnected: ' + (ctx.error || '')); });
}

function receiveAll(port, cb) {
  const container = rhea.create_container({ id: 'rhea-receiver' });
  const conn = container.connect({ host: '127.0.0.1', port, reconnect: false });
  const receiver = conn.open_receiver({ source: TOPIC, autoaccept: true, credit_window: 100 });
  let n = 0;
  receiver.on('message', (ctx) => {
    const m = ctx.message;
    const want = 'rhea-' + String(n).padStart(4, '0');
    check(m.body === want, 'message ' + n + ': body ' + JSON.stringify(m.body) + ', want ' + want);
    check(m.message_id === 'id-' + n, 'message ' + n + ': message_id ' + m.message_id);
    check(m.subject === 'subject-' + n, 'message ' + n + ': subject ' + m.subject);
    check(m.content_type === 'text/plain', 'message ' + n + ': content_type ' + m.content_type);
    const ap = m.application_properties || {};
    check(ap.index === n && ap.name === 'n' + n && ap.even === (n % 2 === 0) && ap.ratio === n / 8,
      'message ' + n + ': application properties ' + JSON.stringify(ap));
    const ma = m.message_annotations || {};
    check(ma['x-opt-partition-id'] === 0, 'message ' + n + ': x-opt-partition-id ' + ma['x-opt-partition-id']);
    check(ma['x-opt-offset'] === String(n), 'message ' + n + ': x-opt-offset ' + JSON.stringify(ma['x-opt-offset']));
    check(Number(ma['x-opt-sequence-number']) === n, 'message ' + n + ': x-opt-sequence-number ' + ma['x-opt-sequence-number']);
    const enq = ma['x-opt-enqueued-time'];
    const enqMs = enq instanceof Date ? enq.getTime() : Number(enq);
    check(Math.abs(enqMs - Date.now()) < 300000, 'message ' + n + ': x-opt-enqueued-time ' + enq);
    n++;
    if (n === N) {
      // linger briefly for unexpected extra deliveries
      setTimeout(() => { conn.close(); }, 1000);
    } else if (n > N) {
      end(false, 'received more than ' + N + ' messages');
    }
  });
  receiver.on('receiver_close', (ctx) => { if (n < N) end(false, 'receiver closed: ' + JSON.stringify(ctx.receiver.error)); });
  conn.on('connection_close', () => cb(n));
  conn.on('disconnected', (ctx) => { if (n < N) end(false, 'receiver disconnected: ' + (ctx.error || '')); });
}

freePort((port) => {
  const dataDir = path.join(tmp, 'data');
  fs.mkdirSync(dataDir);
  const argv = ['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', dataDir];
  h.startBroker(argv, port, () => {
    sendAll(port, (accepted) => {
      log('sent and accepted: ' + accepted);
      if (accepted !== N) return end(false, 'only ' + accepted + ' of ' + N + ' accepted');
      receiveAll(port, (n) => {
        log('received: ' + n);
        if (n !== N) return end(false, 'received ' + n + ' of ' + N);
        end(true);
      });
    });
  });
});
