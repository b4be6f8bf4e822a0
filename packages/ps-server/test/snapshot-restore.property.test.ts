import * as fs from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type DurableStoreOptions, ParameterStore, type SparseTableConfig } from '../src/index.js';
import { bits, tmpDir } from './helpers.js';

const TABLES: SparseTableConfig[] = [
  {
    name: 'adagrad',
    dim: 3,
    optimizer: { kind: 'adagrad', lr: 0.1 },
    init: { kind: 'normal', seed: 9 },
  },
  { name: 'adam16', dim: 2, optimizer: { kind: 'adam', lr: 0.05 }, rowDtype: 'f16' },
  {
    name: 'budget',
    dim: 4,
    optimizer: { kind: 'ftrl', alpha: 0.5, l1: 0.01 },
    budgetBytes: 4096,
    admission: { threshold: 2, width: 64, depth: 2 },
    ttlMs: 50,
  },
];

type Op =
  | { t: 'push'; table: number; keys: number[]; g: number }
  | { t: 'dense'; g: number }
  | { t: 'snap' }
  | { t: 'tick'; ms: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      t: fc.constant('push' as const),
      table: fc.integer({ min: 0, max: 2 }),
      keys: fc.array(fc.integer({ min: 0, max: 40 }), { minLength: 1, maxLength: 6 }),
      g: fc.integer({ min: -8, max: 8 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ t: fc.constant('dense' as const), g: fc.integer({ min: -8, max: 8 }) }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('snap' as const) }) },
  {
    weight: 2,
    arbitrary: fc.record({ t: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 30 }) }),
  },
);

function options(dir: string, clock: { now: number }, log: boolean): DurableStoreOptions {
  return {
    dir,
    tables: TABLES,
    dense: [{ name: 'bias', shape: [3], optimizer: { kind: 'sgd', lr: 0.1, momentum: 0.9 } }],
    now: () => clock.now,
    log: log ? { policy: 'none' } : false,
  };
}

function dump(s: ParameterStore): Uint32Array[] {
  const out: Uint32Array[] = [];
  const ks = BigUint64Array.from({ length: 41 }, (_, i) => BigInt(i) * 0x9e3779b97f4a7c15n);
  TABLES.forEach((t) => {
    const o = new Float32Array(41 * t.dim);
    s.pullInto(t.name, ks, o);
    out.push(bits(o));
  });
  const d = new Float32Array(3);
  s.pullDense('bias', d);
  out.push(bits(d));
  out.push(Uint32Array.from(TABLES.map((t) => s.stats(t.name).rows)));
  return out;
}

async function apply(
  s: ParameterStore,
  op: Op,
  seq: number,
  clock: { now: number },
): Promise<void> {
  if (op.t === 'push') {
    const t = TABLES[op.table] as SparseTableConfig;
    const ks = BigUint64Array.from(op.keys.map((k) => BigInt(k) * 0x9e3779b97f4a7c15n));
    const g = new Float32Array(ks.length * t.dim).map((_, i) => (op.g * (i + 1)) / 8);
    await s.push(t.name, ks, g, { session: `s${seq % 3}`, seq });
  } else if (op.t === 'dense')
    await s.pushDense('bias', Float32Array.of(op.g, 1, -op.g), { session: 'd', seq });
  else if (op.t === 'snap') await s.snapshot();
  else clock.now += op.ms;
}

