import { connect, type Socket } from 'node:net';
import type { EchoPeer } from '../peers/EchoPeer.js';
import { type Result, throughputResult } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { LatencyRecorder } from '../stats/LatencyRecorder.js';

async function open(port: number): Promise<Socket> {
  const sock = connect({ port, host: '127.0.0.1', noDelay: true });
  await new Promise<void>((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  sock.setNoDelay(true);
  return sock;
}

/** Waits until `bytes` more bytes have arrived on `sock` (a reusable, promise-per-wait reader). */
class Reader {
  #have = 0;
  #want = 0;
  #wake: (() => void) | undefined;

  constructor(sock: Socket) {
    sock.on('data', (d: Buffer) => {
      this.#have += d.length;
      if (this.#wake && this.#have >= this.#want) {
        const w = this.#wake;
        this.#wake = undefined;
        w();
      }
    });
  }

  take(bytes: number): Promise<void> | undefined {
    if (this.#have >= bytes) {
      this.#have -= bytes;
      return undefined;
    }
    this.#want = bytes;
    return new Promise<void>((resolve) => {
      this.#wake = () => {
        this.#have -= bytes;
        resolve();
      };
    });
  }
}

/** Node TCP loopback ping-pong, the fair baseline: setNoDelay, one connection, echo peer. */
export async function tcpPingPong(
  peer: EchoPeer,
  size: number,
  iterations: number,
  warmup: number,
): Promise<Result> {
  const { port } = await peer.call<{ port: number }>({ op: 'tcp-listen', size });
  const sock = await open(port);
  const reader = new Reader(sock);
  const payload = Buffer.alloc(size, 1);
  const rec = new LatencyRecorder();
  let cpu0 = 0;
  let peerCpu0 = 0;
  for (let k = 0; k < warmup + iterations; k++) {
    if (k === warmup) {
      peerCpu0 = await peer.call<number>({ op: 'cpu' });
      cpu0 = cpuNowUs();
    }
    const t0 = performance.now();
    sock.write(payload);
    const p = reader.take(size);
    if (p) await p;
    if (k >= warmup) rec.record((performance.now() - t0) * 1000);
  }
  const cpu = cpuNowUs() - cpu0;
  const peerCpu = (await peer.call<number>({ op: 'cpu' })) - peerCpu0;
  sock.destroy();
  return {
    transport: 'tcp',
    op: 'pingpong',
    sizeBytes: size,
    ...rec.summary(),
    cpuUsPerOp: (cpu + peerCpu) / iterations,
  };
}

/** One-way throughput: stream `count` messages of `size` bytes, the peer acks the last byte. */
export async function tcpThroughput(peer: EchoPeer, size: number, count: number): Promise<Result> {
  const { port } = await peer.call<{ port: number }>({
    op: 'tcp-listen',
    size,
    throughputBytes: size * count,
  });
  const sock = await open(port);
  const reader = new Reader(sock);
  const payload = Buffer.alloc(size, 2);
  const peerCpu0 = await peer.call<number>({ op: 'cpu' });
  const cpu0 = cpuNowUs();
  const t0 = performance.now();
  for (let i = 0; i < count; i++) {
    if (!sock.write(payload)) await new Promise((r) => sock.once('drain', r));
  }
  const p = reader.take(1);
  if (p) await p;
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuNowUs() - cpu0;
  const peerCpu = (await peer.call<number>({ op: 'cpu' })) - peerCpu0;
  sock.destroy();
  return throughputResult('tcp', 'throughput', size, count, seconds, cpu + peerCpu);
}
