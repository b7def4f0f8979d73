// A CheckpointStore for @azure/event-hubs (5.x, 6.x) that keeps everything in mqd, so
// EventHubConsumerClient instances balance a hub's partitions across processes without
// Azure Blob Storage:
//   - checkpoints are the committed offsets of an mqd consumer group of their own
//     (`<consumer group>.checkpoints` unless you choose another name), written with the
//     `$management` operation COMMIT of com.mqd:consumergroup and read with READ, so
//     `mqctl group show HUB/$default.checkpoints` shows how far processing got;
//   - partition ownership is the com.mqd:ownership records (QUERY, CLAIM), whose CLAIM
//     compares the etag on the broker: of two processes claiming a partition with the
//     same etag, one wins and the other is refused (412).
// No npm package besides the SDK: rhea comes with it (rhea-promise depends on it).
//
//   const { EventHubConsumerClient } = require('@azure/event-hubs');
//   const { MqdCheckpointStore } = require('./mqd-checkpoint-store');
//   const store = new MqdCheckpointStore(connectionString);   // the same string
//   const client = new EventHubConsumerClient('$Default', connectionString, store);
//   client.subscribe({ processEvents: async (events, ctx) => {
//     /* handle events */ if (events.length) await ctx.updateCheckpoint(events[events.length - 1]);
//   }, processError: async (err) => console.error(err) });
//   // ... later: await client.close(); await store.close();
//
// The store opens one AMQP connection of its own to the Endpoint of the connection
// string. With sas_required = on it sends a $cbs put-token signed with the string's key
// (a checkpoint write needs the `manage` right, an ownership claim `listen`); options
// { username, password } use SASL PLAIN instead. See docs/eventhubs.md, "Checkpoint
// store".
'use strict';
const crypto = require('crypto');

const OWNERSHIP = 'com.mqd:ownership';
const GROUP = 'com.mqd:consumergroup';

