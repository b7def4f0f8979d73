#!/usr/bin/env node
// rhea interop: 1,000 messages sent with rhea to a one-partition topic and received
// with rhea: order, bodies, application properties intact; mqd's x-opt-* annotations
// present (offset == index). Exit 0 pass, 1 fail, 77 skip (rhea not installed:
// run `npm ci` in tests/interop/node). Consumer groups (T/ConsumerGroups/...) are
// not tested yet: they come with a later issue.
'use strict';
const path = require('path');
const fs = require('fs');
const os = require('os');
const net = require('net');
const { spawn } = require('child_process');

const N = 1000;
const TOPIC = 'rhea-order';
const HARD_TIMEOUT_MS = 120000;

let rhea;
try {
  rhea = require(path.join(__dirname, 'node', 'node_modules', 'rhea'));
} catch (e) {
  try { rhea = require('rhea'); } catch (e2) {
    console.log('SKIP: rhea not installed (cd tests/interop/node && npm ci)');
    process.exit(77);
  }
}

let bin = process.env.MQD_BIN;
if (!bin && process.env.MQD_BUILDDIR) bin = path.join(process.env.MQD_BUILDDIR, 'mqd');
if (!bin) { console.log('SKIP: set MQD_BIN (or run through make check)'); process.exit(77); }
if (!fs.existsSync(bin)) { console.log('FAIL: broker binary ' + bin + ' missing'); process.exit(1); }

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mqd-12-rhea-'));
const logPath = path.join(tmp, 'mqd.log');
let broker = null;
let finished = false;
const t0 = Date.now();
function log(...a) { console.log('[' + ((Date.now() - t0) / 1000).toFixed(2) + ']', ...a); }

function stopBroker(cb) {
  if (!broker || broker.exitCode !== null || broker.signalCode !== null) return cb();
  const killer = setTimeout(() => { try { process.kill(broker.pid, 'SIGKILL'); } catch (e) { /* gone */ } }, 10000);
  broker.once('exit', () => { clearTimeout(killer); cb(); });
  try { process.kill(broker.pid, 'SIGTERM'); } catch (e) { clearTimeout(killer); cb(); }
}

function end(ok, msg) {
  if (finished) return;
  finished = true;
  console.log((ok ? 'PASS: ' : 'FAIL: ') + '12-rhea' + (msg ? ': ' + msg : ''));
  const died = broker && broker.exitCode === null && broker.signalCode === null ? null
    : broker && ('broker exited: code ' + broker.exitCode + ' signal ' + broker.signalCode);
  stopBroker(() => {
    if (!ok) {
      if (died) console.log('NOTE: ' + died);
      try { console.log('----- mqd log -----\n' + fs.readFileSync(logPath, 'utf8').slice(-60000)); } catch (e) { /* none */ }
      console.log('(temp dir kept: ' + tmp + ')');
    } else {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
    process.exit(ok ? 0 : 1);
  });
}

setTimeout(() => end(false, 'hard timeout of ' + HARD_TIMEOUT_MS / 1000 + 's reached'), HARD_TIMEOUT_MS).unref();

function freePort(cb) {
  const s = net.createServer();
  s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => cb(p)); });
}

function waitPort(port, deadline, cb) {
  if (broker.exitCode !== null || broker.signalCode !== null) return end(false, 'mqd exited before accepting connections');
  const s = net.connect(port, '127.0.0.1');
  s.on('connect', () => { s.destroy(); cb(); });
  s.on('error', () => {
    if (Date.now() > deadline) return end(false, 'mqd did not accept connections');
    setTimeout(() => waitPort(port, deadline, cb), 50);
  });
}

function check(cond, msg) { if (!cond) { end(false, msg); throw new Error(msg); } }

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
  const out = fs.openSync(logPath, 'w');
  const argv = ['--foreground', '--listen', '127.0.0.1:' + port, '--data-dir', dataDir];
  log('start broker: ' + bin + ' ' + argv.join(' '));
  broker = spawn(bin, argv, { stdio: ['ignore', out, out] });
  waitPort(port, Date.now() + 30000, () => {
    log('broker ready on port ' + port);
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
