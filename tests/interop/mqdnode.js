// Shared harness of the Node (rhea) interop tests, as mqdtest.py is for the Python ones:
// finds rhea and the broker binary (exit 77 to skip without them), a temp dir with the
// broker's log, one broker started by the test and stopped by its PID at the end,
// PASS/FAIL lines (with the tail of the broker's log on a failure), a hard timeout,
// Kafka's murmur2 partitioner, SAS tokens, free ports, and a wait for the broker's port; and the
// setup the @azure/event-hubs SDK tests share (eventHubs, below).
//   const h = require('./mqdnode')('44-rhea-eventhubs', 90000);
'use strict';
// Debian 12's nodejs (18) has no global Web Crypto, which the Azure SDK uses
// (crypto.randomUUID): give it the module's, as Node 19+ does
if (typeof globalThis.crypto === 'undefined') globalThis.crypto = require('crypto').webcrypto;
const path = require('path');
const fs = require('fs');
const os = require('os');
const net = require('net');
const { spawn } = require('child_process');

const SLOW = Math.max(1, Number(process.env.MQD_TEST_SLOW || 1));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

module.exports = function harness(name, hardTimeoutMs) {
  const h = {};
  try {
    h.rhea = require(path.join(__dirname, 'node', 'node_modules', 'rhea'));
  } catch (e) {
    try { h.rhea = require('rhea'); } catch (e2) {
      console.log('SKIP: rhea not installed (cd tests/interop/node && npm ci)');
      process.exit(77);
    }
  }
  let bin = process.env.MQD_BIN;
  if (!bin && process.env.MQD_BUILDDIR) bin = path.join(process.env.MQD_BUILDDIR, 'mqd');
  if (!bin) { console.log('SKIP: set MQD_BIN (or run through make check)'); process.exit(77); }
  if (!fs.existsSync(bin)) { console.log('FAIL: broker binary ' + bin + ' missing'); process.exit(1); }
  h.bin = bin;
  h.tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mqd-' + name.replace(/^(\d+)-.*/, '$1') + '-'));
  h.logPath = path.join(h.tmp, 'mqd.log');
  let broker = null;
  let finished = false;
  const t0 = Date.now();
  h.log = (...a) => console.log('[' + ((Date.now() - t0) / 1000).toFixed(2) + ']', ...a);

  function stopBroker(cb) {
    if (!broker || broker.exitCode !== null || broker.signalCode !== null) return cb();
    const killer = setTimeout(() => { try { process.kill(broker.pid, 'SIGKILL'); } catch (e) { /* gone */ } }, 10000);
    broker.once('exit', () => { clearTimeout(killer); cb(); });
    try { process.kill(broker.pid, 'SIGTERM'); } catch (e) { clearTimeout(killer); cb(); }
  }

  // Ends the test: stops the broker (SIGTERM; a broker that then exits non-zero fails a
  // passing test), prints PASS/FAIL, and exits 0 or 1.
  h.end = (ok, msg) => {
    if (finished) return;
    finished = true;
    const died = broker && broker.exitCode === null && broker.signalCode === null ? null
      : broker && ('broker exited: code ' + broker.exitCode + ' signal ' + broker.signalCode);
    stopBroker(() => {
      if (ok && broker && broker.exitCode !== 0) {
        ok = false;
        msg = 'broker exited with ' + broker.exitCode + '/' + broker.signalCode + ' after SIGTERM';
      }
      console.log((ok ? 'PASS: ' : 'FAIL: ') + name + (msg ? ': ' + msg : ''));
      if (!ok) {
        if (died) console.log('NOTE: ' + died);
        try { console.log('----- mqd log -----\n' + fs.readFileSync(h.logPath, 'utf8').slice(-60000)); } catch (e) { /* none */ }
        console.log('(temp dir kept: ' + h.tmp + ')');
      } else {
        fs.rmSync(h.tmp, { recursive: true, force: true });
      }
      process.exit(ok ? 0 : 1);
    });
  };

  setTimeout(() => h.end(false, 'hard timeout of ' + hardTimeoutMs / 1000 + 's reached'), hardTimeoutMs).unref();

  h.check = (cond, msg) => { if (!cond) { h.end(false, msg); throw new Error(msg); } };

  // Kafka's murmur2 (signed 32-bit, like org.apache.kafka.common.utils.Utils.murmur2)
  h.murmur2 = (str) => {
    const data = Buffer.from(str, 'utf8');
    const len = data.length;
    const m = 0x5bd1e995;
    let x = (0x9747b28c ^ len) | 0;
    for (let i = 0; i + 4 <= len; i += 4) {
      let k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24);
      k = Math.imul(k, m);
      k ^= k >>> 24;
      k = Math.imul(k, m);
      x = Math.imul(x, m);
      x ^= k;
    }
    const t = len & ~3;
    switch (len % 4) {
      case 3: x ^= data[t + 2] << 16; // falls through
      case 2: x ^= data[t + 1] << 8; // falls through
      case 1: x ^= data[t]; x = Math.imul(x, m);
    }
    x ^= x >>> 13;
    x = Math.imul(x, m);
    x ^= x >>> 15;
    return x | 0;
  };
  h.kafkaPartition = (key, n) => (h.murmur2(key) & 0x7fffffff) % n;

  // An Event Hubs / Service Bus SAS token for audience aud, signed with key (HMAC-SHA256
  // of the url-encoded audience, a newline and the expiry se in unix seconds).
  h.sasToken = (aud, keyName, key, se) => {
    const sr = encodeURIComponent(aud);
    const sig = require('crypto').createHmac('sha256', key).update(sr + '\n' + se).digest('base64');
    return 'SharedAccessSignature sr=' + sr + '&sig=' + encodeURIComponent(sig) + '&se=' + se + '&skn=' + keyName;
  };

  h.freePort = (cb) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => cb(p)); });
  };

  // Starts mqd with argv, its output in logPath; cb once it accepts connections on port.
  h.startBroker = (argv, port, cb, logMode) => {
    const out = fs.openSync(h.logPath, logMode || 'w');
    h.log('start broker: ' + bin + ' ' + argv.join(' '));
    broker = spawn(bin, argv, { stdio: ['ignore', out, out] });
    const deadline = Date.now() + 30000;
    const wait = () => {
      if (broker.exitCode !== null || broker.signalCode !== null) return h.end(false, 'mqd exited before accepting connections');
      const s = net.connect(port, '127.0.0.1');
      s.on('connect', () => { s.destroy(); h.log('broker ready on port ' + port); cb(); });
      s.on('error', () => {
        if (Date.now() > deadline) return h.end(false, 'mqd did not accept connections');
        setTimeout(wait, 50);
      });
    };
    wait();
  };

  // Stops the broker (SIGTERM) and starts it again with argv, its log appended.
  h.restartBroker = (argv, port, cb) => stopBroker(() => {
    h.log('broker stopped: code ' + broker.exitCode + ' signal ' + broker.signalCode);
    if (broker.exitCode !== 0) return h.end(false, 'broker exited with ' + broker.exitCode + '/' + broker.signalCode + ' on SIGTERM');
    h.startBroker(argv, port, cb, 'a');
  });

  // A rhea connection to 127.0.0.1:port; a connection error fails the test.
  h.connect = (port, id, opts) => {
    const container = h.rhea.create_container({ id });
    container.on('error', (e) => h.log(id + ': container error: ' + e));
    const conn = container.connect(Object.assign({ host: '127.0.0.1', port, reconnect: false }, opts || {}));
    conn.on('connection_error', (ctx) => h.end(false, id + ': connection error ' + JSON.stringify(ctx.connection.error)));
    return conn;
  };
  // The AMQP 0-9-1 tests' amqplib (npm, tests/interop/node; exit 77 to skip without it)
  // and the [user] section mqd-passwd prints for user/pw.
  h.amqplib = () => {
    try {
      return require(path.join(__dirname, 'node', 'node_modules', 'amqplib'));
    } catch (e) {
      console.log('SKIP: amqplib not installed (cd tests/interop/node && npm ci)');
      process.exit(77);
    }
    return null;
  };
  h.passwd = (user, pw) => require('child_process').execFileSync(
    path.join(path.dirname(bin), 'mqd-passwd'), ['--both', '--iterations', '4096', user],
    { input: pw + '\n' }).toString();
  return h;
};

