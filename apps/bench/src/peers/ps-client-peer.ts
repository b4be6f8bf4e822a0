// One transport's PsClient of `pnpm bench ps`, run as a real child process: it makes the calls
// of each block the bench asks for and sends back their latencies and its own CPU time. Each
// client's garbage is thus collected in its own process, inside its own calls, as a user's
// client pays it; the bench never forces a GC. argv[2]: JSON PsClientPeerArgs.
import { PsClient } from '@rdmajs/ps-client';
import { openDevice } from '@rdmajs/verbs';
import { TCP_BASELINE_OPTIONS } from '../baselines/tcpFrames.js';
import { cpuNowUs } from '../stats/cpu.js';
import { exitWithParent } from './IpcChild.js';
import type {
  PsBlockRequest,
  PsBlockResult,
  PsClientPeerArgs,
  PsClientPeerRequest,
} from './psClientProtocol.js';
import { DISTINCT_BATCHES, keyBatches, psTableName } from './psWorkload.js';

exitWithParent();
const args = JSON.parse(process.argv[2] ?? '{}') as PsClientPeerArgs;

let client: PsClient;
try {
  client = await PsClient.connect({
    servers: args.servers,
    transport: args.side,
    tcp: TCP_BASELINE_OPTIONS,
    ...(args.side === 'rdma'
      ? {
          rdma: {
            ...(args.provider === 'soft'
              ? {}
              : { device: openDevice({ provider: args.provider }) }),
            ...(args.eagerThreshold === undefined ? {} : { eagerThreshold: args.eagerThreshold }),
          },
        }
      : {}),
    secret: args.secret,
  });
} catch (err) {
  process.send?.({ startError: (err as Error).message });
  process.exit(1);
}

/** The current row's key batches and gradients (rows come one after another). */
let row: { batch: number; seed: number; batches: BigUint64Array[] } | undefined;
let grads = new Float32Array(0);

const count = (x: unknown): boolean => Number.isSafeInteger(x) && (x as number) >= 0;

async function warmUp(calls: number, dims: readonly number[]): Promise<void> {
  if (!count(calls) || dims.length === 0 || !dims.every((d) => count(d) && d > 0))
    throw new Error(`bad warm-up request ${JSON.stringify({ calls, dims })}`);
  for (let k = 0; k < calls; k++) {
    const dim = dims[k % dims.length] as number;
    const keys = BigUint64Array.from({ length: 16 }, (_, i) => BigInt(k * 16 + i + 1));
    (await client.pull(psTableName(dim), keys)).release();
    await client.push(psTableName(dim), keys, new Float32Array(16 * dim));
  }
}

async function block(r: PsBlockRequest): Promise<PsBlockResult> {
  if (![r.dim, r.batch, r.seed, r.from, r.n].every(count) || r.dim * r.batch === 0)
    throw new Error(`bad block request ${JSON.stringify(r)}`);
  if (row?.batch !== r.batch || row.seed !== r.seed)
    row = { batch: r.batch, seed: r.seed, batches: keyBatches(r.batch, r.seed) };
  if (grads.length !== r.batch * r.dim) grads = new Float32Array(r.batch * r.dim).fill(0.001);
  const { batches } = row;
  const table = psTableName(r.dim);
  const latenciesUs = new Float64Array(r.measure ? r.n : 0);
  // The window: from the first call to the last reply, nothing of IPC in it.
  const cpu0 = cpuNowUs();
  for (let k = 0; k < r.n; k++) {
    const keys = batches[(r.from + k) % DISTINCT_BATCHES] as BigUint64Array;
    const t0 = performance.now();
    // A pull hands out views of the replies; releasing them is part of the call.
    if (r.call === 'pull') (await client.pull(table, keys)).release();
    else await client.push(table, keys, grads);
    if (r.measure) latenciesUs[k] = (performance.now() - t0) * 1000;
  }
  return { latenciesUs, cpuUs: cpuNowUs() - cpu0 };
}

const reply = (id: number, work: Promise<unknown>): void =>
  void work.then(
    (result) => process.send?.({ id, result }),
    (err: Error) => process.send?.({ id, error: err.message }),
  );

process.on('message', (m: PsClientPeerRequest & { id: number }) => {
  switch (m.op) {
    case 'warmup':
      return reply(m.id, warmUp(m.calls, m.dims));
    case 'block':
      return reply(m.id, block(m));
    case 'exit':
      return reply(
        m.id,
        client.close().finally(() => setImmediate(() => process.exit(0))),
      );
  }
});
process.send?.({ ready: true });
