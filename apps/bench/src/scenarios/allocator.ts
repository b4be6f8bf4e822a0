import { fromProtectionDomain } from '@rdmajs/allocator';
import { Access, openDevice } from '@rdmajs/verbs';
import type { Result } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { LatencyRecorder } from '../stats/LatencyRecorder.js';
import type { Scenario, ScenarioOptions } from './Scenario.js';

const MIN = 64;
const MAX = 4 << 20;

/** A seeded, log-uniform message-size mix from 64 B to 4 MiB (xorshift32). */
export function sizeMix(count: number, seed = 12345): number[] {
  let x = seed >>> 0 || 1;
  const out: number[] = [];
  const span = Math.log(MAX / MIN);
  for (let i = 0; i < count; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out.push(Math.round(MIN * Math.exp((x / 2 ** 32) * span)));
  }
  return out;
}

function row(
  op: string,
  rec: LatencyRecorder,
  cpuUs: number,
  ops: number,
  meanSize: number,
  extra: Record<string, number>,
): Result {
  return {
    transport: 'soft',
    op,
    sizeBytes: Math.round(meanSize),
    ...rec.summary(),
    cpuUsPerOp: cpuUs / ops,
    ...extra,
  };
}

/**
 * Times `fn(size)` over the mix in batches of `batch` operations (a clock read per
 * operation would cost as much as a sub-microsecond alloc+free); each sample is a
 * batch's time per operation. The JIT is warmed with three passes over the mix first.
 */
function timeEach(
  sizes: number[],
  fn: (size: number) => void,
  batch: number,
): { rec: LatencyRecorder; cpuUs: number } {
  for (let r = 0; r < 3; r++) for (const s of sizes) fn(s);
  const rec = new LatencyRecorder();
  const cpu0 = cpuNowUs();
  for (let i = 0; i < sizes.length; i += batch) {
    const end = Math.min(i + batch, sizes.length);
    const t0 = performance.now();
    for (let k = i; k < end; k++) fn(sizes[k] as number);
    rec.record(((performance.now() - t0) * 1000) / (end - i));
  }
  return { rec, cpuUs: cpuNowUs() - cpu0 };
}

export const allocatorScenario: Scenario = {
  name: 'allocator',
  summarize(results) {
    const r = results.find((x) => x.op === 'alloc-free');
    if (!r) return '';
    const speed = Number(r.speedupVsRegistration).toFixed(1);
    const mem = Number(r.memoryOverhead).toFixed(2);
    return `alloc+free is ${speed}× faster than per-message registration (target ≥ 50×); memory overhead ${mem}× (target ≤ 1.5×, peak registered / peak requested, ${r.liveBlocks} live blocks)`;
  },
  description:
    'alloc+free of registered blocks vs per-message registration vs a bounce-buffer copy (64 B–4 MiB mix)',
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const dev = openDevice({ provider: o.provider });
    try {
      const pd = dev.allocPd();
      const sizes = sizeMix(Math.max(500, Math.min(o.iterations * 4, 40_000)));
      const meanSize = sizes.reduce((a, b) => a + b, 0) / sizes.length;
      const access = Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead;

      progress('allocator alloc+free');
      const allocator = fromProtectionDomain(pd, {
        defaultAccess: 'remote-read-write',
        maxRegisteredBytes: 1 << 30,
      });
      const alloc = timeEach(sizes, (n) => allocator.alloc(n).release(), 64);

      progress('per-message registration');
      // What a transport without an allocator does: register the message buffer, send, deregister.
      const regSizes = sizes.slice(0, Math.max(50, Math.floor(sizes.length / 10)));
      const reg = timeEach(regSizes, (n) => pd.allocMr(n, access).deregister(), 4);

      progress('bounce-buffer copy');
      // What a transport with one pre-registered buffer does: copy each message into it.
      const bounce = pd.allocMr(MAX, access);
      const messages = new Map<number, Uint8Array>();
      const copy = timeEach(
        sizes,
        (n) => {
          let m = messages.get(n);
          if (!m) {
            m = new Uint8Array(n).fill(1);
            if (messages.size < 64) messages.set(n, m);
          }
          bounce.bytes.set(m);
        },
        16,
      );

      progress('memory overhead under the mix');
      // A window of live blocks while the mix streams through; overhead = peak registered
      // bytes / peak requested bytes (arenas are released only when empty, so a ratio at
      // an arbitrary instant overstates what the allocator holds for a steady load).
      const LIVE = 256;
      const live: { release(): void; length: number }[] = [];
      let requested = 0;
      let peakRequested = 0;
      let peakRegistered = 0;
      const registrations0 = allocator.stats().registrations;
      for (const n of sizes) {
        live.push(allocator.alloc(n));
        requested += n;
        if (live.length > LIVE) {
          const old = live.shift() as { release(): void; length: number };
          requested -= old.length;
          old.release();
        }
        peakRequested = Math.max(peakRequested, requested);
        peakRegistered = Math.max(peakRegistered, allocator.registeredBytes);
      }
      const registrations = allocator.stats().registrations - registrations0;
      for (const b of live) b.release();
      allocator.close();

      const allocMean = alloc.rec.summary().meanUs;
      const regMean = reg.rec.summary().meanUs;
      return [
        row('alloc-free', alloc.rec, alloc.cpuUs, sizes.length, meanSize, {
          speedupVsRegistration: regMean / allocMean,
          memoryOverhead: peakRegistered / peakRequested,
          liveBlocks: LIVE,
          registrationsUnderMix: registrations,
        }),
        row(
          'register-per-message',
          reg.rec,
          reg.cpuUs,
          regSizes.length,
          regSizes.reduce((a, b) => a + b, 0) / regSizes.length,
          {},
        ),
        row('bounce-copy', copy.rec, copy.cpuUs, sizes.length, meanSize, {}),
      ];
    } finally {
      dev.close();
    }
  },
};
