// `pnpm bench mux`: the mux contract over RDMA (RdmaTransport, each polling policy) and over
// TCP (@rdmajs/tcp), and plain Node TCP, in one run: channel round trip per size, and many
// concurrent channels on one connection, with the CPU of both processes. Ablations: one QP
// (one connection) per channel against the pool, and sending from allocator blocks against
// plain bytes that RdmaTransport copies into a bounce buffer.
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { Block } from '@rdmajs/allocator';
import {
  type Connection,
  type OutboundMessage,
  type PollPolicy,
  type RdmaConnection,
  RdmaTransport,
} from '@rdmajs/mux';
import { TcpTransport } from '@rdmajs/tcp';
import { openDevice } from '@rdmajs/verbs';
import { TCP_BASELINE_OPTIONS } from '../baselines/tcpFrames.js';
import { EchoPeer } from '../peers/EchoPeer.js';
import { peerExecArgv, peerScriptPath } from '../peers/peerLaunch.js';
import { formatSize } from '../report/format.js';
import type { Result, Transport } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { LatencyRecorder } from '../stats/LatencyRecorder.js';
import { iterationsFor, warmupFor } from './iterations.js';
import { EchoChannel } from './muxEchoChannel.js';
import {
  OPEN_CHANNELS,
  type OpenLoopTarget,
  openLoopRows,
  openLoopSummary,
} from './muxOpenLoop.js';
import type { Scenario, ScenarioOptions } from './Scenario.js';
import { tcpPingPong } from './tcp.js';

const MiB = 1 << 20;
const CONCURRENCY = [1, 16, 256, 1024];
/** `MUX_BENCH_POLICIES=event,adaptive`: a part of the policies (quick looks). */
const POLICIES: PollPolicy[] = (
  process.env.MUX_BENCH_POLICIES?.split(',') ?? ['event', 'adaptive', 'busy']
).map((p) => {
  if (p !== 'event' && p !== 'adaptive' && p !== 'busy')
    throw new Error(`MUX_BENCH_POLICIES: ${p} is not event, adaptive or busy`);
  return p;
});
/** `MUX_BENCH_EAGER=<bytes>`: the RDMA eager threshold of both sides (the echo peer reads it too). */
const MUX_BENCH_EAGER =
  process.env.MUX_BENCH_EAGER === undefined ? undefined : Number(process.env.MUX_BENCH_EAGER);
const eagerOption = MUX_BENCH_EAGER === undefined ? {} : { eagerThreshold: MUX_BENCH_EAGER };
/** Channels of the "one QP per channel" ablation (a connection, so a QP, each). */
const QP_ABLATION = [16, 64];

/** The mux echo peer in its own process, with its CPU over IPC. */
class MuxPeer {
  #next = 1;
  readonly #pending = new Map<number, (v: number) => void>();
  private constructor(
    readonly proc: ChildProcess,
    readonly port: number,
  ) {
    proc.on('message', (m: { id?: number; result?: number }) => {
      const f = m.id === undefined ? undefined : this.#pending.get(m.id);
      if (f === undefined) return;
      this.#pending.delete(m.id as number);
      f(m.result as number);
    });
  }

  static async spawn(secret: string, args: string[] = ['tcp']): Promise<MuxPeer> {
    const script = peerScriptPath('../peers/mux-echo-peer', import.meta.url);
    const proc = fork(script, [secret, ...args], {
      execArgv: [...peerExecArgv],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const port = await new Promise<number>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('mux peer did not start within 30 s')), 30_000);
      proc.once('message', (m: { port: number }) => {
        clearTimeout(t);
        resolve(m.port);
      });
      proc.once('exit', (c) => reject(new Error(`mux peer exited during start (${c})`)));
    });
    return new MuxPeer(proc, port);
  }

  cpu(): Promise<number> {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('mux peer: cpu unanswered')), 30_000);
      this.#pending.set(id, (v) => {
        clearTimeout(t);
        resolve(v);
      });
      this.proc.send({ id, op: 'cpu' });
    });
  }

  close(): void {
    this.proc.kill('SIGKILL');
  }
}

