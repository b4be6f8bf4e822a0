import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PsClientPeer } from '../src/peers/PsClientPeer.js';
import { PsShardSet } from '../src/peers/PsShardSet.js';
import type { PsClientPeerArgs } from '../src/peers/psClientProtocol.js';
import { psTableName } from '../src/peers/psWorkload.js';
import { alive } from './fixtures/alive.js';

const SECRET = 'rdmajs-bench-ps-peer-test-secret-0123';
const DIM = 8;

/** Waits (at most `ms`) for `pid` to be gone. */
async function gone(pid: number, ms = 20_000): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; ) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return !alive(pid);
}

describe('ps client peer (one transport’s PsClient in its own process)', () => {
  let set: PsShardSet | undefined;
  const args = (side: 'tcp' | 'rdma'): PsClientPeerArgs => ({
    side,
    servers: (set as PsShardSet).servers(side),
    secret: SECRET,
    provider: 'soft',
  });

  beforeAll(async () => {
    set = await PsShardSet.start({
      shards: 1,
      tables: [{ name: psTableName(DIM), dim: DIM, optimizer: { kind: 'sgd', lr: 0.01 } }],
      secret: SECRET,
      transports: ['tcp', 'rdma'],
      provider: 'soft',
      idPrefix: 'peer-test-',
    });
  }, 120_000);
  afterAll(() => set?.stop());

  it.each(['tcp', 'rdma'] as const)(
    '%s: runs a measured block and reports one latency per call and its CPU',
    async (side) => {
      const peer = await PsClientPeer.spawn(args(side));
      try {
        await peer.warmUp(5, [DIM]);
        const block = { dim: DIM, batch: 16, seed: 7, from: 0, n: 20 };
        const t0 = performance.now();
        const r = await peer.block({ ...block, call: 'pull', measure: true });
        const requestUs = (performance.now() - t0) * 1000;
        expect(r.latenciesUs).toBeInstanceOf(Float64Array);
        expect(r.latenciesUs.length).toBe(20);
        for (const us of r.latenciesUs) expect(us).toBeGreaterThan(0);
        // The calls are timed inside the request: their sum cannot exceed it.
        expect(r.latenciesUs.reduce((a, b) => a + b, 0)).toBeLessThan(requestUs);
        expect(r.cpuUs).toBeGreaterThan(0);
        // A warm-up block makes its calls but sends no latencies back.
        const w = await peer.block({ ...block, call: 'push', measure: false });
        expect(w.latenciesUs.length).toBe(0);
        expect(w.cpuUs).toBeGreaterThan(0);
      } finally {
        await peer.close();
      }
      expect(alive(peer.pid)).toBe(false);
    },
  );

  it('a failed call is an error of that request; the peer keeps serving', async () => {
    const peer = await PsClientPeer.spawn(args('tcp'));
    try {
      const block = { batch: 4, seed: 1, from: 0, n: 2, call: 'pull', measure: true } as const;
      await expect(peer.block({ ...block, dim: 999 })).rejects.toThrow(/ps tcp client peer: /);
      expect((await peer.block({ ...block, dim: DIM })).latenciesUs.length).toBe(2);
    } finally {
      await peer.close();
    }
  });

  it('a peer that misses its deadline is killed before the error is seen', async () => {
    const peer = await PsClientPeer.spawn(args('rdma'));
    try {
      const block = { dim: DIM, batch: 16, seed: 1, from: 0, n: 1_000_000, measure: false };
      await expect(peer.block({ ...block, call: 'pull' }, 200)).rejects.toThrow(/timed out/);
      expect(alive(peer.pid)).toBe(false);
      await expect(peer.warmUp(1, [DIM])).rejects.toThrow(/not running/);
    } finally {
      await peer.close();
    }
  });

  it('a peer exits by itself when the bench dies without closing it', async () => {
    const fixture = fileURLToPath(new URL('./fixtures/abandon-ps-client-peer.ts', import.meta.url));
    const bench = spawn(
      process.execPath,
      ['--conditions=@rdmajs/source', '--import', 'tsx', fixture, JSON.stringify(args('tcp'))],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    bench.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => bench.once('exit', resolve));
    expect(code).toBe(3);
    const pid = Number(out.trim());
    expect(pid).toBeGreaterThan(0);
    const exited = await gone(pid);
    if (!exited) process.kill(pid, 'SIGKILL'); // this test leaves no process either way
    expect(exited).toBe(true);
  });
});
