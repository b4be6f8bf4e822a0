import { ShardRouter } from '@rdmajs/ps-client';
import type { SparseTableConfig } from '@rdmajs/ps-server';
import { GrpcStoreClient } from './GrpcStoreClient.js';

/**
 * The client side of the parameter server as a Node user would build it on gRPC today (one
 * `@grpc/grpc-js` server per shard, `GrpcStoreServer`): one channel per shard, keys routed by
 * the same rendezvous hashing as `PsClient`, each batch split by shard, sent in parallel and
 * put back in request order.
 */
export class GrpcShardedStore {
  readonly #router: ShardRouter;
  /** Next seq per writer: the store de-duplicates by (session, seq), in order per session. */
  readonly #seqs: number[] = [];

  private constructor(
    readonly clients: readonly GrpcStoreClient[],
    readonly dims: ReadonlyMap<string, number>,
  ) {
    this.#router = new ShardRouter(clients.map((_, i) => `g${i}`));
  }

  /** A channel to each shard (`ports`, in shard order) serving `tables`. */
  static connect(ports: readonly number[], tables: readonly SparseTableConfig[]): GrpcShardedStore {
    return new GrpcShardedStore(
      ports.map((p) => new GrpcStoreClient(p)),
      new Map(tables.map((t) => [t.name, t.dim])),
    );
  }

  /** Rows of `keys` in request order (keys.length × dim). */
  async pull(table: string, keys: BigUint64Array): Promise<Float32Array> {
    const dim = this.#dimOf(table);
    const { shardOf, parts } = this.#split(keys);
    const replies = await Promise.all(
      parts.map((k, s) => (k.length === 0 ? undefined : this.clients[s]?.pull(table, k))),
    );
    const out = new Float32Array(keys.length * dim);
    const next = new Uint32Array(parts.length);
    for (let i = 0; i < keys.length; i++) {
      const s = shardOf[i] as number;
      const j = (next[s] as number)++;
      out.set((replies[s] as Float32Array).subarray(j * dim, (j + 1) * dim), i * dim);
    }
    return out;
  }

  /**
   * Applies `grads` on every shard holding some of `keys`; resolves when all applied. Each
   * `writer` is one session with its own seqs: one push at a time per writer.
   */
  async push(table: string, keys: BigUint64Array, grads: Float32Array, writer = 0): Promise<void> {
    const dim = this.#dimOf(table);
    const { shardOf, parts } = this.#split(keys);
    const g = parts.map((k) => new Float32Array(k.length * dim));
    const next = new Uint32Array(parts.length);
    for (let i = 0; i < keys.length; i++) {
      const s = shardOf[i] as number;
      const j = (next[s] as number)++;
      (g[s] as Float32Array).set(grads.subarray(i * dim, (i + 1) * dim), j * dim);
    }
    const seq = (this.#seqs[writer] ?? 0) + 1;
    this.#seqs[writer] = seq;
    await Promise.all(
      parts.map(async (k, s) => {
        if (k.length === 0) return;
        const r = await this.clients[s]?.push(table, k, g[s] as Float32Array, {
          session: `bench-grpc-${writer}`,
          seq,
        });
        if (!r?.applied) throw new Error(`grpc push to shard ${s} not applied`);
      }),
    );
  }

  close(): void {
    for (const c of this.clients) c.close();
  }

  #dimOf(table: string): number {
    const d = this.dims.get(table);
    if (d === undefined) throw new Error(`grpc baseline: no table ${table}`);
    return d;
  }

  #split(keys: BigUint64Array): { shardOf: Uint32Array; parts: BigUint64Array[] } {
    const shardOf = this.#router.route(keys);
    const counts = new Uint32Array(this.clients.length);
    for (let i = 0; i < keys.length; i++) (counts[shardOf[i] as number] as number)++;
    const parts = Array.from(counts, (n) => new BigUint64Array(n));
    const fill = new Uint32Array(counts.length);
    for (let i = 0; i < keys.length; i++) {
      const s = shardOf[i] as number;
      (parts[s] as BigUint64Array)[(fill[s] as number)++] = keys[i] as bigint;
    }
    return { shardOf, parts };
  }
}
