import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { type GcCounts, isGcCounts } from '../stats/GcCounts.js';
import { peerExecArgv, peerScriptUrl, runsFromSource } from './peerLaunch.js';

const require = createRequire(import.meta.url);
// The shard CLI as the bench runs: its source through tsx, or the compiled `rdmajs-ps-server`.
const cli = join(
  dirname(require.resolve('@rdmajs/ps-service/package.json')),
  ...(runsFromSource ? ['src', 'cli.ts'] : ['dist', 'cli.js']),
);
/** The GC counter preloaded into every shard (answers `gc` over the IPC channel). */
const gcReport = peerScriptUrl('./gc-report', import.meta.url).href;
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 10_000;
const GC_READ_TIMEOUT_MS = 10_000;

export interface PsShardOptions {
  id: string;
  tablesFile: string;
  secretFile: string;
  /** Ports, one per transport (0 picks a free one); a restart passes the ports it had. */
  listen?: readonly number[];
  /** Snapshots + push log: a shard restarted on the same directory has every acknowledged push. */
  dataDir?: string;
  /** Further CLI arguments (e.g. a transport). */
  args?: readonly string[];
}

/**
 * One `rdmajs-ps-server` process run from source, ready once it logs `serving`. The bench
 * preloads `gc-report.ts` into it and keeps an IPC channel to it for that alone: `gcCounts()`
 * reads the shard's GCs so far (the CLI has no way to report them: its metrics endpoint has
 * no `nodejs_gc_*`).
 */
export class PsShardProcess {
  readonly #gcWaits = new Map<number, (gc: GcCounts | undefined) => void>();
  #nextGc = 1;

  private constructor(
    readonly options: PsShardOptions,
    readonly proc: ChildProcess,
    /** The port of each transport it listens on (`tcp`, `rdma`). */
    readonly ports: Readonly<Record<string, number>>,
    /** Where it serves its Prometheus metrics (`--metrics`), if it does. */
    readonly metricsPort: number | undefined,
  ) {
    proc.on('message', (m: { id?: unknown; gc?: unknown }) => {
      const done = typeof m?.id === 'number' ? this.#gcWaits.get(m.id) : undefined;
      if (done === undefined) return;
      this.#gcWaits.delete(m.id as number);
      done(isGcCounts(m.gc) ? m.gc : undefined);
    });
    proc.once('exit', () => {
      for (const done of this.#gcWaits.values()) done(undefined);
      this.#gcWaits.clear();
    });
  }

  /** The first listener's port (what `--listen` is given back on a restart). */
  get port(): number {
    return Object.values(this.ports)[0] as number;
  }

  get pid(): number {
    return this.proc.pid as number;
  }

  get running(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  static start(options: PsShardOptions): Promise<PsShardProcess> {
    const args = [
      // BENCH_CPU_PROF_DIR=<dir>: each shard writes a V8 CPU profile there when it exits
      // (NODE_OPTIONS may not carry --cpu-prof); the bench process takes `node --cpu-prof`.
      ...(process.env.BENCH_CPU_PROF_DIR
        ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF_DIR}`]
        : []),
      ...peerExecArgv,
      '--import',
      gcReport,
      cli,
      '--tables',
      options.tablesFile,
      '--shard-id',
      options.id,
      '--secret-file',
      options.secretFile,
      '--listen',
      `127.0.0.1:${(options.listen ?? [0]).join(',')}`,
      '--log-level',
      'info', // `serving` (with the port) is an info line
      ...(options.dataDir === undefined ? [] : ['--data-dir', options.dataDir]),
      ...(options.args ?? []),
    ];
    const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
    return new Promise((resolve, reject) => {
      let buf = '';
      const fail = (err: Error) => {
        clearTimeout(timer);
        proc.kill('SIGKILL');
        reject(err);
      };
      const timer = setTimeout(
        () => fail(new Error(`ps shard ${options.id} did not start in ${START_TIMEOUT_MS} ms`)),
        START_TIMEOUT_MS,
      );
      proc.once('exit', (c, s) => fail(new Error(`ps shard ${options.id} exited (${c ?? s})`)));
      const onData = (d: Buffer) => {
        buf += d.toString();
        const serving = servingLine(buf);
        if (serving === undefined) return;
        clearTimeout(timer);
        proc.removeAllListeners('exit');
        proc.stdout?.off('data', onData);
        proc.stdout?.resume(); // later log lines are not read
        resolve(new PsShardProcess(options, proc, serving.ports, serving.metricsPort));
      };
      proc.stdout?.on('data', onData);
    });
  }

  /**
   * The shard's GCs since it started; undefined when it is not running, does not answer within
   * `timeoutMs` (a loaded host: the reading is skipped, the shard is left alone) or answers
   * malformed.
   */
  gcCounts(timeoutMs = GC_READ_TIMEOUT_MS): Promise<GcCounts | undefined> {
    if (!this.running || !this.proc.connected) return Promise.resolve(undefined);
    const id = this.#nextGc++;
    return new Promise((resolve) => {
      const done = (gc: GcCounts | undefined) => {
        clearTimeout(t);
        this.#gcWaits.delete(id);
        resolve(gc);
      };
      const t = setTimeout(() => done(undefined), timeoutMs);
      this.#gcWaits.set(id, done);
      this.proc.send({ op: 'gc', id }, (err) => {
        if (err) done(undefined);
      });
    });
  }

  /**
   * The value of the shard's metric `name` (a single unlabelled series besides its `shard`
   * label), scraped from its metrics endpoint; undefined when it serves none, is not running,
   * or does not answer within `timeoutMs`.
   */
  async metric(name: string, timeoutMs = GC_READ_TIMEOUT_MS): Promise<number | undefined> {
    if (this.metricsPort === undefined || !this.running) return undefined;
    try {
      const res = await fetch(`http://127.0.0.1:${this.metricsPort}/metrics`, {
        signal: AbortSignal.timeout(timeoutMs),
      });
      const line = (await res.text()).split('\n').find((l) => l.startsWith(`${name}{`));
      const value = Number(line?.slice(line.lastIndexOf(' ') + 1));
      return line === undefined || !Number.isFinite(value) ? undefined : value;
    } catch {
      return undefined;
    }
  }

