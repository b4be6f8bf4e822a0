// Standalone rate driver over built dist/: pull and push rows/s at one dim, one process, no
// other work (run pinned: `taskset -c 1 node bench/driver.mjs`). Args: rows dim kernels
// [view: a one-sided readable table of `rows` rows, to see what its seqlock costs].
import { ParameterStore } from '../dist/index.js';

const rows = Number(process.argv[2] ?? 1e4);
const dim = Number(process.argv[3] ?? 32);
const kernels = process.argv[4] ?? 'native';
const view = process.argv[5] === 'view' ? { oneSidedRead: true, maxRows: rows } : {};
const BATCH = 4096;
const keyOf = (i) => (BigInt(i) * 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn;
let x = 12345;
const rnd = () => {
  x ^= x << 13;
  x >>>= 0;
  x ^= x >>> 17;
  x ^= x << 5;
  x >>>= 0;
  return x;
};
const bs = Array.from({ length: 64 }, () =>
  BigUint64Array.from({ length: BATCH }, () => keyOf(rnd() % rows)),
);
const distinct = Array.from({ length: 64 }, (_, b) =>
  BigUint64Array.from({ length: BATCH }, (_, i) => keyOf((b * BATCH + i) % rows)),
);
const opt = { kind: 'adagrad' };
const store = new ParameterStore({
  tables: [
    {
      name: 't',
      dim,
      optimizer: opt,
      log: false,
      ...(kernels === 'js' ? { kernels } : {}),
      ...view,
    },
  ],
});
const g = new Float32Array(BATCH * dim).fill(0.001);
for (let i = 0; i < rows; i += BATCH) {
  const n = Math.min(BATCH, rows - i);
  const ks = BigUint64Array.from({ length: n }, (_, j) => keyOf(i + j));
  await store.push('t', ks, g.subarray(0, n * dim), { session: 's', seq: i });
}
const out = new Float32Array(BATCH * dim);
function time(label, fn) {
  for (let k = 0; k < 8; k++) fn(k);
  let best = 0;
  for (let round = 0; round < 5; round++) {
    const t0 = performance.now();
    let n = 0;
    let k = 0;
    while (performance.now() - t0 < 200) {
      fn(k++);
      n += BATCH;
    }
    best = Math.max(best, n / ((performance.now() - t0) / 1e3));
  }
  console.log(
    `${label} rows=${rows} dim=${dim} ${kernels}${view.oneSidedRead ? ' view' : ''}: ${(best / 1e6).toFixed(2)} M rows/s`,
  );
}
time('pull', (k) => store.pullInto('t', bs[k % 64], out));
// A session of its own: the store refuses a seq more than maxSeqGap above its session's last.
let seq = 0;
time('push adagrad', (k) => {
  store.push('t', distinct[k % 64], g, { session: 'p', seq: seq++ });
});
