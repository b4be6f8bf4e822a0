import { Etcd3 } from 'etcd3';
import type { Logger } from './Logger.js';

/**
 * Where shards register in etcd by default: `<prefix><shardId>` → `{"host","port","ports"}`
 * (`port`: the first listener's; `ports`: transport name → port, e.g. `{"rdma":…,"tcp":…}`).
 */
export const DEFAULT_ETCD_PREFIX = 'rdmajs/ps/shards/';

export interface EtcdRegistrationOptions {
  /** etcd client URLs, e.g. `['http://127.0.0.1:2379']`. */
  hosts: string[];
  /** Key prefix. Default `rdmajs/ps/shards/`. */
  prefix?: string;
  /** Lease TTL, seconds: a shard that stops renewing disappears after it. Default 5. */
  ttlSec?: number;
  /** The address clients should dial (default the listen address). */
  advertiseHost?: string;
  /**
   * On close, how long the shard keeps serving after leaving the map, ms, so clients route
   * elsewhere and their pushes already on the way are answered, not refused. Default 1000.
   */
  leaveGraceMs?: number;
}

/**
 * This shard's entry in the etcd shard map, under a lease kept alive while the shard
 * serves: a crashed shard vanishes from the map within the TTL; a closing one revokes the
 * lease first, so clients route elsewhere before it drains.
 */
export class ShardRegistration {
  readonly #client: Etcd3;
  readonly #lease: ReturnType<Etcd3['lease']>;
  readonly key: string;

  private constructor(client: Etcd3, lease: ReturnType<Etcd3['lease']>, key: string) {
    this.#client = client;
    this.#lease = lease;
    this.key = key;
  }

  static async register(
    o: EtcdRegistrationOptions,
    shard: { id: string; host: string; port: number; ports?: Record<string, number> },
    log: Logger,
  ): Promise<ShardRegistration> {
    const client = new Etcd3({ hosts: o.hosts, dialTimeout: 5000 });
    const lease = client.lease(o.ttlSec ?? 5);
    const key = `${o.prefix ?? DEFAULT_ETCD_PREFIX}${shard.id}`;
    lease.on('lost', (err) => log.log('error', 'etcd lease lost', { shard: shard.id, error: err }));
    try {
      await lease.put(key).value(
        JSON.stringify({
          host: o.advertiseHost ?? shard.host,
          port: shard.port,
          ...(shard.ports === undefined ? {} : { ports: shard.ports }),
        }),
      );
    } catch (err) {
      lease.release();
      client.close();
      throw err;
    }
    log.log('info', 'registered', { shard: shard.id, key, ttlSec: o.ttlSec ?? 5 });
    return new ShardRegistration(client, lease, key);
  }

  /** Removes the entry (revokes the lease) and closes the etcd client. Idempotent. */
  async close(): Promise<void> {
    await this.#lease.revoke().catch(() => {});
    this.#client.close();
  }
}
