import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { PsClient } from '@rdmajs/ps-client';
import { TcpTransport } from '@rdmajs/tcp';
import type { Result } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { LatencyRecorder } from '../stats/LatencyRecorder.js';
import { callsFor } from './grpc-store.js';
import type { Scenario, ScenarioOptions } from './Scenario.js';

/** Keys per call and row widths measured (the grid, first version). */
export const PS_BATCHES: readonly number[] = [1, 16, 256, 4096];
export const PS_DIMS: readonly number[] = [8, 64, 256];
const SHARDS = 3;
const KEY_SPACE = 1_000_000;
const DISTINCT_BATCHES = 16;
const SECRET = 'rdmajs-bench-ps-secret-0123456789';

const require = createRequire(import.meta.url);
const cli = join(dirname(require.resolve('@rdmajs/ps-service/package.json')), 'src', 'cli.ts');

interface Shard {
  proc: ChildProcess;
  port: number;
}

/** One `rdmajs-ps-server` process (the CLI from source), resolved once it logs `serving`. */
function startShard(id: string, tablesFile: string, secretFile: string): Promise<Shard> {
  const proc = spawn(
    process.execPath,
    [
      '--conditions=@rdmajs/source',
      '--import',
      'tsx',
      cli,
      '--tables',
      tablesFile,
      '--shard-id',
      id,
      '--secret-file',
      secretFile,
      '--log-level',
      'info',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`ps shard ${id} did not start`)), 60_000);
    proc.once('exit', (c) => reject(new Error(`ps shard ${id} exited ${c}`)));
    proc.stdout?.on('data', (d: Buffer) => {
      buf += d.toString();
      const m = /"msg":"serving".*?"port":(\d+)/.exec(buf);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, port: Number(m[1]) });
      }
    });
  });
}

/** CPU (user + system) of another process, µs, from /proc (Linux). */
function procCpuUs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime
  return (ticks * 1e6) / 100; // USER_HZ is 100 on Linux
}

function keyBatches(batch: number, seed: number): BigUint64Array[] {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % KEY_SPACE;
  };
  return Array.from({ length: DISTINCT_BATCHES }, () =>
    BigUint64Array.from({ length: batch }, () => BigInt(next() + 1)),
  );
}

export const psScenario: Scenario = {
  name: 'ps',
  description: `the networked parameter server: ${SHARDS} rdmajs-ps-server processes + one PsClient, pull and push round trip and CPU of all processes per call, batches ${PS_BATCHES.join(', ')} keys × dims ${PS_DIMS.join(', ')}; TCP (the RDMA column comes with the RDMA transport)`,
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const work = mkdtempSync(join(tmpdir(), 'rdmajs-bench-ps-'));
    const tablesFile = join(work, 'tables.json');
    const secretFile = join(work, 'secret');
    writeFileSync(
      tablesFile,
      JSON.stringify({
        tables: PS_DIMS.map((dim) => ({
          name: `emb${dim}`,
          dim,
          optimizer: { kind: 'adagrad', lr: 0.01 },
          log: false,
        })),
      }),
    );
    writeFileSync(secretFile, SECRET, { mode: 0o600 });
    const shards: Shard[] = [];
    const results: Result[] = [];
    let client: PsClient | undefined;
    try {
      progress('starting ps shards');
      shards.push(
        ...(await Promise.all(
          Array.from({ length: SHARDS }, (_, i) => startShard(`b${i}`, tablesFile, secretFile)),
        )),
      );
      client = await PsClient.connect({
        servers: shards.map((s) => `127.0.0.1:${s.port}`),
        transport: new TcpTransport(),
        secret: SECRET,
      });
      const c = client;
      const allCpu = () =>
        cpuNowUs() + shards.reduce((a, s) => a + procCpuUs(s.proc.pid as number), 0);
      if (!o.transports.includes('tcp')) return results;
      // Warm every path once (JIT, connections, first rows) so the first rows measured are not
      // the slowest; each row still has its own warm-up below.
      progress('ps warm-up');
      for (let k = 0; k < 200; k++) {
        const dim = PS_DIMS[k % PS_DIMS.length] as number;
        const keys = BigUint64Array.from({ length: 16 }, (_, i) => BigInt(k * 16 + i + 1));
        await c.pull(`emb${dim}`, keys);
        await c.push(`emb${dim}`, keys, new Float32Array(16 * dim));
      }
      for (const dim of PS_DIMS) {
        for (const batch of PS_BATCHES) {
          const batches = keyBatches(batch, batch * 7919 + dim);
          const grads = new Float32Array(batch * dim).fill(0.001);
          const calls = callsFor(batch, o.iterations);
          for (const op of ['pull', 'push'] as const) {
            progress(`ps ${op} ${batch} keys × dim ${dim}`);
            const call = async (k: number) => {
              const keys = batches[k % DISTINCT_BATCHES] as BigUint64Array;
              if (op === 'pull') await c.pull(`emb${dim}`, keys);
              else await c.push(`emb${dim}`, keys, grads);
            };
            const warmup = Math.max(10, Math.floor(calls / 10));
            for (let k = 0; k < warmup; k++) await call(k);
            const rec = new LatencyRecorder();
            const cpu0 = allCpu();
            for (let k = 0; k < calls; k++) {
              const t0 = performance.now();
              await call(warmup + k);
              rec.record((performance.now() - t0) * 1000);
            }
            results.push({
              transport: 'tcp',
              op: `ps-${op}/d${dim}`,
              sizeBytes: batch * dim * 4,
              batchKeys: batch,
              dim,
              ...rec.summary(),
              cpuUsPerOp: (allCpu() - cpu0) / calls,
            });
          }
        }
      }
    } finally {
      await client?.close();
      await Promise.all(
        shards.map(
          (s) =>
            new Promise<void>((resolve) => {
              if (s.proc.exitCode !== null) return resolve();
              s.proc.once('exit', () => resolve());
              s.proc.kill('SIGTERM');
            }),
        ),
      );
      rmSync(work, { recursive: true, force: true });
    }
    return results;
  },
};
