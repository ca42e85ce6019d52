// dlserve's status page: polls /status and /metrics every POLL_MS and draws
// tables and small canvas charts of the last WINDOW_S seconds; the training
// curves come from /status/training. At start it draws the daemon's own
// history (/status/history: a snapshot every 2 s), so that a reload keeps
// the charts. No libraries, no other origin.
'use strict';

const POLL_MS = 2000;
const WINDOW_S = 900;
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04',
                '#db2777'];
// The token of http.token: taken from ?token= and sent as a bearer token.
const TOKEN = new URLSearchParams(location.search).get('token');

const history = [];     // one sample a snapshot: derive()'s
let prev = null;        // the previous snapshot (snapshot()'s, or the daemon's)
let trainingKey = null; // served versions whose curves are shown
const live = {};        // Redis progress per model: {epoch: {loss, accuracy}}
let polls = 0;

// ---- fetching -------------------------------------------------------------

async function get(path, json) {
  const headers = TOKEN ? {Authorization: 'Bearer ' + TOKEN} : {};
  const r = await fetch(path, {headers, cache: 'no-store'});
  if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
  return json ? r.json() : r.text();
}

// Prometheus text: [{name, labels, value}].
function parseProm(text) {
  const out = [];
  for (const line of text.split('\n')) {
    const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    out.push({name: m[1], labels, value: Number(m[3])});
  }
  return out;
}

// Cumulative buckets of histogram `name` per model: {model: [{le, n}]}.
function histograms(samples, name) {
  const h = {};
  for (const s of samples) {
    if (s.name !== name + '_bucket') continue;
    const le = s.labels.le === '+Inf' ? Infinity : Number(s.labels.le);
    (h[s.labels.model] = h[s.labels.model] || []).push({le, n: s.value});
  }
  for (const m in h) h[m].sort((a, b) => a.le - b.le);
  return h;
}

// Quantile q of the observations between two cumulative bucket lists,
// interpolated inside its bucket as Prometheus's histogram_quantile does.
function quantile(q, cur, old) {
  const d = cur.map((b, i) => ({le: b.le, n: b.n - (old && old[i] ? old[i].n : 0)}));
  const total = d.length ? d[d.length - 1].n : 0;
  if (total <= 0) return null;
  const rank = q * total;
  let lo = 0, below = 0;
  for (const b of d) {
    if (b.n >= rank) {
      if (b.le === Infinity) return lo;
      return lo + (b.le - lo) * (rank - below) / Math.max(b.n - below, 1e-12);
    }
    lo = b.le;
    below = b.n;
  }
  return lo;
}

// ---- the DOM ----------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

function num(v) {
  return el('td', {class: 'num'}, v === undefined || v === null ? '' : fmt(v));
}

function fmt(v) {
  if (typeof v !== 'number') return String(v);
  if (Number.isInteger(v)) return v.toLocaleString('en');
  return Math.abs(v) >= 100 ? Math.round(v).toLocaleString('en')
                            : String(Number(v.toPrecision(3)));
}

function fill(tableId, rows) {
  document.querySelector('#' + tableId + ' tbody').replaceChildren(...rows);
}

// ---- charts -----------------------------------------------------------------

// A canvas sized for the screen; returns its 2D context and CSS size.
function surface(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 400, h = canvas.clientHeight || 180;
  canvas.width = w * dpr;
  canvas.height = h * dpr;
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  g.font = '11px sans-serif';
  return {g, w, h};
}

// Round y-axis ticks for values up to ymax: 0, step, 2 step, ... with step
// 1, 2 or 5 times a power of ten, five or fewer steps, the last at or above
// ymax.
function ticks(ymax) {
  if (!(ymax > 0)) return [0, 1];
  const raw = ymax / 5, p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
  const n = Math.ceil(ymax / step - 1e-9);
  // the products are rounded to the step's decimals (0.1 * 3 is 0.30000000000000004)
  const dec = Math.max(0, -Math.floor(Math.log10(step)));
  return Array.from({length: n + 1}, (_, i) => Number((i * step).toFixed(dec)));
}

