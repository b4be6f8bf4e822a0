import {
  type Connection,
  decodeReadDescriptor,
  type RdmaTransport,
  type ReadDescriptor,
  ReadList,
} from '@rdmajs/mux';
import {
  decodeStoreViewHeader,
  decodeTableInfoReply,
  encodeTableInfoRequest,
  type InitFn,
  PsMethod,
  readStoreView,
  STORE_VIEW,
  type StoreViewLayout,
  StoreViewReader,
  StoreViewSlotCache,
  type TableInfo,
  type ViewReadFn,
  type ViewReadList,
} from '@rdmajs/ps-wire';
import type { ShardLink } from '../ShardLink.js';
import type { LoadGate } from './LoadGate.js';

type Allocator = RdmaTransport['allocator'];
type Block = ReturnType<Allocator['alloc']>;

/** Keys one one-sided read of a segment takes (a ReadList holds 2 + 3 per key, ≤ 2^16). */
export const ONE_SIDED_MAX_KEYS = 1024;
/**
 * Default one-sided reads in flight per (shard, table) (PsClient option `oneSidedReaders`;
 * each a reader: scratch ≈ 130 KiB registered + ReadList); pulls beyond go two-sided. Bounded on
 * purpose: a one-sided fetch moves the shard's work onto the client (on soft the client's CPU
 * does every READ's copy, 3–4 READs per key), so it wins while the client has CPU to spare
 * and loses once pulls pile up — then two-sided lets the shards share the load.
 * `BENCH_EVAL_ONLY=fetch` (2 runs each, before slot hints, RDMA ÷ TCP mean at 50 % of TCP's
 * capacity / at gRPC's lower rate): 32 readers 5.1–3.3× / 0.31–0.37×; 2 readers 0.47–1.22× /
 * 0.45–0.64×; none (two-sided) 0.83–1.16× / 0.99–1.06×. With slot hints and ReadList.addBatch
 * (`BENCH_ONE_SIDED_READERS`, 2 runs each, interleaved, load average 5–9 from other jobs):
 * 2 readers 1.10–1.51× / 0.44–0.48×, 4: 2.47–9.63× / 0.37–0.74×, 32: 0.68–7.20× / 0.10–0.56×
 * (CPU per fetch at gRPC's rate ≈ 0.5× for all three): no count clearly better, 2 kept.
 * With the load gate (option `oneSidedMaxLoad` 0.25, LoadGate.ts), 4 runs each: 2 readers
 * 0.73–1.04× / 0.46–0.63×, 32: 0.62–2.19× / 0.41–0.57× — 32 still not clearly better, 2 kept.
 * With `oneSidedBusyMaxKeys` (32: small segments one-sided while the gate is shut), 3 runs
 * each, interleaved, load average 1.5–2.5: 2 readers 1.09–1.63× (earlier pair 0.44–0.77×),
 * 8: 0.45–0.69× (p99 0.36–0.67×, CPU 0.94–1.01×), 16: 0.56–0.64× (CPU 1.02–1.06×): with many
 * small pulls in flight, 2 readers sent most of them two-sided. 8 is the default (≈ 1 MiB of
 * registered scratch per (shard, table)).
 */
export const DEFAULT_ONE_SIDED_READERS = 8;
/**
 * Default slot hints per (shard, table) (option `oneSidedSlotHints`): 17 bytes each, 272 KiB
 * (beside 8 readers × ≈ 130 KiB of scratch). Zipf keys repeat, so hints catch most of a
 * batch's keys (ps-wire README, "Slot hints"): a hinted key costs 3 READs, no index window. The evaluation's request pool (1024 requests, Zipf 0.99
 * over 1M keys, 3 shards) over a table holding its 65 k keys, one client, pulls back to back,
 * hints ÷ none on the same requests, interleaved (3 runs × 9 rounds): 75 % of keys hinted,
 * READs a key 4.04 → 3.29, client CPU a key 0.70–1.18× (median 0.88×), mean latency median
 * 0.92×. A 16 384-request pool (445 k keys, most read once): 60 % hinted, READs 3.44.
 */