/** How a row's transport is named: the table's transport column and its op suffix. */
interface Side {
  transport: Transport;
  /** '' for TCP; ' event' etc. for RDMA. */
  suffix: string;
  /** The TCP row an RDMA row compares with. */
  baselineOp?: string;
}

/**
 * JIT warm-up of the mux path, so the first row is not measured on cold code: one channel,
 * then many at once, at every concurrency a row measures (batched posts, several receives per
 * wake-up, credit and lease growth take other paths, whose first compilation cost a cold `x16`
 * row 4–5× the CPU of a repeat of it; x1024 alone stalls on credits and stops drains at the
 * copy-out mark: its row, 5 round trips per channel, cost RDMA 1.3–1.9× the CPU of a warm one).
 */
async function warmUp(conn: Connection, iterations: number): Promise<void> {
  const warm = new EchoChannel(conn.openChannel('warm-up'));
  await warm.roundTrips(new Uint8Array(64), Math.max(500, iterations));
  await warm.close();
  for (const n of CONCURRENCY) {
    if (n === 1) continue;
    const chs = Array.from({ length: n }, () => new EchoChannel(conn.openChannel('warm-up')));
    const per = Math.max(4, Math.ceil(iterations / n));
    await Promise.all(chs.map((ch) => ch.roundTrips(new Uint8Array(64), per)));
    await Promise.all(chs.map((ch) => ch.close()));
  }
}

/** One channel, round trips of `size` bytes (from `payload`, default plain bytes). */
async function muxRoundTrip(
  conn: Connection,
  peer: MuxPeer,
  side: Side,
  size: number,
  iterations: number,
  warmup: number,
  payload: OutboundMessage = new Uint8Array(size).fill(1),
  label = 'mux-rtt',
): Promise<Result> {
  const ch = new EchoChannel(conn.openChannel('rtt'));
  const rec = new LatencyRecorder();
  await ch.roundTrips(payload, warmup);
  const peerCpu0 = await peer.cpu();
  const cpu0 = cpuNowUs();
  const t0 = performance.now();
  await ch.roundTrips(payload, iterations, (us) => rec.record(us));
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuNowUs() - cpu0;
  const peerCpu = (await peer.cpu()) - peerCpu0;
  await ch.close();
  return {
    transport: side.transport,
    op: `${label}${side.suffix}`,
    sizeBytes: size,
    ...rec.summary(),
    cpuUsPerOp: (cpu + peerCpu) / iterations,
    // Both directions move `size` bytes per round trip.
    gibPerSec: (2 * size * iterations) / seconds / 2 ** 30,
    ...(side.baselineOp === undefined ? {} : { baselineOp: `${label}` }),
  };
}

/** `channels` channels on one connection, each doing round trips of 64 B at once. */
async function muxConcurrent(
  conns: Connection[],
  peer: MuxPeer,
  side: Side,
  channels: number,
  total: number,
  label = `mux-rtt x${channels}`,
): Promise<Result> {
  const per = Math.max(4, Math.ceil(total / channels));
  // Channels spread over the connections given (one: the pool; one each: a QP per channel).
  const chs = Array.from(
    { length: channels },
    (_, i) => new EchoChannel((conns[i % conns.length] as Connection).openChannel('conc')),
  );
  const payload = new Uint8Array(64).fill(3);
  await Promise.all(chs.map((ch) => ch.roundTrips(payload, 2)));
  const rec = new LatencyRecorder();
  const record = (us: number) => rec.record(us);
  const peerCpu0 = await peer.cpu();
  const cpu0 = cpuNowUs();
  const t0 = performance.now();
  await Promise.all(chs.map((ch) => ch.roundTrips(payload, per, record)));
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuNowUs() - cpu0;
  const peerCpu = (await peer.cpu()) - peerCpu0;
  await Promise.all(chs.map((ch) => ch.close()));
  const messages = per * channels;
  let qps = 0;
  for (const c of conns)
    if ('stats' in c) qps += ((c as RdmaConnection).stats().qps ?? 0) as number;
  return {
    transport: side.transport,
    op: `${label}${side.suffix}`,
    sizeBytes: 64,
    ...rec.summary(),
    cpuUsPerOp: (cpu + peerCpu) / messages,
    channels,
    roundTripsPerSec: messages / seconds,
    ...(side.transport === 'tcp' ? {} : { qps }),
    ...(side.baselineOp === undefined ? {} : { baselineOp: `mux-rtt x${channels}` }),
  };
}