// Lines [{label, color, dash, dots, legend, pts: [[x, y]]}]; xfmt labels the x axis.
// The canvas keeps what the hover readout needs (canvas.chart), its ticks
// and its lines' labels (data-ticks, data-labels).
function lineChart(canvas, lines, xfmt) {
  const {g, w, h} = surface(canvas);
  const pts = lines.flatMap((l) => l.pts).filter((p) => p[1] !== null);
  const L = 46, R = 8, T = 18, B = 18;
  g.strokeStyle = '#c9ced6';
  g.strokeRect(L, T, w - L - R, h - T - B);
  canvas.chart = null;
  delete canvas.dataset.ticks;
  canvas.dataset.labels = lines.map((l) => l.label).join(',');
  if (!pts.length) {
    g.fillStyle = '#9aa3b1';
    g.fillText('no data yet', L + 8, T + 16);
    return;
  }
  const x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
  const ys = ticks(Math.max(...pts.map((p) => p[1])));
  const y1 = ys.at(-1);
  const X = (x) => L + (x1 > x0 ? (x - x0) / (x1 - x0) : 1) * (w - L - R);
  const Y = (y) => h - B - (y / y1) * (h - T - B);
  canvas.chart = {lines, xfmt, x0, x1, L, R, w};
  canvas.dataset.ticks = ys.join(',');
  hoverable(canvas);
  g.fillStyle = '#555d6b';
  g.textAlign = 'right';
  g.strokeStyle = '#eef0f3';
  for (const y of ys) {
    g.fillText(fmt(y), L - 4, Y(y) + 4);
    if (y > 0 && y < y1) {
      g.beginPath();
      g.moveTo(L + 1, Y(y));
      g.lineTo(w - R - 1, Y(y));
      g.stroke();
    }
  }
  g.textAlign = 'left';
  g.fillText(xfmt(x0), L, h - 4);
  g.textAlign = 'right';
  g.fillText(xfmt(x1), w - R, h - 4);
  g.textAlign = 'left';
  let lx = L;
  for (const l of lines) {
    g.strokeStyle = g.fillStyle = l.color;
    g.setLineDash(l.dash || []);
    g.lineWidth = 1.5;
    g.beginPath();
    let up = false;
    for (const [x, y] of l.pts) {
      if (y === null) { up = false; continue; }
      up ? g.lineTo(X(x), Y(y)) : g.moveTo(X(x), Y(y));
      up = true;
    }
    g.stroke();
    if (l.dots)
      for (const [x, y] of l.pts) if (y !== null) g.fillRect(X(x) - 2, Y(y) - 2, 4, 4);
    if (l.legend !== false) {
      g.fillText(l.label, lx, 12);
      lx += g.measureText(l.label).width + 12;
    }
  }
  g.setLineDash([]);
}

// The hover readout: the time under the cursor and each line's value
// there (its nearest point), in #readout beside the cursor.
function hoverable(canvas) {
  if (canvas.dataset.hover) return;
  canvas.dataset.hover = '1';
  const box = document.getElementById('readout');
  canvas.addEventListener('mousemove', (ev) => {
    const c = canvas.chart;
    if (!c) return;
    const px = ev.clientX - canvas.getBoundingClientRect().left;
    const x = c.x0 + Math.min(Math.max((px - c.L) / (c.w - c.L - c.R), 0), 1) * (c.x1 - c.x0);
    const rows = [];
    let at = null;
    for (const l of c.lines) {
      const near = l.pts.filter((p) => p[1] !== null)
          .reduce((a, p) => (a && Math.abs(a[0] - x) <= Math.abs(p[0] - x) ? a : p), null);
      if (!near) continue;
      at = at === null || Math.abs(near[0] - x) < Math.abs(at - x) ? near[0] : at;
      rows.push(l.label + ': ' + fmt(near[1]));
    }
    if (at === null) return;
    box.textContent = [c.xfmt(at), ...rows].join('\n');
    box.style.left = ev.clientX + 14 + 'px';
    box.style.top = ev.clientY + 14 + 'px';
    box.hidden = false;
  });
  canvas.addEventListener('mouseleave', () => { box.hidden = true; });
}

