import { randomBytes } from 'node:crypto';
import {
  type MessagePart,
  RdmaTransport,
  type RdmaTransportOptions,
  type SharedSecret,
  type Transport,
} from '@rdmajs/mux';
import { firstNonFinite } from '@rdmajs/ps-server';
import {
  decodePullDenseReply,
  decodePullReply,
  decodePushReply,
  decodeTableInfoReply,
  encodePullDenseRequest,
  encodePushDenseRequestInto,
  encodePushRequest,
  encodeTableInfoRequest,
  type InitFn,
  initRowFn,
  MAX_MESSAGE_BYTES,
  PsMessageKind,
  PsMethod,
  type PushReply,
  pushDenseRequestLength,
  pushRequestLength,
  type TableInfo,
  writePushRequestHead,
} from '@rdmajs/ps-wire';
import type { BackoffPolicy, RpcReply } from '@rdmajs/rpc-recovery';
import type { TcpTransportOptions } from '@rdmajs/tcp';
import { ClientTransports, type TransportChoice, type TransportPorts } from './ClientTransports.js';
import { EtcdShardMap, type EtcdShardMapOptions } from './EtcdShardMap.js';
import { PsClientError } from './errors.js';
import { Deduper, halvesOf, LITTLE_ENDIAN } from './internal/dedupe.js';
import { DEFAULT_ONE_SIDED_MAX_LOAD, LoadGate } from './internal/LoadGate.js';
import {
  DEFAULT_ONE_SIDED_BUSY_MAX_KEYS,
  DEFAULT_ONE_SIDED_READERS,
  DEFAULT_ONE_SIDED_SLOT_HINTS,
  LinkReads,
  MAX_ONE_SIDED_READERS,
  MAX_ONE_SIDED_SLOT_HINTS,
  ONE_SIDED_MAX_KEYS,
  type OneSidedConfig,
  type OneSidedStats,
  ReadRows,
} from './internal/OneSidedReads.js';
import { PullPlan } from './internal/PullPlan.js';
import { RequestBuffers } from './internal/RequestBuffers.js';
import { type HeldReply, PulledRows } from './PulledRows.js';
import { PushBlocks, type PushBlocksStats, type PushPart } from './PushBlocks.js';
import {
  type ShardAddress,
  ShardLink,
  type ShardLinkOptions,
  type ShardLinkStats,
} from './ShardLink.js';

type LinkBase = Omit<ShardLinkOptions, 'address' | 'label' | 'firstSeq'>;

import { ShardRouter } from './ShardRouter.js';

export interface ShardSpec extends Omit<ShardAddress, 'port'> {
  /** The port for a transport `ports` does not name (default: `ports.rdma ?? ports.tcp`). */
  port?: number;
  /** Per transport, for a shard listening on several (`rdmajs-ps-server --transport rdma,tcp`). */
  ports?: TransportPorts;
  /** The shard id the server must report (checked at connect). Default: whatever it reports. */
  id?: string;
}

export interface PsClientOptions {
  /** The static shard list: `{ host?, port, id? }` or `'host:port'`. */
  servers?: readonly (ShardSpec | string)[];
  /** Or the shard map in etcd (read, then watched: shards join and leave during traffic). */
  etcd?: EtcdShardMapOptions;
  /**
   * `'rdma'` (soft provider unless `rdma.device` names another device), `'tcp'`, `'auto'`
   * (RDMA; a connection whose RDMA setup fails goes over TCP instead — rpc-recovery's
   * fallback — and RDMA is probed again every `probeIntervalMs`; see `stats().shards`), or a
   * mux Transport of your own (not closed by the client). A shard's port for each is
   * `ports[name] ?? port`.
   */
  transport: TransportChoice | Transport;
  /** Options of the RdmaTransport made for `'rdma'` / `'auto'`. */
  rdma?: RdmaTransportOptions;
  /**
   * Options of the TcpTransport made for `'tcp'` / `'auto'`'s fallback, e.g.
   * `{ frameProtection: 'none' }` for servers started with `--tcp-frame-protection none`.
   */
  tcp?: TcpTransportOptions;
  /** `'auto'`: while on TCP, RDMA is tried again this often, ms (0: never). Default 30 000. */
  probeIntervalMs?: number;
  secret: SharedSecret;
  /** Per connection attempt, ms. Default 5 000. */
  connectTimeoutMs?: number;
  /** Default deadline of every call, ms. Default 30 000. */
  deadlineMs?: number;
  /** How long a shard may stay unreachable before its calls fail ERR_PS_CLIENT_UNAVAILABLE, ms. Default 60 000. */
  reconnectBudgetMs?: number;
  /** Pushes in flight per shard. Default 64. */
  maxInFlightPushes?: number;
  /** Pushes queued per shard. Default 65 536. */
  maxQueuedPushes?: number;
  /** Push payload bytes queued per shard (kept until acknowledged, for resends). Default 256 MiB. */
  maxQueuedPushBytes?: number;
  /** RPC heartbeats. Defaults 1 000 ms × 3. */
  heartbeatIntervalMs?: number;
  heartbeatMisses?: number;
  /**
   * The RPC session's reconnect policy, one per session (default rpc-recovery's: jittered
   * exponential within 30 s). When it gives up, the shard's link opens a new session.
   */
  backoff?: () => BackoffPolicy;
  /** This client's writer id in the stores' de-duplication (1–64 of [A-Za-z0-9_-]). Default random. */
  writerId?: string;
  /**
   * Over RDMA, build push requests in the transport's registered memory (see PushBlocks).
   * Default false: mux still copies a message of [RPC header, block] into its send slot (its
   * gather was measured slower than that copy on soft: README), so today this only changes
   * where the request is built.
   */
  registeredPushes?: boolean;
  /**
   * Pull rows of `oneSidedRead` tables with one-sided RDMA READs straight from shard memory
   * (the shard is never woken) when the connection supports reads; keys that race a write
   * and anything doubtful are pulled two-sided. Default true; false: always two-sided.
   */
  oneSidedReads?: boolean;
  /**
   * One-sided reads in flight per (shard, table), an integer in [1, 64]; pulls beyond go
   * two-sided. Default 8: a one-sided fetch spends the client's CPU (on soft every READ's copy),
   * so too many lose once pulls pile up, too few send small pulls two-sided (OneSidedReads.ts).
   */
  oneSidedReaders?: number;
  /**
   * Key → slot hints per (shard, table), an integer in [0, 2^22] (13 bytes each; 0: none). A
   * hinted key is READ as meta, row, meta without its index window; a hint is only a hint,
   * checked like every one-sided row (ps-wire README, "Slot hints"). Default 16384.
   */
  oneSidedSlotHints?: number;
  /**
   * Event loop utilization of this client, a number in [0, 1], at or above which pulls go
   * two-sided even with a reader free (sampled over the last 50 ms): a one-sided fetch spends
   * the client's CPU, so it pays only while the client has CPU to spare. 1: no gate; 0: never
   * one-sided (except small segments: `oneSidedBusyMaxKeys`). Default 0.25 on soft, 1 on other
   * providers (measured: README, "One-sided fetches").
   */
  oneSidedMaxLoad?: number;
  /**
   * While the load gate is shut (`oneSidedMaxLoad`), a shard's segment of at most this many
   * keys still goes one-sided, an integer in [0, 1024] (0: none). Small segments are where a
   * one-sided read saves most (no shard wake-up, no reply) for the least client CPU. Default 32.
   */
  oneSidedBusyMaxKeys?: number;
}