export const DEFAULT_ONE_SIDED_SLOT_HINTS = 16_384;
/** Bounds of the two options above. */
export const MAX_ONE_SIDED_READERS = 64;
export const MAX_ONE_SIDED_SLOT_HINTS = 1 << 22;

/**
 * Default of option `oneSidedBusyMaxKeys`: segments of at most this many keys still go
 * one-sided while the load gate is shut. A small segment is where one-sided pays most (a
 * two-sided pull of one key costs a shard wake-up and a reply for ≈ 0.7 µs of READs), a large
 * one is where the client's CPU runs out (≈ 0.75 µs of client CPU a key on soft, all on its one
 * thread, while a two-sided pull spreads the gathering over the shards' cores).
 * `BENCH_EVAL_ONLY=fetch` evaluation, RDMA ÷ TCP at 50 % of TCP's capacity, 2 runs each,
 * interleaved (readers 16, gate off, cap on every segment): cap 32 mean 0.70× / 0.48×, CPU
 * 1.01× / 0.96×; cap 64 0.88× / 1.56×, CPU 1.16× / 1.10×; no cap (2 readers, gate 0.25)
 * 1.06× / 0.98×, CPU 1.16× / 1.10×. A cap on every segment cost CPU at gRPC's low rate
 * (0.75× against 0.56–0.61×), so it applies only while the gate is shut: then (2 readers,
 * 2 runs each) mean 0.44–0.77×, p99 0.36–0.40× against 0.89–1.22×, 0.89–1.08× with no
 * segment one-sided while shut.
 */
export const DEFAULT_ONE_SIDED_BUSY_MAX_KEYS = 32;

/** How many readers and hints each (shard, table) gets (PsClient options). */
export interface OneSidedConfig {
  readers: number;
  /** 0: no hints (every key through the index). */
  slotHints: number;
  /** One per client: shut while its event loop is busy (option `oneSidedMaxLoad`). */
  gate: LoadGate;
  /** While the gate is shut, segments of at most this many keys still go one-sided. */
  busyMaxKeys: number;
}
/** Attempts of readStoreView before a raced key falls back. */
const ATTEMPTS = 4;

/** Counters of one-sided fetches (PsClientStats.oneSided). */
export interface OneSidedStats {
  /** Keys whose rows were READ from shard memory (the shard never woke). */
  keys: number;
  /** Segments pulled two-sided instead: raced or unreadable keys, busy readers, errors. */
  fallbacks: number;
  /** Keys of those segments. */
  fallbackKeys: number;
  /** Read descriptors fetched again (a new connection, a stale descriptor, a failed READ). */
  refreshes: number;
  /** READs that failed or a header / descriptor that did not validate (then two-sided). */
  errors: number;
  /** READs posted (every op of every list: epoch words, windows, metas, rows). */
  reads: number;
  /** Keys whose row was read through a slot hint (no index window). */
  hinted: number;
  /** Segments pulled two-sided because the client's event loop was busy (also in fallbacks). */
  gated: number;
}

/** A segment's rows, READ into a registered block (released with the pulled rows). */
export class ReadRows {
  readonly rows: Float32Array;
  readonly #block: Block;
  constructor(block: Block, floats: number) {
    this.#block = block;
    this.rows = new Float32Array(block.bytes.buffer, block.bytes.byteOffset, floats);
  }
  release(): void {
    this.#block.release();
  }
}

/**
 * A StoreViewReader with its registered scratch, its mux ReadList, and the one ViewReadFn
 * it posts through (made once: a pull only sets conn, desc, out and the deadline).
 */
interface Reader {
  view: StoreViewReader;
  scratch: Block;
  list: ReadList;
  /** The layout epoch it was made for. */
  epoch: number;
  /** The generation word of the last batch's first round (scratch's first word). */
  gen: Uint32Array;
  read: ViewReadFn;
  conn: Connection | undefined;
  desc: ReadDescriptor | undefined;
  out: Block | undefined;
  /** performance.now() time the pull's READs must end by. */
  until: number;
  /** conn.read's options (read synchronously by mux): reused, not made per READ list. */
  opts: { timeoutMs: number };
  /** addBatch's destinations: [scratch, the pull's rows block] (the second set per list). */
  dests: Block[];
}

