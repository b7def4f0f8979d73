// Helper of 56-disk-full.py: sends Event Hubs batches (message-format 0x80013700, one
// encoded message per data section) with rhea and prints their outcomes as JSON.
//   node ehbatch-send.js PORT TOPIC < BATCHES_JSON   (BATCHES_JSON: [[[id, body], ...], ...])
// Output: [{"i": N, "state": "accepted"|"rejected"|"released"|"modified",
//           "condition": NAME|null, "description": TEXT|null}, ...] in settlement order.
// Exit 77 without rhea, 1 if not every batch got an outcome within 60 s.
'use strict';
const fs = require('fs');
const path = require('path');

let rhea;
try {
  rhea = require(path.join(__dirname, 'node', 'node_modules', 'rhea'));
} catch (e) {
  try { rhea = require('rhea'); } catch (e2) { process.exit(77); }
}

const BATCH = 0x80013700;
const [port, topic] = process.argv.slice(2);
const batches = JSON.parse(fs.readFileSync(0, 'utf8'));
const out = [];
const c = rhea.create_container({ id: 'ehbatch-send' });
const conn = c.connect({ host: '127.0.0.1', port: Number(port), reconnect: false });
const s = conn.open_sender({ target: topic });
const timer = setTimeout(() => { console.log(JSON.stringify(out)); process.exit(1); }, 60000);

function done(ctx, state) {
  const rs = ctx.delivery.remote_state || {};
  const err = rs.error || {};
  out.push({ i: ctx.delivery.batch_index, state, condition: err.condition || null,
             description: err.description || null });
  if (out.length === batches.length) {
    clearTimeout(timer);
    console.log(JSON.stringify(out));
    conn.close();
  }
}

s.once('sendable', () => {
  batches.forEach((b, i) => {
    const sections = b.map(([id, body]) => rhea.message.encode({ message_id: id, body }));
    const d = s.send(rhea.message.encode({ body: rhea.message.data_sections(sections) }), undefined, BATCH);
    d.batch_index = i;
  });
});
s.on('accepted', (ctx) => done(ctx, 'accepted'));
s.on('rejected', (ctx) => done(ctx, 'rejected'));
s.on('released', (ctx) => done(ctx, 'released'));
s.on('modified', (ctx) => done(ctx, 'modified'));
conn.on('connection_close', () => process.exit(0));