export interface CallDeadline {
  deadlineMs?: number;
}

export interface PullOptions extends CallDeadline {
  /**
   * Return at the deadline with what arrived: rows of shards that did not answer in time
   * (slow, stopped, recovering, unreachable) are filled with the table's init and flagged
   * in `missing`. Without it, such a pull fails ERR_PS_CLIENT_DEADLINE.
   */
  partial?: boolean;
}

/** Which rows of a partial pull are not the shard's (1: filled with the table's init). */
export interface MissingRows {
  /** One byte per requested key, request order. */
  missing: Uint8Array;
  missingCount: number;
  /** Shards whose part did not arrive. */
  missingShards: string[];
}

/** Keys of the largest push whose routing scratch is kept (64 Ki keys: 256 KiB). */
const PUSH_SCRATCH_MAX_KEYS = 1 << 16;
const releaseReply = (r: HeldReply): void => r.release();
const decodeSparsePushReply = (b: Uint8Array): PushReply => decodePushReply(b);
const nonFinite = (grads: Float32Array): never => {
  throw new PsClientError(
    'ERR_PS_CLIENT_NON_FINITE',
    `grads[${firstNonFinite(grads)}] is not finite`,
  );
};
const ignore = (): void => {};
/** Row width from which a push copies each row with one `set` rather than word by word. */
const BULK_ROW_COPY_DIM = 16;

export type PartialPull = PulledRows & { readonly missing: Uint8Array };

export interface PushSummary {
  /** Distinct rows updated, summed over shards. */
  rows: number;
  /** Keys the stores did not apply (unadmitted, beyond row limits). */
  dropped: number;
  /** Shard pushes that were answered as duplicates (resends of already-applied pushes). */
  duplicates: number;
}

export interface PsClientStats {
  /** The `transport` option (`'custom'` for a Transport object). */
  transport: TransportChoice | 'custom';
  shards: ShardLinkStats[];
  pulls: number;
  pushes: number;
  keysRequested: number;
  /** Keys sent after de-duplication within each pull. */
  keysFetched: number;
  denseCalls: number;
  /** With `registeredPushes` over RDMA: push requests in registered memory (held until no session can read them). */
  pushBlocks: PushBlocksStats | undefined;
  /** One-sided fetches (see the `oneSidedReads` option). */
  oneSided: OneSidedStats;
}

interface TableShape {
  dim: number;
  rejectNonFinite: boolean;
  init: InitFn;
}

const MAX_SAFE_DEADLINE = 86_400_000;

const isPort = (v: unknown): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 65_535;

function parseServer(s: ShardSpec | string, i: number): ShardSpec & { port: number } {
  if (typeof s === 'string') {
    const m = /^(.*):(\d{1,5})$/.exec(s);
    const port = Number(m?.[2]);
    if (m === null || !(port >= 1 && port <= 65_535)) {
      throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', `servers[${i}]: expected host:port`);
    }
    return { host: (m[1] ?? '').replace(/^\[(.*)\]$/, '$1') || '127.0.0.1', port };
  }
  if (s === null || typeof s !== 'object') {
    throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', `servers[${i}]: expected host:port`);
  }
  const ports = s.ports;
  if (ports !== undefined) {
    const bad =
      ports === null ||
      typeof ports !== 'object' ||
      Object.keys(ports).some((k) => k !== 'rdma' && k !== 'tcp') ||
      Object.values(ports).some((v) => v !== undefined && !isPort(v));
    if (bad) {
      throw new PsClientError(
        'ERR_PS_CLIENT_INVALID_ARG',
        `servers[${i}].ports: { rdma?, tcp? } of ports 1–65535`,
      );
    }
  }
  const port = s.port ?? ports?.rdma ?? ports?.tcp;
  if (!isPort(port)) {
    throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', `servers[${i}]: port must be 1–65535`);
  }
  return { ...s, port };
}

function checkPositiveInt(
  name: string,
  v: unknown,
  dflt: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  return checkIntIn(name, v, dflt, 1, max);
}

/** v (dflt when undefined) if an integer in [min, max], else ERR_PS_CLIENT_INVALID_ARG. */
function checkIntIn(name: string, v: unknown, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new PsClientError(
      'ERR_PS_CLIENT_INVALID_ARG',
      `${name} must be an integer in [${min}, ${max}]`,
    );
  }
  return v;
}

/** v (dflt when undefined) if a number in [min, max], else ERR_PS_CLIENT_INVALID_ARG. */
function checkNumberIn(name: string, v: unknown, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !(v >= min && v <= max)) {
    throw new PsClientError(
      'ERR_PS_CLIENT_INVALID_ARG',
      `${name} must be a number in [${min}, ${max}]`,
    );
  }
  return v;
}

/** Keys as a BigUint64Array: that type as it is, or an array of bigints in [0, 2^64). */
function keysOf(keys: unknown): BigUint64Array {
  if (keys instanceof BigUint64Array) return keys;
  if (!Array.isArray(keys)) {
    throw new PsClientError(
      'ERR_PS_CLIENT_INVALID_ARG',
      'keys must be a BigUint64Array or an array of bigints',
    );
  }
  const out = new BigUint64Array(keys.length);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i] as unknown;
    if (typeof k !== 'bigint' || k < 0n || k > 0xffff_ffff_ffff_ffffn) {
      throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', `keys[${i}] is not a u64 bigint`);
    }
    out[i] = k;
  }
  return out;
}

/**
 * The load gate's default: measured on soft, where the client's CPU executes every READ; on a
 * NIC a READ costs the client almost nothing, so its one-sided fetches are never gated.
 */
