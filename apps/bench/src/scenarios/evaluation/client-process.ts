// One evaluation target's clients, run as their own process (`ClientProcess`): the open-loop
// arrivals, closed loops and incast bursts are generated here and latencies recorded here, so
// each target's garbage is collected in its own process, inside its own calls, and its event
// loop serves no other target. One summary goes back per round. argv[2]: JSON ClientProcessArgs.
import { openChild, serveChild } from '../../peers/IpcChild.js';
import { cpuNowUs } from '../../stats/cpu.js';
import { addGc, gcSince, NO_GC } from '../../stats/GcCounts.js';
import { GcTally } from '../../stats/GcTally.js';
import { LatencyRecorder } from '../../stats/LatencyRecorder.js';
import { closedLoopRps } from './capacity.js';
import type {
  ClientInfoReply,
  ClientProcessArgs,
  ClientProcessRequest,
  FetchRowReply,
  IncastRowReply,
} from './clientProtocol.js';
import { runIncast } from './incast.js';
import { OpenLoopLatency } from './OpenLoopLatency.js';
import { runOpenLoop } from './openLoop.js';
import { EVAL_DIM, GrpcPsTarget, type PsTarget, RdmajsPsTarget } from './PsTarget.js';

const target = await openChild<ClientProcessArgs, PsTarget>((args) =>
  args.kind === 'grpc'
    ? Promise.resolve(GrpcPsTarget.connect(args.ports))
    : RdmajsPsTarget.connect(args.servers, args.side, args.provider, args.options),
);

let fetchPool: BigUint64Array[] = [];
let pushPool: BigUint64Array[] = [];
/** Gradients of a push batch, by its key count (all zero-ish, allocated once). */
const grads = new Map<number, Float32Array>();
const gradsFor = (keys: BigUint64Array): Float32Array => {
  let g = grads.get(keys.length);
  if (g === undefined) {
    g = new Float32Array(keys.length * EVAL_DIM).fill(0.001);
    grads.set(keys.length, g);
  }
  return g;
};
const pull = (k: number) => target.pull(fetchPool[k % fetchPool.length] as BigUint64Array);
const push = (k: number, writer: number) => {
  const keys = pushPool[k % pushPool.length] as BigUint64Array;
  return target.push(keys, gradsFor(keys), writer);
};

/** Keys per push of `fill` (one push per batch; the tail batch is shorter). */
const FILL_BATCH = 2048;

/**
 * Pushes every distinct key of the fetch pool once, so the rows a fetch asks for exist, as
 * in a trained model being served (pulls of absent keys return their initial value and a
 * one-sided read finds them absent in the index alone: an empty table measures neither
 * side's row path). Returns the keys pushed.
 */
async function fillFetchKeys(): Promise<number> {
  const all = new BigUint64Array(fetchPool.reduce((n, b) => n + b.length, 0));
  let n = 0;
  for (const b of fetchPool) {
    all.set(b, n);
    n += b.length;
  }
  all.sort();
  let distinct = 0;
  for (let i = 0; i < all.length; i++)
    if (i === 0 || all[i] !== all[i - 1]) all[distinct++] = all[i] as bigint;
  for (let at = 0; at < distinct; at += FILL_BATCH) {
    const keys = all.subarray(at, Math.min(distinct, at + FILL_BATCH));
    await target.push(keys, gradsFor(keys), 0);
  }
  return distinct;
}

const count = (x: unknown, min = 0): boolean => Number.isSafeInteger(x) && (x as number) >= min;
const positive = (x: unknown): boolean => typeof x === 'number' && Number.isFinite(x) && x > 0;
const isPool = (p: unknown): p is BigUint64Array[] =>
  Array.isArray(p) && p.every((b) => b instanceof BigUint64Array && b.length > 0);

function need(ok: boolean, m: ClientProcessRequest): void {
  if (!ok)
    throw new Error(
      `bad ${m.op} request ${JSON.stringify(m, (_, v) => (typeof v === 'bigint' ? String(v) : v))}`,
    );
}

const rssBytes = () => process.memoryUsage.rss();
/** This process's GCs from the start; a row adds up the differences over its rounds. */
const gcTally = new GcTally().start();

/** The row being measured, over its rounds (one fetch row and one incast row at a time). */
const zeroCounts = () => ({
  completed: 0,
  dropped: 0,
  failed: 0,
  seconds: 0,
  cpuUs: 0,
  gc: { ...NO_GC },
});
let fetchRow: ({ rec: OpenLoopLatency } & ReturnType<typeof zeroCounts>) | undefined;
let incastRow:
  | ({ rec: LatencyRecorder; busyMs: number } & ReturnType<typeof zeroCounts>)
  | undefined;

