// Over 500 lines on purpose: the store's one lifecycle (open, push de-dup, snapshot,
// restore, close) over tables, log and snapshots, which have files of their own.
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { DenseTensor, type DenseTensorConfig } from './DenseTensor.js';
import { invalidArg, PsCorruptError, PsError, PsNoValidSnapshotError } from './errors.js';
import { KIND_DENSE, KIND_SPARSE, type PushRecord } from './internal/record.js';
import {
  listSegments,
  loggedRecordBytes,
  PushLog,
  type PushLogOptions,
  scanSegment,
} from './PushLog.js';
import { heapRowMemory, type RowMemory } from './RowMemory.js';
import {
  listSnapshots,
  readSnapshot,
  type SnapshotData,
  type StoreCapture,
  writeSnapshot,
} from './Snapshot.js';
import { SparseTable, type SparseTableConfig, type SparseTableStats } from './SparseTable.js';
import type { StoreViewWriter } from './StoreViewWriter.js';

/** Largest batch one call takes (keys for sparse calls). */
export const MAX_BATCH_KEYS = 1 << 20;
/** Largest gradient one push takes (floats), so one log record stays under 256 MiB. */
export const MAX_PUSH_FLOATS = 1 << 26;

export interface StoreOptions {
  tables?: SparseTableConfig[];
  dense?: DenseTensorConfig[];
  /**
   * Where row chunks come from; e.g. a RegisteredAllocator. Default: the JS heap. A
   * `oneSidedRead` table's region comes from here too and peers READ all of its
   * registration: with readable tables, alloc must give each block its own registration
   * (e.g. mux `allocReadRegion`), never a slice of an arena other rows or buffers share.
   */
  memory?: RowMemory;
  /** Clock for TTL (ms). Default Date.now. Logged with every push, so replay sees the same time. */
  now?: () => number;
  /**
   * A push whose seq is more than this above its session's last applied seq is refused
   * (`ERR_PS_SEQ_GAP`, nothing applied), so one forged push cannot mark a session's future
   * pushes as duplicates. Sessions not seen yet take any seq. Default 65 536.
   */
  maxSeqGap?: number;
  /**
   * Sessions (writers) remembered for de-duplication. A push from a new session past this
   * many forgets the one idle longest, if it has been idle for `sessionIdleMs`; else it is
   * refused (`ERR_PS_TOO_MANY_SESSIONS`, nothing applied, not retryable), so writer ids that come and go
   * cannot grow the table (and its snapshots) without bound. Default 65 536.
   */
  maxSessions?: number;
  /**
   * How long a session must have gone without a push before a new one may take its place,
   * ms. A forgotten session's retransmissions are no longer recognised as duplicates, so
   * this must exceed any writer's retry window (ps-client: `reconnectBudgetMs`, 60 s).
   * Default 3 600 000 (1 h).
   */
  sessionIdleMs?: number;
}

export interface DurableStoreOptions extends StoreOptions {
  /** Directory of snapshots and log segments (created if missing). */
  dir: string;
  /** Push log options, or false for no log (snapshots only). Default: fsync policy. */
  log?: PushLogOptions | false;
  /** Snapshots kept (older ones are deleted with the log they no longer need). Default 2. */
  keepSnapshots?: number;
}

/** Who sent a push: a retransmitted (session, seq) ≤ the last applied one is not applied again. */
export interface PushOptions {
  session: string;
  seq: number;
}

export interface PushResult {
  /** False for a duplicate (session, seq). */
  applied: boolean;
  duplicate: boolean;
  /** Distinct rows updated (sparse) or 1 (dense). */
  rows: number;
  /** Keys whose gradient was dropped: not admitted, or the batch alone exceeded the row limit. */
  dropped: number;
}

export interface RestoreReport {
  /** Snapshot loaded, or null when the store started from the log alone (or empty). */
  snapshot: string | null;
  /** Newer snapshots that failed validation, newest first. */
  skipped: PsError[];
  /** Log records applied after the snapshot. */
  replayed: number;
  /** A torn final record that was dropped (never applied). */
  tornTail: { file: string; offset: number } | null;
}

