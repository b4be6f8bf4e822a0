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

const ROUNDS_TIMEOUT_MS = 180_000;

/**
 * `n` round trips driven from the socket's 'data' callback: the next message goes out as
 * soon as the whole reply is in, with no promise or await per round trip (which would add
 * a microtask hop and a timer-phase delay to every sample). Records into `rec` if given.
 */
function rounds(
  sock: Socket,
  payload: Buffer,
  n: number,
  rec: LatencyRecorder | undefined,
): Promise<void> {
  const size = payload.length;
  return new Promise<void>((resolve, reject) => {
    let k = 0;
    let have = 0;
    let t0 = 0;
    const done = (err?: Error) => {
      clearTimeout(timer);
      sock.off('data', onData);
      sock.off('error', done);
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(
      () => done(new Error(`tcp ping-pong ${size} B: no reply in ${ROUNDS_TIMEOUT_MS} ms`)),
      ROUNDS_TIMEOUT_MS,
    );
    const onData = (d: Buffer) => {
      have += d.length;
      if (have < size) return;
      if (have > size) return done(new Error(`tcp ping-pong ${size} B: peer sent extra bytes`));
      have = 0;
      rec?.record((performance.now() - t0) * 1000);
      if (++k === n) return done();
      t0 = performance.now();
      sock.write(payload);
    };
    sock.on('data', onData);
    sock.on('error', done);
    t0 = performance.now();
    sock.write(payload);
  });
}

/**
 * Node TCP loopback ping-pong, the fair baseline: setNoDelay, one connection, echo peer.
 * Samples go into `rec` (a caller pooling rounds passes its own).
 */
export async function tcpPingPong(
  peer: EchoPeer,
  size: number,
  iterations: number,
  warmup: number,
  rec: LatencyRecorder = new LatencyRecorder(),
): Promise<Result> {
  const { port } = await peer.call<{ port: number }>({ op: 'tcp-listen', size });
  const sock = await open(port);
  const payload = Buffer.alloc(size, 1);
  try {
    await rounds(sock, payload, warmup, undefined);
    const peerCpu0 = await peer.call<number>({ op: 'cpu' });
    const cpu0 = cpuNowUs();
    await rounds(sock, payload, iterations, rec);
    const cpu = cpuNowUs() - cpu0;
    const peerCpu = (await peer.call<number>({ op: 'cpu' })) - peerCpu0;
    return {
      transport: 'tcp',
      op: 'pingpong',
      sizeBytes: size,
      ...rec.summary(),
      cpuUsPerOp: (cpu + peerCpu) / iterations,
    };
  } finally {
    sock.destroy();
  }
}

/**
 * Streams `count` messages of `size` bytes, then waits for the peer's one-byte ack of the
 * last one, all from callbacks ('drain' and 'data'), like the ping-pong: no promise per step.
 */
function stream(sock: Socket, payload: Buffer, count: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let sent = 0;
    const done = (err?: Error) => {
      clearTimeout(timer);
      sock.off('data', onData);
      sock.off('drain', pump);
      sock.off('error', done);
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(
      () => done(new Error(`tcp throughput: no ack in ${ROUNDS_TIMEOUT_MS} ms`)),
      ROUNDS_TIMEOUT_MS,
    );
    const onData = (d: Buffer) => {
      if (sent < count || d.length !== 1) return done(new Error('tcp throughput: unexpected ack'));
      done();
    };
    function pump() {
      while (sent < count) {
        sent++;
        if (!sock.write(payload)) return;
      }
    }
    sock.on('data', onData);
    sock.on('drain', pump);
    sock.on('error', done);
    pump();
  });
}

/** One-way throughput: stream `count` messages of `size` bytes, the peer acks the last byte. */
export async function tcpThroughput(peer: EchoPeer, size: number, count: number): Promise<Result> {
  const { port } = await peer.call<{ port: number }>({
    op: 'tcp-listen',
    size,
    throughputBytes: size * count,
  });
  const sock = await open(port);
  const payload = Buffer.alloc(size, 2);
  try {
    const peerCpu0 = await peer.call<number>({ op: 'cpu' });
    const cpu0 = cpuNowUs();
    const t0 = performance.now();
    await stream(sock, payload, count);
    const seconds = (performance.now() - t0) / 1000;
    const cpu = cpuNowUs() - cpu0;
    const peerCpu = (await peer.call<number>({ op: 'cpu' })) - peerCpu0;
    return throughputResult('tcp', 'throughput', size, count, seconds, cpu + peerCpu);
  } finally {
    sock.destroy();
  }
}