/**
 * One-sided fetches of one readable table on one shard: the descriptor from table info, the
 * header read once per connection (again when the generation moves), and a few readers. Any
 * doubt — no RDMA connection, a stale descriptor, a READ or header that fails, a raced key —
 * ends in `null`: the caller pulls that segment two-sided; nothing is lost or left waiting.
 */
class TableReads {
  readonly #owner: LinkReads;
  readonly #name: string;
  readonly #dim: number;
  readonly #init: InitFn;
  descriptor: ReadDescriptor | undefined;
  #layout: StoreViewLayout | undefined;
  /** The connection the header was read on (a new one: read it again). */
  #headerConn: Connection | undefined;
  #header: Block | undefined;
  #headerList = new ReadList(1);
  readonly #idle: Reader[] = [];
  #readers = 0;
  /** Slot hints shared by this table's readers (one layout epoch; cleared at each header). */
  #hints: StoreViewSlotCache | undefined;
  /** Bumped when the layout changes: readers of an older one are dropped, not reused. */
  #epoch = 0;
  /** A connection whose shard served a header that does not validate: two-sided on it. */
  #refusedOn: Connection | undefined;
  #closed = false;

  constructor(owner: LinkReads, name: string, dim: number, init: InitFn) {
    this.#owner = owner;
    this.#name = name;
    this.#dim = dim;
    this.#init = init;
  }