export interface SnapshotInfo {
  file: string;
  lsn: number;
  bytes: number;
  /** Time the store was paused to take the capture. */
  pauseMs: number;
  /** Longest single copy-on-write chunk copy while writing. */
  maxChunkCopyMs: number;
}

export type StoreState = 'open' | 'closing' | 'closed' | 'failed';

const SESSION_RE = /^[\x20-\x7e]{1,256}$/;
/** Dense records carry no keys (shared: nothing writes to an empty array). */
const EMPTY_KEYS = new Uint32Array(0);

function canonicalTable(t: SparseTable): unknown {
  const c = t.config;
  return {
    dim: t.dim,
    rowDtype: t.rowDtype,
    optimizer: t.optimizer.config,
    init: c.init ?? { kind: 'zeros' },
    budgetBytes: c.budgetBytes ?? null,
    admission: c.admission ?? null,
    ttlMs: c.ttlMs ?? null,
    stateNames: t.optimizer.stateNames,
    usesSteps: t.optimizer.usesSteps,
    lru: t.hasLru,
    ttl: t.hasTtl,
    sketch: t.sketchShape,
  };
}

function canonicalDense(d: DenseTensor): unknown {
  return {
    shape: d.shape,
    optimizer: d.optimizer.config,
    init: d.config.init ?? { kind: 'zeros' },
    stateNames: d.optimizer.stateNames,
  };
}

/**
 * The parameter store: sparse tables and dense tensors, the batch API the network layer
 * calls, (session, seq) de-duplication, and — when opened on a directory — snapshots, the
 * push log and restore. Single-threaded; pulls are synchronous, pushes apply synchronously
 * and resolve when durable.
 */
export class ParameterStore {
  readonly #tables = new Map<string, SparseTable>();
  readonly #dense = new Map<string, DenseTensor>();
  readonly #now: () => number;
  /** Last applied (seq, lsn) and push time per session, least recently pushed first. */
  readonly #sessions = new Map<string, { seq: number; lsn: number; at: number }>();
  readonly #maxSeqGap: number;
  readonly #maxSessions: number;
  readonly #sessionIdleMs: number;
  #lsn = 0;
  #state: StoreState = 'open';
  #dir: string | null = null;
  #log: PushLog | null = null;
  #keep = 2;
  #snapshotting: Promise<unknown> = Promise.resolve();
  #snapshotBusy = false;
  #restore: RestoreReport = { snapshot: null, skipped: [], replayed: 0, tornTail: null };
  #replayNow: number | null = null;

