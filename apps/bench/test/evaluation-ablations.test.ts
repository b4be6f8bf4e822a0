import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatRatio } from '../src/report/format.js';
import type { Result } from '../src/report/Result.js';
import {
  ABLATIONS,
  ablatedServerArgs,
  ablatedTarget,
  compareWithReference,
} from '../src/scenarios/evaluation/ablations.js';
import { plan, renderAblations } from '../src/scenarios/evaluation/index.js';
import { serverArgsOf } from '../src/scenarios/evaluation/RdmaTuning.js';
import { ablationFetchRate } from '../src/scenarios/evaluation/runAblations.js';

const require = createRequire(import.meta.url);
const psCli = join(dirname(require.resolve('@rdmajs/ps-service/package.json')), 'src', 'cli.ts');

const tuning = {
  pollPolicy: 'adaptive',
  qpPoolSize: 2,
  eagerThreshold: 16384,
  recvBufferCount: 128,
  windowBytes: 1 << 24,
} as const;

describe('evaluation ablations: configuration', () => {
  it("gives every shard the client's RDMA tuning as rdmajs-ps-server flags", () => {
    expect(serverArgsOf(tuning)).toEqual([
      '--rdma-poll',
      'adaptive',
      '--rdma-qp-pool',
      '2',
      '--rdma-eager-threshold',
      '16384',
      '--rdma-recv-buffers',
      '128',
      '--rdma-window-bytes',
      String(1 << 24),
    ]);
    // Unset knobs stay unset: mux's defaults apply on both sides.
    expect(serverArgsOf({})).toEqual([]);
  });

  it('every flag an ablation or the tuning gives a shard is one rdmajs-ps-server knows', () => {
    const help = execFileSync(
      process.execPath,
      ['--import', 'tsx', '--conditions=@rdmajs/source', psCli, '--help'],
      { encoding: 'utf8', timeout: 60_000 },
    );
    const flags = [
      ...serverArgsOf(tuning),
      ...ABLATIONS.flatMap((a) => ablatedServerArgs(a, {})),
    ].filter((f) => f.startsWith('--'));
    expect(flags.length).toBeGreaterThan(5);
    for (const f of flags) expect(help, f).toContain(f);
  }, 90_000);

  it('the one-sided ablation pulls two-sided on the main shards, nothing else changed', () => {
    const os = ABLATIONS.find((a) => a.name === 'one-sided');
    expect(os?.measure).toBe('fetch');
    if (os === undefined) return;
    expect(os.serverArgs).toBeUndefined(); // the main shards serve it
    expect(ablatedTarget(os, tuning)).toEqual({ oneSided: false, tuning, variant: '−one-sided' });
  });

  it('turns exactly one lesson off per ablation, on top of the run tuning', () => {
    const byName = new Map(ABLATIONS.map((a) => [a.name, a]));
    const zc = byName.get('zero-copy');
    const pool = byName.get('qp-pool');
    const rec = byName.get('recovery');
    expect(zc && pool && rec).toBeTruthy();
    if (!(zc && pool && rec)) return;
    // zero-copy: heap replies on the shards (bounce copy in mux), rows copied out on the client.
    expect(ablatedServerArgs(zc, tuning)).toEqual([
      ...serverArgsOf(tuning),
      '--rdma-zero-copy',
      'off',
    ]);
    expect(ablatedTarget(zc, tuning)).toEqual({ copyRows: true, tuning, variant: '−zero-copy' });
    // qp-pool: a client (connection) per incast writer, on shards of its own that (like its
    // client) may register the receive buffers of 64 × 3 connections; nothing else changes.
    const roomy = { ...tuning, maxRegisteredBytes: 4 * 1024 ** 3 };
    expect(ablatedServerArgs(pool, tuning)).toEqual(serverArgsOf(roomy));
    expect(ablatedTarget(pool, tuning)).toEqual({
      clients: 64,
      tuning: roomy,
      variant: '−qp-pool',
    });
    expect(pool.measure).toBe('incast');
    // recovery: the same shards, a client without session recovery, on the shard kill.
    expect(ablatedTarget(rec, {})).toEqual({ recovery: false, tuning: {}, variant: '−recovery' });
    expect(rec.measure).toBe('failure');
    // credits, send-window: mux's negotiated ablation on the client and on shards of their own
    // (both sides must agree), on the incast.
    for (const [name, lesson] of [
      ['credits', 'credits'],
      ['send-window', 'send-window'],
    ] as const) {
      const a = byName.get(name);
      expect(a?.measure).toBe('incast');
      if (a === undefined) return;
      expect(ablatedServerArgs(a, tuning)).toEqual([
        ...serverArgsOf(tuning),
        '--rdma-ablate',
        lesson,
      ]);
      expect(ablatedTarget(a, tuning)).toEqual({
        tuning: { ...tuning, ablations: [lesson] },
        variant: `−${name}`,
      });
    }
  });

  it('BENCH_EVAL_ONLY=fetch plans the headline fetch rows alone', () => {
    const p = plan(false, 'soft', true);
    expect(p.fetchOnly).toBe(true);
    expect(p.inference.loads).toEqual([0.5]);
    expect(p.inference.grpcLoads).toEqual({ grpc: [0.5], tcp: [0.5], soft: [0.5] });
    expect(plan(false, 'soft', false).fetchOnly).toBe(false);
    expect(plan(false, 'soft', false).inference.loads).toEqual([0.25, 0.5, 0.75, 1]);
  });

  it('BENCH_EVAL_ONLY=incast plans the headline push-incast rows alone, with more bursts', () => {
    const p = plan(false, 'soft', false, true);
    expect(p.incastOnly).toBe(true);
    expect(p.training.concurrency).toEqual([64]);
    expect(p.training.samples).toBe(2048);
    expect(p.loggedIncast).toBe(false);
    expect(plan(false, 'soft', false, false).incastOnly).toBe(false);
    expect(plan(false, 'soft', false, false).training.concurrency).toEqual([1, 16, 64, 256]);
  });

  it('--quick runs one ablation, the full evaluation all of them', () => {
    expect(plan(true, 'soft', false).ablations.map((a) => a.name)).toEqual(['zero-copy']);
    expect(plan(false, 'soft', false).ablations).toEqual(ABLATIONS);
    // The incast again on shards that log pushes: the full run only.
    expect(plan(true, 'soft', false).loggedIncast).toBe(false);
    expect(plan(false, 'soft', false).loggedIncast).toBe(true);
    // gRPC at fractions of its own capacity; TCP and RDMA at the headline fraction of it.
    expect(plan(false, 'soft', false).inference.grpcLoads).toEqual({
      grpc: [0.25, 0.5, 0.75, 1],
      tcp: [0.5],
      soft: [0.5],
    });
    expect(plan(true, 'ibverbs', false).inference.grpcLoads).toEqual({
      grpc: [0.5],
      tcp: [0.5],
      ibverbs: [0.5],
    });
  });
});