/** The bench's RDMA client transport: the run's provider, the policy, the eager threshold. */
function rdmaClient(o: ScenarioOptions, policy: PollPolicy, qpPoolSize: number): RdmaTransport {
  const device = o.provider === 'soft' ? undefined : openDevice({ provider: o.provider });
  return new RdmaTransport({
    pollPolicy: policy,
    qpPoolSize,
    ...eagerOption,
    ...(device ? { device } : {}),
  });
}

/** Every RDMA row of one polling policy: its own peer process and client transport. */
async function rdmaRows(
  o: ScenarioOptions,
  secret: string,
  policy: PollPolicy,
  sizes: number[],
  progress: (label: string) => void,
  ablations: boolean,
): Promise<Result[]> {
  const results: Result[] = [];
  const transport = o.provider === 'soft' ? 'soft' : 'ibverbs';
  const side: Side = { transport, suffix: ` ${policy}`, baselineOp: 'mux-rtt' };
  const peer = await MuxPeer.spawn(secret, ['rdma', policy, o.provider]);
  const client = rdmaClient(o, policy, 2);
  const conn = await client.connect({ port: peer.port, secret, timeoutMs: 30_000 });
  try {
    progress(`rdma ${policy} warm-up`);
    await warmUp(conn, o.iterations);
    for (const size of sizes) {
      const iterations = iterationsFor(size, o.iterations);
      const warmup = warmupFor(size, iterations);
      progress(`rdma ${policy} channel round trip ${size} B`);
      results.push(await muxRoundTrip(conn, peer, side, size, iterations, warmup));
    }
    for (const n of CONCURRENCY) {
      progress(`rdma ${policy} ${n} concurrent channels, 64 B`);
      results.push(await muxConcurrent([conn], peer, side, n, Math.max(o.iterations, 4 * n)));
    }
    if (ablations) {
      // Zero-copy from the application's registered blocks against the bounce-buffer copy
      // the rows above pay for plain bytes: built in the connection's own pool, so a
      // rendezvous is READ in place (a block of the shared transport allocator is copied).
      for (const size of sizes.filter((s) => s >= 4096)) {
        const iterations = iterationsFor(size, o.iterations);
        const warmup = warmupFor(size, iterations);
        const block: Block = conn.allocator.alloc(size, 'remote-read');
        block.bytes.fill(1);
        progress(`rdma ${policy} round trip from an allocator block ${size} B`);
        const r = await muxRoundTrip(
          conn,
          peer,
          side,
          size,
          iterations,
          warmup,
          block,
          'mux-rtt block',
        );
        r.baselineOp = 'mux-rtt';
        results.push(r);
        block.release();
      }
    }
  } finally {
    conn.destroy();
    peer.close();
    client.close();
  }
  if (ablations) results.push(...(await qpPerChannel(o, secret, policy, side, progress)));
  return results;
}

/**
 * Ablation: a connection (so a QP, a CQ and a lease of receive buffers) per channel against the
 * pool (2 QPs for every channel): QPs, registered memory of this side, latency.
 */
async function qpPerChannel(
  o: ScenarioOptions,
  secret: string,
  policy: PollPolicy,
  side: Side,
  progress: (label: string) => void,
): Promise<Result[]> {
  const results: Result[] = [];
  for (const n of QP_ABLATION) {
    for (const perChannel of [false, true]) {
      const peer = await MuxPeer.spawn(secret, ['rdma', policy, o.provider]);
      const client = rdmaClient(o, policy, perChannel ? 1 : 2);
      const conns: Connection[] = [];
      try {
        for (let i = 0; i < (perChannel ? n : 1); i++)
          conns.push(await client.connect({ port: peer.port, secret, timeoutMs: 30_000 }));
        const label = perChannel ? `mux-rtt x${n} qp-per-channel` : `mux-rtt x${n} pool`;
        progress(`rdma ${policy} ${label}`);
        const r = await muxConcurrent(conns, peer, side, n, Math.max(o.iterations, 4 * n), label);
        r.registeredBytes = client.allocator.registeredBytes;
        results.push(r);
      } finally {
        for (const c of conns) c.destroy();
        peer.close();
        client.close();
      }
    }
  }
  return results;
}

