// Training example: a small CTR model — an embedding per categorical feature, concatenated,
// then logistic regression — trained through the parameter server on a seeded synthetic
// click dataset. Embedding gradients go to the sparse table (Adagrad on the servers),
// the regression weights to dense tensors (Adam). The held-out log loss falls.
//
//   pnpm --filter @rdmajs/ps-client example:training
import { TcpTransport } from '@rdmajs/tcp';
import { PsClient } from '../src/index.js';
import { featureKey, gaussian, seeded, startLocalShards } from './localShards.js';

export const FIELDS = [500, 300, 20]; // users, items, contexts
export const DIM = 4;
const WIDTH = FIELDS.length * DIM;

export const TABLES = {
  tables: [
    {
      name: 'ctr_emb',
      dim: DIM,
      optimizer: { kind: 'adagrad', lr: 0.05 },
      init: { kind: 'normal', seed: 11, std: 0.1 },
    },
  ],
  dense: [
    { name: 'ctr_w', shape: [WIDTH], optimizer: { kind: 'adam', lr: 0.02 } },
    { name: 'ctr_b', shape: [1], optimizer: { kind: 'adam', lr: 0.02 } },
  ],
};

interface Example {
  ids: number[];
  click: number;
}

/** Clicks drawn from a hidden logistic model over per-feature weights. */
export function syntheticClicks(n: number, seed: number): Example[] {
  const rand = seeded(seed);
  const truth = FIELDS.map((size) => Array.from({ length: size }, () => gaussian(rand)));
  const out: Example[] = [];
  for (let i = 0; i < n; i++) {
    const ids = FIELDS.map((size) => Math.floor(rand() * size));
    const z = ids.reduce((acc, id, f) => acc + (truth[f]?.[id] ?? 0), -0.5);
    out.push({ ids, click: rand() < 1 / (1 + Math.exp(-z)) ? 1 : 0 });
  }
  return out;
}

const sigmoid = (z: number): number => 1 / (1 + Math.exp(-z));

/** Forward pass of a batch: the feature rows, then p = σ(w · concat(rows) + b). */
async function forward(ps: PsClient, batch: Example[]) {
  const keys = BigUint64Array.from(batch.flatMap((e) => e.ids.map((id, f) => featureKey(f, id))));
  // The rows are kept for the backward pass: copied into our own array (pullInto).
  const rows = new Float32Array(batch.length * WIDTH);
  const [, w, b] = await Promise.all([
    ps.pullInto('ctr_emb', keys, rows),
    ps.pullDense('ctr_w'),
    ps.pullDense('ctr_b'),
  ]);
  const p = batch.map((_, i) => {
    let z = b[0] as number;
    for (let j = 0; j < WIDTH; j++) z += (w[j] as number) * (rows[i * WIDTH + j] as number);
    return sigmoid(z);
  });
  return { keys, rows, w, p };
}

export async function logLoss(ps: PsClient, data: Example[]): Promise<number> {
  let loss = 0;
  for (let at = 0; at < data.length; at += 512) {
    const batch = data.slice(at, at + 512);
    const { p } = await forward(ps, batch);
    batch.forEach((e, i) => {
      const q = Math.min(Math.max(p[i] as number, 1e-7), 1 - 1e-7);
      loss -= e.click * Math.log(q) + (1 - e.click) * Math.log(1 - q);
    });
  }
  return loss / data.length;
}

/** One SGD step on a batch: gradients of the mean log loss, pushed to the servers. */
async function step(ps: PsClient, batch: Example[]): Promise<void> {
  const { keys, rows, w, p } = await forward(ps, batch);
  const gEmb = new Float32Array(rows.length);
  const gW = new Float32Array(WIDTH);
  let gB = 0;
  batch.forEach((e, i) => {
    const d = ((p[i] as number) - e.click) / batch.length; // ∂loss/∂z
    gB += d;
    for (let j = 0; j < WIDTH; j++) {
      gW[j] = (gW[j] as number) + d * (rows[i * WIDTH + j] as number);
      gEmb[i * WIDTH + j] = d * (w[j] as number);
    }
  });
  // Duplicate keys in the batch are summed by the store: exactly the batch gradient.
  await Promise.all([
    ps.push('ctr_emb', keys, gEmb),
    ps.pushDense('ctr_w', gW),
    ps.pushDense('ctr_b', Float32Array.of(gB)),
  ]);
}

export interface TrainingReport {
  losses: number[];
  steps: number;
}

/** Trains for `epochs` over a seeded dataset; returns the held-out loss before and after each epoch. */
export async function train(
  ps: PsClient,
  options: {
    examples?: number;
    epochs?: number;
    batch?: number;
    log?: (line: string) => void;
  } = {},
): Promise<TrainingReport> {
  const all = syntheticClicks(options.examples ?? 16000, 2026);
  const heldOut = all.slice(0, 1000);
  const trainSet = all.slice(1000);
  const size = options.batch ?? 64;
  const losses = [await logLoss(ps, heldOut)];
  options.log?.(`epoch 0: held-out log loss ${losses[0]?.toFixed(4)}`);
  let steps = 0;
  for (let epoch = 1; epoch <= (options.epochs ?? 3); epoch++) {
    for (let at = 0; at + size <= trainSet.length; at += size) {
      await step(ps, trainSet.slice(at, at + size));
      steps++;
    }
    losses.push(await logLoss(ps, heldOut));
    options.log?.(
      `epoch ${epoch}: held-out log loss ${losses[epoch]?.toFixed(4)} (${steps} steps)`,
    );
  }
  return { losses, steps };
}

async function main(): Promise<void> {
  const secret = process.env.RDMAJS_PS_SECRET ?? 'example-secret-0123456789abcdef-0123456789';
  const external = process.argv[2]; // optional: host:port,host:port of running rdmajs-ps-server shards
  const local = external === undefined ? await startLocalShards(3, TABLES, secret) : undefined;
  const servers = external?.split(',') ?? local?.servers ?? [];
  const ps = await PsClient.connect({ servers, transport: new TcpTransport(), secret });
  try {
    const r = await train(ps, { log: (l) => console.log(l) });
    const first = r.losses[0] as number;
    const last = r.losses[r.losses.length - 1] as number;
    console.log(
      `log loss ${first.toFixed(4)} → ${last.toFixed(4)} over ${r.steps} steps on ${ps.shards.length} shards`,
    );
  } finally {
    await ps.close();
    await local?.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
