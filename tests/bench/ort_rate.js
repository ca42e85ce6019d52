// ort_rate.js: ONNX Runtime (onnxruntime-node) on the CPU, the peer of
// tests/bench/onnx_vs_ort.py.
//
//   node ort_rate.js MODEL.onnx --shape 3,224,224 [--threads 2]
//        [--batches 1,32] [--min-secs 1.0] [--spin 0|1] [--ort NODE_MODULES]
//   node ort_rate.js MODEL.onnx --shape 3,224,224 [--threads 2]
//        --run IN.f32 OUT.f32
//
// The session: graphOptimizationLevel 'all', intraOpNumThreads --threads,
// interOpNumThreads 1, executionMode 'sequential'; --spin 0 sets
// session.intra_op.allow_spinning to 0 (the pool's threads sleep between
// jobs instead of spinning, as OMP_WAIT_POLICY=passive does for OpenMP).
// The model's first input takes [batch, ...--shape] float32; its first
// output is the answer.
//
// Rates: for each batch of --batches, warms up (3 passes), then runs at
// least --min-secs seconds and 3 passes on uniform random input, and
// prints one JSON line {"batch":B,"samples_per_sec":R}.
//
// --run: reads IN.f32 (raw little-endian float32, a whole number of
// samples of --shape), runs it as one batch and writes the first output to
// OUT.f32 the same way.
//
// onnxruntime-node comes from --ort (a node_modules folder), else from
// NODE_PATH.
'use strict';

const fs = require('fs');
const path = require('path');

function parseArgs(argv) {
  const a = {threads: 2, batches: [1, 32], minSecs: 1.0, spin: 1, ort: null, run: null, model: null};
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(k + ' needs a value');
      return argv[++i];
    };
    if (k === '--shape') a.shape = next().split(/[,x]/).map(Number);
    else if (k === '--threads') a.threads = Number(next());
    else if (k === '--batches') a.batches = next().split(',').map(Number);
    else if (k === '--min-secs') a.minSecs = Number(next());
    else if (k === '--spin') a.spin = Number(next());
    else if (k === '--ort') a.ort = next();
    else if (k === '--run') a.run = [next(), next()];
    else if (k.startsWith('--')) throw new Error('unknown option ' + k);
    else a.model = k;
  }
  if (!a.model || !a.shape) throw new Error('usage: ort_rate.js MODEL.onnx --shape D,D,... [options]');
  return a;
}

function loadOrt(dir) {
  if (dir) return require(path.resolve(dir, 'onnxruntime-node'));
  return require('onnxruntime-node');
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const ort = loadOrt(a.ort);
  const opts = {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  };
  if (!a.spin) opts.extra = {session: {intra_op: {allow_spinning: '0'}}};
  const sess = await ort.InferenceSession.create(a.model, opts);
  const inName = sess.inputNames[0], outName = sess.outputNames[0];
  const sample = a.shape.reduce((p, d) => p * d, 1);
  const run = async (x, batch) => {
    const feeds = {[inName]: new ort.Tensor('float32', x, [batch, ...a.shape])};
    return (await sess.run(feeds))[outName];
  };

  if (a.run) {
    const buf = fs.readFileSync(a.run[0]);
    const x = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
    if (x.length % sample) throw new Error(a.run[0] + ': not a whole number of samples');
    const y = await run(x, x.length / sample);
    fs.writeFileSync(a.run[1], Buffer.from(y.data.buffer, y.data.byteOffset, y.data.byteLength));
    return;
  }
  for (const batch of a.batches) {
    const x = new Float32Array(batch * sample);
    for (let i = 0; i < x.length; i++) x[i] = Math.random();
    for (let i = 0; i < 3; i++) await run(x, batch);
    let n = 0;
    const t0 = process.hrtime.bigint();
    let secs = 0;
    while (n < 3 || secs < a.minSecs) {
      await run(x, batch);
      n++;
      secs = Number(process.hrtime.bigint() - t0) / 1e9;
    }
    console.log(JSON.stringify({batch, samples_per_sec: n * batch / secs}));
  }
}

main().catch((e) => {
  console.error('ort_rate: ' + (e && e.message ? e.message : e));
  process.exit(1);
});
