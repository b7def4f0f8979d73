#!/usr/bin/env node
// The rhea client of test 122 (the test starts the cluster): connects to one node as
// admin (SASL PLAIN), sends N keyed messages (x-opt-partition-key k<i % K>, message-id) to
// ADDRESS and prints one JSON line: {"accepted": n, "rejected": [...], "error": ...}.
//   node fwd-rhea-client.js PORT PASSWORD ADDRESS N K
'use strict';
const path = require('path');
let rhea;
try {
  rhea = require(path.join(__dirname, 'node', 'node_modules', 'rhea'));
} catch (e) {
  try { rhea = require('rhea'); } catch (e2) { console.log(JSON.stringify({ skip: 'rhea not installed' })); process.exit(77); }
}
const [port, password, address, nStr, kStr] = process.argv.slice(2);
const N = Number(nStr);
const K = Number(kStr);
const out = { accepted: 0, rejected: [], error: null };
const container = rhea.create_container({ id: 'rhea-fwd-sender' });
const conn = container.connect({
  host: '127.0.0.1', port: Number(port), reconnect: false, username: 'admin', password,
});
const sender = conn.open_sender({ target: { address } });
let sent = 0;
function done() {
  console.log(JSON.stringify(out));
  conn.close();
  setTimeout(() => process.exit(0), 200);
}
sender.on('sendable', (ctx) => {
  while (ctx.sender.sendable() && sent < N) {
    const k = 'k' + (sent % K);
    ctx.sender.send({
      message_id: 'r-' + sent,
      body: 'r:' + k + ':' + sent,
      message_annotations: { 'x-opt-partition-key': k },
      durable: true,
    });
    sent++;
  }
});
function settled() { if (out.accepted + out.rejected.length === N) done(); }
sender.on('accepted', () => { out.accepted++; settled(); });
sender.on('rejected', (ctx) => { out.rejected.push(ctx.delivery.remote_state && ctx.delivery.remote_state.error); settled(); });
sender.on('released', () => { out.rejected.push('released'); settled(); });
sender.on('sender_error', (ctx) => { out.error = String(ctx.sender.error && ctx.sender.error.condition); done(); });
conn.on('connection_error', (ctx) => { out.error = 'connection error ' + String(ctx.connection.error); done(); });
conn.on('disconnected', (ctx) => { if (out.accepted + out.rejected.length < N) { out.error = 'disconnected ' + String(ctx.error); done(); } });
setTimeout(() => { out.error = 'timed out: ' + out.accepted + ' accepted'; done(); }, 120000 * Math.max(1, Number(process.env.MQD_TEST_SLOW || 1))).unref();
