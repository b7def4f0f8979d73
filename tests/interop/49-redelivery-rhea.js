#!/usr/bin/env node
// Issue 17 points 3 and 2 with rhea (manual settlement): 10 messages without a header
// (rhea sends none when no header field is set) to a one-partition topic. A receiver
// with credit 10 and autoaccept off accepts 5, leaves 5 unsettled and destroys its TCP
// socket (no AMQP close). The next receiver gets exactly those 5, in order, each with
// header delivery_count 1 and first_acquirer false (the header was created), bodies and
// application properties intact; the first deliveries had neither field (undefined).
// They are released (the count stays 1). Then a browser (distribution_mode copy) gets
// copies of the 5 still on the queue (issue 39): delivery.remote_settled false on arrival,
// it accepts them, and a consumer still gets the 5 (delivery_count 1, first_acquirer
// false: a browse is no delivery attempt).
// Exit 0 pass, 1 fail, 77 skip.
'use strict';
const path = require('path');
const fs = require('fs');

const TOPIC = 'rh49';
const N = 10;
const HARD_TIMEOUT_MS = 90000;

const h = require('./mqdnode')('49-redelivery-rhea', HARD_TIMEOUT_MS);
const { log, end, check, freePort, connect } = h;
const name = (i) => 'rhea-' + String(i).padStart(2, '0');

function sendAll(port, cb) {
  const conn = connect(port, 'rh49-sender');
  let sent = 0; let accepted = 0;
  const sender = conn.open_sender(TOPIC);
  sender.on('sendable', (ctx) => {
    while (ctx.sender.sendable() && sent < N) {
      ctx.sender.send({ body: name(sent), application_properties: { i: sent } });
      sent++;
    }
  });
  sender.on('accepted', () => { if (++accepted === N) conn.close(); });
  sender.on('rejected', (ctx) => end(false, 'send rejected: ' + JSON.stringify(ctx.delivery.remote_state)));
  conn.on('connection_close', () => cb(accepted));
}

// Takes 10 with credit 10, accepts the first 5, then drops the socket.
function takeAndDrop(port, cb) {
  const conn = connect(port, 'rh49-dropper');
  const rcv = conn.open_receiver({ source: TOPIC, autoaccept: false, credit_window: 0 });
  rcv.add_credit(10);
  const got = [];
  rcv.on('message', (ctx) => {
    const m = ctx.message;
    got.push({ body: m.body, dc: m.delivery_count, fa: m.first_acquirer });
    if (got.length <= 5) ctx.delivery.accept();
    if (got.length === 10) {
      // let the accepts go out, then lose the connection without closing anything
      setTimeout(() => {
        conn.removeAllListeners('connection_error');
        conn.on('disconnected', () => { /* expected */ });
        conn.socket.destroy();
        cb(got);
      }, 500);
    }
  });
}

// Receives until `n` arrived (plus a 1 s linger for extras), settling with `settle`.
function receiveN(port, id, n, source, settle, cb) {
  const conn = connect(port, id);
  const rcv = conn.open_receiver({ source, autoaccept: false, credit_window: 0 });
  rcv.add_credit(n);
  const got = [];
  rcv.on('message', (ctx) => {
    const m = ctx.message;
    got.push({ body: m.body, dc: m.delivery_count, fa: m.first_acquirer, ap: m.application_properties,
      settled: ctx.delivery.remote_settled });
    settle(ctx.delivery);
    if (got.length === n) setTimeout(() => conn.close(), 1000);
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
      takeAndDrop(port, (first) => {
        log('first deliveries: ' + JSON.stringify(first));
        check(first.map((x) => x.body).join() === [...Array(N).keys()].map(name).join(),
          'first receiver got ' + JSON.stringify(first.map((x) => x.body)));
        check(first.every((x) => x.dc === undefined && x.fa === undefined),
          'first deliveries carried header fields: ' + JSON.stringify(first));
        setTimeout(() => receiveN(port, 'rh49-second', 5, TOPIC, (d) => d.release(), (again) => {
          log('redeliveries: ' + JSON.stringify(again));
          const want = [5, 6, 7, 8, 9].map(name);
          check(again.map((x) => x.body).join() === want.join(),
            'after the drop the next receiver got ' + JSON.stringify(again.map((x) => x.body)) + ', want ' + want);
          for (const x of again) {
            check(x.dc === 1 && x.fa === false, x.body + ': delivery_count ' + x.dc + ' first_acquirer ' + x.fa +
              ', want 1 and false');
            check(x.ap && x.ap.i === Number(x.body.slice(-2)), x.body + ': application_properties ' + JSON.stringify(x.ap));
          }
          // a browser of the queue shows what is still on it (issue 39: not the 5 accepted)
          receiveN(port, 'rh49-browser', 5, { address: TOPIC, distribution_mode: 'copy' }, (d) => d.accept(), (copies) => {
            log('browsed: ' + JSON.stringify(copies));
            check(copies.map((x) => x.body).join() === want.join(),
              'browser got ' + JSON.stringify(copies.map((x) => x.body)) + ', want ' + want);
            check(copies.every((x) => x.settled === false), 'browse deliveries arrived settled: ' +
              JSON.stringify(copies.map((x) => x.settled)));
            receiveN(port, 'rh49-third', 5, TOPIC, (d) => d.accept(), (last) => {
              log('after browsing: ' + JSON.stringify(last));
              check(last.map((x) => x.body).join() === want.join(), 'consumer after the browser got ' +
                JSON.stringify(last.map((x) => x.body)));
              check(last.every((x) => x.dc === 1 && x.fa === false), 'after release + browse: ' + JSON.stringify(last));
              end(true);
            });
          });
        }), 300);
      });
    });
  });
});