// Grouped bars: labels along x, one bar per group [{label, color, values}].
function barChart(canvas, labels, groups) {
  const {g, w, h} = surface(canvas);
  const L = 46, T = 18, B = 18;
  const ymax = Math.max(1, ...groups.flatMap((s) => s.values));
  const slot = (w - L) / Math.max(labels.length, 1), bw = slot * 0.8 / Math.max(groups.length, 1);
  g.fillStyle = '#555d6b';
  g.textAlign = 'right';
  g.fillText(fmt(ymax), L - 4, T + 4);
  g.fillText('0', L - 4, h - B);
  g.textAlign = 'center';
  labels.forEach((lab, i) => g.fillText(lab, L + slot * (i + 0.5), h - 4));
  g.textAlign = 'left';
  let lx = L;
  groups.forEach((s, k) => {
    g.fillStyle = s.color;
    s.values.forEach((v, i) => {
      const bh = (v / ymax) * (h - T - B);
      g.fillRect(L + slot * i + slot * 0.1 + bw * k, h - B - bh, bw, bh);
    });
    g.fillText(s.label, lx, 12);
    lx += g.measureText(s.label).width + 12;
  });
}

const ago = (t) => (t === history.at(-1).t ? 'now' : '-' + Math.round(history.at(-1).t - t) + ' s');

// A model's color, the same in every chart; other keys by their place.
const color = (models, k, i) => COLORS[(models.includes(k) ? models.indexOf(k) : i) % COLORS.length];

// One line per key of history[i][field], a color per key.
function seriesOf(field, keys, models, extra) {
  return keys.map((k, i) => Object.assign({
    label: k, color: color(models, k, i),
    pts: history.map((s) => [s.t, s[field][k] === undefined ? null : s[field][k]])}, extra || {}));
}

// ---- one poll ---------------------------------------------------------------

function perModel(counters) {
  const c = {};
  for (const [m, versions] of Object.entries(counters.models || {})) {
    c[m] = {success: 0, failure: 0, inferences: 0};
    for (const v of Object.values(versions))
      for (const k in c[m]) c[m][k] += v[k];
  }
  return c;
}

function showModels(st, counts) {
  fill('models', st.models.map((m) => {
    const c = counts[m.name] || {};
    return el('tr', {'data-model': m.name}, el('td', {}, m.name),
              el('td', {class: 'versions'}, m.versions.join(', ') || '-'),
              el('td', {class: 'state-' + m.state}, m.state), num(c.success || 0),
              num(c.failure || 0), num(c.inferences || 0),
              num(st.batcher.queued_samples[m.name] || 0), el('td', {class: 'bad'}, m.reason));
  }));
}

// The models that generate: sequences running and waiting, tokens
// generated, and the medians of time to first token and per output token
// since the daemon started.
function showGeneration(st, prom) {
  const gen = st.models.filter((m) => m.generate);
  document.getElementById('generation').hidden = !gen.length;
  const p50 = (name, m) => {
    const b = histograms(prom, name)[m];
    const v = b ? quantile(0.5, b, null) : null;
    return v === null ? null : v * 1000;
  };
  fill('generation-models', gen.map((m) => {
    let tokens = 0;
    for (const v of Object.values((st.counters.models || {})[m.name] || {}))
      tokens += v.generated_tokens || 0;
    return el('tr', {'data-model': m.name}, el('td', {}, m.name), num(m.generate.running),
              num(m.generate.waiting), num(tokens),
              num(p50('dlserve_time_to_first_token_seconds', m.name)),
              num(p50('dlserve_time_per_output_token_seconds', m.name)),
              el('td', {}, m.generate.cached ? 'key-value cache' : 'whole prefix a step'));
  }));
}

