import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { LATENCY_BUCKETS, RequestTally } from './RequestTally.js';

export type RequestOutcome = 'ok' | 'refused' | 'error';

/**
 * Connections the metrics endpoint holds at once. Nobody authenticates to it, so a new
 * connection beyond this drops the oldest one: idle sockets cannot lock the scraper out
 * (one keep-alive connection per scraper is the norm).
 */
export const MAX_METRICS_CONNECTIONS = 64;
/** A request's headers and whole request must arrive within this, ms. */
const METRICS_REQUEST_TIMEOUT_MS = 10_000;

/** perf_hooks' GC kinds, as the `kind` label of the GC metrics. */
const GC_KINDS: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};

/** prom-client 15's state of one histogram series (the version is pinned; a test guards this). */
interface HistogramSeries {
  labels: Record<string, string | number>;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

/** The series of `h` for `method`, created (prom-client's `zero`) when it has none yet. */
function seriesOf(h: Histogram<'method'>, method: string): HistogramSeries {
  const find = () =>
    Object.values((h as unknown as { hashMap: Record<string, HistogramSeries> }).hashMap).find(
      (e) => e.labels.method === method,
    );
  let series = find();
  if (series === undefined) {
    h.zero({ method });
    series = find();
  }
  if (series === undefined) throw new Error('prom-client histogram internals changed');
  return series;
}

/**
 * The shard's Prometheus metrics (prom-client), in a registry of their own so several
 * services in one process (tests) do not collide. `serve()` exposes them over HTTP.
 *
 * The per-request figures (requests, payload bytes, keys, latency, duplicates, registered
 * replies) are added up in plain numbers (`tally(method)`, `countDuplicate()`,
 * `countRegisteredReply()`) and moved into their prom-client metrics when those are read
 * (`collect()`: on scrape, or `get()`): the same names, types, labels and values, without
 * prom-client's per-call label hashing and validation on the request path.
 */
export class ServiceMetrics {
  readonly registry = new Registry();
  readonly requests: Counter<'method' | 'outcome'>;
  readonly bytes: Counter<'method' | 'direction'>;
  readonly latency: Histogram<'method'>;
  readonly keys: Counter<'method'>;
  readonly snapshots: Counter<'outcome'>;
  readonly duplicates: Counter;
  readonly registeredReplies: Counter;
  readonly gcs: Counter<'kind'>;
  readonly gcPause: Counter<'kind'>;
  readonly #tallies: RequestTally[] = [];
  /** GCs of this process by kind, counted while the endpoint is served (see serve()). */
  readonly #gc = new Map<string, { count: number; seconds: number }>();
  #gcObserver: PerformanceObserver | undefined;
  /** Counts not yet handed to their (label-less) counters. */
  readonly #pending = { duplicates: 0, registeredReplies: 0 };
  #server: Server | undefined;