function defaultMaxLoad(primary: Transport): number {
  return primary instanceof RdmaTransport && primary.provider !== 'soft'
    ? 1
    : DEFAULT_ONE_SIDED_MAX_LOAD;
}

/**
 * A parameter-server client over a static list of shards. Keys are routed by rendezvous
 * hashing over the shard ids the servers report; `pull` de-duplicates keys within a batch,
 * fetches every shard's part in parallel and returns rows in request order; `push` splits
 * the same way (duplicates kept, in order: the store sums them as an unsharded store would)
 * and is exactly-once per shard (see ShardLink). Every argument is checked against the
 * servers' table info before anything is sent.
 */
export class PsClient {
  #links: ShardLink[];
  #router: ShardRouter;
  /** Push request buffers, reused once no session can read them (see RequestBuffers). */
  readonly #pushBuffers = new RequestBuffers();
  /** Over RDMA: push requests built in registered memory, sent in place (see PushBlocks). */
  readonly #pushBlocks: PushBlocks | undefined;
  /** A push's payload, back from its link once no session can read it (ShardLink.push). */
  readonly #freePush = (p: MessagePart): void => {
    if (p instanceof Uint8Array) this.#pushBuffers.give(p);
    else this.#pushBlocks?.give(p as PushPart);
  };
  /** Scratch of every pull's de-duplication (used before the pull's first await only). */
  readonly #deduper = new Deduper();
  /**
   * Scratch of every push's routing (read before its first await only): a fresh array per
   * push was a malloc'd backing store (over V8's 64 on-heap bytes) counted as external memory.
   */
  #pushShardOf = new Uint32Array(0);

  /** Room for `n` shard indexes: the kept scratch, or a new array for a huge push (not kept). */
  #pushScratch(n: number): Uint32Array {
    if (n > PUSH_SCRATCH_MAX_KEYS) return new Uint32Array(n);
    if (this.#pushShardOf.length < n) this.#pushShardOf = new Uint32Array(n);
    return this.#pushShardOf;
  }
  /** Plans of pulls whose rows were released, for the next pulls (see PullPlan). */
  readonly #plans: PullPlan[] = [];
  readonly #signature: string;
  #base: LinkBase | undefined;
  #shardMap: EtcdShardMap | undefined;
  #mapUpdate: Promise<void> = Promise.resolve();
  /** Links of shards that left the map, closed once their queued pushes settle. */
  readonly #retiring = new Map<string, ShardLink>();
  /** Next push seq of shards seen before (a shard that returns continues its writer's seqs). */
  readonly #seqFloor = new Map<string, number>();
  readonly #tables: Map<string, TableShape>;
  readonly #dense: Map<string, { length: number; rejectNonFinite: boolean }>;
  readonly #maxBatchKeys: number;
  readonly #writer: string;
  readonly #deadlineMs: number;
  #closed = false;
  readonly #counts = { pulls: 0, pushes: 0, keysRequested: 0, keysFetched: 0, denseCalls: 0 };
  readonly #transports: ClientTransports;
  /** Per link of a shard with readable tables: its one-sided reads (option `oneSidedReads`). */
  readonly #reads = new Map<ShardLink, LinkReads>();
  #oneSided = false;
  #oneSidedConfig: OneSidedConfig = {
    readers: DEFAULT_ONE_SIDED_READERS,
    slotHints: DEFAULT_ONE_SIDED_SLOT_HINTS,
    gate: new LoadGate(1),
    busyMaxKeys: DEFAULT_ONE_SIDED_BUSY_MAX_KEYS,
  };
  readonly #oneSidedStats: OneSidedStats = {
    keys: 0,
    fallbacks: 0,
    fallbackKeys: 0,
    refreshes: 0,
    errors: 0,
    reads: 0,
    hinted: 0,
    gated: 0,
  };

  private constructor(
    links: ShardLink[],
    infos: TableInfo[],
    writer: string,
    deadlineMs: number,
    transports: ClientTransports,
    registeredPushes: boolean,
  ) {
    this.#transports = transports;
    const alloc = registeredPushes ? transports.allocator : undefined;
    this.#pushBlocks = alloc === undefined ? undefined : new PushBlocks(alloc);
    this.#links = links;
    this.#writer = writer;
    this.#deadlineMs = deadlineMs;
    this.#router = new ShardRouter(infos.map((i) => i.shardId));
    const first = infos[0] as TableInfo;
    this.#signature = signatureOf(first);
    const sig = signatureOf;
    for (const i of infos) {
      if (sig(i) !== sig(first)) {
        throw new PsClientError(
          'ERR_PS_CLIENT_SHARD_MISMATCH',
          `shards ${first.shardId} and ${i.shardId} serve different tables`,
          { shard: i.shardId },
        );
      }
    }
    this.#tables = new Map(
      first.tables.map((t) => [
        t.name,
        { dim: t.dim, rejectNonFinite: t.rejectNonFinite, init: initRowFn(t.init) },
      ]),
    );
    this.#dense = new Map(
      first.dense.map((d) => [d.name, { length: d.length, rejectNonFinite: d.rejectNonFinite }]),
    );
    this.#maxBatchKeys = Math.min(...infos.map((i) => i.maxBatchKeys));
  }

  /**
   * Connects to every shard and learns their tables; rejects typed if any cannot be reached.
   * Shards come from `servers` (a static list) or from `etcd` (the shard map, then watched).
   */
  static async connect(options: PsClientOptions): Promise<PsClient> {
    if (options === null || typeof options !== 'object' || options.transport === undefined) {
      throw new PsClientError(
        'ERR_PS_CLIENT_INVALID_ARG',
        'PsClient.connect needs { servers or etcd, transport, secret }',
      );
    }
    const probeIntervalMs = options.probeIntervalMs ?? 30_000;
    if (!Number.isInteger(probeIntervalMs) || probeIntervalMs < 0) {
      throw new PsClientError(
        'ERR_PS_CLIENT_INVALID_ARG',
        'probeIntervalMs must be an integer ≥ 0',
      );
    }
    // Checked before anything is made; the transports are made last (they own resources).
    ClientTransports.check(options.transport);
    let shardMap: EtcdShardMap | undefined;
    let specs: (ShardSpec & { port: number })[];
    if (options.etcd !== undefined) {
      shardMap = await EtcdShardMap.open(options.etcd);
      specs = [...shardMap.shards]
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([id, a]) => ({ id, ...a }));
      if (specs.length === 0) {
        await shardMap.close();
        throw new PsClientError('ERR_PS_CLIENT_UNAVAILABLE', 'no shard is registered in etcd');
      }
    } else {
      if (!Array.isArray(options.servers) || options.servers.length === 0) {
        throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', 'servers must be a non-empty list');
      }
      specs = options.servers.map(parseServer);
    }
    let transports: ClientTransports | undefined;
    try {
      transports = ClientTransports.of(
        options.transport,
        options.rdma,
        options.tcp,
        probeIntervalMs,
      );
      const client = await PsClient.#connectTo(options, specs, transports);
      if (shardMap !== undefined) client.#follow(shardMap);
      return client;
    } catch (err) {
      await shardMap?.close();
      transports?.close();
      throw err;
    }
  }

  static async #connectTo(
    options: PsClientOptions,
    specs: (ShardSpec & { port: number })[],
    transports: ClientTransports,
  ): Promise<PsClient> {
    const writer = options.writerId ?? `w${randomBytes(12).toString('base64url')}`;
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(writer)) {
      throw new PsClientError(
        'ERR_PS_CLIENT_INVALID_ARG',
        'writerId must be 1–64 characters of [A-Za-z0-9_-]',
      );
    }
    if (options.registeredPushes !== undefined && typeof options.registeredPushes !== 'boolean') {
      throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', 'registeredPushes must be a boolean');
    }
    const oneSidedConfig: OneSidedConfig = {
      readers: checkIntIn(
        'oneSidedReaders',
        options.oneSidedReaders,
        DEFAULT_ONE_SIDED_READERS,
        1,
        MAX_ONE_SIDED_READERS,
      ),
      slotHints: checkIntIn(
        'oneSidedSlotHints',
        options.oneSidedSlotHints,
        DEFAULT_ONE_SIDED_SLOT_HINTS,
        0,
        MAX_ONE_SIDED_SLOT_HINTS,
      ),
      gate: new LoadGate(
        checkNumberIn(
          'oneSidedMaxLoad',
          options.oneSidedMaxLoad,
          defaultMaxLoad(transports.link.primary),
          0,
          1,
        ),
      ),
      busyMaxKeys: checkIntIn(
        'oneSidedBusyMaxKeys',
        options.oneSidedBusyMaxKeys,
        DEFAULT_ONE_SIDED_BUSY_MAX_KEYS,
        0,
        ONE_SIDED_MAX_KEYS,
      ),
    };
    const deadlineMs = checkPositiveInt(
      'deadlineMs',
      options.deadlineMs,
      30_000,
      MAX_SAFE_DEADLINE,
    );
    const base = {
      transport: transports.link,
      secret: options.secret,
      connectTimeoutMs: checkPositiveInt('connectTimeoutMs', options.connectTimeoutMs, 5000),
      reconnectBudgetMs: checkPositiveInt('reconnectBudgetMs', options.reconnectBudgetMs, 60_000),
      maxInFlightPushes: checkPositiveInt('maxInFlightPushes', options.maxInFlightPushes, 64, 1024),
      maxQueuedPushes: checkPositiveInt('maxQueuedPushes', options.maxQueuedPushes, 65_536),
      maxQueuedPushBytes: checkPositiveInt(
        'maxQueuedPushBytes',
        options.maxQueuedPushBytes,
        256 * 1024 * 1024,
      ),
      heartbeatIntervalMs: checkPositiveInt(
        'heartbeatIntervalMs',
        options.heartbeatIntervalMs,
        1000,
      ),
      heartbeatMisses: checkPositiveInt('heartbeatMisses', options.heartbeatMisses, 3, 1000),
      ...(options.backoff === undefined ? {} : { backoff: options.backoff }),
    };
    const opened = await Promise.allSettled(
      specs.map((s) =>
        ShardLink.open({
          ...base,
          address: {
            ...(s.host === undefined ? {} : { host: s.host }),
            port: s.port,
            ...(s.ports === undefined ? {} : { ports: s.ports }),
          },
          label: s.id ?? `${s.host ?? '127.0.0.1'}:${s.port}`,
        }),
      ),
    );
    const links = opened.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const close = () => Promise.allSettled(links.map((l) => l.close()));
    const failed = opened.findIndex((r) => r.status === 'rejected');
    if (failed >= 0) {
      await close();
      const r = opened[failed] as PromiseRejectedResult;
      throw new PsClientError(
        'ERR_PS_CLIENT_UNAVAILABLE',
        `cannot connect to servers[${failed}]: ${(r.reason as Error)?.message}`,
        {
          cause: r.reason,
        },
      );
    }
    try {
      const infos = await Promise.all(
        links.map(async (l, i) => {
          const info = decodeTableInfoReply(
            await l.call(PsMethod.tableInfo, encodeTableInfoRequest(), deadlineMs),
          );
          const want = specs[i]?.id;
          if (want !== undefined && want !== info.shardId) {
            throw new PsClientError(
              'ERR_PS_CLIENT_SHARD_MISMATCH',
              `servers[${i}] is shard ${info.shardId}, not ${want}`,
              {
                shard: info.shardId,
              },
            );
          }
          l.label = info.shardId;
          return info;
        }),
      );
      if (new Set(infos.map((i) => i.shardId)).size !== infos.length) {
        throw new PsClientError(
          'ERR_PS_CLIENT_SHARD_MISMATCH',
          'two servers report the same shard id',
        );
      }
      const client = new PsClient(
        links,
        infos,
        writer,
        deadlineMs,
        transports,
        options.registeredPushes === true,
      );
      client.#base = base;
      if (options.oneSidedReads !== undefined && typeof options.oneSidedReads !== 'boolean') {
        throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', 'oneSidedReads must be a boolean');
      }
      client.#oneSided = options.oneSidedReads !== false;
      client.#oneSidedConfig = oneSidedConfig;
      for (const [i, l] of links.entries()) client.#readsFor(l, infos[i] as TableInfo);
      return client;
    } catch (err) {
      await close();
      throw err;
    }
  }

  /**
   * One-sided reads over `link` when the shard handed read descriptors (it does so only on a
   * connection that can READ) and the primary transport is RDMA (its allocator holds the
   * READs' destinations).
   */
  #readsFor(link: ShardLink, info: TableInfo): void {
    const t = this.#transports.link.primary;
    if (!this.#oneSided || !(t instanceof RdmaTransport)) return;
    if (!info.tables.some((x) => x.readDescriptor !== undefined)) return;
    const reads = new LinkReads(
      link,
      t.allocator,
      this.#oneSidedStats,
      this.#tables,
      this.#deadlineMs,
      this.#oneSidedConfig,
    );
    reads.apply(info, link.connection);
    this.#reads.set(link, reads);
  }

  /** Follows the etcd shard map: every change is applied in turn. */
  #follow(map: EtcdShardMap): void {
    this.#shardMap = map;
    map.on('change', (shards) => {
      this.#mapUpdate = this.#mapUpdate.then(() => this.#applyMap(shards)).catch(() => {});
    });
    map.on('error', () => {});
  }

  /** Resolves once every shard-map change seen so far is applied (tests, tools). */
  mapSettled(): Promise<void> {
    return this.#mapUpdate;
  }

  /**
   * Routes by a new shard map. New shards are connected and checked (same tables) before
   * any key goes to them; a shard that fails the check is left out. Leaving shards stop
   * getting new work at once; pushes already queued for them are delivered (exactly once)
   * before their link closes. A shard that returns continues its writer's seqs.
   */
  async #applyMap(shards: Map<string, ShardAddress>): Promise<void> {
    if (this.#closed || this.#base === undefined) return;
    const base = this.#base;
    const current = new Map(this.#router.ids.map((id, i) => [id, this.#links[i] as ShardLink]));
    const added = new Map<string, ShardLink>();
    await Promise.all(
      [...shards].map(async ([id, address]) => {
        if (current.has(id)) return;
        const back = this.#retiring.get(id);
        if (back !== undefined) {
          this.#retiring.delete(id);
          added.set(id, back);
          return;
        }
        let link: ShardLink | undefined;
        try {
          link = await ShardLink.open({
            ...base,
            address,
            label: id,
            firstSeq: this.#seqFloor.get(id) ?? 1,
          });
          const info = decodeTableInfoReply(
            await link.call(PsMethod.tableInfo, encodeTableInfoRequest(), this.#deadlineMs),
          );
          if (info.shardId !== id || signatureOf(info) !== this.#signature) {
            throw new PsClientError('ERR_PS_CLIENT_SHARD_MISMATCH', `shard ${id} does not match`);
          }
          this.#readsFor(link, info);
          added.set(id, link);
        } catch {
          await link?.close();
        }
      }),
    );
    if (this.#closed) {
      await Promise.allSettled([...added.values()].map((l) => l.close()));
      return;
    }
    const ids = [...shards.keys()].filter((id) => current.has(id) || added.has(id)).sort();
    if (ids.length === 0) return; // never route to nothing: keep the last map
    this.#links = ids.map((id) => (current.get(id) ?? added.get(id)) as ShardLink);
    this.#router = new ShardRouter(ids);
    for (const [id, link] of current) {
      if (ids.includes(id)) continue;
      this.#retiring.set(id, link);
      void link.whenIdle().then(async () => {
        if (this.#retiring.get(id) !== link) return; // it came back
        this.#retiring.delete(id);
        this.#seqFloor.set(id, link.nextSeq());
        await link.close();
      });
    }
  }

  /**
   * The RPC session's reconnect policy, one per session (default rpc-recovery's: jittered
   * exponential within 30 s). When it gives up, the shard's link opens a new session.
   */
  backoff?: () => BackoffPolicy;
  /** This client's writer id (the stores de-duplicate its pushes by (writer, seq)). */
  get writerId(): string {
    return this.#writer;
  }

  /** Shard ids in list order. */
  get shards(): readonly string[] {
    return this.#router.ids;
  }

  /** The tables the servers serve: name → dim. */
  get tables(): ReadonlyMap<string, number> {
    return new Map([...this.#tables].map(([n, t]) => [n, t.dim]));
  }

  /** The shard a key lives on. */
  shardOf(key: bigint): string {
    return this.#router.ids[this.#router.shardOf(key)] as string;
  }

  #open(): void {
    if (this.#closed) throw new PsClientError('ERR_PS_CLIENT_CLOSED', 'client closed');
  }

  #table(name: unknown): TableShape {
    if (typeof name !== 'string')
      throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', 'table must be a string');
    const t = this.#tables.get(name);
    if (t === undefined) throw new PsClientError('ERR_PS_CLIENT_UNKNOWN_TABLE', `no table ${name}`);
    return t;
  }

  #deadline(o: CallDeadline | undefined): number {
    return checkPositiveInt('deadlineMs', o?.deadlineMs, this.#deadlineMs, MAX_SAFE_DEADLINE);
  }

  #batch(n: number): void {
    if (n > this.#maxBatchKeys) {
      throw new PsClientError('ERR_PS_CLIENT_BATCH_TOO_LARGE', `${n} keys > ${this.#maxBatchKeys}`);
    }
  }

  /**
   * Rows of `keys`, in request order, as views of the replies where they arrived (registered
   * memory on RDMA): see PulledRows; `release()` it when done (`using rows = await …`). With
   * `partial: true`, resolves by the deadline with the rows that arrived and a mask of the
   * missing ones (filled with the table's init).
   */
  pull(
    table: string,
    keys: BigUint64Array | readonly bigint[],
    options: PullOptions & { partial: true },
  ): Promise<PartialPull>;
  pull(
    table: string,
    keys: BigUint64Array | readonly bigint[],
    options?: PullOptions,
  ): Promise<PulledRows>;
  pull(
    table: string,
    keys: BigUint64Array | readonly bigint[],
    options?: PullOptions,
  ): Promise<PulledRows> {
    // Not async: the fetch's own promise is the pull's (an async wrapper would add a promise
    // and three microtask turns per pull). What the checks throw is a rejection all the same.
    try {
      this.#open();
      const t = this.#table(table);
      return this.#fetch(table, t, keysOf(keys), options);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Copies the rows of `keys` into `out` (`keys.length × dim` floats) — the one copy, by
   * design: the replies are released at once. `partial` as for `pull`.
   */
  pullInto(
    table: string,
    keys: BigUint64Array | readonly bigint[],
    out: Float32Array,
    options: PullOptions & { partial: true },
  ): Promise<MissingRows>;
  pullInto(
    table: string,
    keys: BigUint64Array | readonly bigint[],
    out: Float32Array,
    options?: PullOptions,
  ): Promise<void>;
  async pullInto(
    table: string,
    keys: BigUint64Array | readonly bigint[],
    out: Float32Array,
    options?: PullOptions,
    // biome-ignore lint/suspicious/noConfusingVoidType: the overload without `partial` resolves to void
  ): Promise<MissingRows | void> {
    this.#open();
    const t = this.#table(table);
    const k = keysOf(keys);
    if (!(out instanceof Float32Array) || out.length !== k.length * t.dim) {
      throw new PsClientError(
        'ERR_PS_CLIENT_LENGTH_MISMATCH',
        `out must be a Float32Array of ${k.length} × ${t.dim}`,
      );
    }
    const pulled = await this.#fetch(table, t, k, options);
    try {
      pulled.copyInto(out);
    } finally {
      pulled.release();
    }
    if (pulled.missing === undefined) return undefined;
    return {
      missing: pulled.missing,
      missingCount: pulled.missingCount,
      missingShards: [...pulled.missingShards],
    };
  }

  /** What it throws, its callers turn into a rejection (they are async, or `pull`'s catch). */
  #fetch(
    table: string,
    t: TableShape,
    keys: BigUint64Array,
    o: PullOptions | undefined,
  ): Promise<PulledRows> {
    this.#batch(keys.length);
    const deadlineMs = this.#deadline(o);
    const plan = this.#plan(table, t, keys);
    return o?.partial === true
      ? this.#fetchPartial(t, plan, deadlineMs)
      : this.#fetchWhole(table, t, plan, deadlineMs);
  }

  /** The synchronous part of a pull (see PullPlan), in a plan reused from an earlier pull. */
  #plan(table: string, t: TableShape, keys: BigUint64Array): PullPlan {
    const plan = PullPlan.take(this.#plans);
    // One map for the whole call, whatever changes meanwhile.
    plan.build(table, t.dim, keys, this.#deduper, this.#router, this.#links);
    this.#counts.pulls++;
    this.#counts.keysRequested += plan.n;
    this.#counts.keysFetched += plan.distinct;
    return plan;
  }

  /** A pull that takes what answered by its deadline (`partial`). */
  async #fetchPartial(t: TableShape, plan: PullPlan, deadlineMs: number): Promise<PulledRows> {
    // Not recycled: calls that missed the deadline may still send (and resend) its requests.
    const { n, distinct, links, counts, segBase, reqs, segLen, segOf, offOf, nSeg } = plan;
    const router = plan.router as ShardRouter;
    const S = links.length;
    const dim = t.dim;
    // A partial pull stops waiting at its deadline; the late calls end on their own deadline.
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), deadlineMs);
    });
    const segments = new Array<Float32Array>(nSeg);
    // Replies that arrived; released here if the pull fails, else by the PulledRows.
    const held: HeldReply[] = [];
    let abandoned = false;
    const fetchChunk = async (g: number, link: ShardLink): Promise<void> => {
      const reply = await link.callView(PsMethod.pull, reqs[g] as Uint8Array, deadlineMs);
      if (abandoned) {
        reply.release(); // a failed or past-deadline pull: nobody will read it
        return;
      }
      held.push(reply);
      const r = decodePullReply(reply.bytes);
      if (r.dim !== dim || r.count !== segLen[g]) {
        throw new PsClientError(
          'ERR_PS_CLIENT_SHARD_MISMATCH',
          `shard ${link.label} answered ${r.count} × ${r.dim}`,
          { shard: link.label },
        );
      }
      segments[g] = r.rows;
    };
    const fetchPart = async (s: number): Promise<void> => {
      const link = links[s] as ShardLink;
      const base = segBase[s] as number;
      const chunks = (segBase[s + 1] as number) - base;
      if (chunks === 1) return fetchChunk(base, link);
      await Promise.all(Array.from({ length: chunks }, (_, c) => fetchChunk(base + c, link)));
    };
    const answered = new Uint8Array(S);
    try {
      await Promise.all(
        Array.from({ length: S }, async (_, s) => {
          if (counts[s] === 0) return;
          const call = fetchPart(s);
          const r = await Promise.race([
            call.then(
              () => ({ ok: true as const }),
              (err: unknown) => ({ ok: false as const, err }),
            ),
            late,
          ]);
          if (r === 'late') return; // its replies are released on arrival (see fetchChunk)
          if (r.ok) {
            answered[s] = 1;
            return;
          }
          // Slow or unreachable shards are what partial pulls are for; refusals are not.
          const code = (r.err as { code?: unknown }).code;
          if (code === 'ERR_PS_CLIENT_DEADLINE' || code === 'ERR_PS_CLIENT_UNAVAILABLE') return;
          throw r.err;
        }),
      );
    } catch (err) {
      abandoned = true;
      for (const r of held) r.release();
      throw err;
    } finally {
      clearTimeout(timer);
    }
    // From here on, replies of shards that missed the deadline are released on arrival.
    abandoned = true;
    const missing = new Uint8Array(n);
    let missingCount = 0;
    const missedSet = new Set<number>();
    let segMissed: Uint8Array | undefined;
    for (let s = 0; s < S; s++) {
      if ((counts[s] as number) === 0 || answered[s] === 1) continue;
      missedSet.add(s);
      segMissed ??= new Uint8Array(nSeg);
      // The table's init, as the store would give for an unseen key, one segment per chunk.
      for (let g = segBase[s] as number; g < (segBase[s + 1] as number); g++) {
        segMissed[g] = 1;
        const kh = plan.keyHalves(g);
        const len = kh.length / 2;
        const seg = new Float32Array(len * dim);
        for (let j = 0; j < len; j++) {
          t.init(seg, j * dim, dim, kh[2 * j] as number, kh[2 * j + 1] as number);
        }
        segments[g] = seg;
      }
    }
    if (segMissed !== undefined) {
      for (let i = 0; i < n; i++) {
        if (segMissed[segOf[i] as number] === 1) {
          missing[i] = 1;
          missingCount++;
        }
      }
    }
    // One segment holding exactly the distinct keys, which are the request: a view as it is.
    const whole =
      segments.length === 1 && distinct === n ? (segments[0] as Float32Array) : undefined;
    const missingShards = router.ids.filter((_, s) => missedSet.has(s));
    return new PulledRows(dim, n, segments, segOf, offOf, held, whole, undefined, {
      missing,
      missingCount,
      missingShards,
    });
  }

  /**
   * The rest of a pull that needs every shard's answer: each segment's call sent at once,
   * awaited together (the first failure fails the pull; replies that arrived, or arrive
   * later, are released). No closure or async step per shard.
   */
  async #fetchWhole(
    table: string,
    t: TableShape,
    plan: PullPlan,
    deadlineMs: number,
  ): Promise<PulledRows> {
    const { n, distinct, links, segBase, reqs, segLen, nSeg, calls, segments } = plan;
    const S = links.length;
    calls.length = nSeg;
    for (let s = 0; s < S; s++) {
      const link = links[s] as ShardLink;
      const reads = this.#reads.size === 0 ? undefined : this.#reads.get(link)?.table(table);
      for (let g = segBase[s] as number; g < (segBase[s + 1] as number); g++) {
        calls[g] =
          reads === undefined
            ? link.callView(PsMethod.pull, reqs[g] as Uint8Array, deadlineMs)
            : this.#readOrPull(reads, link, plan, g, deadlineMs);
      }
    }
    let replies: (RpcReply | ReadRows)[];
    try {
      replies = await Promise.all(calls);
    } catch (err) {
      // The plan is dropped, not reused: calls still pending hold its requests.
      for (const c of calls) c.then(releaseReply, ignore);
      throw err;
    }
    const dim = t.dim;
    segments.length = nSeg;
    for (let s = 0; s < S; s++) {
      for (let g = segBase[s] as number; g < (segBase[s + 1] as number); g++) {
        const got = replies[g] as RpcReply | ReadRows;
        if (got instanceof ReadRows) {
          segments[g] = got.rows;
          continue;
        }
        let r: ReturnType<typeof decodePullReply>;
        try {
          r = decodePullReply(got.bytes);
          if (r.dim !== dim || r.count !== segLen[g]) {
            const label = (links[s] as ShardLink).label;
            throw new PsClientError(
              'ERR_PS_CLIENT_SHARD_MISMATCH',
              `shard ${label} answered ${r.count} × ${r.dim}`,
              { shard: label },
            );
          }
        } catch (err) {
          for (const reply of replies) reply.release();
          throw err;
        }
        segments[g] = r.rows;
      }
    }
    // One segment holding exactly the distinct keys, which are the request: a view as it is.
    const whole = nSeg === 1 && distinct === n ? (segments[0] as Float32Array) : undefined;
    // Every call settled: the plan goes back to the pool when the rows are released.
    return new PulledRows(
      dim,
      n,
      segments,
      plan.segOf,
      plan.offOf,
      replies,
      whole,
      plan,
      undefined,
    );
  }

  /**
   * Segment g's rows READ one-sidedly; if that cannot be done (see LinkReads) the segment is
   * pulled two-sided within what is left of the deadline.
   */
  async #readOrPull(
    reads: NonNullable<ReturnType<LinkReads['table']>>,
    link: ShardLink,
    plan: PullPlan,
    g: number,
    deadlineMs: number,
  ): Promise<RpcReply | ReadRows> {
    const t0 = performance.now();
    const len = plan.segLen[g] as number;
    const rows = await reads.read(plan.keyView(g), len, deadlineMs);
    if (rows !== null) return rows;
    this.#oneSidedStats.fallbacks++;
    this.#oneSidedStats.fallbackKeys += len;
    const left = Math.max(1, Math.ceil(deadlineMs - (performance.now() - t0)));
    return link.callView(PsMethod.pull, plan.reqs[g] as Uint8Array, left);
  }

  /**
   * Applies `grads` (`keys.length × dim`) to the rows of `keys` with each table's optimizer,
   * exactly once per shard; resolves when every shard acknowledged (durable under its log
   * policy). A failure of one shard does not undo another's part.
   */
  async push(
    table: string,
    keys: BigUint64Array | readonly bigint[],
    grads: Float32Array,
    options?: CallDeadline,
  ): Promise<PushSummary> {
    this.#open();
    const t = this.#table(table);
    const k = keysOf(keys);
    if (!(grads instanceof Float32Array) || grads.length !== k.length * t.dim) {
      throw new PsClientError(
        'ERR_PS_CLIENT_LENGTH_MISMATCH',
        `grads must be a Float32Array of ${k.length} × ${t.dim}`,
      );
    }
    this.#batch(k.length);
    // Before anything is queued; one pass of the kernels addon (64 floats per branch), not a
    // test per word while the rows are copied below.
    if (t.rejectNonFinite && firstNonFinite(grads) >= 0) nonFinite(grads);
    const deadlineMs = this.#deadline(options);
    const dim = t.dim;
    const router = this.#router;
    const links = this.#links;
    const shardOf = router.route(k, this.#pushScratch(k.length));
    const S = links.length;
    const counts = new Uint32Array(S);
    for (let i = 0; i < k.length; i++) (counts[shardOf[i] as number] as number)++;
    this.#counts.pushes++;
    // Every shard's part is queued or none is (a full queue must not leave half a push applied).
    for (let s = 0; s < S; s++) {
      if (counts[s] === 0) continue;
      const link = links[s] as ShardLink;
      const bytes = pushRequestLength(table, this.#writer, counts[s] as number, dim);
      // One push is one message per shard (splitting it would change the optimizer's steps).
      if (bytes > MAX_MESSAGE_BYTES) {
        throw new PsClientError(
          'ERR_PS_CLIENT_BATCH_TOO_LARGE',
          `shard ${link.label}'s part of the push is ${bytes} bytes > ${MAX_MESSAGE_BYTES}`,
          { shard: link.label },
        );
      }
      if (!link.canQueue(bytes)) {
        throw new PsClientError(
          'ERR_PS_CLIENT_OVERLOADED',
          `too many pushes queued for shard ${link.label}`,
          {
            retryable: true,
            shard: link.label,
          },
        );
      }
    }
    // Each shard's request, its keys and rows written straight into it (no per-shard arrays
    // copied again by an encoder). Seqs are taken and queued in this tick, so concurrent
    // pushes keep their order per shard.
    const reqs = new Array<Uint8Array | PushPart | undefined>(S);
    const seqs = new Float64Array(S);
    const kh = halvesOf(k);
    const g32 = new Int32Array(grads.buffer, grads.byteOffset, grads.length);
    const rk = new Array<Uint32Array | BigUint64Array | undefined>(S);
    const rg = new Array<Int32Array | Float32Array | undefined>(S);
    for (let s = 0; s < S; s++) {
      if (counts[s] === 0) continue;
      const head = {
        table,
        writer: this.#writer,
        seq: (links[s] as ShardLink).nextSeq(),
        dim,
        count: counts[s] as number,
      };
      seqs[s] = head.seq;
      if (LITTLE_ENDIAN) {
        // In registered memory over RDMA (sent as it is), else in a buffer given back by an
        // earlier push (see RequestBuffers); a new one only while the pools fill.
        const count = head.count;
        const length = pushRequestLength(table, head.writer, count, dim);
        const block = this.#pushBlocks?.take(length);
        const bytes = block?.bytes ?? this.#pushBuffers.take(length);
        reqs[s] = block ?? bytes;
        let at: number;
        try {
          at = bytes.byteOffset + writePushRequestHead(bytes, head);
        } catch (err) {
          for (const r of reqs) if (r !== undefined) this.#freePush(r); // none was queued
          throw err;
        }
        rk[s] = new Uint32Array(bytes.buffer, at, 2 * count);
        rg[s] = new Int32Array(bytes.buffer, at + 8 * count, count * dim);
      } else {
        rk[s] = new BigUint64Array(head.count);
        rg[s] = new Float32Array(head.count * dim);
      }
    }
    const fill = new Uint32Array(S);
    for (let i = 0; i < k.length; i++) {
      const s = shardOf[i] as number;
      const j = (fill[s] as number)++;
      if (!LITTLE_ENDIAN) {
        (rk[s] as BigUint64Array)[j] = k[i] as bigint;
        (rg[s] as Float32Array).set(grads.subarray(i * dim, (i + 1) * dim), j * dim);
        continue;
      }
      // u32 key halves and i32 gradient words: no bigint per key, the bits copied exactly.
      const keysOut = rk[s] as Uint32Array;
      keysOut[2 * j] = kh[2 * i] as number;
      keysOut[2 * j + 1] = kh[2 * i + 1] as number;
      const rowsOut = rg[s] as Int32Array;
      const from = i * dim;
      // A wide row is one bulk copy (a memmove: about half the CPU of a JS loop over its
      // words at dim 64, its subarray view included); a narrow one is cheaper word by word.
      if (dim >= BULK_ROW_COPY_DIM) rowsOut.set(g32.subarray(from, from + dim), j * dim);
      else for (let d = 0, to = j * dim; d < dim; d++) rowsOut[to + d] = g32[from + d] as number;
    }
    if (!LITTLE_ENDIAN) {
      // In-place requests are native order: a big-endian host encodes portable copies.
      for (let s = 0; s < S; s++) {
        if (counts[s] === 0) continue;
        reqs[s] = encodePushRequest({
          table,
          writer: this.#writer,
          seq: seqs[s] as number,
          dim,
          keys: rk[s] as BigUint64Array,
          grads: rg[s] as Float32Array,
        });
      }
    }
    const calls: Promise<PushReply>[] = [];
    for (let s = 0; s < S; s++) {
      const bytes = reqs[s];
      if (bytes === undefined) continue;
      calls.push(
        (links[s] as ShardLink)
          .push(seqs[s] as number, PsMethod.push, bytes, deadlineMs, this.#freePush)
          .then(decodeSparsePushReply),
      );
    }
    return summarize(await Promise.all(calls));
  }

  #denseOf(name: unknown): { length: number; rejectNonFinite: boolean } {
    if (typeof name !== 'string')
      throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', 'name must be a string');
    const d = this.#dense.get(name);
    if (d === undefined)
      throw new PsClientError('ERR_PS_CLIENT_UNKNOWN_TABLE', `no dense tensor ${name}`);
    return d;
  }

  /** The values of dense tensor `name`. */
  async pullDense(name: string, options?: CallDeadline): Promise<Float32Array> {
    this.#open();
    const d = this.#denseOf(name);
    const deadlineMs = this.#deadline(options);
    const link = this.#links[this.#router.shardOfName(name)] as ShardLink;
    this.#counts.denseCalls++;
    const v = decodePullDenseReply(
      await link.call(PsMethod.pullDense, encodePullDenseRequest({ name }), deadlineMs),
    );
    if (v.length !== d.length) {
      throw new PsClientError(
        'ERR_PS_CLIENT_SHARD_MISMATCH',
        `dense ${name}: ${v.length} values, expected ${d.length}`,
      );
    }
    return v;
  }

  /** Applies `grad` to dense tensor `name`, exactly once. */
  async pushDense(name: string, grad: Float32Array, options?: CallDeadline): Promise<PushSummary> {
    this.#open();
    const d = this.#denseOf(name);
    if (!(grad instanceof Float32Array) || grad.length !== d.length) {
      throw new PsClientError(
        'ERR_PS_CLIENT_LENGTH_MISMATCH',
        `grad must be a Float32Array of ${d.length}`,
      );
    }
    if (d.rejectNonFinite) {
      const i = firstNonFinite(grad);
      if (i >= 0) throw new PsClientError('ERR_PS_CLIENT_NON_FINITE', `grad[${i}] is not finite`);
    }
    const deadlineMs = this.#deadline(options);
    const link = this.#links[this.#router.shardOfName(name)] as ShardLink;
    const seq = link.nextSeq();
    const length = pushDenseRequestLength(name, this.#writer, grad.length);
    if (!link.canQueue(length)) {
      throw new PsClientError(
        'ERR_PS_CLIENT_OVERLOADED',
        `too many pushes queued for shard ${link.label}`,
        {
          retryable: true,
          shard: link.label,
        },
      );
    }
    this.#counts.denseCalls++;
    // As a sparse push's: in registered memory over RDMA, else a reused heap buffer.
    const block = this.#pushBlocks?.take(length);
    const bytes = block?.bytes ?? this.#pushBuffers.take(length);
    try {
      encodePushDenseRequestInto(bytes, { name, writer: this.#writer, seq, grads: grad });
    } catch (err) {
      this.#freePush(block ?? bytes); // never queued
      throw err;
    }
    const r = decodePushReply(
      await link.push(seq, PsMethod.pushDense, block ?? bytes, deadlineMs, this.#freePush),
      PsMessageKind.PushDenseReply,
    );
    return summarize([r]);
  }

  stats(): PsClientStats {
    return {
      transport: this.#transports.choice,
      shards: [...this.#links, ...this.#retiring.values()].map((l) => l.stats()),
      ...this.#counts,
      pushBlocks: this.#pushBlocks?.stats(),
      oneSided: { ...this.#oneSidedStats },
    };
  }

  /** Closes every shard's session; pending calls fail ERR_PS_CLIENT_CLOSED. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#shardMap?.close();
    await Promise.allSettled([...this.#links, ...this.#retiring.values()].map((l) => l.close()));
    this.#pushBlocks?.close(); // every push's part is back by now (ShardLink.close)
    await Promise.allSettled([...this.#reads.values()].map((r) => r.settled()));
    for (const r of this.#reads.values()) r.close();
    this.#transports.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** What must be equal on every shard: the tables and dense tensors, sorted by name. */
function signatureOf(i: TableInfo): string {
  return JSON.stringify([
    // A read descriptor is per shard (its own memory): not part of what must match.
    [...i.tables]
      .map(({ readDescriptor: _, ...t }) => t)
      .sort((a, b) => (a.name < b.name ? -1 : 1)),
    [...i.dense].sort((a, b) => (a.name < b.name ? -1 : 1)),
  ]);
}

function summarize(replies: PushReply[]): PushSummary {
  const s: PushSummary = { rows: 0, dropped: 0, duplicates: 0 };
  for (const r of replies) {
    s.rows += r.rows;
    s.dropped += r.dropped;
    if (r.duplicate) s.duplicates++;
  }
  return s;
}
