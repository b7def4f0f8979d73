// The console's pages. Each renders into <main> and may poll through ctx.every(); the
// router stops the polling when the page changes. DOM is built with h() (text nodes,
// never innerHTML): topic names and message bodies are data, not markup.
import { get, post, enc } from './api.js';
import { drawChart } from './chart.js';

export function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}

const num = (v) => (v === null || v === undefined ? '' : Number(v).toLocaleString('en-US'));
function bytes(v) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return `${i ? v.toFixed(1) : v} ${u[i]}`;
}
function dur(s) {
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${hh}h` : hh ? `${hh}h ${m}m` : `${m}m ${s % 60}s`;
}
const msgCount = (t) => (t.partition_info || []).reduce((a, p) => a + (p.end - p.start), 0);
const topicLink = (name) => h('a', { href: `#/topic/${enc(name)}` }, name);
const groupLink = (t, g) => h('a', { href: `#/group/${enc(t)}/${enc(g)}` }, g);

function kv(pairs) {
  return h('dl', { class: 'kv' }, pairs.flatMap(([k, v, id]) => [h('dt', {}, k), h('dd', { id }, v)]));
}

// A table whose header buttons sort it (keyboard: Tab to a header, Enter).
function sortableTable(id, columns, rows, state, rerender) {
  const head = h('tr', {}, columns.map((c) => {
    const sorted = state.key === c.key;
    return h('th', { scope: 'col', class: c.num ? 'num' : null,
                     'aria-sort': sorted ? (state.desc ? 'descending' : 'ascending') : null },
             h('button', { type: 'button', 'data-key': c.key, onclick: () => {
               state.desc = state.key === c.key ? !state.desc : false;
               state.key = c.key;
               rerender();
             } }, c.label, sorted ? (state.desc ? ' ▼' : ' ▲') : ''));
  }));
  const sorted = [...rows];
  if (state.key) {
    const col = columns.find((c) => c.key === state.key);
    sorted.sort((a, b) => {
      const x = col.value(a), y = col.value(b);
      const r = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
      return state.desc ? -r : r;
    });
  }
  const body = sorted.map((r) => h('tr', { 'data-name': r.__name },
    columns.map((c) => h('td', { class: [c.num ? 'num' : '', c.key].join(' ').trim() },
                         c.cell ? c.cell(r) : String(c.value(r))))));
  return h('div', { class: 'table-wrap' }, h('table', { id }, h('thead', {}, head), h('tbody', {}, body)));
}

// Rates from two polls of cumulative counters.
function rater() {
  const last = new Map();
  return (key, value, now) => {
    const prev = last.get(key);
    last.set(key, [now, value]);
    if (!prev || now <= prev[0]) return null;
    return Math.max(0, ((value - prev[1]) * 1000) / (now - prev[0]));
  };
}

const WINDOW_MS = 5 * 60 * 1000;

// The server's samples of a series (metrics/history.c) within the chart's window, as
// [t, v...] rows; none when the broker has none yet (or an older broker).
async function pastOf(series) {
  try {
    const r = await get(`history?series=${enc(series)}&resolution=5s`);
    const since = Date.now() - WINDOW_MS;
    return r.points.filter((p) => p[0] >= since);
  } catch (e) { return []; }
}

export async function overview(main, ctx) {
  main.append(h('h1', {}, 'Overview'));
  const facts = h('div', {});
  const canvas = h('canvas', { id: 'rates-chart', class: 'chart', role: 'img',
                               'aria-label': 'messages in and out per second' });
  main.append(facts, h('h2', {}, 'Messages per second (up to the last 5 minutes)'),
              h('p', { class: 'legend' }, h('span', { class: 'in' }, 'in'), h('span', { class: 'out' }, 'out')),
              canvas);
  const rate = rater(), inPts = [], outPts = [];
  // the broker keeps 5 s samples for an hour: the chart starts with what came before the page
  for (const [t, ri, ro] of await pastOf('broker')) { inPts.push([t, ri]); outPts.push([t, ro]); }
  await ctx.every(async () => {
    const o = await get('overview');
    const now = Date.now();
    const ri = rate('in', o.messages_in, now), ro = rate('out', o.messages_out, now);
    if (ri !== null) { inPts.push([now, ri]); outPts.push([now, ro]); }
    while (inPts.length && inPts[0][0] < now - WINDOW_MS) { inPts.shift(); outPts.shift(); }
    facts.replaceChildren(kv([
      ['Version', o.version], ['Uptime', dur(o.uptime_s)], ['Listeners', (o.listen || []).join(', ')],
      ['Connections', num(o.connections), 'ov-connections'], ['Topics', num(o.topics), 'ov-topics'],
      ['Messages in (total)', num(o.messages_in), 'ov-in'], ['Messages out (total)', num(o.messages_out), 'ov-out'],
      ['Rate in / out', ri === null ? '…' : `${ri.toFixed(1)} / ${ro.toFixed(1)} msg/s`, 'ov-rate'],
      ['Disk used by the data dir', bytes(o.data_dir_size_bytes), 'ov-disk'], ['Of it, topics', bytes(o.size_bytes)], ['Memory (RSS)', bytes(o.rss_bytes)],
      ['Data directory', o.data_dir],
    ]));
    canvas.dataset.first = inPts.length ? inPts[0][0] : '';
    canvas.dataset.points = inPts.length;
    drawChart(canvas, [{ label: 'in', color: '#0b5cad', points: inPts },
                       { label: 'out', color: '#15803d', dash: [6, 4], points: outPts }], WINDOW_MS);
  }, 1000);
}

export async function topics(main, ctx) {
  main.append(h('h1', {}, 'Topics'));
  const state = { key: 'name', desc: false, filter: ctx.query.get('filter') || '' };
  const filter = h('input', { id: 'topic-filter', type: 'search', value: state.filter,
                              'aria-controls': 'topics-table' });
  const holder = h('div', {});
  main.append(h('form', { class: 'inline', role: 'search', onsubmit: (e) => e.preventDefault() },
                h('label', {}, 'Filter by name', filter)), holder);
  let list = [];
  const rate = rater();
  const columns = [
    { key: 'name', label: 'Topic', value: (t) => t.name, cell: (t) => topicLink(t.name) },
    { key: 'partitions', label: 'Partitions', num: true, value: (t) => t.partitions },
    { key: 'messages', label: 'Messages stored', num: true, value: (t) => t.__messages, cell: (t) => num(t.__messages) },
    { key: 'size', label: 'Size', num: true, value: (t) => t.size_bytes, cell: (t) => bytes(t.size_bytes) },
    { key: 'in', label: 'In/s', num: true, value: (t) => t.__in ?? 0, cell: (t) => (t.__in ?? 0).toFixed(1) },
    { key: 'out', label: 'Out/s', num: true, value: (t) => t.__out ?? 0, cell: (t) => (t.__out ?? 0).toFixed(1) },
    { key: 'retention', label: 'Retention', value: (t) => t.config.retention_ms,
      cell: (t) => [t.config.retention_ms ? dur(Math.round(t.config.retention_ms / 1000)) : 'forever',
                    t.config.retention_bytes ? ` / ${bytes(t.config.retention_bytes)}` : ''].join('') },
  ];
  const render = () => {
    const f = state.filter.toLowerCase();
    const rows = list.filter((t) => t.name.toLowerCase().includes(f));
    holder.replaceChildren(sortableTable('topics-table', columns, rows, state, render),
                           h('p', { class: 'muted', id: 'topics-count' }, `${rows.length} of ${list.length} topics`));
  };
  filter.addEventListener('input', () => {
    state.filter = filter.value;
    history.replaceState(null, '', state.filter ? `#/topics?filter=${enc(state.filter)}` : '#/topics');
    render();
  });
  await ctx.every(async () => {
    const now = Date.now();
    list = (await get('topics')).map((t) => Object.assign(t, {
      __name: t.name, __messages: msgCount(t),
      __in: rate(`${t.name}/in`, t.messages_in, now), __out: rate(`${t.name}/out`, t.messages_out, now) }));
    render();
  }, 3000);
}

export async function topic(main, ctx, name) {
  main.append(h('h1', {}, 'Topic ', h('span', { id: 'topic-name' }, name)));
  const holder = h('div', {});
  main.append(holder);
  if (ctx.session.manage) main.append(topicActions(name));
  const rate = rater();
  await ctx.every(async () => {
    const [t, groups] = await Promise.all([get(`topics/${enc(name)}`), get(`topics/${enc(name)}/groups`)]);
    const now = Date.now();
    const parts = h('table', { id: 'partitions-table' },
      h('thead', {}, h('tr', {}, ['Partition', 'Start', 'End', 'Messages', 'Size', 'In/s', 'State', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, t.partition_info.map((p) => h('tr', { 'data-partition': p.partition },
        h('td', {}, p.partition), h('td', { class: 'num' }, num(p.start)), h('td', { class: 'num' }, num(p.end)),
        h('td', { class: 'num messages' }, num(p.end - p.start)), h('td', { class: 'num' }, bytes(p.size_bytes)),
        h('td', { class: 'num rate' }, (rate(p.partition, p.end, now) ?? 0).toFixed(1)),
        h('td', {}, p.failed ? `failed: ${p.failed_reason}` : p.resuming ? 'resuming' : 'ok'),
        h('td', {}, h('a', { href: `#/browse/${enc(name)}/${p.partition}` }, 'Browse messages'))))));
    const gt = h('table', { id: 'topic-groups' },
      h('thead', {}, h('tr', {}, ['Group', 'Mode', 'Members', 'Lag'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, groups.map((g) => h('tr', {}, h('td', {}, groupLink(name, g.group)), h('td', {}, g.mode),
        h('td', { class: 'num' }, num(g.members)), h('td', { class: 'num' }, num(g.lag))))));
    holder.replaceChildren(
      kv([['Partitions', t.partitions], ['Messages stored', num(msgCount(t)), 'topic-messages'],
          ['Size', bytes(t.size_bytes)], ['Messages in / out', `${num(t.messages_in)} / ${num(t.messages_out)}`],
          ['Created', new Date(t.created_at).toISOString()],
          ['Settings', Object.entries(t.config).map(([k, v]) => `${k}=${v}`).join(', ')]]),
      h('h2', {}, 'Partitions'), h('div', { class: 'table-wrap' }, parts),
      h('h2', {}, 'Consumer groups'), groups.length ? gt : h('p', { class: 'muted' }, 'No groups yet.'));
  }, 3000);
}

// Alter (partitions, one setting as in mqd.conf: retention_ms = 7d) and delete, each
// with a confirmation step; the broker checks the manage right on the topic.
function topicActions(name) {
  const parts = h('input', { id: 'alter-partitions', type: 'number', min: '1', inputmode: 'numeric' });
  const key = h('input', { id: 'alter-key', type: 'text', size: '18', placeholder: 'retention_ms' });
  const value = h('input', { id: 'alter-value', type: 'text', size: '10', placeholder: '7d' });
  const slot = h('div', {});
  const alter = h('form', { class: 'inline', id: 'alter-form', onsubmit: (e) => {
    e.preventDefault();
    const body = {};
    if (parts.value) body.partitions = Number(parts.value);
    if (key.value.trim()) body.config = { [key.value.trim()]: value.value.trim() };
    const what = [body.partitions ? `${body.partitions} partitions` : '',
                  body.config ? `${key.value.trim()} = ${value.value.trim()}` : ''].filter(Boolean).join(', ');
    slot.replaceChildren(confirmPanel(`Alter ${name}: ${what || 'nothing'}? Partitions only grow.`, 'Confirm alter',
      async () => { const t = await post(`topics/${enc(name)}/alter`, body); return `Altered: ${t.partitions} partitions`; }));
  } }, h('label', {}, 'Partitions', parts), h('label', {}, 'Setting', key), h('label', {}, 'Value', value),
     h('button', { type: 'submit', id: 'alter-button' }, 'Alter…'));
  const del = h('button', { type: 'button', class: 'danger', id: 'delete-button', onclick: () =>
    slot.replaceChildren(confirmPanel(`Delete topic ${name} with every message and group offset? This cannot be undone.`,
      'Confirm delete', async () => { await post(`topics/${enc(name)}/delete`); return `Deleted ${name}`; })) },
    'Delete topic…');
  return h('section', { 'aria-label': 'change the topic' }, h('h2', {}, 'Change the topic'), alter, del, slot);
}

export async function groups(main, ctx) {
  main.append(h('h1', {}, 'Consumer groups'));
  const holder = h('div', {});
  main.append(holder);
  await ctx.every(async () => {
    const list = await get('groups');
    holder.replaceChildren(list.length ? h('table', { id: 'groups-table' },
      h('thead', {}, h('tr', {}, ['Topic', 'Group', 'Mode', 'Members', 'Lag'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, list.map((g) => h('tr', {}, h('td', {}, topicLink(g.topic)), h('td', {}, groupLink(g.topic, g.group)),
        h('td', {}, g.mode), h('td', { class: 'num' }, num(g.members)), h('td', { class: 'num' }, num(g.lag))))))
      : h('p', { class: 'muted' }, 'No consumer groups yet.'));
  }, 3000);
}

// The RESET body of the group page's form: to/value, or shift; a date (ISO 8601, no
// zone: UTC) and a duration back from now (90s, 15m, 2h, 7d) become a time in ms.
export function resetBody(mode, v, parts) {
  const body = {};
  const int = (x) => { if (!/^-?\d+$/.test(x)) throw new Error(`not a whole number: '${x}'`); return Number(x); };
  if (mode === 'earliest' || mode === 'latest') body.to = mode;
  else if (mode === 'offset' || mode === 'time') { body.to = mode; body.value = int(v); }
  else if (mode === 'shift') body.shift = int(v);
  else if (mode === 'datetime') {
    const ms = Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(v) ? v : v + 'Z');
    if (Number.isNaN(ms)) throw new Error(`not an ISO 8601 date and time: '${v}'`);
    body.to = 'time'; body.value = ms;
  } else if (mode === 'duration') {
    const m = /^(\d+)(ms|s|m|h|d)$/.exec(v);
    if (!m) throw new Error(`not a duration such as 90s, 15m, 2h, 7d: '${v}'`);
    const unit = { ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5 }[m[2]];
    body.to = 'time'; body.value = Math.max(0, Date.now() - Number(m[1]) * unit);
  }
  if (parts) {
    if (!/^\d+(,\d+)*$/.test(parts)) throw new Error(`partitions are numbers such as 0,2: '${parts}'`);
    body.partitions = parts;
  }
  return body;
}

function confirmPanel(text, label, action) {
  const out = h('div', { class: 'confirm', role: 'alertdialog', 'aria-label': text });
  const yes = h('button', { type: 'button', class: 'danger', id: 'confirm-yes', onclick: async () => {
    out.replaceChildren(h('p', {}, 'Working…'));
    try { out.replaceChildren(h('p', { id: 'action-result' }, await action())); } catch (e) {
      out.replaceChildren(h('p', { class: 'error', id: 'action-result' }, `Refused: ${e.message} (${e.status})`));
    }
  } }, label);
  const no = h('button', { type: 'button', onclick: () => out.remove() }, 'Cancel');
  out.append(h('p', {}, text), yes, ' ', no);
  setTimeout(() => yes.focus(), 0);
  return out;
}

export async function group(main, ctx, tname, gname) {
  main.append(h('h1', {}, 'Group ', h('span', { id: 'group-name' }, gname), ' on ', topicLink(tname)));
  const facts = h('div', {}), parts = h('div', { class: 'table-wrap' });
  const canvas = h('canvas', { id: 'lag-chart', class: 'chart', role: 'img', 'aria-label': 'lag' });
  const to = h('select', { id: 'reset-to' }, [['earliest', 'earliest'], ['latest', 'latest'], ['offset', 'offset'],
    ['time', 'time (ms since the epoch)'], ['datetime', 'date and time (ISO 8601)'], ['duration', 'duration back from now'],
    ['shift', 'shift by N offsets']].map(([v, label]) => h('option', { value: v }, label)));
  const value = h('input', { id: 'reset-value', type: 'text', size: '24', placeholder: '25 | 2026-12-07T13:00:00Z | 1h | -10' });
  const partsIn = h('input', { id: 'reset-partitions', type: 'text', size: '10', placeholder: 'all' });
  const confirmSlot = h('div', {});
  const form = h('form', { class: 'inline', id: 'reset-form', onsubmit: async (e) => {
    e.preventDefault();
    let body;
    try { body = resetBody(to.value, value.value.trim(), partsIn.value.trim()); } catch (err) {
      confirmSlot.replaceChildren(h('p', { class: 'error', id: 'action-result' }, err.message));
      return;
    }
    confirmSlot.replaceChildren(h('p', {}, 'Preview…'));
    let preview;
    try { preview = await post(`groups/${enc(tname)}/${enc(gname)}/reset`, { ...body, dry_run: true }); } catch (err) {
      confirmSlot.replaceChildren(h('p', { class: 'error', id: 'action-result' }, `Refused: ${err.message} (${err.status})`));
      return;
    }
    const table = h('table', { id: 'reset-preview' },
      h('thead', {}, h('tr', {}, ['Partition', 'Committed now', 'After the reset', 'Log start', 'Log end', 'Lag after'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, preview.partitions.map((p) => h('tr', { 'data-partition': p.partition, class: p.changed ? 'changed' : '' },
        h('td', {}, p.partition), h('td', { class: 'num before' }, num(p.previous ?? p.committed)),
        h('td', { class: 'num after' }, num(p.committed)), h('td', { class: 'num' }, num(p.log_start)),
        h('td', { class: 'num' }, num(p.log_end)), h('td', { class: 'num' }, num(p.lag))))));
    const panel = confirmPanel(
      `Reset ${body.partitions ? 'partitions ' + body.partitions : 'every partition'} of ${gname} as previewed? ` +
      'The group must have no live members.', 'Confirm reset',
      async () => {
        const r = await post(`groups/${enc(tname)}/${enc(gname)}/reset`, body);
        return `Reset done: committed ${r.partitions.map((p) => `${p.partition}:${p.committed}`).join(', ')}`;
      });
    panel.prepend(h('div', { class: 'table-wrap' }, table));
    confirmSlot.replaceChildren(panel);
  } }, h('label', {}, 'Reset offsets to', to), h('label', {}, 'Value', value),
     h('label', {}, 'Partitions (e.g. 0,2)', partsIn),
     h('button', { type: 'submit', id: 'reset-button', hidden: !ctx.session.manage }, 'Preview reset…'));
  main.append(facts, h('h2', {}, 'Partitions'), parts, h('h2', {}, 'Lag (up to the last 5 minutes)'), canvas,
              h('h2', {}, 'Reset offsets'), ctx.session.manage ? form : h('p', { class: 'muted' }, 'Needs the manage right.'),
              confirmSlot);
  const pts = (await pastOf(`group/${tname}/${gname}`)).map(([t, lag]) => [t, lag]);
  await ctx.every(async () => {
    const g = await get(`groups/${enc(tname)}/${enc(gname)}`);
    const now = Date.now();
    pts.push([now, g.lag]);
    while (pts.length && pts[0][0] < now - WINDOW_MS) pts.shift();
    facts.replaceChildren(kv([['Mode', g.mode ?? '(no members yet)'], ['Members', num(g.members), 'group-members'],
                              ['Lag', num(g.lag), 'group-lag']]));
    parts.replaceChildren(h('table', { id: 'group-partitions' },
      h('thead', {}, h('tr', {}, ['Partition', 'Committed', 'Log start', 'Log end', 'Lag', 'In flight', 'Owner'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, g.partitions.map((p) => h('tr', { 'data-partition': p.partition }, h('td', {}, p.partition),
        h('td', { class: 'num committed' }, num(p.committed)), h('td', { class: 'num' }, num(p.log_start)),
        h('td', { class: 'num' }, num(p.log_end)), h('td', { class: 'num lag' }, num(p.lag)),
        h('td', { class: 'num' }, num(p.inflight)), h('td', {}, p.owner || '—'))))));
    canvas.dataset.first = pts.length ? pts[0][0] : '';
    canvas.dataset.points = pts.length;
    drawChart(canvas, [{ label: 'lag', color: '#9a3412', points: pts }], WINDOW_MS);
  }, 1000);
}

export async function connections(main, ctx) {
  main.append(h('h1', {}, 'Connections'));
  const holder = h('div', {}), confirmSlot = h('div', {});
  main.append(confirmSlot, holder);
  await ctx.every(async () => {
    const [conns, links] = await Promise.all([get('connections'), get('links')]);
    const closeBtn = (c) => h('button', { type: 'button', class: 'danger', 'data-close': c.id,
      onclick: () => confirmSlot.replaceChildren(confirmPanel(`Close connection ${c.id} (${c.container})?`,
        'Confirm close', async () => { await post(`connections/${enc(c.id)}/close`); return `Closed ${c.id}`; })) },
      'Close…');
    holder.replaceChildren(
      h('div', { class: 'table-wrap' }, h('table', { id: 'connections-table' },
        h('thead', {}, h('tr', {}, ['Peer', 'User', 'TLS', 'SASL', 'Container', 'Client', 'Sessions', 'Links', ''].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, conns.map((c) => h('tr', { 'data-id': c.id, 'data-container': c.container },
          h('td', {}, c.id), h('td', {}, c.user), h('td', {}, c.tls ? 'yes' : 'no'), h('td', {}, c.sasl_mechanism),
          h('td', { class: 'container' }, c.container),
          h('td', { title: JSON.stringify(c.client_properties || {}) },
            [c.client_properties && c.client_properties.product, c.client_properties && c.client_properties.version].filter(Boolean).join(' ') || '—'),
          h('td', { class: 'num' }, num(c.sessions)), h('td', { class: 'num' }, num(c.links)),
          h('td', {}, ctx.session.manage ? closeBtn(c) : '')))))),
      h('h2', {}, 'Links'),
      h('div', { class: 'table-wrap' }, h('table', { id: 'links-table' },
        h('thead', {}, h('tr', {}, ['Connection', 'Name', 'Role', 'Kind', 'Address', 'Credit', 'Unsettled'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, links.map((l) => h('tr', {}, h('td', {}, l.connection), h('td', {}, l.name), h('td', {}, l.role),
          h('td', {}, l.kind), h('td', {}, l.address), h('td', { class: 'num' }, num(l.credit)),
          h('td', { class: 'num' }, num(l.unsettled))))))));
  }, 3000);
}

function hexBytes(hex) {
  const b = new Uint8Array(hex.length / 2);
  for (let i = 0; i < b.length; i++) b[i] = parseInt(hex.substr(2 * i, 2), 16);
  return b;
}

function showBody(m, view) {
  const b = hexBytes(m.body_hex || '');
  if (view === 'hex') return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join(' ').replace(/(([0-9a-f]{2} ){16})/g, '$1\n');
  if (m.body !== undefined && view !== 'text') return JSON.stringify(m.body, null, 2);
  const text = new TextDecoder('utf-8').decode(b);
  if (view === 'json') { try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return `(not JSON) ${text}`; } }
  return text;
}

// AMQP's header and properties are lists; name their fields for reading
const HEADER = ['durable', 'priority', 'ttl', 'first-acquirer', 'delivery-count'];
const PROPERTIES = ['message-id', 'user-id', 'to', 'subject', 'reply-to', 'correlation-id',
  'content-type', 'content-encoding', 'absolute-expiry-time', 'creation-time', 'group-id',
  'group-sequence', 'reply-to-group-id'];
function named(list, names) {
  if (!Array.isArray(list)) return list ? JSON.stringify(list) : '—';
  const out = list.map((v, i) => (v === null ? null : `${names[i] || i}: ${JSON.stringify(v)}`)).filter(Boolean);
  return out.length ? out.join(', ') : '—';
}

export async function browse(main, ctx, tname, part) {
  main.append(h('h1', {}, 'Message browser'), h('p', { class: 'muted' }, 'Peeks at stored messages; nothing is consumed.'));
  const q = ctx.query;
  const topicsList = await get('topics');
  const tsel = h('select', { id: 'browse-topic', name: 'topic' }, topicsList.map((t) => h('option', { value: t.name, selected: t.name === tname }, t.name)));
  const psel = h('input', { id: 'browse-partition', type: 'number', min: '0', value: part ?? '0' });
  const from = h('input', { id: 'browse-from', type: 'number', min: '0', value: q.get('from') ?? '', placeholder: 'last N' });
  const count = h('input', { id: 'browse-count', type: 'number', min: '1', max: '100', value: q.get('count') ?? '10' });
  const view = h('select', { id: 'browse-view' }, ['text', 'json', 'hex'].map((v) => h('option', { value: v, selected: v === (q.get('view') || 'text') }, v)));
  const out = h('div', { id: 'browse-out', 'aria-live': 'polite' });
  main.append(h('form', { class: 'inline', id: 'browse-form', onsubmit: (e) => {
    e.preventDefault();
    const p = new URLSearchParams();
    if (from.value !== '') p.set('from', from.value);
    p.set('count', count.value || '10');
    p.set('view', view.value);
    location.hash = `#/browse/${enc(tsel.value)}/${enc(psel.value || '0')}?${p}`;
  } }, h('label', {}, 'Topic', tsel), h('label', {}, 'Partition', psel),
     h('label', {}, 'From offset (empty: the last N)', from), h('label', {}, 'Count', count),
     h('label', {}, 'Show body as', view), h('button', { type: 'submit', id: 'browse-go' }, 'Peek')), out);
  if (!tname) return;
  const p = new URLSearchParams();
  if (q.get('from')) p.set('from', q.get('from'));
  p.set('count', q.get('count') || '10');
  const r = await get(`topics/${enc(tname)}/partitions/${enc(part || '0')}/messages?${p}`);
  const v = q.get('view') || 'text';
  out.replaceChildren(h('p', {}, `Partition ${r.partition}: offsets ${num(r.start)} to ${num(r.end)}; showing ${r.messages.length}.`),
    ...r.messages.map((m) => h('article', { class: 'message', 'data-offset': m.offset },
      h('h2', {}, `Offset ${m.offset}`),
      kv([['Time', new Date(m.timestamp).toISOString()], ['Size', `${m.size} bytes`], ['Body', `${m.body_type}, ${m.body_size} bytes${m.body_truncated ? ' (first 4 KiB shown)' : ''}`],
          ['Header', named(m.header, HEADER)], ['Properties', named(m.properties, PROPERTIES)],
          ['Application properties', m.application_properties ? JSON.stringify(m.application_properties) : '—'],
          ['Annotations', m.message_annotations ? JSON.stringify(m.message_annotations) : '—']]),
      h('pre', { class: 'body' }, showBody(m, v)))));
}

export async function users(main, ctx) {
  main.append(h('h1', {}, 'Users and access rules'));
  const holder = h('div', {});
  main.append(holder);
  await ctx.every(async () => {
    const [us, acl] = await Promise.all([get('users'), get('acl')]);
    const yes = (b) => (b ? 'yes' : 'no');
    holder.replaceChildren(
      h('div', { class: 'table-wrap' }, h('table', { id: 'users-table' },
        h('thead', {}, h('tr', {}, ['User', 'Groups', 'Password', 'SCRAM-SHA-256', 'Certificate CN'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, us.map((u) => h('tr', { 'data-name': u.name }, h('td', {}, u.name), h('td', {}, u.groups),
          h('td', {}, yes(u.password)), h('td', {}, yes(u.scram_sha256)), h('td', {}, u.cert_cn || '—')))))),
      h('h2', {}, 'ACL (first matching rule wins)'),
      acl.present ? h('div', { class: 'table-wrap' }, h('table', { id: 'acl-table' },
        h('thead', {}, h('tr', {}, ['#', 'Action', 'Who', 'Rights', 'Pattern'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, acl.rules.map((r, i) => h('tr', {}, h('td', {}, i + 1), h('td', {}, r.action), h('td', {}, r.who),
          h('td', {}, r.rights.join(', ')), h('td', {}, r.pattern))))))
        : h('p', {}, 'No [acl] section: every user may do everything.'));
  }, 10000);
}

// The cluster as the node the console runs on sees it in etcd (com.mqd:cluster READ):
// its nodes (alive, controller, client address, rack) and every partition's leader,
// replicas and in-sync set. A partition whose ISR is smaller than its replica set is
// under-replicated (row marked, and counted at the top); one without a live leader is
// offline.
export function partitionState(p, alive) {
  if (!p.leader || !alive.has(p.leader)) return 'offline';
  return (p.isr || []).length < (p.replicas || []).length ? 'under-replicated' : 'ok';
}

export async function cluster(main, ctx) {
  main.append(h('h1', {}, 'Cluster'));
  const holder = h('div', {});
  main.append(holder);
  await ctx.every(async () => {
    let c;
    try {
      c = await get('cluster');
    } catch (e) {
      if (e.status !== 404) throw e;
      holder.replaceChildren(h('p', { id: 'cluster-none' }, 'Not a cluster node (cluster = none): this broker serves every partition itself.'));
      return;
    }
    const alive = new Set(c.nodes.filter((n) => n.alive).map((n) => n.id));
    const parts = [...c.partitions].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
    const states = parts.map((p) => partitionState(p, alive));
    const urp = states.filter((s) => s === 'under-replicated').length;
    const offline = states.filter((s) => s === 'offline').length;
    const ids = (v) => (v || []).join(', ');
    holder.replaceChildren(
      kv([['Controller', c.controller ? `node ${c.controller}` : 'none', 'cluster-controller'],
          ['Answered by', `node ${c.node_id}`, 'cluster-self'],
          ['Nodes alive', `${alive.size} of ${c.nodes.length}`, 'cluster-alive'],
          ['Under-replicated partitions', String(urp), 'cluster-urp'],
          ['Offline partitions', String(offline), 'cluster-offline']]),
      h('h2', {}, 'Nodes'),
      h('div', { class: 'table-wrap' }, h('table', { id: 'nodes-table' },
        h('thead', {}, h('tr', {}, ['Node', 'Alive', 'Controller', 'Address', 'Rack', 'Leads'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, c.nodes.map((n) => h('tr', { 'data-node': n.id, class: n.alive ? null : 'down' },
          h('td', { class: 'id' }, n.id), h('td', { class: 'alive' }, n.alive ? 'yes' : 'no'),
          h('td', { class: 'controller' }, n.id === c.controller ? 'yes' : ''),
          h('td', { class: 'address' }, n.address), h('td', {}, n.rack || '—'),
          h('td', { class: 'num leads' }, parts.filter((p) => p.leader === n.id).length)))))),
      h('h2', {}, 'Partitions'),
      h('div', { class: 'table-wrap' }, h('table', { id: 'cluster-partitions' },
        h('thead', {}, h('tr', {}, ['Topic', 'Partition', 'Leader', 'Replicas', 'In sync', 'Epoch', 'State'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, parts.map((p, i) => h('tr', { 'data-topic': p.topic, 'data-partition': p.partition, 'data-state': states[i],
                                                   class: states[i] === 'ok' ? null : states[i] },
          h('td', {}, topicLink(p.topic)), h('td', { class: 'num' }, p.partition),
          h('td', { class: 'leader' }, p.leader || 'none'), h('td', { class: 'replicas' }, ids(p.replicas)),
          h('td', { class: 'isr' }, ids(p.isr)), h('td', { class: 'num' }, p.epoch),
          h('td', { class: 'state' }, states[i])))))));
  }, 2000);
}