function parseConnectionString(cs) {
  const kv = {};
  for (const part of String(cs).split(';')) {
    const i = part.indexOf('=');
    if (i > 0) kv[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  const m = /^sb:\/\/([^:/]+)(?::(\d+))?/.exec(kv.Endpoint || '');
  if (!m) throw new TypeError('connection string without an Endpoint=sb://host[:port]');
  return { host: m[1], port: m[2] ? Number(m[2]) : 5672, keyName: kv.SharedAccessKeyName,
    key: kv.SharedAccessKey, hub: kv.EntityPath };
}

function sasToken(audience, keyName, key, ttlS) {
  const sr = encodeURIComponent(audience);
  const se = Math.floor(Date.now() / 1000) + ttlS;
  const sig = crypto.createHmac('sha256', key).update(sr + '\n' + se).digest('base64');
  return 'SharedAccessSignature sr=' + sr + '&sig=' + encodeURIComponent(sig) + '&se=' + se + '&skn=' + keyName;
}

class MqdCheckpointStore {
  // connection: an Event Hubs connection string, or { host, port, username, password,
  // keyName, key }. options: { checkpointGroup(consumerGroup) -> name, timeoutMs, rhea }.
  constructor(connection, options = {}) {
    this._c = typeof connection === 'string' ? parseConnectionString(connection) : Object.assign({ port: 5672 }, connection);
    this._rhea = options.rhea || require('rhea');
    this._groupOf = options.checkpointGroup || ((g) => g + '.checkpoints');
    this._timeoutMs = options.timeoutMs || 15000;
    this._pending = new Map();
    this._ready = null;
    this._n = 0;
    this._id = 'mqd-ckpt-' + crypto.randomBytes(6).toString('hex');
  }

  // ---- the CheckpointStore interface ----

  async listOwnership(fullyQualifiedNamespace, eventHubName, consumerGroup) {
    const rows = await this._call(OWNERSHIP, 'QUERY', eventHubName + '/' + consumerGroup, {});
    return (rows || []).map((r) => ({ fullyQualifiedNamespace, eventHubName, consumerGroup,
      partitionId: String(r.partition), ownerId: r.owner, etag: r.etag, lastModifiedTimeInMs: toMs(r.modified) }));
  }

  // Claims one by one; a claim another process won meanwhile (412) is left out of the
  // result, as the SDK expects, and any other failure is thrown.
  async claimOwnership(ownerships) {
    const won = [];
    for (const o of ownerships) {
      const props = { partition: Number(o.partitionId), owner: o.ownerId || '' };
      if (o.etag) props.etag = o.etag;
      try {
        const r = await this._call(OWNERSHIP, 'CLAIM', o.eventHubName + '/' + o.consumerGroup, props);
        won.push(Object.assign({}, o, { etag: r.etag, lastModifiedTimeInMs: toMs(r.modified) }));
      } catch (e) {
        if (e.statusCode !== 412) throw e;
      }
    }
    return won;
  }

  // mqd's offset of an event is its sequence number; the group's committed offset is the
  // next one to process.
  async updateCheckpoint(checkpoint) {
    const seq = Number(checkpoint.sequenceNumber);
    if (!Number.isInteger(seq) || seq < 0) throw new TypeError('checkpoint without a sequenceNumber');
    await this._call(GROUP, 'COMMIT', checkpoint.eventHubName + '/' + this._groupOf(checkpoint.consumerGroup),
      { partition: Number(checkpoint.partitionId), offset: seq + 1 });
  }

  // Partitions whose committed offset is 0 have no checkpoint (the SDK then uses the
  // subscription's startPosition); the others resume after offset committed - 1.
  async listCheckpoints(fullyQualifiedNamespace, eventHubName, consumerGroup) {
    let g;
    try {
      g = await this._call(GROUP, 'READ', eventHubName + '/' + this._groupOf(consumerGroup), {});
    } catch (e) {
      if (e.statusCode === 404 && /no group/.test(e.message)) return [];
      throw e;
    }
    return (g.partitions || []).filter((p) => p.committed > 0).map((p) => ({ fullyQualifiedNamespace,
      eventHubName, consumerGroup, partitionId: String(p.partition),
      sequenceNumber: p.committed - 1, offset: String(p.committed - 1) }));
  }

  async close() {
    clearTimeout(this._renew);
    const ready = this._ready;
    this._ready = null;
    if (!ready) return;
    let l;
    try { l = await ready; } catch (e) { return; }
    await new Promise((resolve) => {
      l.conn.once('connection_close', resolve);
      l.conn.once('disconnected', resolve);
      setTimeout(resolve, 2000).unref();
      l.conn.close();
    });
  }

  // ---- the $management link ----

  _open() {
    if (this._ready) return this._ready;
    this._ready = new Promise((resolve, reject) => {
      const c = this._c;
      const container = this._rhea.create_container({ id: this._id });
      const opts = { host: c.host, port: c.port, reconnect: false, idle_time_out: 60000 };
      if (c.username) Object.assign(opts, { username: c.username, password: c.password || '' });
      const conn = container.connect(opts);
      const fail = (why) => { this._ready = null; reject(new Error('mqd checkpoint store: ' + why)); this._failAll(why); };
      conn.on('connection_error', (ctx) => fail('connection error ' + JSON.stringify(ctx.connection.error)));
      conn.on('disconnected', (ctx) => fail('disconnected' + (ctx.error ? ': ' + ctx.error.message : '')));
      conn.on('message', (ctx) => this._reply(ctx.message));
      conn.on('connection_open', () => {
        const recv = conn.open_receiver({ source: { dynamic: true }, autoaccept: true });
        recv.on('receiver_open', () => {
          const sender = conn.open_sender({ target: { address: '$management' } });
          sender.on('sendable', () => {
            if (this._l) return;
            this._l = { conn, sender, replyTo: recv.source.address };
            this._putToken().then(() => resolve(this._l), (e) => { fail(e.message); });
          });
        });
      });
    });
    return this._ready;
  }

  // With a key in the connection string: one token for the hub's namespace (renewed
  // before it expires), sent to $cbs on the same connection.
  async _putToken() {
    const c = this._c;
    if (!c.key || !c.keyName) return;
    const l = this._l;
    const aud = 'sb://' + c.host + ':' + c.port + (c.hub ? '/' + c.hub : '');
    if (!l.cbs) {
      // $cbs answers on a receiver attached to it, whose target names the reply-to
      const replyTo = 'cbs-' + this._id;
      const recv = l.conn.open_receiver({ source: '$cbs', target: replyTo, name: replyTo + '-r', autoaccept: true });
      const sender = l.conn.open_sender({ target: '$cbs', name: replyTo + '-s' });
      await Promise.all([new Promise((resolve) => recv.once('receiver_open', resolve)),
        new Promise((resolve) => sender.once('sendable', resolve))]);
      l.cbs = { sender, replyTo };
    }
    const r = await this._send(l.cbs.sender, { operation: 'put-token', type: 'servicebus.windows.net:sastoken',
      name: aud, expiration: Date.now() + 3600 * 1000 }, sasToken(aud, c.keyName, c.key, 3600), true, l.cbs.replyTo);
    if (r.status >= 300) throw new Error('put-token: ' + r.status + ' ' + r.desc);
    clearTimeout(this._renew);
    if (this._l !== l) return; // closed meanwhile
    this._renew = setTimeout(() => this._putToken().catch(() => {}), 3000 * 1000);
    this._renew.unref();
  }

  _send(sender, props, body, raw, replyTo) {
    const id = this._id + '-' + ++this._n;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { this._pending.delete(id); reject(new Error('no reply to ' + props.operation + ' in ' + this._timeoutMs + ' ms')); }, this._timeoutMs);
      this._pending.set(id, { resolve, reject, timer, raw });
      sender.send({ message_id: id, reply_to: replyTo || this._l.replyTo, application_properties: props, body });
    });
  }

  _reply(m) {
    const p = this._pending.get(m.correlation_id);
    if (!p) return;
    this._pending.delete(m.correlation_id);
    clearTimeout(p.timer);
    const ap = m.application_properties || {};
    const status = Number(ap['status-code'] !== undefined ? ap['status-code'] : ap.statusCode);
    const desc = ap['status-description'] || ap.statusDescription || '';
    if (p.raw) return p.resolve({ status, desc });
    if (status >= 300) {
      const e = new Error(desc || 'status ' + status);
      e.statusCode = status;
      return p.reject(e);
    }
    p.resolve(m.body);
  }

  _failAll(why) {
    for (const [id, p] of this._pending) {
      clearTimeout(p.timer);
      p.reject(new Error('mqd checkpoint store: ' + why));
      this._pending.delete(id);
    }
    this._l = null;
  }

  async _call(type, operation, name, props) {
    const l = await this._open();
    return this._send(l.sender, Object.assign({ operation, type, name }, props), {});
  }
}

function toMs(v) {
  return v instanceof Date ? v.getTime() : Number(v);
}

module.exports = { MqdCheckpointStore, parseConnectionString };
