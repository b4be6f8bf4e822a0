// Inference example: a ranking service scores candidate items for users. User and item
// embeddings live on the parameter server (loaded here with `assign` pushes, as a trainer
// would leave them); the small scoring model — a bilinear weight vector and a bias — is held
// by the example. Each request batch pulls its rows with a deadline and `partial: true`, so
// a slow shard costs candidates (masked out), never the answer's deadline.
//
//   pnpm --filter @rdmajs/ps-client example:inference
import { TcpTransport } from '@rdmajs/tcp';
import { PsClient } from '../src/index.js';
import { featureKey, gaussian, seeded, startLocalShards } from './localShards.js';

export const DIM = 16;
const USER = 0;
const ITEM = 1;
export const TABLES = { tables: [{ name: 'emb', dim: DIM, optimizer: { kind: 'assign' } }] };

/** Writes seeded embeddings for `users` users and `items` items (a trained model's rows). */
export async function loadEmbeddings(
  ps: PsClient,
  users: number,
  items: number,
  seed = 5,
): Promise<void> {
  const rand = seeded(seed);
  for (const [field, count] of [
    [USER, users],
    [ITEM, items],
  ] as const) {
    for (let at = 0; at < count; at += 1000) {
      const n = Math.min(1000, count - at);
      const keys = BigUint64Array.from({ length: n }, (_, i) => featureKey(field, at + i));
      const rows = Float32Array.from({ length: n * DIM }, () => gaussian(rand) * 0.5);
      await ps.push('emb', keys, rows);
    }
  }
}

/** The model held by the service: score = σ(Σ_j w_j · u_j · v_j + b). */
export const model = (() => {
  const rand = seeded(77);
  return { w: Float32Array.from({ length: DIM }, () => 0.5 + rand()), b: -0.2 };
})();

export interface RankedRequest {
  user: number;
  /** Candidates by descending score (missing rows excluded). */
  ranked: { item: number; score: number }[];
  missing: number;
}

/** Scores the candidates of each request with one pull for the whole batch. */
export async function rankBatch(
  ps: PsClient,
  requests: { user: number; items: number[] }[],
  deadlineMs: number,
): Promise<RankedRequest[]> {
  const keys = BigUint64Array.from(
    requests.flatMap((r) => [featureKey(USER, r.user), ...r.items.map((i) => featureKey(ITEM, i))]),
  );
  // Views of the replies (registered memory over RDMA), released when this scope ends.
  using pulled = await ps.pull('emb', keys, { deadlineMs, partial: true });
  const missing = pulled.missing;
  let k = 0;
  return requests.map((r) => {
    const u = k++;
    const ranked: { item: number; score: number }[] = [];
    let lost = 0;
    for (const item of r.items) {
      const v = k++;
      if (missing[u] === 1 || missing[v] === 1) {
        lost++;
        continue;
      }
      const user = pulled.row(u);
      const cand = pulled.row(v);
      let z = model.b;
      for (let j = 0; j < DIM; j++) {
        z += (model.w[j] as number) * (user[j] as number) * (cand[j] as number);
      }
      ranked.push({ item, score: 1 / (1 + Math.exp(-z)) });
    }
    ranked.sort((a, b) => b.score - a.score);
    return { user: r.user, ranked, missing: lost };
  });
}

async function main(): Promise<void> {
  const secret = process.env.RDMAJS_PS_SECRET ?? 'example-secret-0123456789abcdef-0123456789';
  const local = await startLocalShards(3, TABLES, secret);
  const ps = await PsClient.connect({
    servers: local.servers,
    transport: new TcpTransport(),
    secret,
  });
  try {
    const USERS = 1000;
    const ITEMS = 5000;
    await loadEmbeddings(ps, USERS, ITEMS);
    const rand = seeded(9);
    const latencies: number[] = [];
    let first: RankedRequest | undefined;
    let lost = 0;
    for (let b = 0; b < 50; b++) {
      const requests = Array.from({ length: 8 }, () => {
        const items = new Set<number>();
        while (items.size < 100) items.add(Math.floor(rand() * ITEMS));
        return { user: Math.floor(rand() * USERS), items: [...items] };
      });
      const t0 = performance.now();
      const out = await rankBatch(ps, requests, 50);
      latencies.push(performance.now() - t0);
      first ??= out[0];
      lost += out.reduce((a, r) => a + r.missing, 0);
    }
    latencies.sort((a, b) => a - b);
    const q = (p: number) =>
      (
        latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] as number
      ).toFixed(2);
    console.log(
      `50 batches of 8 requests × 101 rows: p50 ${q(0.5)} ms, p99 ${q(0.99)} ms (deadline 50 ms), ${lost} candidates lost to late shards`,
    );
    console.log(
      `user ${first?.user}: top 3 ${first?.ranked
        .slice(0, 3)
        .map((r) => `${r.item} (${r.score.toFixed(3)})`)
        .join(', ')}`,
    );
  } finally {
    await ps.close();
    await local.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
