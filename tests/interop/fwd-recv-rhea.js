// The rhea receiver of test 126 (run by 126-fwd-recv-rhea.py): one receiver on ADDRESS
// through the node at PORT (SASL PLAIN as USER), credit window 10, each message accepted;
// stops IDLE_MS after the last message once it has WANT of them (so that a duplicate
// would still show), or at the first link or connection error.
//   node fwd-recv-rhea.js PORT USER PASSWORD ADDRESS WANT IDLE_MS
// stdout: "M <body> <x-opt-partition-id> <x-opt-offset>" per message, "E <condition>
// <description>" on an error (exit 2), "D <count>" at the end (exit 0).
'use strict';
const path = require('path');
let rhea;
try {
  rhea = require(path.join(__dirname, 'node', 'node_modules', 'rhea'));
} catch (e) {
  rhea = require('rhea');
}
const [portS, user, password, address, wantS, idleS] = process.argv.slice(2);
const want = Number(wantS);
const idleMs = Number(idleS);
const out = (s) => process.stdout.write(s + '\n');
let n = 0;
let timer = null;
const c = rhea.create_container({ id: 'fwd-recv-rhea' });
const conn = c.connect({ host: '127.0.0.1', port: Number(portS), username: user, password, reconnect: false });
conn.open_receiver({ source: address, credit_window: 10, autoaccept: true });

function done() {
  out('D ' + n);
  conn.close();
  setTimeout(() => process.exit(0), 200);
}

c.on('message', (ctx) => {
  const a = ctx.message.message_annotations || {};
  out('M ' + ctx.message.body + ' ' + a['x-opt-partition-id'] + ' ' + a['x-opt-offset']);
  n++;
  if (n >= want) {
    if (timer) clearTimeout(timer);
    timer = setTimeout(done, idleMs);
  }
});
const error = (what) => (ctx) => {
  const e = (ctx.receiver && ctx.receiver.error) || (ctx.connection && ctx.connection.error) || {};
  out('E ' + (e.condition || what) + ' ' + (e.description || ''));
  process.exit(2);
};
c.on('receiver_error', error('receiver_error'));
c.on('connection_error', error('connection_error'));
c.on('disconnected', (ctx) => { if (!timer) error('disconnected')(ctx); });