  constructor(
    labels: { shard: string },
    gauges: {
      connections: () => number;
      inFlight: () => number;
      sessionsResumed: () => number;
      receiveQueueEmptied: () => number;
    },
  ) {
    this.registry.setDefaultLabels(labels);
    const registers = [this.registry];
    const tallies = this.#tallies;
    this.requests = new Counter({
      name: 'rdmajs_ps_requests_total',
      help: 'Requests served, by method and outcome (refused: validation failed, nothing applied)',
      labelNames: ['method', 'outcome'],
      registers,
      collect() {
        for (const t of tallies) {
          if (t.ok > 0) this.inc({ method: t.method, outcome: 'ok' }, t.ok);
          if (t.refused > 0) this.inc({ method: t.method, outcome: 'refused' }, t.refused);
          if (t.error > 0) this.inc({ method: t.method, outcome: 'error' }, t.error);
          t.ok = t.refused = t.error = 0;
        }
      },
    });
    this.bytes = new Counter({
      name: 'rdmajs_ps_payload_bytes_total',
      help: 'Request and reply payload bytes',
      labelNames: ['method', 'direction'],
      registers,
      collect() {
        for (const t of tallies) {
          if (!t.bytesSeen) continue;
          this.inc({ method: t.method, direction: 'in' }, t.bytesIn);
          this.inc({ method: t.method, direction: 'out' }, t.bytesOut);
          t.bytesIn = t.bytesOut = 0;
          t.bytesSeen = false;
        }
      },
    });
    this.latency = new Histogram({
      name: 'rdmajs_ps_request_duration_seconds',
      help: 'Time from a request reaching the handler to its reply (pushes: until durable)',
      labelNames: ['method'],
      buckets: [...LATENCY_BUCKETS],
      registers,
      collect() {
        for (const t of tallies) {
          if (t.latencyCount === 0) continue;
          const series = seriesOf(this, t.method);
          // Per-bucket counts, not cumulative (prom-client adds them up on export); the
          // observations above the last bound count in `count` (+Inf) only.
          for (let b = 0; b < LATENCY_BUCKETS.length; b++) {
            const le = LATENCY_BUCKETS[b] as number;
            series.bucketValues[le] = (series.bucketValues[le] ?? 0) + (t.buckets[b] as number);
          }
          series.sum += t.latencySum;
          series.count += t.latencyCount;
          t.buckets.fill(0);
          t.latencySum = 0;
          t.latencyCount = 0;
        }
      },
    });
    this.keys = new Counter({
      name: 'rdmajs_ps_keys_total',
      help: 'Keys pulled and pushed',
      labelNames: ['method'],
      registers,
      collect() {
        for (const t of tallies) {
          if (!t.keysSeen) continue;
          this.inc({ method: t.method }, t.keys);
          t.keys = 0;
          t.keysSeen = false;
        }
      },
    });
    this.snapshots = new Counter({
      name: 'rdmajs_ps_snapshots_total',
      help: 'Snapshots written',
      labelNames: ['outcome'],
      registers,
    });
    const pending = this.#pending;
    this.duplicates = new Counter({
      name: 'rdmajs_ps_push_duplicates_total',
      help: 'Pushes answered as duplicates (resends of applied pushes, not applied again)',
      registers,
      collect() {
        if (pending.duplicates > 0) this.inc(pending.duplicates);
        pending.duplicates = 0;
      },
    });
    this.registeredReplies = new Counter({
      name: 'rdmajs_ps_registered_replies_total',
      help: 'Replies built in registered memory and sent from there without a copy (RDMA)',
      registers,
      collect() {
        if (pending.registeredReplies > 0) this.inc(pending.registeredReplies);
        pending.registeredReplies = 0;
      },
    });
    const gc = this.#gc;
    // One counter per figure of #gc, each moving what accrued since the last read.
    const gcCounter = (name: string, help: string, field: 'count' | 'seconds') =>
      new Counter({
        name,
        help,
        labelNames: ['kind'] as const,
        registers,
        collect() {
          for (const [kind, g] of gc) {
            if (g[field] > 0) this.inc({ kind }, g[field]);
            g[field] = 0;
          }
        },
      });
    this.gcs = gcCounter(
      'rdmajs_ps_gc_total',
      'Garbage collections of this process by kind (major: the full Mark-Compacts that pause for milliseconds)',
      'count',
    );
    this.gcPause = gcCounter(
      'rdmajs_ps_gc_pause_seconds_total',
      'Time garbage collections paused this process, by kind',
      'seconds',
    );
    new Gauge({
      name: 'rdmajs_ps_connections',
      help: 'Open connections',
      registers,
      collect() {
        this.set(gauges.connections());
      },
    });
    new Gauge({
      name: 'rdmajs_ps_in_flight_pushes',
      help: 'Pushes applied and not yet durable',
      registers,
      collect() {
        this.set(gauges.inFlight());
      },
    });
    new Gauge({
      name: 'rdmajs_ps_sessions_resumed',
      help: 'RPC sessions resumed on a new connection (client recoveries)',
      registers,
      collect() {
        this.set(gauges.sessionsResumed());
      },
    });
    // A count that only grows, read from the transport at scrape time: a counter advanced by
    // what it grew since the last scrape (rate() and resets work on it as on any counter).
    let emptiedSeen = 0;
    new Counter({
      name: 'rdmajs_ps_rdma_receive_queue_emptied_total',
      help: 'Times the RDMA shared receive queue ran dry (with credits off: SENDs RNR-retried)',
      registers,
      collect() {
        const now = gauges.receiveQueueEmptied();
        if (now > emptiedSeen) this.inc(now - emptiedSeen);
        emptiedSeen = Math.max(emptiedSeen, now);
      },
    });
  }

  /** The figures of `method`'s requests, to add to per request (one tally per method). */
  tally(method: string): RequestTally {
    let t = this.#tallies.find((x) => x.method === method);
    if (t === undefined) {
      t = new RequestTally(method);
      this.#tallies.push(t);
    }
    return t;
  }

  /** A push answered as a duplicate. */
  countDuplicate(): void {
    this.#pending.duplicates++;
  }

  /** A reply built in registered memory and sent from there. */
  countRegisteredReply(): void {
    this.#pending.registeredReplies++;
  }

  /**
   * Serves `GET /metrics` on host:port (port 0: any free one). Resolves with the port. GCs are
   * counted from then on (a PerformanceObserver: nothing per request, no timer), so that a
   * shard's tail latency can be read against its full GCs.
   */
  async serve(host: string, port: number): Promise<number> {
    this.#observeGc();
    const server = createServer((req, res) => {
      if (req.method !== 'GET' || req.url !== '/metrics') {
        res.writeHead(404).end();
        return;
      }
      this.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
        () => res.writeHead(500).end(),
      );
    });
    // Insertion order is age: the first is the oldest.
    const open = new Set<Socket>();
    server.on('connection', (sock: Socket) => {
      if (open.size >= MAX_METRICS_CONNECTIONS) {
        const oldest = open.values().next().value as Socket;
        open.delete(oldest);
        oldest.destroy();
      }
      open.add(sock);
      sock.once('close', () => open.delete(sock));
    });
    server.headersTimeout = METRICS_REQUEST_TIMEOUT_MS;
    server.requestTimeout = METRICS_REQUEST_TIMEOUT_MS;
    this.#server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    const addr = server.address();
    return typeof addr === 'object' && addr !== null ? addr.port : port;
  }

  #observeGc(): void {
    if (this.#gcObserver !== undefined) return;
    const gc = this.#gc;
    this.#gcObserver = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        const kind = GC_KINDS[(e as { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'other';
        let g = gc.get(kind);
        if (g === undefined) {
          g = { count: 0, seconds: 0 };
          gc.set(kind, g);
        }
        g.count++;
        g.seconds += e.duration / 1000;
      }
    });
    this.#gcObserver.observe({ entryTypes: ['gc'] });
  }

  async close(): Promise<void> {
    this.#gcObserver?.disconnect();
    this.#gcObserver = undefined;
    const s = this.#server;
    this.#server = undefined;
    if (s === undefined) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
}
