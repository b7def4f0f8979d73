#!/usr/bin/env node
// Issue 17 point 1 with rhea (manual settlement): 30 messages with application property
// colour red/green/blue to a one-partition queue (plain address T). A receiver with
// rhea's filter.selector("colour = 'red'") (key jms-selector, descriptor code
// 0x468C00000004), autoaccept off, accepts each: it gets the 10 red ones in order and
// closes. A plain receiver then gets the 20 green and blue ones in order (they were
// lost before: the selector consumed what it did not select), with offsets 1, 2, 4, ...;
// a third receiver gets nothing.
// Exit 0 pass, 1 fail, 77 skip.
'use strict';
const path = require('path');
const fs = require('fs');

const TOPIC = 'rh48';
const N = 30;
const COLOURS = ['red', 'green', 'blue'];
const HARD_TIMEOUT_MS = 90000;

const h = require('./mqdnode')('48-selector-rhea', HARD_TIMEOUT_MS);
const { rhea, log, end, check, freePort, connect } = h;
const name = (i) => 'rh48-' + String(i).padStart(2, '0');

function sendAll(port, cb) {
  const conn = connect(port, 'rh48-sender');
  let sent = 0; let accepted = 0;
  const sender = conn.open_sender(TOPIC);
  sender.on('sendable', (ctx) => {
    while (ctx.sender.sendable() && sent < N) {
      ctx.sender.send({ body: name(sent), application_properties: { colour: COLOURS[sent % 3], i: sent } });
      sent++;
    }
  });
  sender.on('accepted', () => { if (++accepted === N) conn.close(); });
  sender.on('rejected', (ctx) => end(false, 'send rejected: ' + JSON.stringify(ctx.delivery.remote_state)));
  conn.on('connection_close', () => cb(accepted));
}

// Receives (accepting each) until nothing arrived for 1.5 s, then closes.
function drain(port, id, source, cb) {
  const conn = connect(port, id);
  const rcv = conn.open_receiver({ source, autoaccept: false, credit_window: 10 });
  const got = [];
  let timer = null;
  const idle = () => { clearTimeout(timer); timer = setTimeout(() => conn.close(), 1500); };
  rcv.on('receiver_open', idle);
  rcv.on('message', (ctx) => {
    const m = ctx.message;
    got.push({ body: m.body, colour: (m.application_properties || {}).colour,
      off: Number((m.message_annotations || {})['x-opt-sequence-number']) });
    ctx.delivery.accept();
    idle();
  });
  rcv.on('receiver_error', (ctx) => end(false, id + ': receiver error ' + JSON.stringify(ctx.receiver.error)));
  conn.on('connection_close', () => cb(got));
}

freePort((port) => {
  const dataDir = path.join(h.tmp, 'data');
  fs.mkdirSync(dataDir);
  const argv = ['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', dataDir,
    '--set', 'topic.' + TOPIC + '.partitions=1'];
  h.startBroker(argv, port, () => {
    sendAll(port, (accepted) => {
      check(accepted === N, 'accepted ' + accepted + ' of ' + N);
      const source = { address: TOPIC, filter: rhea.filter.selector("colour = 'red'") };
      drain(port, 'rh48-red', source, (red) => {
        const wantRed = [...Array(N).keys()].filter((i) => i % 3 === 0);
        log('selective receiver: ' + red.map((x) => x.body).join(' '));
        check(red.map((x) => x.body).join() === wantRed.map(name).join(),
          'selective receiver got ' + JSON.stringify(red.map((x) => x.body)) + ', want the 10 red');
        check(red.every((x) => x.colour === 'red'), 'selective receiver got other colours');
        drain(port, 'rh48-plain', TOPIC, (rest) => {
          const want = [...Array(N).keys()].filter((i) => i % 3 !== 0);
          log('plain receiver: ' + rest.length + ': ' + rest.map((x) => x.body).join(' '));
          check(rest.map((x) => x.body).join() === want.map(name).join(),
            'plain receiver after the selective one got ' + rest.length + ': ' +
            JSON.stringify(rest.map((x) => x.body)) + ', want the 20 green and blue in order');
          check(rest.map((x) => x.off).join() === want.join(), 'plain receiver offsets ' + rest.map((x) => x.off));
          drain(port, 'rh48-third', TOPIC, (left) => {
            check(left.length === 0, 'a third receiver got ' + JSON.stringify(left.map((x) => x.body)));
            end(true);
          });
        });
      });
    });
  });
});
