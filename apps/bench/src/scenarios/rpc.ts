// `pnpm bench rpc`: @rdmajs/rpc-recovery calls over RdmaTransport (soft provider) and
// TcpTransport in one run — round-trip latency and CPU per call of both processes, per
// size, and recovery time after a server restart (server ready → first successful call).
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type MessagePart, RdmaTransport, type Transport } from '@rdmajs/mux';
import { type BackoffPolicy, ExponentialBackoff, RpcClient } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { TCP_BASELINE_OPTIONS } from '../baselines/tcpFrames.js';
import { peerExecArgv, peerScriptPath } from '../peers/peerLaunch.js';
import type { Result } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { LatencyRecorder } from '../stats/LatencyRecorder.js';
import { iterationsFor, warmupFor } from './iterations.js';
import type { Scenario, ScenarioOptions } from './Scenario.js';

const MiB = 1 << 20;
/** Largest RPC payload measured (the frame limit is 16 MiB; bigger rows add little here). */
const MAX_SIZE = 4 * MiB;
const RESTARTS = 5;
const DEFAULT_BACKOFF_RESTARTS = 3;
const now = (): number => performance.timeOrigin + performance.now();

type Poll = 'event' | 'adaptive';
interface Side {
  transport: 'tcp' | 'soft';
  poll: Poll | undefined;
  label: string;
}

/** The rpc peer in its own process; restartable on the same ports with its state. */
class RpcPeer {
  #next = 1;
  readonly #pending = new Map<number, (v: number) => void>();
  private constructor(
    readonly proc: ChildProcess,
    readonly rdmaPort: number,
    readonly tcpPort: number,
    /** Wall-clock ms at which both listeners accepted. */
    readonly readyAt: number,
  ) {
    proc.on('message', (m: { id?: number; result?: number }) => {
      const f = m.id === undefined ? undefined : this.#pending.get(m.id);
      if (f === undefined) return;
      this.#pending.delete(m.id as number);
      f(m.result as number);
    });
  }

  static async spawn(args: {
    secret: string;
    key: string;
    stateFile: string;
    pollPolicy: Poll;
    rdmaPort?: number;
    tcpPort?: number;
  }): Promise<RpcPeer> {
    const script = peerScriptPath('../peers/rpc-peer', import.meta.url);
    const proc = fork(script, [JSON.stringify(args)], {
      execArgv: [...peerExecArgv],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const ready = await new Promise<{ rdmaPort: number; tcpPort: number; at: number }>(
      (resolve, reject) => {
        const t = setTimeout(() => reject(new Error('rpc peer did not start within 30 s')), 30_000);
        proc.once('message', (m: { ready: { rdmaPort: number; tcpPort: number; at: number } }) => {
          clearTimeout(t);
          resolve(m.ready);
        });
        proc.once('exit', (c) => reject(new Error(`rpc peer exited during start (${c})`)));
      },
    );
    return new RpcPeer(proc, ready.rdmaPort, ready.tcpPort, ready.at);
  }

  cpu(): Promise<number> {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('rpc peer: cpu unanswered')), 30_000);
      this.#pending.set(id, (v) => {
        clearTimeout(t);
        resolve(v);
      });
      this.proc.send({ id, op: 'cpu' });
    });
  }

  async kill(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise((r) => this.proc.once('exit', r));
    this.proc.kill('SIGKILL');
    await exited;
  }
}

/** Round trips without payload copies in JS: the request goes as it is, the reply is a view. */
async function calls(
  c: RpcClient,
  method: string,
  payload: MessagePart,
  n: number,
  rec: LatencyRecorder | undefined,
): Promise<void> {
  const idempotent = method === 'echo';
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const reply = await c.callView(method, payload, { idempotent, deadlineMs: 60_000 });
    reply.release();
    rec?.record((performance.now() - t0) * 1000);
  }
}

/**
 * The request payload: a block of the RDMA transport's allocator (RpcClient sends it behind
 * its header bytes, so mux copies it once into a send slot or, above the eager size, into
 * the connection's pool: RpcClient does not hand out its connection's own allocator), else
 * bytes.
 */
function payloadOf(transport: Transport, size: number): { part: MessagePart; free: () => void } {
  if (transport instanceof RdmaTransport && size > 0) {
    const block = transport.allocator.alloc(size, 'remote-read');
    block.bytes.fill(7);
    return { part: block.slice(0, size), free: () => block.release() };
  }
  return { part: new Uint8Array(size).fill(7), free: () => {} };
}

