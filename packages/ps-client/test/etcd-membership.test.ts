import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ParameterStore } from '@rdmajs/ps-server';
import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { TcpTransport } from '@rdmajs/tcp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PsClient } from '../src/index.js';
import { type EtcdProcess, haveEtcd, startEtcd } from './support/etcdProcess.js';

// Debian's etcd-server, started here on loopback ports (skipped with a message without it).
if (!haveEtcd)
  console.warn('etcd-membership: skipped (no `etcd` binary: apt-get install etcd-server)');

const secret = 'ps-etcd-secret-0123456789abcdef-abcdefghijklmnop';
const spec = { tables: [{ name: 'cnt', dim: 1, optimizer: { kind: 'sum' } }] };

describe.skipIf(!haveEtcd)('shard map in etcd', () => {
  let etcd: EtcdProcess;
  const services: PsService[] = [];
  const start = async (id: string, prefix?: string, dir?: string) => {
    const s = await PsService.start({
      transport: new TcpTransport(),
      secret,
      shardId: id,
      tables: parseServiceTables(spec),
      ...(dir === undefined ? {} : { dir }),
      etcd: { hosts: [etcd.url], ttlSec: 3, ...(prefix === undefined ? {} : { prefix }) },
    });
    services.push(s);
    return s;
  };

  beforeAll(async () => {
    etcd = await startEtcd();
  });

  afterAll(async () => {
    await Promise.allSettled(services.map((s) => s.close()));
    await etcd?.stop();
  });

  it('a shard added during a push stream: rerouted, nothing lost or duplicated', async () => {
    await start('e0');
    await start('e1');
    const client = await PsClient.connect({
      etcd: { hosts: [etcd.url] },
      transport: new TcpTransport(),
      secret,
    });
    try {
      expect([...client.shards]).toEqual(['e0', 'e1']);
      const pool = Array.from({ length: 300 }, (_, i) => BigInt(i) * 0x9e3779b97f4a7c15n + 17n);
      const expected = new Map<bigint, number>();
      let x = 12345;
      const rnd = () => {
        x = (Math.imul(x, 1103515245) + 12345) >>> 0;
        return x / 2 ** 32;
      };
      const inFlight = new Set<Promise<unknown>>();
      for (let i = 0; i < 300; i++) {
        if (i === 100) {
          await start('e2');
          // Traffic goes on while the client learns of it (bounded wait).
          for (let t = 0; t < 200 && client.shards.length < 3; t++) {
            await new Promise((r) => setTimeout(r, 25));
            if (inFlight.size > 0) await Promise.race(inFlight);
          }
          expect([...client.shards]).toEqual(['e0', 'e1', 'e2']);
        }
        // Every push adds 1 to each of its keys (duplicates within a push add more).
        const keys = BigUint64Array.from(
          { length: 16 },
          () => pool[Math.floor(rnd() * pool.length)] as bigint,
        );
        for (const k of keys) expected.set(k, (expected.get(k) ?? 0) + 1);
        const p = client.push('cnt', keys, new Float32Array(16).fill(1));
        inFlight.add(p);
        void p.finally(() => inFlight.delete(p)).catch(() => {});
        while (inFlight.size >= 8) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
      // Each key's count summed over every shard's store: each push landed exactly once.
      const one = new Float32Array(1);
      let onNew = 0;
      for (const [k, n] of expected) {
        let total = 0;
        for (const s of services) {
          s.store.pullInto('cnt', BigUint64Array.of(k), one);
          total += one[0] as number;
          if (s === services[2]) onNew += one[0] as number;
        }
        expect(total, `key ${k}`).toBe(n);
      }
      expect(onNew).toBeGreaterThan(0); // the new shard took its share after it joined
    } finally {
      await client.close();
    }
  });

  it('a shard leaving the map during a push stream: its keys move, nothing lost or duplicated', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ps-leave-'));
    const prefix = 'leave/';
    const f0 = await start('f0', prefix);
    const f1 = await start('f1', prefix, dir);
    const f2 = await start('f2', prefix);
    const client = await PsClient.connect({
      etcd: { hosts: [etcd.url], prefix },
      transport: new TcpTransport(),
      secret,
    });
    try {
      expect([...client.shards]).toEqual(['f0', 'f1', 'f2']);
      const pool = Array.from({ length: 300 }, (_, i) => BigInt(i) * 0x9e3779b97f4a7c15n + 5n);
      const expected = new Map<bigint, number>();
      let x = 777;
      const rnd = () => {
        x = (Math.imul(x, 1103515245) + 12345) >>> 0;
        return x / 2 ** 32;
      };
      const inFlight = new Set<Promise<unknown>>();
      let leaving: Promise<void> | undefined;
      for (let i = 0; i < 300; i++) {
        if (i === 150) {
          leaving = f1.close(); // leaves the map, serves its grace period, drains, snapshots
          for (let t = 0; t < 200 && client.shards.length > 2; t++) {
            await new Promise((r) => setTimeout(r, 25));
            if (inFlight.size > 0) await Promise.race(inFlight);
          }
          expect([...client.shards]).toEqual(['f0', 'f2']);
        }
        const keys = BigUint64Array.from(
          { length: 16 },
          () => pool[Math.floor(rnd() * pool.length)] as bigint,
        );
        for (const k of keys) expected.set(k, (expected.get(k) ?? 0) + 1);
        const p = client.push('cnt', keys, new Float32Array(16).fill(1));
        inFlight.add(p);
        void p.finally(() => inFlight.delete(p)).catch(() => {});
        while (inFlight.size >= 8) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
      await leaving;
      // The shard that left keeps what it was given: read it back from its directory.
      const { tables, dense } = parseServiceTables(spec);
      const left = await ParameterStore.open({ tables, dense, dir });
      const one = new Float32Array(1);
      try {
        for (const [k, n] of expected) {
          let total = 0;
          for (const store of [f0.store, left, f2.store]) {
            store.pullInto('cnt', BigUint64Array.of(k), one);
            total += one[0] as number;
          }
          expect(total, `key ${k}`).toBe(n);
        }
      } finally {
        await left.close();
        rmSync(dir, { recursive: true, force: true });
      }
    } finally {
      await client.close();
    }
  });
});