// A record's timestamp to its output's acknowledgement: the buckets that
// hold the median and the 99th percentile, per timestamp type seen.
function latencyText(lat) {
  const bound = (ms) => (ms === null ? '> 10000' : '≤ ' + ms) + ' ms';
  return Object.entries(lat || {}).filter(([, l]) => l.count > 0).map(([type, l]) =>
    ` · latency (${type.replace(/_/g, ' ')}) p50 ${bound(l.p50_ms)}, p99 ${bound(l.p99_ms)}`)
    .join('');
}

const sum = (xs) => xs.reduce((a, b) => a + b, 0);

// An offset cell: a partition never read has position -1 (and nothing committed).
function offset(v, none) {
  return v === undefined || v === null || v >= 0 ? num(v) : el('td', {class: 'num muted'}, none);
}

function showKafka(k) {
  document.getElementById('kafka').hidden = !k;
  if (!k) return;
  document.getElementById('kafka-summary').textContent =
      `${k.bootstrap} · group ${k.group_id} · ${k.delivery} · topics ${k.input_topics} · ` +
      `consumed ${fmt(k.consumed)} · outputs ${fmt(k.outputs)} · ` +
      `dead letters ${fmt(sum(Object.values(k.dead_letters)))} · in flight ${fmt(k.in_flight)}` +
      ` · partitions ${fmt(k.assigned_partitions || 0)}` + latencyText(k.record_latency) +
      (k.paused ? ' · paused' : '') + (k.fatal ? ' · FATAL: ' + k.fatal : '');
  fill('kafka-partitions', k.partitions.map((p) =>
    el('tr', {class: 'partition' + (p.position < 0 ? ' never-read' : '')},
       el('td', {}, p.topic), num(p.partition), offset(p.position, 'never read'),
       offset(p.committed, 'none'), offset(p.high, '-'), offset(p.lag, '-'))));
  fill('dead-letters', Object.entries(k.dead_letters).map(([why, n]) =>
    el('tr', {}, el('td', {}, why), num(n))));
}

function showRedis(r) {
  document.getElementById('redis').hidden = !r;
  if (!r) return;
  fill('redis-links', r.links.map((l) =>
    el('tr', {}, el('td', {}, l.role), el('td', {}, l.address),
       el('td', {class: l.connected ? '' : 'bad'}, l.connected ? 'yes' : 'no'),
       num(l.reconnects), num(l.errors), el('td', {class: 'bad'}, l.last_error))));
  fill('redis-training', Object.entries(r.training).map(([m, p]) => {
    const pts = live[m] = live[m] || {};
    pts[p.epoch] = {loss: p.loss, accuracy: p.accuracy};
    return el('tr', {}, el('td', {}, m), num(p.epoch), num(p.step), num(p.loss),
              num(p.accuracy), num(p.samples_per_s), num(p.ranks));
  }));
}

async function showTraining(st) {
  const key = JSON.stringify(st.models.map((m) => [m.name, m.versions[0]]));
  if (key !== trainingKey || Object.keys(live).length) {
    const tr = await get('status/training', true);
    trainingKey = key;
    const box = document.getElementById('training');
    box.replaceChildren(...tr.models.map(curves));
  }
}

// The loss and accuracy charts of one model's metrics.csv (and Redis progress),
// then, for a model of several outputs, a chart of each output's metric.
function curves(m) {
  const card = el('div', {class: 'curves', 'data-model': m.name},
                  el('h3', {}, `${m.name} version ${m.version}`));
  if (m.error) {
    card.append(el('p', {class: 'bad'}, m.error));
    return card;
  }
  const col = (name) => m.rows.map((r) => [r[0], r[m.columns.indexOf(name)]]);
  const progress = Object.entries(live[m.name] || {}).map(([e, p]) => [Number(e), p]);
  for (const [what, names] of [['loss', ['train_loss', 'test_loss']],
                               ['accuracy', ['train_accuracy', 'test_accuracy']]]) {
    const canvas = el('canvas', {class: what});
    card.append(canvas);
    const lines = names.filter((n) => m.columns.includes(n))
        .map((n, i) => ({label: n, color: COLORS[i], dots: true, pts: col(n)}));
    if (progress.length)
      lines.push({label: 'in progress', color: COLORS[3], dash: [4, 3], dots: true,
                  pts: progress.map(([e, p]) => [e, p[what] === undefined ? null : p[what]])});
    requestAnimationFrame(() => lineChart(canvas, lines, (x) => 'epoch ' + fmt(x)));
  }
  for (const o of m.outputs || []) {
    const canvas = el('canvas', {class: 'output', 'data-output': o.name});
    card.append(canvas);
    const lines = [`${o.name}_train_${o.metric}`, `${o.name}_test_${o.metric}`]
        .filter((n) => m.columns.includes(n))
        .map((n, i) => ({label: n, color: COLORS[i], dots: true, pts: col(n)}));
    requestAnimationFrame(() => lineChart(canvas, lines, (x) => 'epoch ' + fmt(x)));
  }
  return card;
}

