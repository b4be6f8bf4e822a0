// Exactly-once, counted: 10 000 non-idempotent increments while the counter's server is
// SIGKILLed and restarted on the same address at random points (state and de-dup table
// persisted together by the service). The final count equals the increments the client saw
// succeed, and every other call failed with a typed error. Over TcpTransport and over
// RdmaTransport (soft provider).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ExponentialBackoff, RpcClient, RpcError } from '../src/index.js';
import { type Peer, spawnServer } from './support/spawn.js';
import { makeTransport } from './support/transports.js';

const secret = 'rpc-soak-secret-0123456789-abcdefghijklmnop';
const keyHex = '22'.repeat(32);
const TOTAL = 10_000;
const KILLS = 6;
const CONCURRENCY = 64;

/** A small seeded generator (mulberry32), so a failing run can be repeated. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe.each(['tcp', 'rdma'] as const)('over %s', (kind) => {
  it('exactly_once_counter_survives_random_server_kills', { timeout: 180_000 }, async () => {
    const seed = Number(process.env.RPC_SOAK_SEED ?? Date.now() % 1_000_000);
    const random = seeded(seed);
    const dir = mkdtempSync(join(tmpdir(), 'rpc-soak-'));
    const stateFile = join(dir, 'state.json');
    let peer: Peer = await spawnServer({
      port: 0,
      secret,
      key: keyHex,
      stateFile,
      transport: kind,
    });
    const port = peer.port;
    const transport = makeTransport(kind);
    const client = await RpcClient.connect({
      transport,
      port,
      secret,
      heartbeatIntervalMs: 200,
      heartbeatMisses: 5,
      connectTimeoutMs: 2000,
      backoff: new ExponentialBackoff({ baseMs: 10, capMs: 100, deadlineMs: 30_000, random }),
    });
    try {
      // Kill points: after a random number of successes, spread over the run.
      const killAt = Array.from({ length: KILLS }, () =>
        Math.floor(200 + random() * (TOTAL - 400)),
      );
      killAt.sort((a, b) => a - b);
      let issued = 0;
      let succeeded = 0;
      const failures: unknown[] = [];
      let restarting: Promise<void> | undefined;
      let kills = 0;
      const worker = async (): Promise<void> => {
        while (issued < TOTAL) {
          issued++;
          try {
            await client.call('inc', new Uint8Array(0), { deadlineMs: 30_000 });
            succeeded++;
          } catch (err) {
            failures.push(err);
          }
          if (restarting === undefined && kills < KILLS && succeeded >= (killAt[kills] as number)) {
            kills++;
            restarting = (async () => {
              await peer.kill();
              peer = await spawnServer({ port, secret, key: keyHex, stateFile, transport: kind });
              restarting = undefined;
            })();
          }
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
      await restarting;
      const count = await peer.ask<number>('count');
      const codes = failures.map((e) => (e instanceof RpcError ? e.code : String(e)));
      expect({ seed, kills, count, failures: codes }).toEqual({
        seed,
        kills: KILLS,
        count: succeeded,
        failures: codes.filter((c) => c.startsWith('ERR_RPC_')),
      });
      expect(succeeded + failures.length).toBe(TOTAL);
      const stats = client.stats();
      if (process.env.RPC_SOAK_VERBOSE)
        console.info({ seed, count, failures: codes.length, ...stats });
      expect(stats.reconnects).toBeGreaterThanOrEqual(KILLS);
      // Calls were in flight at every kill: the replay path was taken.
      expect(stats.replayed).toBeGreaterThan(0);
    } finally {
      await client.close();
      transport.close?.();
      await peer.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