/** Plain Node TCP ping-pong and mux over @rdmajs/tcp: the baselines of the same run. */
async function tcpRows(
  o: ScenarioOptions,
  secret: string,
  sizes: number[],
  progress: (label: string) => void,
): Promise<Result[]> {
  const results: Result[] = [];
  const side: Side = { transport: 'tcp', suffix: '' };

  const echo = await EchoPeer.spawn();
  const peer = await MuxPeer.spawn(secret);
  const conn = await new TcpTransport(TCP_BASELINE_OPTIONS).connect({
    port: peer.port,
    secret,
    timeoutMs: 30_000,
  });
  try {
    // JIT warm-up of the mux path, so the first row is not measured on cold code (plain
    // TCP's path is mostly native and needs none).
    progress('mux warm-up');
    await warmUp(conn, o.iterations);
    for (const size of sizes) {
      const iterations = iterationsFor(size, o.iterations);
      const warmup = warmupFor(size, iterations);
      progress(`tcp ping-pong ${size} B`);
      results.push(await tcpPingPong(echo, size, iterations, warmup));
      progress(`mux channel round trip ${size} B`);
      results.push(await muxRoundTrip(conn, peer, side, size, iterations, warmup));
    }
    for (const n of CONCURRENCY) {
      progress(`mux ${n} concurrent channels, 64 B`);
      results.push(await muxConcurrent([conn], peer, side, n, Math.max(o.iterations, 4 * n)));
    }
  } finally {
    conn.destroy();
    peer.close();
    await echo.close();
  }
  return results;
}

/**
 * The same-offered-load rows: TCP (@rdmajs/tcp) and RDMA under event and adaptive polling (busy
 * spins by design), each against its own echo peer, all connected at once so their rounds
 * interleave. The load is a fraction of TCP's x16 closed-loop capacity of this run.
 */
async function sameLoadRows(
  o: ScenarioOptions,
  secret: string,
  capacity: number,
  progress: (label: string) => void,
): Promise<Result[]> {
  const peers: MuxPeer[] = [];
  const closers: (() => void)[] = [];
  const targets: OpenLoopTarget[] = [];
  try {
    const tcpPeer = await MuxPeer.spawn(secret);
    peers.push(tcpPeer);
    const tcpConn = await new TcpTransport(TCP_BASELINE_OPTIONS).connect({
      port: tcpPeer.port,
      secret,
      timeoutMs: 30_000,
    });
    closers.push(() => tcpConn.destroy());
    targets.push({
      transport: 'tcp',
      suffix: '',
      conn: tcpConn,
      peerCpu: () => tcpPeer.cpu(),
      peerPid: tcpPeer.proc.pid,
    });
    for (const policy of POLICIES.filter((p) => p !== 'busy')) {
      const peer = await MuxPeer.spawn(secret, ['rdma', policy, o.provider]);
      peers.push(peer);
      const client = rdmaClient(o, policy, 2);
      closers.push(() => client.close());
      const conn = await client.connect({ port: peer.port, secret, timeoutMs: 30_000 });
      closers.push(() => conn.destroy());
      targets.push({
        transport: o.provider === 'soft' ? 'soft' : 'ibverbs',
        suffix: ` ${policy}`,
        conn,
        peerCpu: () => peer.cpu(),
        peerPid: peer.proc.pid,
      });
    }
    return await openLoopRows(targets, capacity, progress);
  } finally {
    for (const close of closers.reverse()) close();
    for (const p of peers) p.close();
  }
}

