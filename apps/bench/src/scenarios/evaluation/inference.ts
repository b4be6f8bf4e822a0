import type { Result } from '../../report/Result.js';
import { addProcessGc, type ProcessGc } from '../../stats/GcCounts.js';
import { BatchMix, INFERENCE_BATCHES } from './BatchMix.js';
import type { ClientProcess, Costed } from './ClientProcess.js';
import type { Capacity } from './capacity.js';
import type { FetchRowReply } from './clientProtocol.js';
import { gcFields } from './gcFields.js';
import { EVAL_DIM } from './PsTarget.js';
import { ZipfKeys } from './ZipfKeys.js';

export interface InferenceOptions {
  /** Offered loads as fractions of the TCP target's closed-loop capacity, for every target. */
  loads: readonly number[];
  /**
   * Per transport, offered loads as fractions of the gRPC target's closed-loop capacity
   * (`fetch@50%grpc`; a target's own when there is no gRPC target): gRPC saturates far below
   * TCP's capacity, so its shared-load rows are queueing; these compare every target at a
   * rate where gRPC is busy, not overloaded.
   */
  grpcLoads: Readonly<Partial<Record<string, readonly number[]>>>;
  durationMs: number;
  /** Each closed-loop capacity probe, ms. */
  probeMs: number;
  /** Pre-drawn requests cycled through (so drawing keys costs nothing while measuring). */
  requests: number;
  keySpace: number;
  zipfExponent: number;
}

/** The load the headline ratios are read at: busy, not saturated. */
export const HEADLINE_LOAD = 0.5;
const MAX_OUTSTANDING = 256;
/**
 * Closed-loop capacity: 16 requests in flight. Not deeper: on 2 cores a 64-deep closed loop
 * reached 3.7× the throughput (7 170 req/s over TCP), and the one-process open-loop
 * generator could not issue even a quarter of that on time (arrival → issue lag p99 20 ms
 * at 25 %), so every row measured the generator's queue instead of the transport.
 */
const CAPACITY_CONCURRENCY = 16;

/** The op of a fetch row: `fetch@50%` (fraction of TCP's capacity) or `fetch@50%grpc` (of gRPC's). */
export function fetchOp(load: number, atGrpcRate: boolean): string {
  return `fetch@${Math.round(load * 100)}%${atGrpcRate ? 'grpc' : ''}`;
}

/** A pool of requests: batch sizes from the mix, keys with Zipf popularity, seeded. */
export function drawRequests(o: InferenceOptions, seed: number): BigUint64Array[] {
  const mix = new BatchMix(INFERENCE_BATCHES, seed);
  const zipf = new ZipfKeys(o.keySpace, o.zipfExponent, seed + 1);
  return Array.from({ length: o.requests }, () =>
    zipf.fill(new BigUint64Array((INFERENCE_BATCHES[mix.draw()] as { keys: number }).keys)),
  );
}

/** The request pool every target is driven with, and its mean size. */
export interface FetchWorkload {
  requests: BigUint64Array[];
  meanKeys: number;
  sizeBytes: number;
}

export function fetchWorkload(o: InferenceOptions): FetchWorkload {
  const requests = drawRequests(o, 20261204);
  const meanKeys = requests.reduce((a, r) => a + r.length, 0) / requests.length;
  return { requests, meanKeys, sizeBytes: Math.round(meanKeys) * EVAL_DIM * 4 };
}

/**
 * Below this share of the offered rate, a row's target did not keep up: its latencies measure
 * a queue (Poisson counts of a few hundred arrivals vary by a few per cent, not 20).
 */
const SERVED_SHARE = 0.8;

/**
 * Whether a fetch row was offered more than its target served: arrivals dropped (256 in
 * flight), or completions per second well below the offered rate.
 */
export function isPastCapacity(offeredRps: number, achievedRps: number, dropped: number): boolean {
  return dropped > 0 || achievedRps < SERVED_SHARE * offeredRps;
}

/** `n` per completed request; null when unknown (NaN) or nothing completed. */
export const perOp = (n: number, completed: number): number | null =>
  completed > 0 && Number.isFinite(n) ? n / completed : null;

/** Rounds a fetch row is cut into, one per `FETCH_ROUND_MS` of its duration. */
const FETCH_ROUND_MS = 1000;

/** One open-loop fetch row to measure: a target, its offered rate and the row's labels. */
export interface FetchRowPlan {
  t: ClientProcess;
  rate: number;
  row: { op: string; baselineOp: string } & Record<string, unknown>;
}

