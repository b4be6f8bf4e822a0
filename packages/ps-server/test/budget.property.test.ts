import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { heapRowMemory, type OptimizerConfig, SparseTable } from '../src/index.js';

const opts: OptimizerConfig[] = [
  { kind: 'sum' },
  { kind: 'adagrad' },
  { kind: 'adam' },
  { kind: 'ftrl', alpha: 0.1 },
];

describe('memory-budgeted tables', () => {
  it('budget_is_never_exceeded_and_admission_lru_ttl_follow_policy', () => {
    fc.assert(
      fc.property(
        fc.record({
          dim: fc.integer({ min: 1, max: 24 }),
          opt: fc.constantFrom(...opts),
          budget: fc.integer({ min: 1500, max: 12000 }),
          threshold: fc.integer({ min: 1, max: 3 }),
          ttl: fc.option(fc.integer({ min: 5, max: 60 }), { nil: undefined }),
          f16: fc.boolean(),
        }),
        fc.array(
          fc.record({ key: fc.integer({ min: 0, max: 300 }), dt: fc.integer({ min: 0, max: 4 }) }),
          { minLength: 1, maxLength: 250 },
        ),
        (cfg, stream) => {
          const t = new SparseTable(
            {
              name: 't',
              dim: cfg.dim,
              optimizer: cfg.opt,
              rowDtype: cfg.f16 ? 'f16' : 'f32',
              budgetBytes: cfg.budget,
              admission: { threshold: cfg.threshold, width: 64, depth: 2 },
              ...(cfg.ttl === undefined ? {} : { ttlMs: cfg.ttl }),
            },
            heapRowMemory,
          );
          const max = t.maxRows;
          expect(max).toBeGreaterThanOrEqual(1);
          // Model: present keys in recency order (Map order), last push time, true counts.
          const present = new Map<number, number>();
          const trueCount = new Map<number, number>();
          let now = 0;
          const g = new Float32Array(cfg.dim).fill(0.5);
          for (const { key, dt } of stream) {
            now += dt;
            if (cfg.ttl !== undefined)
              for (const [k, last] of [...present]) if (now - last >= cfg.ttl) present.delete(k);
            const k32 = Uint32Array.of(key * 2654435761, key);
            if (present.has(key)) {
              present.delete(key);
              present.set(key, now);
            } else {
              const before = t.admissionEstimate(k32[0] as number, key);
              const c = (trueCount.get(key) ?? 0) + 1;
              trueCount.set(key, c);
              const admit = before + 1 >= cfg.threshold;
              // Count-min never undercounts: the threshold-th push of a key always admits it.
              if (c >= cfg.threshold) expect(admit).toBe(true);
              if (admit) {
                if (present.size >= max) present.delete(present.keys().next().value as number);
                present.set(key, now);
              }
            }
            t.push(k32, 1, g, now);
            const st = t.stats();
            expect(st.bytes).toBeLessThanOrEqual(cfg.budget);
            expect(st.rows).toBe(present.size);
            for (let k = 0; k <= 300; k++)
              expect(t.has((k * 2654435761) >>> 0, k, now)).toBe(present.has(k));
          }
        },
      ),
      { numRuns: 40 },
    );
  });

  it('stats_report_exact_bytes_and_an_unadmitted_key_pulls_its_init', () => {
    const t = new SparseTable(
      {
        name: 't',
        dim: 8,
        optimizer: { kind: 'adagrad' },
        init: { kind: 'uniform', seed: 5 },
        budgetBytes: 1 << 20,
        admission: { threshold: 2 },
      },
      heapRowMemory,
    );
    const k = Uint32Array.of(7, 0);
    const init = new Float32Array(8);
    t.pullInto(k, 1, init, 0);
    t.push(k, 1, new Float32Array(8).fill(1), 0);
    expect(t.rows).toBe(0);
    const out = new Float32Array(8);
    t.pullInto(k, 1, out, 0);
    expect(out).toEqual(init);
    t.push(k, 1, new Float32Array(8).fill(1), 0);
    expect(t.rows).toBe(1);
    const st = t.stats();
    // row 32 B + Adagrad sum 32 B + key 8 + live 1 + step 4 + LRU links 8 + tick 8
    expect(st.slotBytes).toBe(32 + 32 + 8 + 1 + 4 + 8 + 8);
    expect(st.rawRowBytes).toBe(64);
    expect(st.bytes).toBe(st.chunkBytes + st.spareBytes + st.indexBytes + st.sketchBytes);
    expect(st.bytes).toBeLessThanOrEqual(1 << 20);
    expect(st.rejected).toBe(1);
    expect(st.admitted).toBe(1);
  });
});