export const muxScenario: Scenario = {
  name: 'mux',
  description:
    'mux channels over RDMA (RdmaTransport: event, adaptive, busy polling) vs @rdmajs/tcp vs plain Node TCP: round trip 64 B … 16 MiB, 1 … 1024 concurrent channels, CPU of both processes; the same offered load (open loop, Poisson over 16 channels, 25 % and 50 % of the TCP x16 capacity) for TCP, event and adaptive in interleaved rounds; ablations: a QP per channel vs the pool, allocator blocks vs a bounce-buffer copy',
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const results: Result[] = [];
    // The full run reaches 16 MiB; --quick (small sizes only) stays quick.
    const sizes = [...o.sizes];
    if (Math.max(...sizes) >= MiB && !sizes.includes(16 * MiB)) sizes.push(16 * MiB);
    const secret = randomBytes(24).toString('hex');
    if (o.transports.includes('tcp')) results.push(...(await tcpRows(o, secret, sizes, progress)));
    if (o.transports.includes('rdma')) {
      for (const policy of POLICIES) {
        // Ablations once, under the policy the targets name.
        const rows = await rdmaRows(o, secret, policy, sizes, progress, policy === 'adaptive');
        results.push(...rows);
      }
    }
    // The same offered load for every transport: a fraction of TCP's closed-loop capacity.
    const capacity = results.find(
      (r) => r.transport === 'tcp' && r.op === `mux-rtt x${OPEN_CHANNELS}`,
    )?.roundTripsPerSec;
    if (typeof capacity === 'number' && o.transports.includes('rdma'))
      results.push(...(await sameLoadRows(o, secret, capacity, progress)));
    return results;
  },
  summarize(results: Result[]): string {
    const lines: string[] = openLoopSummary(results);
    const tcp = (op: string, size: number) =>
      results.find((x) => x.transport === 'tcp' && x.op === op && x.sizeBytes === size);
    for (const r of results.filter((x) => x.transport === 'tcp' && x.op === 'mux-rtt')) {
      const base = tcp('pingpong', r.sizeBytes);
      if (base === undefined) continue;
      lines.push(
        `mux over TCP / plain TCP at ${formatSize(r.sizeBytes)}: p50 ${(r.p50Us / base.p50Us).toFixed(2)}x, CPU/op ${(r.cpuUsPerOp / base.cpuUsPerOp).toFixed(2)}x`,
      );
    }
    for (const r of results.filter((x) => x.transport !== 'tcp' && x.op.startsWith('mux-rtt '))) {
      if (r.op.includes(' x')) continue;
      const base = tcp(r.baselineOp as string, r.sizeBytes);
      const plain = tcp('pingpong', r.sizeBytes);
      if (base === undefined) continue;
      const big = r.sizeBytes >= MiB && r.gibPerSec && base.gibPerSec;
      lines.push(
        `${r.op} / mux over TCP at ${formatSize(r.sizeBytes)}: p50 ${(r.p50Us / base.p50Us).toFixed(2)}x` +
          (plain ? ` (${(r.p50Us / plain.p50Us).toFixed(2)}x plain TCP)` : '') +
          `, CPU/op ${(r.cpuUsPerOp / base.cpuUsPerOp).toFixed(2)}x` +
          (big
            ? `, throughput ${((r.gibPerSec as number) / (base.gibPerSec as number)).toFixed(2)}x`
            : ''),
      );
    }
    for (const r of results.filter((x) => x.op.startsWith('mux-rtt x'))) {
      const base = r.transport === 'tcp' ? undefined : tcp(`mux-rtt x${r.channels}`, 64);
      lines.push(
        `${r.transport} ${r.op}: ${Math.round(r.roundTripsPerSec as number)} round trips/s, ${r.cpuUsPerOp.toFixed(1)} µs CPU per round trip (both processes)` +
          (typeof r.qps === 'number' ? `, ${r.qps} QPs` : '') +
          (typeof r.registeredBytes === 'number'
            ? `, ${formatSize(r.registeredBytes as number)} registered`
            : '') +
          (base ? `, p50 ${(r.p50Us / base.p50Us).toFixed(2)}x TCP` : ''),
      );
    }
    return lines.join('\n');
  },
};