/**
 * Open-loop fetch rows measured side by side: each row's `durationMs` is cut into rounds of
 * about a second, and the targets take turns round by round (the first one rotating), so a
 * burst of load from the shared host lands on every row alike instead of on one row's whole
 * window. Arrivals are generated and latencies recorded in each target's own client process
 * (which holds `w`'s requests), one summary per round; CPU is that process's plus every
 * server's over the row's rounds. No GC is forced between rows: each client process collects
 * its own garbage, inside its own calls, as a user's does.
 */
export async function measureFetchRows(
  plans: readonly FetchRowPlan[],
  w: FetchWorkload,
  durationMs: number,
  seed: number,
  progress: (label: string) => void,
): Promise<Result[]> {
  const rounds = Math.max(1, Math.round(durationMs / FETCH_ROUND_MS));
  const serversUs = plans.map(() => 0);
  const serversGc = plans.map((): ProcessGc[] => []);
  // Event-loop wake-ups over the row's rounds (NaN once a round could not read them).
  const clientWakeups = plans.map(() => 0);
  const serversWakeups = plans.map(() => 0);
  const last: (Costed<FetchRowReply> | undefined)[] = plans.map(() => undefined);
  for (let round = 0; round < rounds; round++) {
    for (let j = 0; j < plans.length; j++) {
      const i = (j + round) % plans.length;
      const { t, rate, row } = plans[i] as FetchRowPlan;
      progress(
        `inference fetch ${t.transport} ${row.op} (${rate} req/s), round ${round + 1}/${rounds}`,
      );
      const r = await t.fetch({
        rate,
        durationMs: durationMs / rounds,
        maxOutstanding: MAX_OUTSTANDING,
        seed: seed * 1000 + round,
        fresh: round === 0,
      });
      serversUs[i] = (serversUs[i] as number) + r.serversCpuUs;
      addProcessGc(serversGc[i] as ProcessGc[], r.serversGc);
      clientWakeups[i] = (clientWakeups[i] as number) + (r.clientWakeups ?? Number.NaN);
      serversWakeups[i] = (serversWakeups[i] as number) + (r.serversWakeups ?? Number.NaN);
      last[i] = r;
    }
  }
  return plans.map(({ t, rate, row }, i) => {
    const r = last[i] as Costed<FetchRowReply>;
    const co = r.fromArrival;
    const lag = r.lag;
    const cpu = r.cpuUs + (serversUs[i] as number);
    const achievedRps = r.completed / r.seconds;
    return {
      transport: t.transport,
      sizeBytes: w.sizeBytes,
      meanKeys: w.meanKeys,
      ...row,
      ...r.latency,
      cpuUsPerOp: r.completed > 0 ? cpu / r.completed : Number.NaN,
      // Its two parts: where one-sided fetches move the shards' work (onto the client).
      clientCpuUsPerOp: r.completed > 0 ? r.cpuUs / r.completed : Number.NaN,
      serverCpuUsPerOp: r.completed > 0 ? (serversUs[i] as number) / r.completed : Number.NaN,
      // Per fetch: how often the client's and all the servers' event loops slept and woke.
      clientWakeupsPerOp: perOp(clientWakeups[i] as number, r.completed),
      serverWakeupsPerOp: perOp(serversWakeups[i] as number, r.completed),
      coP50Us: co.p50Us,
      coMeanUs: co.meanUs,
      coP99Us: co.p99Us,
      coP999Us: co.p999Us,
      offeredRps: rate,
      achievedRps,
      pastCapacity: isPastCapacity(rate, achievedRps, r.dropped),
      dropped: r.dropped,
      failed: r.failed,
      lagMeanUs: lag.meanUs,
      lagP99Us: lag.p99Us,
      rssBytes: r.rssBytes + r.serversRssBytes,
      ...gcFields({ pid: t.pid, ...r.gc }, serversGc[i] as ProcessGc[], r.completed),
    };
  });
}

/** Inference warm-up pulls per target before its capacity probe. */
export const FETCH_WARMUP_PULLS = 300;

/**
 * Warms a target up before its capacity is probed: the fetch pool's keys pushed once (the
 * rows exist, as in a served model), `FETCH_WARMUP_PULLS` pulls, then a closed
 * loop as deep as the probe's for `probeMs`, unmeasured: client and servers compile their hot
 * paths over the first thousands of calls (measured, RDMA client in its own process: 500 ms
 * closed loops after 300 warm-up pulls gave 1 490, 2 113, 4 955, 11 316 req/s in turn, load
 * 5), and a capacity probed before that sets every row's rate too low.
 */