async function handle(m: ClientProcessRequest): Promise<unknown> {
  switch (m.op) {
    case 'workload': {
      need(isPool(m.fetch) && isPool(m.push), m);
      fetchPool = m.fetch;
      pushPool = m.push;
      return null;
    }
    case 'warmup': {
      need(count(m.pulls) && count(m.pushes), m);
      need((m.pulls === 0 || fetchPool.length > 0) && (m.pushes === 0 || pushPool.length > 0), m);
      for (let k = 0; k < m.pulls; k++) await pull(k);
      for (let k = 0; k < m.pushes; k++) await push(k, 0);
      return null;
    }
    case 'fill': {
      need(fetchPool.length > 0, m);
      return fillFetchKeys();
    }
    case 'capacity': {
      need(count(m.concurrency, 1) && positive(m.durationMs) && fetchPool.length > 0, m);
      return closedLoopRps(pull, m.concurrency, m.durationMs);
    }
    case 'fetch': {
      need(
        positive(m.rate) &&
          positive(m.durationMs) &&
          count(m.maxOutstanding, 1) &&
          count(m.seed) &&
          typeof m.fresh === 'boolean' &&
          fetchPool.length > 0 &&
          (m.fresh || fetchRow !== undefined),
        m,
      );
      if (m.fresh) fetchRow = { rec: new OpenLoopLatency(), ...zeroCounts() };
      const row = fetchRow as NonNullable<typeof fetchRow>;
      // The window: first arrival to last completion, nothing of IPC in it.
      const cpu0 = cpuNowUs();
      const gc0 = gcTally.snapshot();
      const r = await runOpenLoop(pull, m, row.rec);
      row.cpuUs += cpuNowUs() - cpu0;
      row.gc = addGc(row.gc, gcSince(await gcTally.settled(), gc0));
      row.completed += r.completed;
      row.dropped += r.dropped;
      row.failed += r.failed;
      row.seconds += r.seconds;
      return {
        latency: row.rec.service.summary(),
        fromArrival: row.rec.fromArrival.summary(),
        lag: row.rec.lag.summary(),
        completed: row.completed,
        dropped: row.dropped,
        failed: row.failed,
        seconds: row.seconds,
        cpuUs: row.cpuUs,
        rssBytes: rssBytes(),
        gc: row.gc,
      } satisfies FetchRowReply;
    }
    case 'incast': {
      need(
        count(m.concurrency, 1) &&
          count(m.bursts, 1) &&
          count(m.gapMs) &&
          count(m.firstBurst) &&
          typeof m.fresh === 'boolean' &&
          pushPool.length > 0 &&
          (m.fresh || incastRow !== undefined),
        m,
      );
      if (m.fresh) incastRow = { rec: new LatencyRecorder(), ...zeroCounts(), busyMs: 0 };
      const row = incastRow as NonNullable<typeof incastRow>;
      const c = m.concurrency;
      const cpu0 = cpuNowUs();
      const gc0 = gcTally.snapshot();
      const r = await runIncast((b, w) => push((m.firstBurst + b) * c + w, w), m, row.rec);
      row.cpuUs += cpuNowUs() - cpu0;
      row.gc = addGc(row.gc, gcSince(await gcTally.settled(), gc0));
      row.failed += r.failed;
      row.busyMs += r.busyMs;
      row.seconds += r.seconds;
      return {
        latency: row.rec.summary(),
        count: row.rec.count,
        failed: row.failed,
        busyMs: row.busyMs,
        seconds: row.seconds,
        cpuUs: row.cpuUs,
        rssBytes: rssBytes(),
        gc: row.gc,
      } satisfies IncastRowReply;
    }
    case 'info': {
      const info: ClientInfoReply = { rssBytes: rssBytes() };
      if (target instanceof RdmajsPsTarget) {
        const registered = target.registeredBytes();
        const qps = target.qps();
        const emptied = target.receiveQueueEmptied();
        if (registered !== undefined) info.registeredBytes = registered;
        if (qps !== undefined) info.qps = qps;
        if (emptied !== undefined) info.receiveQueueEmptied = emptied;
      }
      return info;
    }
    case 'exit':
      await target.close();
      setImmediate(() => process.exit(0));
      return null;
    default:
      throw new Error(`unknown op ${String((m as { op: unknown }).op)}`);
  }
}

serveChild(handle);
