// The rhea producer of test 93 (run by mqdcrash.RheaProducer): sends "<prefix>-<seq>"
// durable messages to TOPIC at most RATE new ones a second, WINDOW unsettled, and sends
// again every one that was not accepted (at-least-once). It follows the partition's
// leader by itself: amqp:link:redirect's info (network-host, port) says where to go;
// after a lost connection or another refusal it tries the next node of PORTS in turn
// (a follower redirects it), 100 ms later.
//   node crash-rhea-producer.js TOPIC PREFIX RATE WINDOW PORT,PORT,...
// stdout: "A <seq> <port>" per acceptance, "R <condition>" per other outcome,
// "D <redirect|lost|refused> <port>" per link given up, every 200 ms "S <unsettled>
// <next seq>". stdin: "pause" (no new sends),
// "stop" (close and exit 0).
'use strict';
const path = require('path');
let rhea;
try {
  rhea = require(path.join(__dirname, 'node', 'node_modules', 'rhea'));
} catch (e) {
  rhea = require('rhea');
}
const [topic, prefix, rateS, windowS, portsS] = process.argv.slice(2);
const rate = Number(rateS);
const windowN = Number(windowS);
const ports = portsS.split(',').map(Number);
const t0 = Date.now();
let nextSeq = 0;
let paused = false;
let resend = [];
let cur = null; // { conn, sender, port, inflight: Map(delivery -> seq), dead }
let portIdx = 0;
let holdUntil = 0;

const out = (s) => process.stdout.write(s + '\n');

function giveUp(why, nextPort) {
  if (!cur || cur.dead) return;
  cur.dead = true;
  for (const seq of cur.inflight.values()) resend.push(seq);
  cur.inflight.clear();
  out('D ' + why + ' ' + cur.port);
  try { cur.conn.close(); } catch (e) { /* gone */ }
  const old = cur;
  cur = null;
  setTimeout(() => connect(nextPort), nextPort ? 0 : 100);
  return old;
}

function pump() {
  if (!cur || cur.dead || !cur.sender.is_open() || Date.now() < holdUntil) return;
  while (cur.sender.sendable() && cur.inflight.size < windowN) {
    let seq;
    if (resend.length) {
      resend.sort((a, b) => a - b);
      seq = resend.shift();
    } else if (!paused && nextSeq < rate * (Date.now() - t0) / 1000) {
      seq = nextSeq++;
    } else {
      return;
    }
    const d = cur.sender.send({ body: prefix + '-' + seq, durable: true });
    cur.inflight.set(d, seq);
  }
}

function connect(port) {
  if (!port) {
    portIdx = (portIdx + 1) % ports.length;
    port = ports[portIdx];
  } else {
    portIdx = Math.max(0, ports.indexOf(port));
  }
  const c = rhea.create_container({ id: 'crash-rhea-' + process.pid });
  const conn = c.connect({ host: '127.0.0.1', port, reconnect: false, idle_time_out: 4000 });
  const me = { conn, port, inflight: new Map(), dead: false };
  me.sender = conn.open_sender({ target: { address: topic } });
  cur = me;
  const settled = (ctx, ok, cond) => {
    if (me.dead) return;
    const seq = me.inflight.get(ctx.delivery);
    if (seq === undefined) return;
    me.inflight.delete(ctx.delivery);
    if (ok) {
      out('A ' + seq + ' ' + port);
    } else {
      resend.push(seq);
      out('R ' + cond);
      holdUntil = Date.now() + 50;
      if (cond === 'amqp:precondition-failed') giveUp('refused');
    }
    pump();
  };
  me.sender.on('sendable', pump);
  me.sender.on('accepted', (ctx) => settled(ctx, true));
  me.sender.on('rejected', (ctx) => settled(ctx, false,
    (ctx.delivery.remote_state && ctx.delivery.remote_state.error &&
     ctx.delivery.remote_state.error.condition) || 'rejected'));
  me.sender.on('released', (ctx) => settled(ctx, false, 'released'));
  me.sender.on('modified', (ctx) => settled(ctx, false, 'modified'));
  me.sender.on('sender_error', (ctx) => {
    if (me.dead) return;
    const err = ctx.sender.error || {};
    const info = err.info || {};
    if (err.condition === 'amqp:link:redirect' && info.port) {
      giveUp('redirect', Number(info.port));
    } else {
      giveUp('refused');
    }
  });
  me.sender.on('sender_close', () => { if (cur === me) giveUp('refused'); });
  conn.on('disconnected', () => { if (cur === me) giveUp('lost'); });
  conn.on('connection_error', () => { if (cur === me) giveUp('lost'); });
  conn.on('connection_close', () => { if (cur === me) giveUp('lost'); });
  conn.on('error', () => { if (cur === me) giveUp('lost'); });
}

process.stdin.setEncoding('utf8');
let inbuf = '';
process.stdin.on('data', (d) => {
  inbuf += d;
  let i;
  while ((i = inbuf.indexOf('\n')) >= 0) {
    const cmd = inbuf.slice(0, i).trim();
    inbuf = inbuf.slice(i + 1);
    if (cmd === 'pause') {
      paused = true;
    } else if (cmd === 'stop') {
      if (cur) { try { cur.conn.close(); } catch (e) { /* gone */ } }
      setTimeout(() => process.exit(0), 200);
    }
  }
});
setInterval(pump, 20);
setInterval(() => out('S ' + ((cur ? cur.inflight.size : 0) + resend.length) + ' ' + nextSeq), 200);
portIdx = -1;
connect(0);