describe('snapshot and restore', () => {
  it('snapshot_then_restore_is_bit_identical_and_keeps_evolving_identically', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(opArb, { maxLength: 40 }),
        fc.array(opArb, { maxLength: 15 }),
        async (ops, after) => {
          const dir = tmpDir();
          const clock = { now: 1000 };
          const a = await ParameterStore.open(options(dir, clock, false));
          for (let i = 0; i < ops.length; i++) await apply(a, ops[i] as Op, i, clock);
          await a.snapshot();
          const clockB = { now: clock.now };
          const b = await ParameterStore.open(options(dir, clockB, false));
          expect(b.restoreReport.snapshot).not.toBeNull();
          expect(dump(b)).toEqual(dump(a));
          // Same future on both: steps, LRU order, sketch and TTL state came back too.
          for (let i = 0; i < after.length; i++) {
            const op = after[i] as Op;
            if (op.t === 'snap') continue;
            await apply(a, op, 1000 + i, clock);
            await apply(b, op, 1000 + i, clockB);
          }
          expect(dump(b)).toEqual(dump(a));
          await a.close();
          await b.close();
          fs.rmSync(dir, { recursive: true, force: true });
        },
      ),
      { numRuns: 40 },
    );
  });

  it('snapshot_plus_log_replay_restores_every_push_and_the_dedup_state', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { maxLength: 40 }), async (ops) => {
        const dir = tmpDir();
        const clock = { now: 1000 };
        const a = await ParameterStore.open(options(dir, clock, true));
        for (let i = 0; i < ops.length; i++) await apply(a, ops[i] as Op, i, clock);
        const want = dump(a);
        const seqs = ['s0', 's1', 's2', 'd'].map((x) => a.sessionSeq(x));
        await a.close();
        // Replay uses each record's own time; the pull below compares at the same clock.
        const b = await ParameterStore.open(options(dir, { now: clock.now }, true));
        expect(dump(b)).toEqual(want);
        expect(['s0', 's1', 's2', 'd'].map((x) => b.sessionSeq(x))).toEqual(seqs);
        await b.close();
        fs.rmSync(dir, { recursive: true, force: true });
      }),
      { numRuns: 40 },
    );
  });

  it('snapshots_roll_and_truncate_log_segments', async () => {
    const dir = tmpDir();
    const clock = { now: 0 };
    const s = await ParameterStore.open({
      ...options(dir, clock, true),
      log: { policy: 'fsync', segmentBytes: 200 },
    });
    for (let i = 0; i < 30; i++)
      await apply(s, { t: 'push', table: 0, keys: [i % 7, 1], g: 1 }, i, clock);
    const segsBefore = fs.readdirSync(dir).filter((n) => n.endsWith('.seg')).length;
    expect(segsBefore).toBeGreaterThan(5);
    for (let k = 0; k < 3; k++) {
      await s.snapshot();
      await apply(s, { t: 'push', table: 0, keys: [k], g: 2 }, 100 + k, clock);
    }
    const names = fs.readdirSync(dir);
    expect(names.filter((n) => n.endsWith('.safetensors'))).toHaveLength(2);
    // kept: the snapshots at lsn 31 and 32; segments with records after 31 stay (32 and 33)
    expect(names.filter((n) => n.endsWith('.seg'))).toEqual([
      'log-0000000000000032.seg',
      'log-0000000000000033.seg',
    ]);
    const want = dump(s);
    await s.close();
    const r = await ParameterStore.open(options(dir, clock, true));
    expect(dump(r)).toEqual(want);
    await r.close();
  });
});

describe('snapshot while serving', () => {
  it('pushes_during_a_snapshot_write_do_not_leak_into_it', async () => {
    const dir = tmpDir();
    const tables: SparseTableConfig[] = [{ name: 'e', dim: 16, optimizer: { kind: 'adagrad' } }];
    const s = await ParameterStore.open({ dir, tables, log: false });
    const n = 12000; // six chunks of 2048 rows
    const ks = BigUint64Array.from({ length: n }, (_, i) => BigInt(i));
    await s.push('e', ks, new Float32Array(n * 16).fill(1), { session: 'a', seq: 1 });
    const want = new Float32Array(n * 16);
    s.pullInto('e', ks, want);
    const snap = s.snapshot();
    // While the file is written chunk by chunk, rewrite every row and add new keys.
    const more = BigUint64Array.from({ length: n + 500 }, (_, i) => BigInt(i));
    for (let k = 0; k < 2; k++) {
      await s.push('e', more, new Float32Array((n + 500) * 16).fill(-3), {
        session: 'a',
        seq: 2 + k,
      });
    }
    const info = await snap;
    expect(info.pauseMs).toBeGreaterThanOrEqual(0);
    await s.close();
    const r = await ParameterStore.open({ dir, tables, log: false });
    expect(r.stats('e').rows).toBe(n);
    const got = new Float32Array(n * 16);
    r.pullInto('e', ks, got);
    expect(bits(got)).toEqual(bits(want));
    expect(r.sessionSeq('a')).toBe(1);
    await r.close();
  });
});
