import { GrpcStoreClient } from '../baselines/grpc/GrpcStoreClient.js';
import { GrpcStoreServer } from '../baselines/grpc/GrpcStoreServer.js';
import { DISTINCT_BATCHES, keyBatches } from '../peers/psWorkload.js';
import type { Result } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { LatencyRecorder } from '../stats/LatencyRecorder.js';
import type { Scenario, ScenarioOptions } from './Scenario.js';

/** Keys per call; rows are DIM float32s (128 B), so 4096 keys pull 512 KiB. */
export const GRPC_BATCHES: readonly number[] = [1, 16, 256, 4096];
const DIM = 32;
const TABLE = 'emb';
/** Fewer calls for big batches so the run stays short (same rule of thumb as the sizes). */
export function callsFor(batch: number, base: number): number {
  return Math.max(50, Math.floor(base / Math.max(1, batch / 16)));
}

async function measure(
  server: GrpcStoreServer,
  op: 'pull' | 'push',
  batch: number,
  calls: number,
  call: (k: number) => Promise<unknown>,
): Promise<Result> {
  const warmup = Math.max(10, Math.floor(calls / 10));
  for (let k = 0; k < warmup; k++) await call(k);
  const rec = new LatencyRecorder();
  const server0 = await server.cpuUs();
  const cpu0 = cpuNowUs();
  for (let k = 0; k < calls; k++) {
    const t0 = performance.now();
    await call(warmup + k);
    rec.record((performance.now() - t0) * 1000);
  }
  const cpu = cpuNowUs() - cpu0;
  const serverCpu = (await server.cpuUs()) - server0;
  return {
    transport: 'grpc',
    op,
    sizeBytes: batch * DIM * 4,
    batchKeys: batch,
    ...rec.summary(),
    cpuUsPerOp: (cpu + serverCpu) / calls,
  };
}

export const grpcStoreScenario: Scenario = {
  name: 'grpc-store',
  description: `the parameter store over @grpc/grpc-js (unary Pull/Push, dim ${DIM}, a forked server): round trip and CPU of both processes per call, at ${GRPC_BATCHES.join(', ')} keys`,
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const server = await GrpcStoreServer.start([
      { name: TABLE, dim: DIM, optimizer: { kind: 'sgd', lr: 0.01 } },
    ]);
    const client = new GrpcStoreClient(server.port);
    const results: Result[] = [];
    let seq = 0;
    try {
      for (const batch of GRPC_BATCHES) {
        const batches = keyBatches(batch, batch * 7919);
        const grads = new Float32Array(batch * DIM).fill(0.001);
        const calls = callsFor(batch, o.iterations);
        progress(`grpc pull ${batch} keys`);
        results.push(
          await measure(server, 'pull', batch, calls, async (k) => {
            const keys = batches[k % DISTINCT_BATCHES] as BigUint64Array;
            const rows = await client.pull(TABLE, keys);
            if (rows.length !== keys.length * DIM) throw new Error('grpc pull: short reply');
          }),
        );
        progress(`grpc push ${batch} keys`);
        results.push(
          await measure(server, 'push', batch, calls, async (k) => {
            const keys = batches[k % DISTINCT_BATCHES] as BigUint64Array;
            const r = await client.push(TABLE, keys, grads, { session: 'bench', seq: ++seq });
            if (!r.applied) throw new Error('grpc push: not applied');
          }),
        );
      }
    } finally {
      client.close();
      await server.close();
    }
    return results;
  },
};
