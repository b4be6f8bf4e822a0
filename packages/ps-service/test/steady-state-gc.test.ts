// A shard serving steady traffic makes no garbage that forces full (Mark-Compact) GCs: pull
// replies are built in reused memory (the RDMA connection's registered pool; reused heap
// blocks on TCP), not in a fresh ArrayBuffer each. Backing stores count as external memory
// toward V8's global limit, so a fresh 256 KiB reply per pull brought a full GC every ~80
// pulls on TCP, each a pause in the shard's p99. GCs are counted in the shard's own process
// (fixture) by PerformanceObserver, never timed.
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { RdmaTransport } from '@rdmajs/mux';
import {
  decodePullReply,
  decodePushReply,
  encodePullRequest,
  encodePushRequest,
  PsMethod,
} from '@rdmajs/ps-wire';
import { RpcClient } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { afterAll, beforeAll, expect, it } from 'vitest';

const fixture = fileURLToPath(new URL('./fixtures/gc-shard.ts', import.meta.url));
const secret = 'ps-service-steady-gc-secret-0123456789';
/** 64 rows of 1024 floats: a 256 KiB reply (and push), a request of a few hundred bytes. */
const DIM = 1024;
const KEYS = BigUint64Array.from({ length: 64 }, (_, i) => BigInt(i + 1));
const GRADS = new Float32Array(KEYS.length * DIM).fill(0.5);
const WARM_UP = 300;
const STEADY = 2000;
/**
 * Full GCs allowed in STEADY requests: 0–1 measured (RDMA and TCP, pulls and pushes, load
 * 10–11). Before TCP's replies were pooled: 22–29 in 2 000 TCP pulls (512 MB of replies);
 * RDMA was at 0–1 already (its replies were already built in the connection's pool).
 */
const MAX_MAJOR_GCS = 4;

interface Counts {
  major: number;
  minor: number;
  arrayBuffers: number;
}

let shard: ChildProcess;
let ports: { rdma: number; tcp: number };
const clientRdma = new RdmaTransport();

function next<T>(): Promise<T> {
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`gc shard exited (${code})`));
    shard.once('exit', onExit);
    shard.once('message', (m) => {
      shard.off('exit', onExit);
      resolve(m as T);
    });
  });
}

const counts = (): Promise<Counts> => {
  const reply = next<Counts>();
  shard.send('count');
  return reply;
};

beforeAll(async () => {
  shard = fork(fixture, [secret, String(DIM)], {
    execArgv: ['--conditions=@rdmajs/source', '--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  ports = await next();
}, 60_000);

afterAll(async () => {
  if (shard.exitCode === null) {
    const exited = new Promise((r) => shard.once('exit', r));
    shard.send('stop');
    const timer = setTimeout(() => shard.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
  await clientRdma.close();
});

type Op = (client: RpcClient, i: number) => Promise<void>;

const pull: Op = async (client) => {
  const reply = await client.call(PsMethod.pull, encodePullRequest({ table: 'wide', keys: KEYS }), {
    idempotent: true,
  });
  if (decodePullReply(reply).rows.length !== KEYS.length * DIM) throw new Error('short pull');
};

const push: Op = async (client, i) => {
  const reply = await client.call(
    PsMethod.push,
    encodePushRequest({
      table: 'wide',
      writer: 'gc',
      seq: i + 1,
      dim: DIM,
      keys: KEYS,
      grads: GRADS,
    }),
  );
  if (decodePushReply(reply).rows !== KEYS.length) throw new Error('push not applied');
};

/** Full GCs in the shard over STEADY requests after WARM_UP, with the counts to explain them. */
async function steadyMajorGcs(transport: 'rdma' | 'tcp', op: Op): Promise<[number, string]> {
  const client = await RpcClient.connect({
    transport: transport === 'rdma' ? clientRdma : new TcpTransport({ frameProtection: 'none' }),
    port: ports[transport],
    secret,
  });
  try {
    let i = 0;
    while (i < WARM_UP) await op(client, i++);
    const before = await counts();
    while (i < WARM_UP + STEADY) await op(client, i++);
    const after = await counts();
    return [
      after.major - before.major,
      `major ${before.major}→${after.major}, minor ${before.minor}→${after.minor}, arrayBuffers ${before.arrayBuffers}→${after.arrayBuffers}`,
    ];
  } finally {
    await client.close();
  }
}

it('2 000 pulls of 256 KiB over soft RDMA: no full GC in the shard', async () => {
  const [major, why] = await steadyMajorGcs('rdma', pull);
  expect(major, why).toBeLessThanOrEqual(MAX_MAJOR_GCS);
});

it('2 000 pushes of 256 KiB over soft RDMA: no full GC in the shard', async () => {
  const [major, why] = await steadyMajorGcs('rdma', push);
  expect(major, why).toBeLessThanOrEqual(MAX_MAJOR_GCS);
});

it('2 000 pulls of 256 KiB over TCP: replies in reused heap blocks, no full GC in the shard', async () => {
  const [major, why] = await steadyMajorGcs('tcp', pull);
  expect(major, why).toBeLessThanOrEqual(MAX_MAJOR_GCS);
});
