import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { TcpTransport } from '@rdmajs/tcp';

/** Starts `n` shards in this process on loopback (what `rdmajs-ps-server` runs, one per process). */
export async function startLocalShards(
  n: number,
  tables: unknown,
  secret: string,
): Promise<{ servers: string[]; close(): Promise<void> }> {
  const services = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      PsService.start({
        transport: new TcpTransport(),
        secret,
        shardId: `shard${i}`,
        tables: parseServiceTables(tables),
      }),
    ),
  );
  return {
    servers: services.map((s) => `127.0.0.1:${s.port}`),
    close: async () => {
      await Promise.all(services.map((s) => s.close()));
    },
  };
}

/** A small seeded generator (mulberry32), so every run sees the same data. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A standard normal draw (Box–Muller). */
export function gaussian(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

/** The key of feature `id` in categorical field `field`. */
export const featureKey = (field: number, id: number): bigint =>
  (BigInt(field) << 32n) | BigInt(id);