async function roundTrip(
  side: Side,
  transport: Transport,
  c: RpcClient,
  peer: RpcPeer,
  method: 'echo' | 'inc',
  size: number,
  iterations: number,
  warmup: number,
): Promise<Result> {
  const payload = payloadOf(transport, size);
  await calls(c, method, payload.part, warmup, undefined);
  const rec = new LatencyRecorder();
  const peerCpu0 = await peer.cpu();
  const cpu0 = cpuNowUs();
  await calls(c, method, payload.part, iterations, rec);
  const cpu = cpuNowUs() - cpu0;
  const peerCpu = (await peer.cpu()) - peerCpu0;
  payload.free();
  return {
    transport: side.transport,
    op: `rpc-${method}${side.poll === undefined ? '' : ` (${side.poll})`}`,
    sizeBytes: size,
    ...rec.summary(),
    cpuUsPerOp: (cpu + peerCpu) / iterations,
  };
}

/**
 * Kills the server, restarts it on the same ports with its persisted state, and times from
 * its ready message to the first call that succeeds (a call issued while the session is
 * recovering, replayed when it resumes).
 */
async function recovery(
  side: Side,
  client: RpcClient,
  start: (rdmaPort: number, tcpPort: number) => Promise<RpcPeer>,
  peer: RpcPeer,
  restarts: number,
  backoffLabel: string,
): Promise<{ peer: RpcPeer; row: Result }> {
  const samplesMs: number[] = [];
  /** Ready → the session connected again (the rest is the replayed call's round trip). */
  const connectedMs: number[] = [];
  let current = peer;
  for (let i = 0; i < restarts; i++) {
    const recovering = new Promise<void>((resolve) =>
      client.session.once('recovering', () => resolve()),
    );
    await current.kill();
    await recovering;
    let doneAt = 0;
    let connectedAt = 0;
    client.session.once('connected', () => {
      connectedAt = now();
    });
    const call = client
      .call('echo', new Uint8Array(64), { idempotent: true, deadlineMs: 60_000 })
      .then(() => {
        doneAt = now();
      });
    current = await start(current.rdmaPort, current.tcpPort);
    await call;
    samplesMs.push(doneAt - current.readyAt);
    connectedMs.push(Math.round((connectedAt - current.readyAt) * 100) / 100);
  }
  samplesMs.sort((a, b) => a - b);
  const at = (q: number) =>
    samplesMs[Math.min(samplesMs.length - 1, Math.floor(q * samplesMs.length))] as number;
  const mean = samplesMs.reduce((a, b) => a + b, 0) / samplesMs.length;
  return {
    peer: current,
    row: {
      transport: side.transport,
      op: `rpc-recovery${side.poll === undefined ? '' : ` (${side.poll})`}, ${backoffLabel}`,
      sizeBytes: 64,
      p50Us: at(0.5) * 1000,
      meanUs: mean * 1000,
      p99Us: (samplesMs.at(-1) as number) * 1000,
      cpuUsPerOp: 0,
      restarts,
      recoveryMs: samplesMs.map((x) => Math.round(x * 100) / 100),
      connectedMs,
    },
  };
}

function clientTransport(side: Side): Transport & { close?: () => void } {
  if (side.transport === 'tcp')
    return new TcpTransport({ ...TCP_BASELINE_OPTIONS, peerTimeoutMs: 60_000 });
  return new RdmaTransport({ pollPolicy: side.poll ?? 'event', peerTimeoutMs: 60_000 });
}

