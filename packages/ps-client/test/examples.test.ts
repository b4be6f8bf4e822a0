import { TcpTransport } from '@rdmajs/tcp';
import { expect, it } from 'vitest';
import * as inference from '../examples/inference.js';
import { featureKey, startLocalShards } from '../examples/localShards.js';
import * as training from '../examples/training.js';
import { PsClient } from '../src/index.js';
import { pulledRows } from './support/pulled.js';

const secret = 'examples-test-secret-0123456789-abcdefghijklmnop';

it('the training example: the held-out log loss falls', async () => {
  const local = await startLocalShards(3, training.TABLES, secret);
  const ps = await PsClient.connect({
    servers: local.servers,
    transport: new TcpTransport(),
    secret,
  });
  try {
    const r = await training.train(ps, { examples: 8000, epochs: 2 });
    const [first, ...rest] = r.losses;
    expect(first).toBeCloseTo(Math.LN2, 3); // w = 0, b = 0: p = 1/2 for every example
    for (const l of rest) expect(l).toBeLessThan((first as number) * 0.85);
  } finally {
    await ps.close();
    await local.close();
  }
});

it('the inference example: rankings match the model over the loaded rows', async () => {
  const local = await startLocalShards(3, inference.TABLES, secret);
  const ps = await PsClient.connect({
    servers: local.servers,
    transport: new TcpTransport(),
    secret,
  });
  try {
    await inference.loadEmbeddings(ps, 50, 300);
    const requests = [
      { user: 3, items: [1, 2, 3, 250, 299] },
      { user: 49, items: [7, 8] },
    ];
    const out = await inference.rankBatch(ps, requests, 5000);
    for (const [i, r] of out.entries()) {
      const req = requests[i] as { user: number; items: number[] };
      expect(r.missing).toBe(0);
      expect(r.ranked.map((x) => x.item).sort((a, b) => a - b)).toEqual(
        [...req.items].sort((a, b) => a - b),
      );
      for (let j = 1; j < r.ranked.length; j++) {
        expect(r.ranked[j - 1]?.score).toBeGreaterThanOrEqual(r.ranked[j]?.score as number);
      }
      const keys = BigUint64Array.from([
        featureKey(0, req.user),
        ...req.items.map((x) => featureKey(1, x)),
      ]);
      // Every score is the model over the rows the servers hold.
      const rows = await pulledRows(ps.pull('emb', keys));
      for (const { item, score } of r.ranked) {
        const v = 1 + req.items.indexOf(item);
        let z = inference.model.b;
        for (let d = 0; d < inference.DIM; d++) {
          z +=
            (inference.model.w[d] as number) *
            (rows[d] as number) *
            (rows[v * inference.DIM + d] as number);
        }
        expect(score).toBe(1 / (1 + Math.exp(-z)));
      }
    }
  } finally {
    await ps.close();
    await local.close();
  }
});
