import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);
const cli = join(dirname(require.resolve('@rdmajs/ps-service/package.json')), 'src', 'cli.ts');
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 10_000;

export interface PsShardOptions {
  id: string;
  tablesFile: string;
  secretFile: string;
  /** 0 picks a free port; a restart passes the port it had. */
  port?: number;
  /** Snapshots + push log: a shard restarted on the same directory has every acknowledged push. */
  dataDir?: string;
  /** Further CLI arguments (e.g. a transport). */
  args?: readonly string[];
}

/** One `rdmajs-ps-server` process run from source, ready once it logs `serving`. */
export class PsShardProcess {
  private constructor(
    readonly options: PsShardOptions,
    readonly proc: ChildProcess,
    readonly port: number,
  ) {}

  get pid(): number {
    return this.proc.pid as number;
  }

  get running(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  static start(options: PsShardOptions): Promise<PsShardProcess> {
    const args = [
      '--conditions=@rdmajs/source',
      '--import',
      'tsx',
      cli,
      '--tables',
      options.tablesFile,
      '--shard-id',
      options.id,
      '--secret-file',
      options.secretFile,
      '--listen',
      `127.0.0.1:${options.port ?? 0}`,
      '--log-level',
      'info', // `serving` (with the port) is an info line
      ...(options.dataDir === undefined ? [] : ['--data-dir', options.dataDir]),
      ...(options.args ?? []),
    ];
    const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
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
        const m = /"msg":"serving".*?"port":(\d+)/.exec(buf);
        if (!m) return;
        clearTimeout(timer);
        proc.removeAllListeners('exit');
        proc.stdout?.off('data', onData);
        proc.stdout?.resume(); // later log lines are not read
        resolve(new PsShardProcess(options, proc, Number(m[1])));
      };
      proc.stdout?.on('data', onData);
    });
  }

  /** The same shard again, on the same port and data directory. */
  restart(): Promise<PsShardProcess> {
    return PsShardProcess.start({ ...this.options, port: this.port });
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