async function runSide(side: Side, o: ScenarioOptions, progress: (l: string) => void) {
  const results: Result[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'rdmajs-bench-rpc-'));
  const secret = randomBytes(24).toString('hex');
  const key = randomBytes(32).toString('hex');
  const stateFile = join(dir, 'state.json');
  const start = (rdmaPort?: number, tcpPort?: number) =>
    RpcPeer.spawn({
      secret,
      key,
      stateFile,
      pollPolicy: side.poll ?? 'event',
      ...(rdmaPort === undefined ? {} : { rdmaPort }),
      ...(tcpPort === undefined ? {} : { tcpPort }),
    });
  let peer = await start();
  const transport = clientTransport(side);
  const connectWith = (backoff: BackoffPolicy) =>
    RpcClient.connect({
      transport,
      port: side.transport === 'tcp' ? peer.tcpPort : peer.rdmaPort,
      secret,
      backoff,
    });
  let client = await connectWith(new ExponentialBackoff({ baseMs: 5, capMs: 25 }));
  try {
    progress(`rpc ${side.label} warm-up`);
    await calls(client, 'echo', new Uint8Array(64), Math.max(500, o.iterations), undefined);
    for (const size of o.sizes.filter((s) => s <= MAX_SIZE)) {
      const iterations = iterationsFor(size, o.iterations);
      progress(`rpc ${side.label} echo ${size} B`);
      results.push(
        await roundTrip(
          side,
          transport,
          client,
          peer,
          'echo',
          size,
          iterations,
          warmupFor(size, iterations),
        ),
      );
    }
    progress(`rpc ${side.label} inc (de-duplicated)`);
    results.push(
      await roundTrip(
        side,
        transport,
        client,
        peer,
        'inc',
        0,
        o.iterations,
        warmupFor(0, o.iterations),
      ),
    );
    progress(`rpc ${side.label} recovery after ${RESTARTS} server restarts`);
    let r = await recovery(side, client, start, peer, RESTARTS, 'backoff 5…25 ms');
    peer = r.peer;
    results.push(r.row);
    await client.close();
    client = await connectWith(new ExponentialBackoff());
    progress(`rpc ${side.label} recovery, default backoff`);
    r = await recovery(side, client, start, peer, DEFAULT_BACKOFF_RESTARTS, 'default backoff');
    peer = r.peer;
    results.push(r.row);
  } finally {
    await client.close();
    transport.close?.();
    await peer.kill();
    rmSync(dir, { recursive: true, force: true });
  }
  return results;
}

export const rpcScenario: Scenario = {
  name: 'rpc',
  description:
    'rpc-recovery calls over RdmaTransport (soft) vs TcpTransport: round trip 64 B … 4 MiB and a de-duplicated inc, CPU of both processes, recovery after server restarts (ready → first successful call)',
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const sides: Side[] = [];
    if (o.transports.includes('tcp'))
      sides.push({ transport: 'tcp', poll: undefined, label: 'tcp' });
    if (o.transports.includes('rdma')) {
      if (o.provider !== 'soft')
        throw new Error('bench rpc runs RdmaTransport on the soft provider only');
      sides.push({ transport: 'soft', poll: 'event', label: 'rdma (event)' });
      sides.push({ transport: 'soft', poll: 'adaptive', label: 'rdma (adaptive)' });
    }
    const results: Result[] = [];
    for (const side of sides) results.push(...(await runSide(side, o, progress)));
    return results;
  },
  summarize(results: Result[]): string {
    const lines: string[] = [];
    for (const r of results.filter((x) => x.transport === 'soft' && x.op.startsWith('rpc-echo'))) {
      const base = results.find(
        (x) => x.transport === 'tcp' && x.op === 'rpc-echo' && x.sizeBytes === r.sizeBytes,
      );
      if (base === undefined) continue;
      const ratio = r.p50Us / base.p50Us;
      const target =
        r.sizeBytes === 64 ? ` (target ≤ 0.20: ${ratio <= 0.2 ? 'met' : 'missed'})` : '';
      lines.push(
        `${r.op} / tcp at ${r.sizeBytes} B: p50 ${ratio.toFixed(2)}x${target}, CPU/call ${(r.cpuUsPerOp / base.cpuUsPerOp).toFixed(2)}x`,
      );
    }
    for (const r of results.filter((x) => x.op.startsWith('rpc-recovery'))) {
      const ms = r.recoveryMs as number[];
      lines.push(
        `${r.transport} ${r.op}: ready → first call p50 ${(r.p50Us / 1000).toFixed(1)} ms, max ${(r.p99Us / 1000).toFixed(1)} ms over ${ms.length} restarts; ready → connected ${(r.connectedMs as number[]).join(', ')} ms (target ≤ 100 ms: ${r.p99Us <= 100_000 ? 'met' : r.p50Us <= 100_000 ? 'met at p50, missed at max' : 'missed'})`,
      );
    }
    return lines.join('\n');
  },
};
