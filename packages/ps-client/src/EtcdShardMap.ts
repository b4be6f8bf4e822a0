import { EventEmitter } from 'node:events';
import { Etcd3 } from 'etcd3';
import type { TransportPorts } from './ClientTransports.js';
import { PsClientError } from './errors.js';
import type { ShardAddress } from './ShardLink.js';

export interface EtcdShardMapOptions {
  /** etcd client URLs, e.g. `['http://127.0.0.1:2379']`. */
  hosts: string[];
  /** Where shards register (`<prefix><shardId>` → `{"host","port","ports"?}`). Default `rdmajs/ps/shards/`. */
  prefix?: string;
}

const isPort = (v: unknown): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 65_535;

function parseEntry(id: string, value: string): ShardAddress | undefined {
  try {
    const v = JSON.parse(value) as { host?: unknown; port?: unknown; ports?: unknown };
    if (typeof v.host === 'string' && isPort(v.port) && /^[A-Za-z0-9_-]{1,64}$/.test(id)) {
      // Ports per transport (a shard on RDMA and TCP at once); anything else in it is ignored.
      const ports: TransportPorts = {};
      const p = v.ports as Record<string, unknown> | null | undefined;
      if (p !== null && typeof p === 'object') {
        if (isPort(p.rdma)) ports.rdma = p.rdma;
        if (isPort(p.tcp)) ports.tcp = p.tcp;
      }
      return { host: v.host, port: v.port, ports };
    }
  } catch {
    // not ours: ignored
  }
  return undefined;
}

/**
 * The shard map as etcd holds it: read once, then watched from the revision read, so no
 * change between the read and the watch is missed. Emits `'change'` with the whole map.
 * Entries that do not parse are ignored (another writer's keys under the prefix).
 */
export class EtcdShardMap extends EventEmitter<{
  change: [Map<string, ShardAddress>];
  error: [Error];
}> {
  readonly #client: Etcd3;
  readonly #prefix: string;
  readonly #map = new Map<string, ShardAddress>();
  #watcher: Awaited<ReturnType<ReturnType<Etcd3['watch']>['create']>> | undefined;

  private constructor(client: Etcd3, prefix: string) {
    super();
    this.#client = client;
    this.#prefix = prefix;
  }

  static async open(o: EtcdShardMapOptions): Promise<EtcdShardMap> {
    if (!Array.isArray(o?.hosts) || o.hosts.length === 0) {
      throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', 'etcd.hosts must be a non-empty list');
    }
    const client = new Etcd3({ hosts: o.hosts, dialTimeout: 5000 });
    const m = new EtcdShardMap(client, o.prefix ?? 'rdmajs/ps/shards/');
    try {
      const res = await client.getAll().prefix(m.#prefix).exec();
      for (const kv of res.kvs) m.#set(kv.key.toString(), kv.value.toString());
      const rev = BigInt(res.header.revision) + 1n;
      const w = await client.watch().prefix(m.#prefix).startRevision(rev.toString()).create();
      m.#watcher = w;
      w.on('put', (kv) => {
        m.#set(kv.key.toString(), kv.value.toString());
        m.emit('change', new Map(m.#map));
      });
      w.on('delete', (kv) => {
        m.#map.delete(kv.key.toString().slice(m.#prefix.length));
        m.emit('change', new Map(m.#map));
      });
      w.on('error', (err) => m.emit('error', err));
    } catch (err) {
      client.close();
      throw new PsClientError('ERR_PS_CLIENT_UNAVAILABLE', `etcd: ${(err as Error).message}`, {
        cause: err,
      });
    }
    return m;
  }

  #set(key: string, value: string): void {
    const id = key.slice(this.#prefix.length);
    const a = parseEntry(id, value);
    if (a !== undefined) this.#map.set(id, a);
  }

  get shards(): Map<string, ShardAddress> {
    return new Map(this.#map);
  }

  async close(): Promise<void> {
    await this.#watcher?.cancel().catch(() => {});
    this.#client.close();
  }
}
