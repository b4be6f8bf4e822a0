import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { LATENCY_BUCKETS } from '../src/RequestTally.js';
import { ServiceMetrics } from '../src/ServiceMetrics.js';

const gauges = {
  connections: () => 0,
  inFlight: () => 0,
  sessionsResumed: () => 0,
  receiveQueueEmptied: () => 0,
};

/** What the metrics held when every request called prom-client directly (before the tallies). */
function reference() {
  const registers = [new Registry()];
  return {
    requests: new Counter({
      name: 'r',
      help: 'r',
      labelNames: ['method', 'outcome'] as const,
      registers,
    }),
    bytes: new Counter({
      name: 'b',
      help: 'b',
      labelNames: ['method', 'direction'] as const,
      registers,
    }),
    latency: new Histogram({
      name: 'l',
      help: 'l',
      labelNames: ['method'] as const,
      buckets: [...LATENCY_BUCKETS],
      registers,
    }),
    keys: new Counter({ name: 'k', help: 'k', labelNames: ['method'] as const, registers }),
    duplicates: new Counter({ name: 'd', help: 'd', registers }),
    registeredReplies: new Counter({ name: 'g', help: 'g', registers }),
  };
}

/** A metric's series, without its name (the reference's names are short). */
async function seriesOf(m: { get(): Promise<{ values: unknown[] }> }): Promise<unknown[]> {
  const { values } = await m.get();
  return values
    .map((v) => {
      const { metricName, ...rest } = v as { metricName?: string };
      return {
        suffix: metricName?.replace(/^[a-z_]*?(_bucket|_sum|_count)?$/, '$1') ?? '',
        ...rest,
      };
    })
    .sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1));
}

describe('metrics tallies', () => {
  it('tallied_metrics_equal_direct_prom_client_calls_across_scrapes', async () => {
    const m = new ServiceMetrics({ shard: 't0' }, gauges);
    const ref = reference();
    let x = 7;
    const rnd = (n: number) => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return (x >>> 0) % n;
    };
    const methods = ['ps.pull', 'ps.push', 'ps.tableInfo'];
    const names = [
      'requests',
      'bytes',
      'latency',
      'keys',
      'duplicates',
      'registeredReplies',
    ] as const;
    for (let round = 0; round < 4; round++) {
      for (let i = 0; i < 500; i++) {
        const method = methods[rnd(methods.length)] as string;
        const tally = m.tally(method);
        const kind = rnd(10);
        if (kind === 0) {
          tally.failed('refused');
          ref.requests.inc({ method, outcome: 'refused' });
        } else if (kind === 1) {
          tally.failed('error');
          ref.requests.inc({ method, outcome: 'error' });
        } else {
          // Multiples of 2^-20 s up to ~4 s (past the last bound): sums are exact either way.
          const seconds = rnd(1 << 22) / (1 << 20);
          const size = rnd(3) === 0 ? 0 : rnd(100_000);
          const out = rnd(100_000);
          const keys = method === 'ps.tableInfo' ? 0 : rnd(300);
          tally.answered(seconds, size, out, keys);
          ref.latency.observe({ method }, seconds);
          ref.requests.inc({ method, outcome: 'ok' });
          ref.bytes.inc({ method, direction: 'in' }, size);
          ref.bytes.inc({ method, direction: 'out' }, out);
          if (keys > 0) ref.keys.inc({ method }, keys);
          if (rnd(4) === 0) {
            m.countDuplicate();
            ref.duplicates.inc();
          }
          if (rnd(3) === 0) {
            m.countRegisteredReply();
            ref.registeredReplies.inc();
          }
        }
      }
      // Read after every round: what a scrape moves over must not be counted twice.
      for (const name of names) {
        expect(await seriesOf(m[name]), name).toEqual(await seriesOf(ref[name]));
      }
    }
    const text = await m.registry.metrics();
    expect(text).toMatch(
      /rdmajs_ps_request_duration_seconds_bucket\{le="\+Inf",shard="t0",method="ps.pull"\} [1-9]/,
    );
    expect(text).toMatch(
      /rdmajs_ps_requests_total\{method="ps.push",outcome="ok",shard="t0"\} [1-9]/,
    );
  });

  it('a_method_never_called_has_no_series', async () => {
    const m = new ServiceMetrics({ shard: 't1' }, gauges);
    m.tally('ps.pull');
    expect((await m.requests.get()).values).toEqual([]);
    expect((await m.latency.get()).values).toEqual([]);
    expect((await m.duplicates.get()).values.map((v) => v.value)).toEqual([0]);
  });
});

describe('GC metrics', () => {
  it('the served endpoint counts this process GCs by kind, and stops at close', async () => {
    const m = new ServiceMetrics({ shard: 'gc0' }, gauges);
    const port = await m.serve('127.0.0.1', 0);
    try {
      // Short-lived garbage that escapes (a ring of 1 024 slots): tens of MiB, certainly
      // scavenges, whatever the optimizing compiler does with the loop.
      const ring: { i: number }[] = new Array(1024);
      for (let i = 0; i < 1 << 21; i++) ring[i & 1023] = { i };
      expect(ring[1023]?.i).toBe((1 << 21) - 1);
      await new Promise((r) => setTimeout(r, 50)); // GC entries reach observers a turn later
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const minor = /rdmajs_ps_gc_total\{kind="minor",shard="gc0"\} (\d+)/.exec(text);
      expect(Number(minor?.[1])).toBeGreaterThan(0);
      expect(text).toMatch(
        /rdmajs_ps_gc_pause_seconds_total\{kind="minor",shard="gc0"\} [0-9.e-]+/,
      );
    } finally {
      await m.close();
    }
  });
});
