import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);
/** The CLI's source (run with tsx under the workspace's source condition). */
const cli = join(dirname(require.resolve('@rdmajs/ps-service/package.json')), 'src', 'cli.ts');

const started = new Set<ChildProcess>();

/** SIGKILLs every shard process still running (for afterAll, whatever failed before). */
export function killStragglers(): void {
  for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  started.clear();
}

export interface ShardProcess {
  readonly id: string;
  /** The first listener's port. */
  readonly port: number;
  /** Port per transport name (`rdma`, `tcp`). */
  readonly ports: Readonly<Record<string, number>>;
  readonly proc: ChildProcess;
  /** Every JSON log line so far. */
  readonly logs: Record<string, unknown>[];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface ShardProcessOptions {
  id: string;
  workDir: string;
  tables: unknown;
  secret: string;
  /** Default 0 (any free port). */
  port?: number;
  /** `--transport`, e.g. `'rdma,tcp'` (default the CLI's: tcp). With `ports`, one port each. */
  transports?: string;
  ports?: number[];
  dataDir?: string;
  extraArgs?: string[];
}

/** Starts `rdmajs-ps-server` as a child process on loopback; resolves once it logs `serving`. */
export function startShard(o: ShardProcessOptions): Promise<ShardProcess> {
  mkdirSync(o.workDir, { recursive: true });
  const tablesFile = join(o.workDir, `${o.id}-tables.json`);
  writeFileSync(tablesFile, JSON.stringify(o.tables));
  const secretFile = join(o.workDir, `${o.id}-secret`);
  writeFileSync(secretFile, `${o.secret}\n`, { mode: 0o600 });
  const args = [
    '--conditions=@rdmajs/source',
    '--import',
    'tsx',
    cli,
    '--tables',
    tablesFile,
    '--shard-id',
    o.id,
    '--listen',
    `127.0.0.1:${o.ports?.join(',') ?? o.port ?? 0}`,
    ...(o.transports === undefined ? [] : ['--transport', o.transports]),
    '--secret-file',
    secretFile,
    ...(o.dataDir === undefined ? [] : ['--data-dir', o.dataDir]),
    ...(o.extraArgs ?? []),
  ];
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  started.add(proc);
  const logs: Record<string, unknown>[] = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    proc.once('exit', (code, signal) => resolve({ code, signal }));
  });
  let stderr = '';
  proc.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`shard ${o.id} did not start in time: ${stderr}`));
    }, 30_000);
    proc.stdout?.on('data', (d: Buffer) => {
      buf += d.toString();
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        let rec: Record<string, unknown>;
        try {
          rec = JSON.parse(line) as Record<string, unknown>;
        } catch {
          continue;
        }
        logs.push(rec);
        if (rec.msg === 'serving') {
          clearTimeout(timer);
          const listeners = rec.listeners as { transport: string; port: number }[];
          const ports = Object.fromEntries(listeners.map((l) => [l.transport, l.port]));
          resolve({ id: o.id, port: rec.port as number, ports, proc, logs, exited });
        }
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`shard ${o.id} exited (${code ?? signal}) before serving: ${stderr}`));
    });
  });
}