// ---- snapshots and samples ---------------------------------------------------

// What a poll saw, in the form of the daemon's history (src/serve/history.h):
// cumulative counters and gauges.
function snapshot(st, prom) {
  const counts = {}, buckets = {};
  for (const [m, c] of Object.entries(perModel(st.counters))) counts[m] = c.success + c.failure;
  for (const [m, b] of Object.entries(histograms(prom, 'dlserve_request_duration_seconds')))
    buckets[m] = b.map((x) => [x.le === Infinity ? null : x.le, x.n]);
  const one = (name) => (prom.find((x) => x.name === name) || {}).value;
  const snap = {t: st.uptime_seconds, models: st.models.map((m) => m.name), counts, buckets,
                queue: st.batcher.queued_samples || {}, codes: st.counters.http || {},
                cpu: one('process_cpu_seconds_total'), rss: one('process_resident_memory_bytes')};
  const k = st.kafka;
  if (k) {
    const lag = {};
    for (const p of k.partitions) lag[p.topic + '/' + p.partition] = p.lag >= 0 ? p.lag : null;
    const lat = Object.values(k.record_latency || {}).find((l) => l.count > 0) || {};
    snap.kafka = {in: k.consumed, out: k.outputs, dead: sum(Object.values(k.dead_letters)),
                  p50_ms: lat.p50_ms ?? null, p99_ms: lat.p99_ms ?? null, lag};
  }
  return snap;
}

// A chart sample from a snapshot and the one before it (p, may be null):
// rates and percentiles between the two, gauges as they are.
function derive(s, p) {
  const dt = p && s.t > p.t ? s.t - p.t : 0;
  const per = (a, b) => (dt && typeof a === 'number' && typeof b === 'number'
                         ? Math.max(0, (a - b) / dt) : null);
  const bk = (b) => b && b.map(([le, n]) => ({le: le === null ? Infinity : le, n}));
  const out = {t: s.t, rate: {}, p50: {}, p90: {}, p99: {}, queue: {}, lag: {}, errors: {},
               kin: null, kout: null, klat50: null, klat99: null,
               cpu: per(s.cpu, p && p.cpu),
               rss: typeof s.rss === 'number' ? s.rss / 2 ** 20 : null};   // MiB
  for (const m of s.models) {
    out.queue[m] = s.queue[m] || 0;
    if (dt && s.counts[m] !== undefined) out.rate[m] = per(s.counts[m], p.counts[m] || 0);
    for (const q of [50, 90, 99]) {
      const v = dt && s.buckets[m] ? quantile(q / 100, bk(s.buckets[m]), bk(p.buckets[m])) : null;
      out['p' + q][m] = v === null ? null : v * 1000;
    }
  }
  for (const c in s.codes)
    if (Number(c) >= 400 && dt) out.errors[c] = per(s.codes[c], (p.codes || {})[c] || 0);
  const k = s.kafka, pk = p && p.kafka;
  if (k) {
    out.lag = k.lag;
    out.kin = pk ? per(k.in, pk.in) : null;
    out.kout = pk ? per(k.out, pk.out) : null;
    out.klat50 = k.p50_ms;
    out.klat99 = k.p99_ms;
  }
  return out;
}