  /**
   * Rows of the n keys (halves in k32) or null: pull them two-sided. Every READ of it shares
   * half of `timeoutMs` (the header's, each round's): the other half is left for the
   * two-sided pull a null sends the caller to.
   */
  async read(k32: Uint32Array, n: number, timeoutMs: number): Promise<ReadRows | null> {
    const o = this.#owner;
    const conn = o.link.connection;
    if (this.#closed) return null;
    if (conn === undefined || !conn.supportsRead || n > ONE_SIDED_MAX_KEYS || n === 0) return null;
    const until = performance.now() + timeoutMs / 2;
    if (conn !== o.conn) o.refresh(conn); // a new connection: perhaps a new shard process
    const desc = this.descriptor;
    if (desc === undefined || o.refreshing !== undefined || conn === this.#refusedOn) return null;
    // The gate first: it samples the loop (at most once per window) on every pull, so a large
    // segment after a run of small ones sees the last window, not the time since the last one.
    if (!o.config.gate.open() && n > o.config.busyMaxKeys) {
      o.stats.gated++; // a busy client: let the shard do the work of a large segment
      return null;
    }
    let out: Block | undefined;
    let r: Reader | undefined;
    try {
      if (this.#layout === undefined || this.#headerConn !== conn) {
        if (this.#headerList.busy) return null; // another pull is reading it
        await conn.read(desc, this.#headerRead(), { timeoutMs: budgetLeft(until) });
        if (!this.#takeHeader(conn, desc)) return null;
      }
      const layout = this.#layout as StoreViewLayout;
      r = this.#take(layout);
      if (r === undefined) return null;
      out = o.allocator.alloc(n * this.#dim * 4);
      const rows = new ReadRows(out, n * this.#dim);
      r.conn = conn;
      r.desc = desc;
      r.out = out;
      r.until = until;
      const fallback = await readStoreView(r.view, k32, n, rows.rows, r.read, ATTEMPTS);
      o.stats.hinted += r.view.hinted;
      // Readers hold a layout's shape; a moved generation is re-checked at the next header.
      if (r.gen[0] !== layout.generation) this.#headerConn = undefined;
      this.#give(r);
      r = undefined;
      if (fallback > 0) {
        rows.release();
        return null;
      }
      o.stats.keys += n;
      return rows;
    } catch (err) {
      // Only the reader's own list writes into `out` (the header list may be another pull's):
      // memory of a list still busy — a READ that may yet land — is never reused.
      if (r?.list.busy !== true) out?.release();
      if (err === OUT_OF_BUDGET) {
        // Nothing went wrong (thrown before posting): no time left to read one-sidedly.
        if (r !== undefined) this.#give(r);
        return null;
      }
      if (r !== undefined) this.#drop(r);
      o.stats.errors++;
      this.#layout = undefined;
      const code = (err as { code?: unknown } | null)?.code;
      // Another incarnation (the shard restarted): fetch its descriptor. A failed read QP
      // stays failed: two-sided on this connection, a new one reads again.
      if (code === 'ERR_MUX_STALE_DESCRIPTOR') o.refresh(undefined);
      else if (code === 'ERR_MUX_READ_FAILED') this.#refusedOn = conn;
      return null;
    }
  }

  /** One ViewReadList as a mux ReadList on the RC read QP (executed in list order). */
  #post(r: Reader, l: ViewReadList): Promise<void> {
    r.opts.timeoutMs = budgetLeft(r.until);
    const list = r.list;
    list.clear();
    // `into` 0: the reader's scratch, 1: the rows block — each checked once, not per entry.
    r.dests[1] = r.out as Block;
    list.addBatch(l.count, l.remote, l.length, l.local, l.into, r.dests);
    this.#owner.stats.reads += l.count;
    return (r.conn as Connection).read(r.desc as ReadDescriptor, list, r.opts);
  }

  /** The list that READs the header (another pull reading it: the caller goes two-sided). */
  #headerRead(): ReadList {
    this.#header ??= this.#owner.allocator.alloc(STORE_VIEW.HEADER_BYTES);
    const list = this.#headerList;
    list.clear(); // throws while busy: caught, two-sided
    return list.add(0, STORE_VIEW.HEADER_BYTES, this.#header);
  }

  /** Validates the header just read; false (and two-sided on this connection) if it lies. */
  #takeHeader(conn: Connection, desc: ReadDescriptor): boolean {
    const h = this.#header as Block;
    let l: StoreViewLayout;
    try {
      // Untrusted bytes: every field checked, every section inside the advertised region.
      l = decodeStoreViewHeader(h.bytes.subarray(0, STORE_VIEW.HEADER_BYTES), desc.length);
      if (l.dim !== this.#dim) throw new Error(`table ${this.#name}: header dim ${l.dim}`);
    } catch {
      this.#owner.stats.errors++;
      this.#refusedOn = conn;
      return false;
    }
    const old = this.#layout;
    if (old === undefined || !sameShape(old, l)) {
      this.#epoch++;
      for (const r of this.#idle.splice(0)) this.#drop(r);
      const cap = this.#owner.config.slotHints;
      this.#hints = cap === 0 ? undefined : new StoreViewSlotCache(cap);
    }
    // A header read again means a new connection (perhaps another shard process with the
    // same shape) or a moved generation: no hint of before is worth a READ.
    this.#hints?.clear(l.generation);
    this.#layout = l;
    this.#headerConn = conn;
    return true;
  }

  #take(layout: StoreViewLayout): Reader | undefined {
    const r = this.#idle.pop();
    if (r !== undefined) return r;
    if (this.#readers >= this.#owner.config.readers) return undefined;
    const a = this.#owner.allocator;
    const bytes = StoreViewReader.scratchBytes(layout, ONE_SIDED_MAX_KEYS);
    const scratch = a.alloc(bytes);
    try {
      const view = new StoreViewReader(layout, {
        maxKeys: ONE_SIDED_MAX_KEYS,
        init: this.#init,
        scratch: scratch.bytes.subarray(0, bytes),
        ...(this.#hints === undefined ? {} : { slotCache: this.#hints }),
      });
      this.#readers++;
      const gen = new Uint32Array(scratch.bytes.buffer, scratch.bytes.byteOffset, 1);
      const list = new ReadList(2 + 3 * ONE_SIDED_MAX_KEYS);
      const r: Reader = {
        view,
        scratch,
        list,
        epoch: this.#epoch,
        gen,
        read: (l) => this.#post(r, l),
        conn: undefined,
        desc: undefined,
        out: undefined,
        until: 0,
        opts: { timeoutMs: 0 },
        dests: [scratch, scratch],
      };
      return r;
    } catch (err) {
      scratch.release();
      throw err;
    }
  }

  #give(r: Reader): void {
    r.conn = undefined;
    r.desc = undefined;
    r.out = undefined;
    r.dests[1] = r.scratch; // not the released rows block
    if (r.epoch === this.#epoch && !this.#closed) this.#idle.push(r);
    else this.#drop(r);
  }

  #drop(r: Reader): void {
    // A list still busy (a READ that timed out) may yet be written by the NIC: its memory is
    // kept, and it still counts against the readers bound (so such leftovers stay bounded).
    if (r.list.busy) return;
    this.#readers--;
    r.scratch.release();
  }

  /** Frees the registered memory (client close); pulls still reading free theirs as they end. */
  close(): void {
    this.#closed = true;
    for (const r of this.#idle.splice(0)) this.#drop(r);
    if (this.#header !== undefined && !this.#headerList.busy) this.#header.release();
    this.#header = undefined;
  }
}

/** Thrown (and caught in TableReads.read) when a one-sided read's share of the deadline is spent. */
const OUT_OF_BUDGET = new Error('one-sided read budget spent');

/** Milliseconds left until `until` (performance.now() time); throws OUT_OF_BUDGET past it. */
function budgetLeft(until: number): number {
  const left = Math.floor(until - performance.now());
  if (left < 1) throw OUT_OF_BUDGET;
  return left;
}

function sameShape(a: StoreViewLayout, b: StoreViewLayout | undefined): boolean {
  return (
    b !== undefined &&
    a.dim === b.dim &&
    a.rowDtype === b.rowDtype &&
    a.buckets === b.buckets &&
    a.salt === b.salt &&
    a.slotCount === b.slotCount &&
    a.chunkRows === b.chunkRows &&
    a.totalBytes === b.totalBytes
  );
}

/**
 * One-sided fetches over one shard link: its readable tables' descriptors (from table info),
 * refreshed — once at a time, bounded by the refresh deadline — when the link's connection
 * changes or a read fails. While a refresh runs, pulls go two-sided.
 */
export class LinkReads {
  readonly link: ShardLink;
  readonly allocator: Allocator;
  readonly stats: OneSidedStats;
  readonly config: OneSidedConfig;
  readonly #tables = new Map<string, TableReads>();
  readonly #deadlineMs: number;
  /** The connection the descriptors were fetched for. */
  conn: Connection | undefined;
  refreshing: Promise<void> | undefined;

  constructor(
    link: ShardLink,
    allocator: Allocator,
    stats: OneSidedStats,
    inits: ReadonlyMap<string, { dim: number; init: InitFn }>,
    deadlineMs: number,
    config: OneSidedConfig,
  ) {
    this.link = link;
    this.allocator = allocator;
    this.stats = stats;
    this.config = config;
    this.#deadlineMs = deadlineMs;
    for (const [name, t] of inits)
      this.#tables.set(name, new TableReads(this, name, t.dim, t.init));
  }

  /** The table's reads (two-sided until the shard handed a descriptor for it). */
  table(name: string): TableReads | undefined {
    return this.#tables.get(name);
  }

  /** Takes the descriptors of a table-info reply (received on `conn`). */
  apply(info: TableInfo, conn: Connection | undefined): void {
    this.conn = conn;
    for (const [name, t] of this.#tables) {
      const bytes = info.tables.find((x) => x.name === name)?.readDescriptor;
      try {
        t.descriptor = bytes === undefined ? undefined : decodeReadDescriptor(bytes);
      } catch {
        this.stats.errors++; // a lying shard: this table is pulled two-sided
        t.descriptor = undefined;
      }
    }
  }

  /** Fetches the descriptors again (in the background, one refresh at a time). */
  refresh(conn: Connection | undefined): void {
    if (this.refreshing !== undefined) return;
    this.conn = conn;
    this.stats.refreshes++;
    this.refreshing = this.link
      .call(PsMethod.tableInfo, encodeTableInfoRequest(), this.#deadlineMs)
      .then(
        (b) => this.apply(decodeTableInfoReply(b), this.link.connection),
        () => {
          this.conn = undefined; // try again at the next pull
        },
      )
      .finally(() => {
        this.refreshing = undefined;
      });
  }

  /** Waits for a running refresh (tests, close). */
  settled(): Promise<void> {
    return this.refreshing ?? Promise.resolve();
  }

  close(): void {
    for (const t of this.#tables.values()) t.close();
  }
}