describe('evaluation ablations: report', () => {
  const row = (op: string, meanUs: number, extra: Partial<Result> = {}): Result => ({
    transport: 'soft',
    op,
    sizeBytes: 1,
    p50Us: meanUs,
    meanUs,
    p99Us: 2 * meanUs,
    cpuUsPerOp: meanUs / 2,
    ...extra,
  });

  it('each ablated row carries its lesson and its ratios against the reference beside it', () => {
    const zc = ABLATIONS[0] as (typeof ABLATIONS)[number];
    const ref = row('fetch@50% ref', 1000, { qps: 3, registeredBytes: 1 << 20 });
    const off = compareWithReference(
      zc,
      row('fetch@50% −zero-copy', 1500, { qps: 3, registeredBytes: 2 << 20 }),
      ref,
    );
    expect(off).toMatchObject({
      ablation: 'zero-copy',
      referenceOp: 'fetch@50% ref',
      meanVsRef: 1.5,
      p99VsRef: 1.5,
      cpuVsRef: 1.5,
    });
    const text = renderAblations([ref, off]);
    expect(text).toContain('−zero-copy');
    expect(text).toContain('mean 1.50×');
    expect(text).toContain('2 MiB vs 1 MiB registered');
    expect(text).not.toContain('receive queue ran dry');
  });

  it('an incast ablation row says how often the receive queues ran dry against the ref', () => {
    const credits = ABLATIONS.find((a) => a.name === 'credits') as (typeof ABLATIONS)[number];
    const ref = row('push-incast×64 ref', 1000, { shardQueueEmptied: 0, clientQueueEmptied: 0 });
    const off = compareWithReference(
      credits,
      row('push-incast×64 −credits', 1200, { shardQueueEmptied: 37, clientQueueEmptied: 0 }),
      ref,
    );
    const text = renderAblations([ref, off]);
    expect(text).toContain('−credits');
    expect(text).toContain("shards' receive queue ran dry 37× vs 0×");
  });

  it('ablations sharing a ref op are each shown against the ref measured beside them', () => {
    const [zc, os] = ['zero-copy', 'one-sided'].map(
      (n) => ABLATIONS.find((a) => a.name === n) as (typeof ABLATIONS)[number],
    );
    const ref1 = row('fetch@50% ref', 1000, { registeredBytes: 1 << 20 });
    const off1 = compareWithReference(
      zc as (typeof ABLATIONS)[number],
      row('fetch@50% −zero-copy', 1500, { registeredBytes: 2 << 20 }),
      ref1,
    );
    const ref2 = row('fetch@50% ref', 1000, { registeredBytes: 3 << 20 });
    const off2 = compareWithReference(
      os as (typeof ABLATIONS)[number],
      row('fetch@50% −one-sided', 1500, { registeredBytes: 4 << 20 }),
      ref2,
    );
    const text = renderAblations([ref1, off1, ref2, off2]);
    expect(text).toContain('2 MiB vs 1 MiB registered');
    expect(text).toContain('4 MiB vs 3 MiB registered');
  });

  it('a fetch ablation runs at the headline rate, or at half its own capacity when that is lower', () => {
    // It serves the headline rate: both rows run at it (the full system's rows' rate).
    expect(ablationFetchRate(400, 1000)).toEqual({ rate: 400, basis: 'tcp-capacity' });
    expect(ablationFetchRate(400, 800)).toEqual({ rate: 400, basis: 'tcp-capacity' });
    // It cannot: both at half its capacity, so neither row measures a queue.
    expect(ablationFetchRate(400, 120)).toEqual({ rate: 60, basis: 'ablated-capacity' });
    expect(ablationFetchRate(400, 0.5)).toEqual({ rate: 1, basis: 'ablated-capacity' });
  });

  it('a fetch ablation row says its capacity against the ref, its rate, and when it was past capacity', () => {
    const zc = ABLATIONS[0] as (typeof ABLATIONS)[number];
    const fetchRow = (op: string, meanUs: number, capacityRps: number, extra: Partial<Result>) =>
      row(op, meanUs, {
        offeredRps: 60,
        achievedRps: 60,
        dropped: 0,
        pastCapacity: false,
        capacityRps,
        headlineRps: 400,
        loadBasis: 'ablated-capacity',
        ...extra,
      });
    const ref = fetchRow('fetch@50% ref', 1000, 900, {});
    const off = compareWithReference(zc, fetchRow('fetch@50% −zero-copy', 2000, 120, {}), ref);
    expect(off.capacityVsRef).toBeCloseTo(120 / 900, 9);
    const text = renderAblations([ref, off]);
    expect(text).toContain('capacity 120 vs 900 req/s (0.13×)');
    expect(text).toContain('both at 60.0 req/s, half its capacity (the headline 400 req/s');
    expect(text).not.toContain('PAST CAPACITY');
    // Offered more than it served (the old way: the headline rate to a target that cannot).
    const queued = compareWithReference(
      zc,
      fetchRow('fetch@50% −zero-copy', 900_000, 20, {
        offeredRps: 400,
        achievedRps: 9.4,
        dropped: 1500,
        pastCapacity: true,
        loadBasis: 'tcp-capacity',
      }),
      ref,
    );
    const past = renderAblations([ref, queued]);
    expect(past).toContain('PAST CAPACITY (it): served 9.4 of 400 req/s offered, 1500 dropped');
    expect(past).not.toContain('PAST CAPACITY (the ref)');
    expect(past).not.toContain('half its capacity');
  });

  it('the recovery row reports pushes failed and torn across shards, not latency ratios', () => {
    const rec = ABLATIONS.find((a) => a.name === 'recovery') as (typeof ABLATIONS)[number];
    const ref = row('push-shard-killed', 100, { acked: 900, failed: 0, recoveryMs: 1500 });
    const off = compareWithReference(
      rec,
      row('push-shard-killed −recovery', 50, {
        acked: 700,
        failed: 40,
        failedAppliedMin: 0,
        failedAppliedMax: 40,
        lost: 0,
        duplicated: 0,
        recoveryMs: 1400,
      }),
      ref,
    );
    const text = renderAblations([ref, off]);
    expect(text).toContain('acked 700 vs 900');
    expect(text).toContain('40 failed vs 0 (0–40 of them applied anyway, per shard)');
    expect(text).toContain('kill → first ack 1400 ms vs 1500 ms');
    expect(text).not.toMatch(/−recovery.*mean 0\.50×/);
  });

  it('prints tiny ratios with significant digits', () => {
    expect(formatRatio(0.0042)).toBe('0.0042×');
    expect(formatRatio(0.00004321)).toBe('0.000043×');
    expect(formatRatio(0.35)).toBe('0.35×');
    expect(formatRatio(1.234)).toBe('1.23×');
    expect(formatRatio(Number.NaN)).toBe('—');
  });
});
