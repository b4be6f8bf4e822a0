import { describe, expect, it } from 'vitest';
import type { Result } from '../src/report/Result.js';
import { BatchMix, INFERENCE_BATCHES } from '../src/scenarios/evaluation/BatchMix.js';
import { evaluationHeadlines } from '../src/scenarios/evaluation/index.js';
import { runOpenLoop } from '../src/scenarios/evaluation/openLoop.js';
import { ZipfKeys } from '../src/scenarios/evaluation/ZipfKeys.js';

describe('evaluation workload', () => {
  it('Zipf ranks follow 1/r^s: rank 0 about twice as often as rank 1, the tail rare', () => {
    const z = new ZipfKeys(10_000, 1, 7);
    const counts = new Uint32Array(10_000);
    const n = 200_000;
    for (let i = 0; i < n; i++) (counts[z.rank()] as number)++;
    let h = 0;
    for (let r = 1; r <= 10_000; r++) h += 1 / r;
    // Expected share of rank 0 is 1/H(10^4) ≈ 10.2 %; allow sampling noise (±5 σ).
    const p0 = 1 / h;
    const sigma = Math.sqrt(n * p0 * (1 - p0));
    expect(Math.abs((counts[0] as number) - n * p0)).toBeLessThan(5 * sigma);
    const ratio = (counts[0] as number) / (counts[1] as number);
    expect(ratio).toBeGreaterThan(1.7);
    expect(ratio).toBeLessThan(2.3);
    // The same seed draws the same keys; keys are never 0 and distinct ranks map to distinct keys.
    const a = new ZipfKeys(1000, 0.99, 3).fill(new BigUint64Array(64));
    const b = new ZipfKeys(1000, 0.99, 3).fill(new BigUint64Array(64));
    expect(a).toEqual(b);
    expect(a.every((k) => k > 0n)).toBe(true);
    expect(new Set(Array.from({ length: 1000 }, (_, r) => ZipfKeys.keyOf(r))).size).toBe(1000);
  });

  it('the batch mix draws each size in proportion to its weight', () => {
    const mix = new BatchMix(INFERENCE_BATCHES, 11);
    const seen = new Uint32Array(INFERENCE_BATCHES.length);
    const n = 100_000;
    for (let i = 0; i < n; i++) (seen[mix.draw()] as number)++;
    for (const [i, b] of INFERENCE_BATCHES.entries()) {
      const sigma = Math.sqrt(n * b.weight * (1 - b.weight));
      expect(Math.abs((seen[i] as number) - n * b.weight)).toBeLessThan(5 * sigma);
    }
    expect(mix.meanKeys).toBeCloseTo(0.1 + 16 * 0.3 + 64 * 0.3 + 256 * 0.2 + 1024 * 0.1, 6);
  });

  it('open loop: every arrival is completed, dropped at the bound, or failed — none waits on another', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    let calls = 0;
    const r = await runOpenLoop(
      async (k) => {
        calls++;
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        // Requests far slower than the arrival gap: an open loop keeps issuing regardless.
        await new Promise((res) => setTimeout(res, 30));
        inFlight--;
        if (k % 10 === 9) throw new Error('a failed request');
      },
      { rate: 2000, durationMs: 200, maxOutstanding: 8, seed: 1 },
    );
    expect(maxInFlight).toBe(8);
    expect(r.dropped).toBeGreaterThan(0);
    expect(r.completed + r.failed).toBe(calls);
    expect(r.failed).toBe(Math.floor(calls / 10));
    expect(r.latency.count).toBe(r.completed);
    expect(inFlight).toBe(0);
  });

  it("headline ratios are read at the headline load and fan-in, RDMA over TCP, and over gRPC at the same rate, half gRPC's capacity", () => {
    const row = (transport: Result['transport'], op: string, meanUs: number, p99Us: number) =>
      ({
        transport,
        op,
        sizeBytes: 1,
        p50Us: meanUs,
        meanUs,
        p99Us,
        cpuUsPerOp: meanUs / 10,
      }) as Result;
    const h = evaluationHeadlines([
      row('tcp', 'fetch@50%', 1000, 4000),
      row('soft', 'fetch@50%', 400, 1000),
      row('grpc', 'fetch@50%', 10_000, 20_000),
      // Both at half gRPC's capacity: what grpcFetchMeanRatio compares.
      row('soft', 'fetch@50%grpc', 500, 1000),
      row('grpc', 'fetch@50%grpc', 2000, 20_000),
      row('soft', 'fetch@100%', 1, 1),
      row('tcp', 'push-incast×64', 2000, 8000),
      row('soft', 'push-incast×64', 500, 1600),
    ]);
    expect(h).toEqual({
      fetchMeanRatio: 0.4,
      fetchP99Ratio: 0.25,
      fetchCpuRatio: 0.4,
      grpcFetchMeanRatio: 0.25,
      grpcFetchMeanRatioSameLoad: 0.04,
      pushP99Ratio: 0.2,
    });
    expect(evaluationHeadlines([row('tcp', 'fetch@50%', 1, 1)])).toEqual({});
  });
});
