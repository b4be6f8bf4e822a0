// `pnpm bench mux`: the mux contract over TCP (@rdmajs/tcp) against plain Node TCP, in one
// run: channel round trip per size, and many concurrent channels on one connection, with
// the CPU of both processes. RdmaTransport rows join when it exists.
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { Channel, Connection } from '@rdmajs/mux';
import { TcpTransport } from '@rdmajs/tcp';
import { EchoPeer } from '../peers/EchoPeer.js';
import type { Result } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { LatencyRecorder } from '../stats/LatencyRecorder.js';
import { iterationsFor, warmupFor } from './iterations.js';
import type { Scenario, ScenarioOptions } from './Scenario.js';
import { tcpPingPong } from './tcp.js';

const MiB = 1 << 20;
const LONG = { timeoutMs: 180_000 };
const CONCURRENCY = [1, 16, 256, 1024];

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

  static async spawn(secret: string): Promise<MuxPeer> {
    const script = fileURLToPath(new URL('../peers/mux-echo-peer.ts', import.meta.url));
    const proc = fork(script, [secret], {
      execArgv: ['--import', 'tsx', '--conditions=@rdmajs/source'],
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

async function roundTrips(
  ch: Channel,
  payload: Uint8Array,
  n: number,
  rec: LatencyRecorder | undefined,
): Promise<void> {
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await ch.send(payload, LONG);
    const m = await ch.receive(LONG);
    m.release();
    rec?.record((performance.now() - t0) * 1000);
  }
}

/** One channel, round trips of `size` bytes. */
async function muxRoundTrip(
  conn: Connection,
  peer: MuxPeer,
  size: number,
  iterations: number,
  warmup: number,
): Promise<Result> {
  const ch = conn.openChannel('rtt');
  const payload = new Uint8Array(size).fill(1);
  const rec = new LatencyRecorder();
  await roundTrips(ch, payload, warmup, undefined);
  const peerCpu0 = await peer.cpu();
  const cpu0 = cpuNowUs();
  await roundTrips(ch, payload, iterations, rec);
  const cpu = cpuNowUs() - cpu0;
  const peerCpu = (await peer.cpu()) - peerCpu0;
  await ch.close(LONG);
  return {
    transport: 'tcp',
    op: 'mux-rtt',
    sizeBytes: size,
    ...rec.summary(),
    cpuUsPerOp: (cpu + peerCpu) / iterations,
  };
}

/** `channels` channels on one connection, each doing round trips of 64 B at once. */
async function muxConcurrent(
  conn: Connection,
  peer: MuxPeer,
  channels: number,
  total: number,
): Promise<Result> {
  const per = Math.max(4, Math.ceil(total / channels));
  const chs = Array.from({ length: channels }, () => conn.openChannel('conc'));
  const payload = new Uint8Array(64).fill(3);
  await Promise.all(chs.map((ch) => roundTrips(ch, payload, 2, undefined)));
  const rec = new LatencyRecorder();
  const peerCpu0 = await peer.cpu();
  const cpu0 = cpuNowUs();
  const t0 = performance.now();
  await Promise.all(chs.map((ch) => roundTrips(ch, payload, per, rec)));
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuNowUs() - cpu0;
  const peerCpu = (await peer.cpu()) - peerCpu0;
  await Promise.all(chs.map((ch) => ch.close(LONG)));
  const messages = per * channels;
  return {
    transport: 'tcp',
    op: `mux-rtt x${channels}`,
    sizeBytes: 64,
    ...rec.summary(),
    cpuUsPerOp: (cpu + peerCpu) / messages,
    channels,
    roundTripsPerSec: messages / seconds,
  };
}

export const muxScenario: Scenario = {
  name: 'mux',
  description:
    'mux channels over @rdmajs/tcp vs plain Node TCP: round trip 64 B … 16 MiB, 1 … 1024 concurrent channels, CPU of both processes',
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const results: Result[] = [];
    if (!o.transports.includes('tcp')) return results; // RdmaTransport rows come later
    // The full run reaches 16 MiB; --quick (small sizes only) stays quick.
    const sizes = [...o.sizes];
    if (Math.max(...sizes) >= MiB && !sizes.includes(16 * MiB)) sizes.push(16 * MiB);
    const secret = randomBytes(24).toString('hex');
    const echo = await EchoPeer.spawn();
    const peer = await MuxPeer.spawn(secret);
    const conn = await new TcpTransport().connect({ port: peer.port, secret, timeoutMs: 30_000 });
    try {
      // JIT warm-up of the mux path, so the first row is not measured on cold code (plain
      // TCP's path is mostly native and needs none).
      progress('mux warm-up');
      const warm = conn.openChannel('warm-up');
      await roundTrips(warm, new Uint8Array(64), Math.max(500, o.iterations), undefined);
      await warm.close(LONG);
      for (const size of sizes) {
        const iterations = iterationsFor(size, o.iterations);
        const warmup = warmupFor(size, iterations);
        progress(`tcp ping-pong ${size} B`);
        results.push(await tcpPingPong(echo, size, iterations, warmup));
        progress(`mux channel round trip ${size} B`);
        results.push(await muxRoundTrip(conn, peer, size, iterations, warmup));
      }
      for (const n of CONCURRENCY) {
        progress(`mux ${n} concurrent channels, 64 B`);
        results.push(await muxConcurrent(conn, peer, n, Math.max(o.iterations, 4 * n)));
      }
    } finally {
      conn.destroy();
      peer.close();
      await echo.close();
    }
    return results;
  },
  summarize(results: Result[]): string {
    const lines: string[] = [];
    for (const r of results.filter((x) => x.op === 'mux-rtt')) {
      const base = results.find((x) => x.op === 'pingpong' && x.sizeBytes === r.sizeBytes);
      if (base === undefined) continue;
      lines.push(
        `mux/plain TCP at ${r.sizeBytes} B: p50 ${(r.p50Us / base.p50Us).toFixed(2)}x, CPU/op ${(r.cpuUsPerOp / base.cpuUsPerOp).toFixed(2)}x`,
      );
    }
    for (const r of results.filter((x) => x.op.startsWith('mux-rtt x'))) {
      lines.push(
        `${r.channels} channels: ${Math.round(r.roundTripsPerSec as number)} round trips/s, ${r.cpuUsPerOp.toFixed(1)} µs CPU per round trip (both processes)`,
      );
    }
    return lines.join('\n');
  },
};