  /** The same shard again, on the same ports and data directory. */
  restart(): Promise<PsShardProcess> {
    return PsShardProcess.start({ ...this.options, listen: Object.values(this.ports) });
  }

  /** SIGKILL: the process dies with whatever it had not written. */
  async kill(): Promise<void> {
    await this.#stop('SIGKILL');
  }

  /** SIGTERM (drain, snapshot, exit 0), SIGKILL if it takes too long. */
  async stop(): Promise<void> {
    await this.#stop('SIGTERM');
  }

  #stop(signal: NodeJS.Signals): Promise<void> {
    if (!this.running) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(() => this.proc.kill('SIGKILL'), STOP_TIMEOUT_MS);
      this.proc.once('exit', () => {
        clearTimeout(t);
        resolve();
      });
      this.proc.kill(signal);
    });
  }
}

/** The ports (and metrics port) of the CLI's `serving` log line (JSON), once a whole one has arrived. */
function servingLine(
  out: string,
): { ports: Record<string, number>; metricsPort: number | undefined } | undefined {
  for (const line of out.split('\n')) {
    if (!line.includes('"serving"')) continue;
    let entry: {
      msg?: string;
      port?: number;
      listeners?: { transport: string; port: number }[];
      metricsPort?: number | null;
    };
    try {
      entry = JSON.parse(line);
    } catch {
      continue; // not a whole line yet
    }
    if (entry.msg !== 'serving') continue;
    const metricsPort = typeof entry.metricsPort === 'number' ? entry.metricsPort : undefined;
    if (Array.isArray(entry.listeners))
      return {
        ports: Object.fromEntries(entry.listeners.map((l) => [l.transport, l.port])),
        metricsPort,
      };
    if (typeof entry.port === 'number') return { ports: { tcp: entry.port }, metricsPort };
  }
  return undefined;
}