function record(snap) {
  history.push(derive(snap, prev));
  prev = snap;
  while (history.length && history[0].t < snap.t - WINDOW_S) history.shift();
}

// The daemon's history, drawn at start (a page that cannot read it starts empty).
async function loadHistory() {
  try {
    const h = await get('status/history', true);
    for (const snap of h.samples) record(snap);
    document.body.dataset.loaded = h.samples.length;
  } catch (e) {
    document.body.dataset.loaded = 0;
  }
}

async function poll() {
  try {
    const [st, promText] = await Promise.all([get('status', true), get('metrics', false)]);
    const prom = parseProm(promText);
    const t = st.uptime_seconds, counts = perModel(st.counters);
    if (prev && t < prev.t) {   // the daemon restarted: its history is another one
      history.length = 0;
      prev = null;
    }
    record(snapshot(st, prom));
    document.body.dataset.span = Math.round(history.at(-1).t - history[0].t);
    document.getElementById('server').textContent =
        `version ${st.version} · up ${fmt(Math.round(t))} s · ` +
        (st.ready ? 'ready' : 'NOT READY') + (st.http.auth ? ' · token' : '') +
        (st.http.tls ? ' · TLS' : '') +
        (st.grpc && st.grpc.port ? ` · gRPC port ${st.grpc.port}, ${st.grpc.calls_in_flight} ` +
                                   `calls, ${st.grpc.streams_open} streams` : '');
    showModels(st, counts);
    showGeneration(st, prom);
    showKafka(st.kafka);
    showRedis(st.redis);
    draw(st, prom);
    await showTraining(st);
    document.getElementById('error').hidden = true;
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    document.body.dataset.polls = ++polls;
  } catch (e) {
    const box = document.getElementById('error');
    box.textContent = 'cannot reach the server: ' + e.message;
    box.hidden = false;
  }
  setTimeout(poll, POLL_MS);
}

function draw(st, prom) {
  const models = st.models.map((m) => m.name);
  lineChart(document.getElementById('rate-chart'), seriesOf('rate', models, models), ago);
  lineChart(document.getElementById('latency-chart'), [
    ...seriesOf('p50', models, models, {dash: [5, 3], legend: false}),
    ...seriesOf('p90', models, models, {dash: [1, 2], legend: false}),
    ...seriesOf('p99', models, models)], ago);
  lineChart(document.getElementById('queue-chart'), seriesOf('queue', models, models), ago);
  const sizes = histograms(prom, 'dlserve_batch_size');
  const les = (Object.values(sizes)[0] || []).map((b) => b.le);
  barChart(document.getElementById('batch-chart'),
           les.map((le) => (le === Infinity ? 'more' : '≤' + le)),
           Object.entries(sizes).map(([m, b], i) => ({
             label: m, color: color(models, m, i),
             values: b.map((x, j) => x.n - (j ? b[j - 1].n : 0))})));
  const codes = [...new Set(history.flatMap((s) => Object.keys(s.errors)))].sort();
  lineChart(document.getElementById('errors-chart'), seriesOf('errors', codes, []), ago);
  const one = (field, label, i, extra) => Object.assign(
      {label, color: COLORS[i], pts: history.map((s) => [s.t, s[field]])}, extra || {});
  lineChart(document.getElementById('cpu-chart'), [one('cpu', 'cpu', 0)], ago);
  lineChart(document.getElementById('mem-chart'), [one('rss', 'rss', 1)], ago);
  if (st.kafka) {
    lineChart(document.getElementById('lag-chart'),
              seriesOf('lag', Object.keys(history.at(-1).lag), []), ago);
    lineChart(document.getElementById('kafka-rate-chart'),
              [one('kin', 'in', 0), one('kout', 'out', 2)], ago);
    lineChart(document.getElementById('kafka-latency-chart'),
              [one('klat50', 'p50', 0, {dash: [5, 3]}), one('klat99', 'p99', 1)], ago);
  }
}

loadHistory().then(poll);