export async function warmUpFetch(t: ClientProcess, probeMs: number): Promise<void> {
  await t.fill();
  await t.warmUp(FETCH_WARMUP_PULLS, 0);
  await t.capacity(CAPACITY_CONCURRENCY, probeMs);
}

/** Rounds each capacity probe is cut into (the targets take them in turn). */
const CAPACITY_ROUNDS = 3;

/**
 * Closed-loop capacity of every target, `CAPACITY_CONCURRENCY` pulls always in flight: the
 * probe is cut into rounds the targets take in turn, and a target's capacity is the median of
 * its rounds, so one burst of load from the shared host does not set one target's rate basis
 * (a single probe per target put gRPC's anywhere from 116 to 626 req/s in runs at load 8–17).
 */
export async function measureCapacities(
  targets: readonly ClientProcess[],
  probeMs: number,
  progress: (label: string) => void,
): Promise<Map<ClientProcess, Capacity>> {
  const rounds = targets.map((): number[] => []);
  for (let round = 0; round < CAPACITY_ROUNDS; round++) {
    for (let j = 0; j < targets.length; j++) {
      const i = (j + round) % targets.length;
      const t = targets[i] as ClientProcess;
      progress(`inference capacity probe (${t.transport}, closed loop), round ${round + 1}`);
      (rounds[i] as number[]).push(
        await t.capacity(CAPACITY_CONCURRENCY, probeMs / CAPACITY_ROUNDS),
      );
    }
  }
  return new Map(
    targets.map((t, i) => {
      const sorted = (rounds[i] as number[]).sort((a, b) => a - b);
      const rps = sorted[sorted.length >> 1] as number;
      return [t, { rps, concurrency: CAPACITY_CONCURRENCY }];
    }),
  );
}

/**
 * Inference fetch: open-loop pulls at several offered loads. First every target's own
 * closed-loop capacity is measured. Shared loads are fractions of the TCP target's capacity,
 * the same requests per second for every target (`fetch@50%`); gRPC loads are fractions of
 * the gRPC target's capacity (`fetch@50%grpc`), again the same rate for every target that
 * runs them, where gRPC is not yet saturated. Probes and loads are measured on every target in
 * rounds taken in turn, so a burst of machine noise does not land on one side only.
 */
export async function runInference(
  targets: readonly ClientProcess[],
  w: FetchWorkload,
  o: InferenceOptions,
  progress: (label: string) => void,
): Promise<Result[]> {
  for (const t of targets) {
    progress(`inference warm-up (${t.transport})`);
    await warmUpFetch(t, o.probeMs);
  }
  const capacity = await measureCapacities(targets, o.probeMs, progress);
  const reference = targets.find((t) => t.transport === 'tcp') ?? (targets[0] as ClientProcess);
  const tcpCapacity = (capacity.get(reference) as Capacity).rps;
  const grpc = targets.find((t) => t.transport === 'grpc');
  const capacityOf = (t: ClientProcess) => (capacity.get(t) as Capacity).rps;
  // Every (load, basis) point, each with the targets it runs on.
  const points = [
    ...o.loads.map((load) => ({ load, own: false, on: targets })),
    ...[...new Set(Object.values(o.grpcLoads).flatMap((l) => l ?? []))]
      .sort((a, b) => a - b)
      .map((load) => ({
        load,
        own: true,
        on: targets.filter((t) => o.grpcLoads[t.transport]?.includes(load)),
      })),
  ];
  const results: Result[] = [];
  for (const [li, p] of points.entries()) {
    const order = p.on.map((_, i) => p.on[(i + li) % p.on.length] as ClientProcess);
    const op = fetchOp(p.load, p.own);
    const plans = order.map((t): FetchRowPlan => {
      const own = capacity.get(t) as Capacity;
      const basis = p.own ? capacityOf(grpc ?? t) : tcpCapacity;
      return {
        t,
        rate: Math.max(1, Math.round(p.load * basis)),
        row: {
          op,
          // A row at gRPC's rate compares with TCP's row at that rate (when TCP runs it).
          baselineOp: op,
          loadBasis: p.own ? 'grpc-capacity' : 'tcp-capacity',
          load: p.load,
          capacityRps: own.rps,
          capacityConcurrency: own.concurrency,
          tcpCapacityRps: tcpCapacity,
        },
      };
    });
    results.push(...(await measureFetchRows(plans, w, o.durationMs, 7 + li, progress)));
  }
  return results;
}
