// dlserve's status page: polls /status and /metrics every POLL_MS and draws
// tables and small canvas charts of the last WINDOW_S seconds; the training
// curves come from /status/training. No libraries, no other origin.
'use strict';

const POLL_MS = 2000;
const WINDOW_S = 300;
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04',
                '#db2777'];
// The token of http.token: taken from ?token= and sent as a bearer token.
const TOKEN = new URLSearchParams(location.search).get('token');

const history = [];     // one sample a poll: {t, rate, p50, p90, p99, queue, lag}
let prev = null;        // the previous poll: {t, counts, buckets}
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

// Lines [{label, color, dash, dots, legend, pts: [[x, y]]}]; xfmt labels the x axis.
function lineChart(canvas, lines, xfmt) {
  const {g, w, h} = surface(canvas);
  const pts = lines.flatMap((l) => l.pts).filter((p) => p[1] !== null);
  const L = 46, R = 8, T = 18, B = 18;
  g.strokeStyle = '#c9ced6';
  g.strokeRect(L, T, w - L - R, h - T - B);
  if (!pts.length) {
    g.fillStyle = '#9aa3b1';
    g.fillText('no data yet', L + 8, T + 16);
    return;
  }
  const x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
  const y1 = Math.max(...pts.map((p) => p[1])) * 1.1 || 1;
  const X = (x) => L + (x1 > x0 ? (x - x0) / (x1 - x0) : 1) * (w - L - R);
  const Y = (y) => h - B - (y / y1) * (h - T - B);
  g.fillStyle = '#555d6b';
  g.textAlign = 'right';
  for (const f of [0, 0.5, 1]) g.fillText(fmt(f * y1), L - 4, Y(f * y1) + 4);
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

// A record's timestamp to its output's acknowledgement: the buckets that
// hold the median and the 99th percentile, per timestamp type seen.
function latencyText(lat) {
  const bound = (ms) => (ms === null ? '> 10000' : '≤ ' + ms) + ' ms';
  return Object.entries(lat || {}).filter(([, l]) => l.count > 0).map(([type, l]) =>
    ` · latency (${type.replace(/_/g, ' ')}) p50 ${bound(l.p50_ms)}, p99 ${bound(l.p99_ms)}`)
    .join('');
}

function showKafka(k, sample) {
  document.getElementById('kafka').hidden = !k;
  if (!k) return;
  document.getElementById('kafka-summary').textContent =
      `${k.bootstrap} · group ${k.group_id} · ${k.delivery} · topics ${k.input_topics} · ` +
      `consumed ${fmt(k.consumed)} · outputs ${fmt(k.outputs)} · in flight ${fmt(k.in_flight)}` +
      ` · partitions ${fmt(k.assigned_partitions || 0)}` + latencyText(k.record_latency) +
      (k.paused ? ' · paused' : '') + (k.fatal ? ' · FATAL: ' + k.fatal : '');
  fill('kafka-partitions', k.partitions.map((p) => {
    sample.lag[p.topic + '/' + p.partition] = p.lag;
    return el('tr', {class: 'partition'}, el('td', {}, p.topic), num(p.partition),
              num(p.position), num(p.committed), num(p.high), num(p.lag));
  }));
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

// The loss and accuracy charts of one model's metrics.csv (and Redis progress).
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
  return card;
}

async function poll() {
  try {
    const [st, promText] = await Promise.all([get('status', true), get('metrics', false)]);
    const prom = parseProm(promText);
    const t = st.uptime_seconds, counts = perModel(st.counters);
    const buckets = histograms(prom, 'dlserve_request_duration_seconds');
    const sample = {t, rate: {}, p50: {}, p90: {}, p99: {}, queue: {}, lag: {}};
    for (const m of st.models) {
      sample.queue[m.name] = st.batcher.queued_samples[m.name] || 0;
      const c = counts[m.name], o = prev && prev.counts[m.name];
      if (c && prev && t > prev.t)
        sample.rate[m.name] = (c.success + c.failure - (o ? o.success + o.failure : 0)) /
                              (t - prev.t);
      for (const q of ['p50', 'p90', 'p99']) {
        const v = buckets[m.name] && prev
            ? quantile(Number(q.slice(1)) / 100, buckets[m.name], prev.buckets[m.name]) : null;
        sample[q][m.name] = v === null ? null : v * 1000;
      }
    }
    prev = {t, counts, buckets};
    document.getElementById('server').textContent =
        `version ${st.version} · up ${fmt(Math.round(t))} s · ` +
        (st.ready ? 'ready' : 'NOT READY') + (st.http.auth ? ' · token' : '') +
        (st.http.tls ? ' · TLS' : '');
    showModels(st, counts);
    showKafka(st.kafka, sample);
    showRedis(st.redis);
    history.push(sample);
    while (history.length && history[0].t < t - WINDOW_S) history.shift();
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
  if (st.kafka)
    lineChart(document.getElementById('lag-chart'),
              seriesOf('lag', Object.keys(history.at(-1).lag), []), ago);
}

poll();
