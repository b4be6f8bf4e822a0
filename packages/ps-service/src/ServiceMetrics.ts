import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

export type RequestOutcome = 'ok' | 'refused' | 'error';

/**
 * Connections the metrics endpoint holds at once. Nobody authenticates to it, so a new
 * connection beyond this drops the oldest one: idle sockets cannot lock the scraper out
 * (one keep-alive connection per scraper is the norm).
 */
export const MAX_METRICS_CONNECTIONS = 64;
/** A request's headers and whole request must arrive within this, ms. */
const METRICS_REQUEST_TIMEOUT_MS = 10_000;

/**
 * The shard's Prometheus metrics (prom-client), in a registry of their own so several
 * services in one process (tests) do not collide. `serve()` exposes them over HTTP.
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
  #server: Server | undefined;

  constructor(
    labels: { shard: string },
    gauges: { connections: () => number; inFlight: () => number; sessionsResumed: () => number },
  ) {
    this.registry.setDefaultLabels(labels);
    const registers = [this.registry];
    this.requests = new Counter({
      name: 'rdmajs_ps_requests_total',
      help: 'Requests served, by method and outcome (refused: validation failed, nothing applied)',
      labelNames: ['method', 'outcome'],
      registers,
    });
    this.bytes = new Counter({
      name: 'rdmajs_ps_payload_bytes_total',
      help: 'Request and reply payload bytes',
      labelNames: ['method', 'direction'],
      registers,
    });
    this.latency = new Histogram({
      name: 'rdmajs_ps_request_duration_seconds',
      help: 'Time from a request reaching the handler to its reply (pushes: until durable)',
      labelNames: ['method'],
      buckets: [1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 0.5, 2],
      registers,
    });
    this.keys = new Counter({
      name: 'rdmajs_ps_keys_total',
      help: 'Keys pulled and pushed',
      labelNames: ['method'],
      registers,
    });
    this.snapshots = new Counter({
      name: 'rdmajs_ps_snapshots_total',
      help: 'Snapshots written',
      labelNames: ['outcome'],
      registers,
    });
    this.duplicates = new Counter({
      name: 'rdmajs_ps_push_duplicates_total',
      help: 'Pushes answered as duplicates (resends of applied pushes, not applied again)',
      registers,
    });
    this.registeredReplies = new Counter({
      name: 'rdmajs_ps_registered_replies_total',
      help: 'Replies built in registered memory and sent from there without a copy (RDMA)',
      registers,
    });
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
  }

  /** Serves `GET /metrics` on host:port (port 0: any free one). Resolves with the port. */
  async serve(host: string, port: number): Promise<number> {
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

  async close(): Promise<void> {
    const s = this.#server;
    this.#server = undefined;
    if (s === undefined) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
}