  constructor(options: StoreOptions = {}) {
    if (options === null || typeof options !== 'object')
      throw invalidArg('options must be an object');
    const memory = options.memory ?? heapRowMemory;
    if (typeof memory?.alloc !== 'function') throw invalidArg('memory must have alloc(bytes)');
    this.#now = options.now ?? Date.now;
    const gap = options.maxSeqGap ?? 65_536;
    if (!Number.isSafeInteger(gap) || gap < 1)
      throw invalidArg('maxSeqGap must be a positive integer');
    this.#maxSeqGap = gap;
    const maxSessions = options.maxSessions ?? 65_536;
    if (!Number.isSafeInteger(maxSessions) || maxSessions < 1)
      throw invalidArg('maxSessions must be a positive integer');
    this.#maxSessions = maxSessions;
    const idle = options.sessionIdleMs ?? 3_600_000;
    if (!Number.isSafeInteger(idle) || idle < 0)
      throw invalidArg('sessionIdleMs must be a non-negative integer');
    this.#sessionIdleMs = idle;
    for (const c of options.tables ?? []) {
      if (this.#tables.has(c?.name) || this.#dense.has(c?.name))
        throw invalidArg(`duplicate table name ${c.name}`);
      this.#tables.set(c.name, new SparseTable(c, memory));
    }
    for (const c of options.dense ?? []) {
      if (this.#tables.has(c?.name) || this.#dense.has(c?.name))
        throw invalidArg(`duplicate tensor name ${c.name}`);
      this.#dense.set(c.name, new DenseTensor(c));
    }
  }

  /** Opens a durable store: newest valid snapshot + log replay, then serves. */
  static async open(options: DurableStoreOptions): Promise<ParameterStore> {
    const store = new ParameterStore(options);
    if (typeof options.dir !== 'string' || options.dir.length === 0)
      throw invalidArg('dir must be a path');
    const keep = options.keepSnapshots ?? 2;
    if (!Number.isInteger(keep) || keep < 1)
      throw invalidArg('keepSnapshots must be an integer ≥ 1');
    store.#keep = keep;
    store.#dir = options.dir;
    try {
      await fsp.mkdir(options.dir, { recursive: true });
    } catch (err) {
      throw new PsError('ERR_PS_IO', `cannot create ${options.dir}`, { cause: err });
    }
    await store.#recover(options.log !== false);
    if (options.log !== false) store.#log = new PushLog(options.dir, store.#lsn, options.log ?? {});
    return store;
  }

  get state(): StoreState {
    return this.#state;
  }

  /** What open() restored from. */
  get restoreReport(): RestoreReport {
    return this.#restore;
  }

  /** Log sequence number of the last logged push. */
  get lsn(): number {
    return this.#lsn;
  }

  get tableNames(): string[] {
    return [...this.#tables.keys()];
  }

  get denseNames(): string[] {
    return [...this.#dense.keys()];
  }

  /** Last applied seq of a session (undefined if unseen). */
  sessionSeq(session: string): number | undefined {
    return this.#sessions.get(session)?.seq;
  }

  stats(table: string): SparseTableStats {
    return this.#table(table).stats();
  }

  /**
   * A `oneSidedRead` table's region (its `bytes`, registered for peers to READ, and `layout`),
   * or null for other tables. Valid until the store closes. The RowMemory the table took it
   * from must be dedicated to it (its own registration, e.g. mux `allocReadRegion`): a
   * registration shared with other row memory would let peers READ that memory too.
   */
  storeView(table: string): StoreViewWriter | null {
    this.#checkOpen();
    return this.#table(table).storeView;
  }

  #checkOpen(): void {
    if (this.#state !== 'open') throw new PsError('ERR_PS_CLOSED', `store is ${this.#state}`);
  }

  #table(name: string): SparseTable {
    const t = this.#tables.get(name);
    if (t === undefined)
      throw new PsError('ERR_PS_UNKNOWN_TABLE', `no sparse table ${String(name)}`);
    return t;
  }

  #denseTensor(name: string): DenseTensor {
    const t = this.#dense.get(name);
    if (t === undefined)
      throw new PsError('ERR_PS_UNKNOWN_TABLE', `no dense tensor ${String(name)}`);
    return t;
  }

  #clock(): number {
    if (this.#replayNow !== null) return this.#replayNow;
    const t = this.#now();
    return Number.isFinite(t) ? t : 0;
  }

  static #keys(keys: unknown): Uint32Array {
    if (!(keys instanceof BigUint64Array)) throw invalidArg('keys must be a BigUint64Array');
    if (keys.length > MAX_BATCH_KEYS) throw invalidArg(`at most ${MAX_BATCH_KEYS} keys per call`);
    return new Uint32Array(keys.buffer, keys.byteOffset, keys.length * 2);
  }

  /** Gathers the rows of `keys` into `out` (keys.length × dim floats) in request order. */
  pullInto(table: string, keys: BigUint64Array, out: Float32Array): void {
    this.#checkOpen();
    const t = this.#table(table);
    const k32 = ParameterStore.#keys(keys);
    if (!(out instanceof Float32Array) || out.length !== keys.length * t.dim)
      throw invalidArg(`out must be a Float32Array of ${keys.length} × ${t.dim} floats`);
    // The clock only decides TTL expiry: a table without one needs no reading of it.
    t.pullInto(k32, keys.length, out, t.hasTtl ? this.#clock() : 0);
  }

  pullDense(name: string, out: Float32Array): void {
    this.#checkOpen();
    const d = this.#denseTensor(name);
    if (!(out instanceof Float32Array) || out.length !== d.length)
      throw invalidArg(`out must be a Float32Array of ${d.length} floats`);
    d.pull(out);
  }

  #checkPushOptions(opts: PushOptions): void {
    if (opts === null || typeof opts !== 'object')
      throw invalidArg('push options { session, seq } are required');
    if (typeof opts.session !== 'string' || !SESSION_RE.test(opts.session))
      throw invalidArg('session must be 1–256 printable ASCII characters');
    if (!Number.isSafeInteger(opts.seq) || opts.seq < 0)
      throw invalidArg('seq must be a non-negative safe integer');
  }

  /** A push whose log record would not fit one is refused before it applies (not after). */
  #checkLoggable(
    logged: boolean,
    opts: PushOptions,
    name: string,
    keys: Uint32Array,
    grads: Float32Array,
  ): void {
    if (this.#log !== null && logged) loggedRecordBytes(opts.session, name, keys, grads);
  }

  #duplicate(opts: PushOptions): PushResult | Promise<PushResult> | null {
    const s = this.#sessions.get(opts.session);
    if (s !== undefined && opts.seq - s.seq > this.#maxSeqGap)
      throw new PsError(
        'ERR_PS_SEQ_GAP',
        `seq ${opts.seq} is more than ${this.#maxSeqGap} above the session's last applied seq ${s.seq}`,
      );
    if (s === undefined) this.#makeRoom();
    if (s === undefined || opts.seq > s.seq) return null;
    const r: PushResult = { applied: false, duplicate: true, rows: 0, dropped: 0 };
    // The original may not be durable yet: a duplicate is acknowledged no earlier than it.
    return this.#log === null ? r : this.#log.waitDurable(s.lsn).then(() => r);
  }

  /** Room for one more session: forgets the longest idle one if it may go, else refuses. */
  #makeRoom(): void {
    if (this.#sessions.size < this.#maxSessions) return;
    for (const [session, v] of this.#sessions) {
      // The first entry is the least recently pushed (#remember moves a session to the end).
      if (this.#clock() - v.at < this.#sessionIdleMs) break;
      this.#sessions.delete(session);
      return;
    }
    throw new PsError(
      'ERR_PS_TOO_MANY_SESSIONS',
      `${this.#sessions.size} writer sessions are remembered and none has been idle for ${this.#sessionIdleMs} ms`,
      // Not retryable: a full table frees only as writers idle out (sessionIdleMs), so a
      // client retrying at once would retry for that long.
    );
  }

  /** Records a session's last applied push, as its most recent. */
  #remember(session: string, seq: number, lsn: number, at: number): void {
    this.#sessions.delete(session);
    this.#sessions.set(session, { seq, lsn, at });
  }

  /**
   * Applies `grads` (keys.length × dim floats) to the rows of `keys` with the table's
   * optimizer, at once; resolves when the push is durable under the log policy.
   */
  push(
    table: string,
    keys: BigUint64Array,
    grads: Float32Array,
    opts: PushOptions,
  ): Promise<PushResult> {
    const r = this.pushNow(table, keys, grads, opts);
    return r instanceof Promise ? r : Promise.resolve(r);
  }

  /**
   * `push` without a promise where none is needed: the result itself when the push is
   * durable as it returns (no log, or a table not logged), else a promise of it (the log
   * append, or a duplicate whose original is not durable yet). Throws what `push` rejects
   * with before it applies anything.
   */
  pushNow(
    table: string,
    keys: BigUint64Array,
    grads: Float32Array,
    opts: PushOptions,
  ): PushResult | Promise<PushResult> {
    this.#checkOpen();
    const t = this.#table(table);
    const k32 = ParameterStore.#keys(keys);
    if (!(grads instanceof Float32Array) || grads.length !== keys.length * t.dim)
      throw invalidArg(`grads must be a Float32Array of ${keys.length} × ${t.dim} floats`);
    if (grads.length > MAX_PUSH_FLOATS)
      throw invalidArg(`at most ${MAX_PUSH_FLOATS} gradient floats per push`);
    this.#checkPushOptions(opts);
    this.#checkLoggable(t.logged, opts, table, k32, grads);
    const dup = this.#duplicate(opts);
    if (dup !== null) return dup;
    const now = this.#clock();
    const r = t.push(k32, keys.length, grads, now);
    const result: PushResult = {
      applied: true,
      duplicate: false,
      rows: r.rows,
      dropped: r.dropped,
    };
    return this.#logged(
      t.logged,
      { kind: KIND_SPARSE, name: table, keys: k32, grads, now, opts },
      result,
    );
  }