module.exports.SLOW = SLOW;
module.exports.sleep = sleep;

// What the @azure/event-hubs SDK tests (76, 77, 90, 91) share, for the hub `hub`: the SDK
// (exit 77 to skip without it), the emulator's connection string, client options
// without retries, a subscription that collects events, a batch sent to one partition,
// and an epoch takeover. `h` is the test's harness (its log and check); a child process
// without one passes null and uses only eh and connStr.
//   const { eh, retry, connStr, collect, sendTo } = require('./mqdnode').eventHubs('eh77', h);
module.exports.eventHubs = function eventHubs(hub, h) {
  let eh;
  try {
    eh = require(path.join(__dirname, 'node', 'node_modules', '@azure', 'event-hubs'));
  } catch (e) {
    console.log('SKIP: @azure/event-hubs not installed (cd tests/interop/node && npm ci): ' + e.message);
    process.exit(77);
  }
  const k = { eh, SLOW, sleep };
  // no retries: a refusal shows as it is, and every call is bounded
  k.retry = { retryOptions: { maxRetries: 0, timeoutInMs: 15000 * SLOW } };
  // the key name and key default to ones mqd does not check (sas_required off)
  k.connStr = (port, keyName, key, hubName) => 'Endpoint=sb://127.0.0.1:' + port + ';SharedAccessKeyName=' + (keyName || 'any') +
    ';SharedAccessKey=' + (key || 'unchecked') + ';UseDevelopmentEmulator=true;EntityPath=' + (hubName || hub);
  k.bodies = (l) => JSON.stringify(l.map((e) => e.body));

  // Subscribes client c to partition pid (null: every partition) until `want` events came
  // and 1 s more (where any beyond `want` would show), or 20 s are up; keeps
  // keep(event, ctx) of each (the event itself by default).
  k.collect = async (c, pid, opts, want, keep) => {
    const got = [];
    const handlers = {
      processEvents: async (evs, ctx) => { for (const e of evs) got.push(keep ? keep(e, ctx) : e); },
      processError: async (err) => h.log('subscribe error: ' + err.code + ' ' + err.message),
    };
    const o = Object.assign({ maxWaitTimeInSeconds: 1 }, opts);
    const sub = pid === null ? c.subscribe(handlers, o) : c.subscribe(pid, handlers, o);
    const deadline = Date.now() + 20000 * SLOW;
    while (got.length < want && Date.now() < deadline) await sleep(100);
    await sleep(1000);
    await sub.close();
    return got;
  };

  k.sendTo = async (p, pid, events) => {
    const b = await p.createBatch({ partitionId: pid });
    for (const e of events) h.check(b.tryAdd(e), 'tryAdd');
    await p.sendBatch(b);
  };

  // Epochs: client c1 subscribes to partition 1 with options o1 and reads its one event;
  // c2 subscribes with o2 and, once it read that event and c1 got an error, producer p
  // sends after-1..after-3. Returns the events each read and the error codes each got
  // 1.5 s after c2 has four, and both subscriptions (s1, s2: the caller closes them).
  k.takeover = async (c1, c2, o1, o2, p) => {
    const r1 = [], e1 = [], r2 = [], e2 = [];
    const on = (r, e) => ({ processEvents: async (evs) => { r.push(...evs); }, processError: async (err) => { e.push(err.code || err.name); } });
    const until = async (cond) => {
      const deadline = Date.now() + 20000 * SLOW;
      while (!cond() && Date.now() < deadline) await sleep(100);
    };
    const s1 = c1.subscribe('1', on(r1, e1), o1);
    await until(() => r1.length >= 1);
    h.check(r1.length === 1, 'the first consumer read ' + r1.length + ' events before the takeover, want 1');
    const s2 = c2.subscribe('1', on(r2, e2), o2);
    await until(() => r2.length >= 1 && e1.length >= 1);
    await k.sendTo(p, '1', [1, 2, 3].map((i) => ({ body: 'after-' + i })));
    await until(() => r2.length >= 4);
    await sleep(1500 * SLOW);
    return { r1, e1, r2, e2, s1, s2 };
  };
  return k;
};