  /** Applies `grad` to a dense tensor with its optimizer; resolves when durable. */
  pushDense(name: string, grad: Float32Array, opts: PushOptions): Promise<PushResult> {
    const r = this.#pushDenseNow(name, grad, opts);
    return r instanceof Promise ? r : Promise.resolve(r);
  }

  #pushDenseNow(
    name: string,
    grad: Float32Array,
    opts: PushOptions,
  ): PushResult | Promise<PushResult> {
    this.#checkOpen();
    const d = this.#denseTensor(name);
    if (!(grad instanceof Float32Array) || grad.length !== d.length)
      throw invalidArg(`grad must be a Float32Array of ${d.length} floats`);
    this.#checkPushOptions(opts);
    this.#checkLoggable(d.logged, opts, name, EMPTY_KEYS, grad);
    const dup = this.#duplicate(opts);
    if (dup !== null) return dup;
    d.push(grad);
    const result: PushResult = { applied: true, duplicate: false, rows: 1, dropped: 0 };
    return this.#logged(
      d.logged,
      { kind: KIND_DENSE, name, keys: EMPTY_KEYS, grads: grad, now: this.#clock(), opts },
      result,
    );
  }

  #logged(
    logged: boolean,
    r: {
      kind: 1 | 2;
      name: string;
      keys: Uint32Array;
      grads: Float32Array;
      now: number;
      opts: PushOptions;
    },
    result: PushResult,
  ): PushResult | Promise<PushResult> {
    const log = this.#log;
    if (log === null || !logged) {
      this.#remember(r.opts.session, r.opts.seq, this.#lsn, r.now);
      return result;
    }
    const lsn = ++this.#lsn;
    this.#remember(r.opts.session, r.opts.seq, lsn, r.now);
    return log.append(lsn, r.now, r.opts.seq, r.kind, r.opts.session, r.name, r.keys, r.grads).then(
      () => result,
      (err: unknown) => {
        // Applied in memory but not durable: stop accepting pushes rather than diverge.
        this.#state = 'failed';
        throw err;
      },
    );
  }

  #apply(rec: PushRecord, file: string): void {
    this.#replayNow = rec.nowMs;
    try {
      if (rec.kind === KIND_SPARSE) {
        const t = this.#tables.get(rec.name);
        if (t === undefined || rec.grads.length !== (rec.keys.length / 2) * t.dim)
          throw new PsCorruptError(
            file,
            0,
            `log record ${rec.lsn} is for unknown table ${rec.name} or has the wrong size`,
          );
        t.push(rec.keys, rec.keys.length / 2, rec.grads, rec.nowMs);
      } else {
        const d = this.#dense.get(rec.name);
        if (d === undefined || rec.grads.length !== d.length)
          throw new PsCorruptError(
            file,
            0,
            `log record ${rec.lsn} is for unknown dense tensor ${rec.name} or has the wrong size`,
          );
        d.push(rec.grads);
      }
    } finally {
      this.#replayNow = null;
    }
    this.#remember(rec.session, rec.seq, rec.lsn, rec.nowMs);
    this.#lsn = rec.lsn;
  }

  #load(snap: SnapshotData): void {
    for (const [name, st] of snap.tables) {
      const t = this.#tables.get(name);
      if (t === undefined)
        throw new PsError(
          'ERR_PS_CONFIG_MISMATCH',
          `${snap.file} has table ${name}, which the store was not given`,
        );
      if (JSON.stringify(canonicalTable(t)) !== JSON.stringify(st.meta.config))
        throw new PsError(
          'ERR_PS_CONFIG_MISMATCH',
          `table ${name}: configuration differs from ${snap.file}`,
        );
    }
    for (const [name, sd] of snap.dense) {
      const d = this.#dense.get(name);
      if (d === undefined)
        throw new PsError(
          'ERR_PS_CONFIG_MISMATCH',
          `${snap.file} has dense tensor ${name}, which the store was not given`,
        );
      if (JSON.stringify(canonicalDense(d)) !== JSON.stringify(sd.meta.config))
        throw new PsError(
          'ERR_PS_CONFIG_MISMATCH',
          `dense tensor ${name}: configuration differs from ${snap.file}`,
        );
    }
    for (const [name, st] of snap.tables)
      (this.#tables.get(name) as SparseTable).load({ ...st, tickCounter: st.meta.tickCounter });
    for (const [name, sd] of snap.dense) {
      const d = this.#dense.get(name) as DenseTensor;
      d.values.set(sd.values);
      sd.state.forEach((s, k) => {
        d.state.set(s, k * d.length);
      });
      d.step = sd.meta.step;
    }
    // Push times are not in snapshots: restored sessions count as pushed now.
    const now = this.#clock();
    for (const [s, seq] of Object.entries(snap.sessions))
      this.#sessions.set(s, { seq, lsn: snap.lsn, at: now });
    this.#lsn = snap.lsn;
  }

  async #recover(withLog: boolean): Promise<void> {
    const dir = this.#dir as string;
    for (const n of await fsp.readdir(dir))
      if (n.endsWith('.tmp')) await fsp.rm(path.join(dir, n), { force: true });
    const snaps = await listSnapshots(dir);
    const segs = withLog ? await listSegments(dir) : [];
    const skipped: PsError[] = [];
    let loaded: SnapshotData | null = null;
    for (const s of snaps) {
      try {
        loaded = await readSnapshot(s.file);
        break;
      } catch (err) {
        if (err instanceof PsError && (err.code === 'ERR_PS_CORRUPT' || err.code === 'ERR_PS_IO'))
          skipped.push(err);
        else throw err;
      }
    }
    const logFromStart = segs.length > 0 && (segs[0]?.start as number) <= 1;
    if (loaded === null && snaps.length > 0 && !logFromStart)
      throw new PsNoValidSnapshotError(dir, skipped);
    if (loaded !== null) this.#load(loaded);
    const base = this.#lsn;
    let tornTail: RestoreReport['tornTail'] = null;
    let replayed = 0;
    let expect = -1;
    for (let i = 0; i < segs.length; i++) {
      const seg = segs[i] as { file: string; start: number };
      const next = segs[i + 1];
      const last = next === undefined;
      if (!last && (next as { start: number }).start <= base + 1) continue;
      if (expect === -1 && seg.start > base + 1)
        throw new PsCorruptError(
          seg.file,
          0,
          `log starts at ${seg.start}, records after ${base} are missing`,
        );
      if (expect !== -1 && seg.start !== expect)
        throw new PsCorruptError(seg.file, 0, `segment starts at ${seg.start}, expected ${expect}`);
      let buf: Buffer;
      try {
        buf = await fsp.readFile(seg.file);
      } catch (err) {
        throw new PsError('ERR_PS_IO', `cannot read ${seg.file}`, { cause: err });
      }
      const r = scanSegment(buf, seg.file, last, seg.start);
      for (const rec of r.records) {
        if (rec.lsn <= base) continue;
        this.#apply(rec, seg.file);
        replayed++;
      }
      expect = seg.start + r.records.length;
      if (r.torn) {
        tornTail = { file: seg.file, offset: r.validEnd };
        await fsp.truncate(seg.file, r.validEnd);
      }
    }
    this.#restore = { snapshot: loaded?.file ?? null, skipped, replayed, tornTail };
  }

  /**
   * Writes a snapshot while the store keeps serving: the capture is O(chunks) (the pause),
   * chunks are copied on their next write or when written out. Then older snapshots beyond
   * `keepSnapshots` and the log segments no snapshot needs are deleted.
   */
  snapshot(): Promise<SnapshotInfo> {
    this.#checkOpen();
    const dir = this.#dir;
    if (dir === null)
      throw new PsError('ERR_PS_INVALID_ARG', 'snapshot() needs a store opened with a dir');
    // The capture is taken now (state as of this call) unless a snapshot is still being
    // written; then it is taken when that one finishes.
    const run = this.#snapshotBusy
      ? this.#snapshotting.catch(() => {}).then(() => this.#snapshotNow(dir))
      : this.#snapshotNow(dir);
    this.#snapshotting = run;
    return run;
  }

  #snapshotNow(dir: string): Promise<SnapshotInfo> {
    this.#snapshotBusy = true;
    let cap: StoreCapture;
    let pauseMs: number;
    try {
      const t0 = performance.now();
      cap = this.#capture();
      pauseMs = performance.now() - t0;
    } catch (err) {
      this.#snapshotBusy = false;
      return Promise.reject(err);
    }
    return this.#writeCapture(dir, cap, pauseMs).finally(() => {
      this.#snapshotBusy = false;
    });
  }

  #capture(): StoreCapture {
    const cap: StoreCapture = {
      lsn: this.#lsn,
      sessions: Object.fromEntries([...this.#sessions].map(([k, v]) => [k, v.seq])),
      tables: [...this.#tables.values()].map((table) => ({
        table,
        cap: table.beginCapture(),
        config: canonicalTable(table),
      })),
      dense: [...this.#dense.values()].map((d) => ({
        tensor: d,
        values: d.values.slice(),
        state: d.state.slice(),
        step: d.step,
        config: canonicalDense(d),
      })),
    };
    this.#log?.roll();
    return cap;
  }

  async #writeCapture(dir: string, cap: StoreCapture, pauseMs: number): Promise<SnapshotInfo> {
    let ws: Awaited<ReturnType<typeof writeSnapshot>>;
    try {
      ws = await writeSnapshot(dir, cap);
    } finally {
      for (const t of this.#tables.values()) t.endCapture();
    }
    const snaps = await listSnapshots(dir);
    for (const s of snaps.slice(this.#keep)) await fsp.rm(s.file, { force: true });
    const oldest = (snaps[Math.min(this.#keep, snaps.length) - 1] as { lsn: number }).lsn;
    const segs = await listSegments(dir);
    for (let i = 0; i + 1 < segs.length; i++)
      if ((segs[i + 1] as { start: number }).start <= oldest + 1)
        await fsp.rm((segs[i] as { file: string }).file, { force: true });
    return {
      file: ws.file,
      lsn: cap.lsn,
      bytes: ws.bytes,
      pauseMs,
      maxChunkCopyMs: ws.maxChunkCopyMs,
    };
  }

  /** Waits for a running snapshot, syncs and closes the log, frees row memory. Idempotent. */
  async close(): Promise<void> {
    if (this.#state === 'closed' || this.#state === 'closing') return;
    this.#state = 'closing';
    try {
      await this.#snapshotting.catch(() => {});
      await this.#log?.close();
    } finally {
      for (const t of this.#tables.values()) t.close();
      this.#state = 'closed';
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
