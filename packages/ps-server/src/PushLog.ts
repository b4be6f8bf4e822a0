import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { PsCorruptError, PsError } from './errors.js';
import { crc32c } from './internal/crc32c.js';
import {
  decodeBody,
  encodeRecordInto,
  type KIND_DENSE,
  type KIND_SPARSE,
  MAX_RECORD_BODY,
  type PushRecord,
  RECORD_HEADER,
  RECORD_MAGIC,
  recordBytes,
} from './internal/record.js';

/**
 * When an appended push is durable: `fsync` — written and made durable (`O_DSYNC` write, or
 * write + fdatasync) before its promise resolves, by group commit: pushes appended in the same
 * event-loop turn, or while a write is in flight, go out together in one write and one sync;
 * `group` — the same, but a sync waits for `groupBytes` or `groupDelayMs`; `none` — written to
 * the OS at once (it survives a process kill, not a power cut) and acknowledged without a sync.
 */
export type LogPolicy = 'fsync' | 'group' | 'none';

export interface PushLogOptions {
  policy?: LogPolicy;
  /** `group` policy: sync once this many bytes wait. Default 1 MiB. */
  groupBytes?: number;
  /** `group` policy: sync at most this long after the first waiting append. Default 2 ms. */
  groupDelayMs?: number;
  /** One write + sync covers at most this many bytes (a larger record goes alone). Default 4 MiB. */
  maxGroupBytes?: number;
  /** One write + sync covers at most this many records. Default 4096. */
  maxGroupRecords?: number;
  /** A write + sync not done by then fails the log (`ERR_PS_IO`). Default 30 000 ms. */
  syncTimeoutMs?: number;
  /** Start a new segment once the current one reaches this size. Default 64 MiB. */
  segmentBytes?: number;
}

/**
 * How a group reaches the disk: `bufs` appended at the file's offset and durable (data
 * integrity, as fdatasync) when `done(null)` runs. Injected by tests to watch and hold syncs.
 * `abandoned()` turns true once the log has given up on the write (its sync timeout fired):
 * the writer then issues no further write or sync on `fd` and calls `done` when what is
 * running returns. The log keeps `fd` open until `done` runs, so its number is not reused
 * under a write still queued or running.
 */
export interface LogWriter {
  /** Whether segments are opened with O_DSYNC for this writer (its writes then sync). */
  readonly dsync: boolean;
  writeDurable(
    fd: number,
    bufs: Uint8Array[],
    done: (err: Error | null) => void,
    abandoned: () => boolean,
  ): void;
}

/** The file calls of the default writer (injected by tests to make writes short or slow). */
export interface LogFileIo {
  writev(
    fd: number,
    bufs: Uint8Array[],
    position: null,
    cb: (err: Error | null, written: number) => void,
  ): void;
  fdatasync(fd: number, cb: (err: Error | null) => void): void;
}

const O_DSYNC: number | undefined = fs.constants.O_DSYNC;

/** A writer doing one writev on an O_DSYNC segment (one thread-pool trip per group). */
export function fileLogWriter(io: LogFileIo = fs): LogWriter {
  return {
    dsync: O_DSYNC !== undefined,
    writeDurable(fd, bufs, done, abandoned) {
      const sync = (): void => {
        if (O_DSYNC !== undefined) done(null);
        else io.fdatasync(fd, (err) => done(err));
      };
      const rest = (views: Uint8Array[], written: number): void => {
        // A short write (disk nearly full, a signal) goes on from where it stopped, unless
        // the log gave up on it meanwhile: then not a byte more goes to fd.
        if (abandoned()) {
          done(new Error('write abandoned after the sync timeout'));
          return;
        }
        let skip = written;
        const left: Uint8Array[] = [];
        for (const v of views) {
          if (skip >= v.length) skip -= v.length;
          else {
            left.push(skip === 0 ? v : v.subarray(skip));
            skip = 0;
          }
        }
        if (left.length === 0) sync();
        else io.writev(fd, left, null, (err, n) => (err ? done(err) : rest(left, n)));
      };
      io.writev(fd, bufs, null, (err, n) => (err ? done(err) : rest(bufs, n)));
    },
  };
}

/** The default writer. */
export const fsLogWriter: LogWriter = fileLogWriter();

const SEG_RE = /^log-(\d{16})\.seg$/;

export function segmentName(startLsn: number): string {
  return `log-${String(startLsn).padStart(16, '0')}.seg`;
}

export interface SegmentFile {
  file: string;
  start: number;
}

export async function listSegments(dir: string): Promise<SegmentFile[]> {
  const names = await fsp.readdir(dir);
  return names
    .map((n) => SEG_RE.exec(n))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ file: path.join(dir, m[0]), start: Number(m[1]) }))
    .sort((a, b) => a.start - b.start);
}

export interface ScanResult {
  records: PushRecord[];
  /** Offset after the last whole valid record. */
  validEnd: number;
  /** A torn tail (at validEnd) that was dropped, when this is the last segment. */
  torn: boolean;
}

function allZero(b: Uint8Array): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] !== 0) return false;
  return true;
}

/**
 * Validates a segment. In the last segment, an incomplete final record (or a final record
 * whose body CRC fails and which ends exactly at end of file, or zero fill) is a torn write
 * and is dropped; anything else that fails is PsCorruptError with the record's offset.
 */
export function scanSegment(
  buf: Uint8Array,
  file: string,
  isLast: boolean,
  expectLsn: number,
): ScanResult {
  const records: PushRecord[] = [];
  let o = 0;
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const torn = (why: string): ScanResult => {
    if (isLast) return { records, validEnd: o, torn: true };
    throw new PsCorruptError(file, o, why);
  };
  let lsn = expectLsn;
  while (o < buf.length) {
    if (buf.length - o < RECORD_HEADER) {
      if (allZero(buf.subarray(o))) return torn('zero fill');
      return torn('incomplete record header');
    }
    const magic = dv.getUint32(o, true);
    const len = dv.getUint32(o + 4, true);
    const hcrc = dv.getUint32(o + 8, true);
    if (
      magic !== RECORD_MAGIC ||
      hcrc !== crc32c(buf.subarray(o, o + 8)) ||
      len > MAX_RECORD_BODY
    ) {
      if (allZero(buf.subarray(o))) return torn('zero fill');
      throw new PsCorruptError(file, o, 'bad record header (magic, length or header checksum)');
    }
    const end = o + RECORD_HEADER + len;
    if (end > buf.length) return torn('record extends past end of file');
    const body = buf.subarray(o + RECORD_HEADER, end);
    if (dv.getUint32(o + 12, true) !== crc32c(body)) {
      if (end === buf.length) return torn('last record body checksum');
      throw new PsCorruptError(file, o, 'record body checksum mismatch');
    }
    const rec = decodeBody(body);
    if (typeof rec === 'string') throw new PsCorruptError(file, o, rec);
    if (rec.lsn !== lsn)
      throw new PsCorruptError(file, o, `record lsn ${rec.lsn}, expected ${lsn}`);
    records.push(rec);
    lsn++;
    o = end;
  }
  return { records, validEnd: o, torn: false };
}

/**
 * The bytes of a push's log record; ERR_PS_INVALID_ARG when it would not fit one record (the
 * store checks this before it applies the push, so a rejected push changes nothing).
 */
export function loggedRecordBytes(
  session: string,
  name: string,
  keys: Uint32Array,
  grads: Float32Array,
): number {
  const size = recordBytes(session, name, keys, grads);
  if (size - RECORD_HEADER > MAX_RECORD_BODY)
    throw new PsError('ERR_PS_INVALID_ARG', 'push too large for one log record');
  return size;
}

interface Waiter {
  lsn: number;
  resolve: () => void;
  reject: (e: unknown) => void;
}

/** Records encoded in place, waiting for (or in) one write; reused once written. */
interface Block {
  buf: Buffer;
  used: number;
  records: number;
  firstLsn: number;
  lastLsn: number;
}

/** Staging block size (a group is whole blocks; a record larger than this gets its own). */
const BLOCK_BYTES = 1 << 20;
/** Written blocks kept for reuse: steady state allocates none, an idle log holds ≤ 4 MiB. */
const BLOCK_POOL = 4;

/**
 * The append side of the push log: one open segment, rolled by size or on request. Pushes are
 * encoded straight into staging blocks; a flush writes the waiting blocks with one durable
 * write (group commit) and then resolves every push that write covered, in lsn order.
 */
export class PushLog {
  readonly dir: string;
  readonly policy: LogPolicy;
  readonly #groupBytes: number;
  readonly #groupDelayMs: number;
  readonly #maxGroupBytes: number;
  readonly #maxGroupRecords: number;
  readonly #syncTimeoutMs: number;
  readonly #segmentBytes: number;
  readonly #blockBytes: number;
  readonly #writer: LogWriter;
  #fd: number | null = null;
  #segSize = 0;
  #roll = true;
  /** Blocks not yet written, oldest first; appends go into the last. */
  #pending: Block[] = [];
  #pendingBytes = 0;
  #free: Block[] = [];
  #durable: number;
  #waiters: Waiter[] = [];
  #flushing: Promise<void> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #immediate: NodeJS.Immediate | null = null;
  #failed: PsError | null = null;
  #closed = false;
  /** The writer has a write (or its sync) under way: the segment fd must stay open. */
  #writing = false;
  /** The segment fd, closed by the log while a timed-out write was still on it. */
  #orphanFd: number | null = null;
  /** Groups written (write + sync), for tests and diagnostics. */
  #groups = 0;

  constructor(dir: string, lastLsn: number, options: PushLogOptions = {}, writer = fsLogWriter) {
    this.dir = dir;
    this.policy = options.policy ?? 'fsync';
    if (!['fsync', 'group', 'none'].includes(this.policy))
      throw new PsError('ERR_PS_INVALID_ARG', `unknown log policy ${String(this.policy)}`);
    this.#groupBytes = options.groupBytes ?? 1 << 20;
    this.#groupDelayMs = options.groupDelayMs ?? 2;
    this.#segmentBytes = options.segmentBytes ?? 64 << 20;
    this.#maxGroupBytes = options.maxGroupBytes ?? 4 << 20;
    this.#maxGroupRecords = options.maxGroupRecords ?? 4096;
    this.#syncTimeoutMs = options.syncTimeoutMs ?? 30_000;
    for (const [k, v] of [
      ['groupBytes', this.#groupBytes],
      ['groupDelayMs', this.#groupDelayMs],
      ['segmentBytes', this.#segmentBytes],
    ] as const)
      if (!Number.isFinite(v) || v < 0)
        throw new PsError('ERR_PS_INVALID_ARG', `log ${k} must be a non-negative number`);
    for (const [k, v] of [
      ['maxGroupBytes', this.#maxGroupBytes],
      ['maxGroupRecords', this.#maxGroupRecords],
      ['syncTimeoutMs', this.#syncTimeoutMs],
    ] as const)
      if (!Number.isSafeInteger(v) || v < 1)
        throw new PsError('ERR_PS_INVALID_ARG', `log ${k} must be a positive integer`);
    this.#blockBytes = Math.min(BLOCK_BYTES, this.#maxGroupBytes);
    this.#writer = writer;
    this.#durable = lastLsn;
  }

  /** Highest lsn known durable under the policy. */
  get durableLsn(): number {
    return this.#durable;
  }

  /** Groups written so far (each one write and one sync). */
  get groupsWritten(): number {
    return this.#groups;
  }

  /** The next append starts a new segment (after a snapshot, so old ones can go). */
  roll(): void {
    this.#roll = true;
  }

  /**
   * Appends one push record (encoded into the log's own staging memory: `keys` and `grads` may
   * be reused as soon as this returns); resolves when it is durable under the policy.
   */
  append(
    lsn: number,
    nowMs: number,
    seq: number,
    kind: typeof KIND_SPARSE | typeof KIND_DENSE,
    session: string,
    name: string,
    keys: Uint32Array,
    grads: Float32Array,
  ): Promise<void> {
    if (this.#failed !== null) return Promise.reject(this.#failed);
    if (this.#closed) return Promise.reject(new PsError('ERR_PS_CLOSED', 'push log is closed'));
    let size: number;
    try {
      size = loggedRecordBytes(session, name, keys, grads);
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.policy === 'none') {
      try {
        this.#openIfNeeded(lsn);
        const b = this.#block(size);
        const n = encodeRecordInto(b.buf, 0, lsn, nowMs, seq, kind, session, name, keys, grads);
        fs.writeSync(this.#fd as number, b.buf, 0, n);
        this.#release(b);
        this.#segSize += n;
        this.#durable = lsn;
        return Promise.resolve();
      } catch (err) {
        return Promise.reject(this.#fail(err));
      }
    }
    let b = this.#pending[this.#pending.length - 1];
    if (b === undefined || b.used + size > b.buf.length || b.records >= this.#maxGroupRecords) {
      b = this.#block(size);
      b.firstLsn = lsn;
      this.#pending.push(b);
    }
    b.used += encodeRecordInto(b.buf, b.used, lsn, nowMs, seq, kind, session, name, keys, grads);
    b.records++;
    b.lastLsn = lsn;
    this.#pendingBytes += size;
    const p = new Promise<void>((resolve, reject) => this.#waiters.push({ lsn, resolve, reject }));
    if (this.policy === 'fsync' || this.#pendingBytes >= this.#groupBytes) this.#schedule();
    else if (this.#timer === null && this.#immediate === null)
      this.#timer = setTimeout(() => this.#kick(), this.#groupDelayMs);
    return p;
  }

  /** Resolves when every record up to `lsn` is durable. */
  waitDurable(lsn: number): Promise<void> {
    if (lsn <= this.#durable) return Promise.resolve();
    if (this.#failed !== null) return Promise.reject(this.#failed);
    const p = new Promise<void>((resolve, reject) => this.#waiters.push({ lsn, resolve, reject }));
    this.#schedule();
    return p;
  }

  /** An empty block with room for `size` bytes: a pooled one, or a new one. */
  #block(size: number): Block {
    if (size <= this.#blockBytes) {
      const pooled = this.#free.pop();
      if (pooled !== undefined) return pooled;
    }
    const buf = Buffer.allocUnsafeSlow(Math.max(size, this.#blockBytes));
    return { buf, used: 0, records: 0, firstLsn: 0, lastLsn: 0 };
  }

  #release(b: Block): void {
    b.used = 0;
    b.records = 0;
    if (b.buf.length === this.#blockBytes && this.#free.length < BLOCK_POOL) this.#free.push(b);
  }

  #fail(err: unknown): PsError {
    this.#failed ??= new PsError('ERR_PS_IO', `push log write failed in ${this.dir}`, {
      cause: err,
    });
    for (const w of this.#waiters) w.reject(this.#failed);
    this.#waiters = [];
    this.#pending = [];
    this.#pendingBytes = 0;
    return this.#failed;
  }

  #openIfNeeded(firstLsn: number): void {
    if (this.#fd !== null && !this.#roll && this.#segSize < this.#segmentBytes) return;
    if (this.#fd !== null) {
      // Unreachable while writes are serial and a timed-out one fails the log: kept as a guard.
      if (this.#writing) throw new Error('segment roll while a write is under way');
      fs.fsyncSync(this.#fd);
      fs.closeSync(this.#fd);
    }
    const flags =
      fs.constants.O_WRONLY |
      fs.constants.O_CREAT |
      fs.constants.O_TRUNC |
      (this.policy !== 'none' && this.#writer.dsync ? (O_DSYNC as number) : 0);
    this.#fd = fs.openSync(path.join(this.dir, segmentName(firstLsn)), flags, 0o644);
    this.#segSize = 0;
    this.#roll = false;
    syncDir(this.dir);
  }

  /**
   * Flushes at the end of this event-loop turn, so every push the turn's I/O callbacks
   * deliver joins one group (a flush already running picks them up when it is done).
   */
  #schedule(): void {
    if (this.#immediate !== null || this.#flushing !== null) return;
    this.#immediate = setImmediate(() => {
      this.#immediate = null;
      this.#kick();
    });
  }

  #kick(): void {
    if (this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
    if (this.#immediate !== null) {
      clearImmediate(this.#immediate);
      this.#immediate = null;
    }
    if (this.#flushing !== null) return;
    this.#flushing = this.#flushLoop().finally(() => {
      this.#flushing = null;
      // An append between the loop's last check and now found a flush running: start anew.
      if (this.#pending.length > 0 && this.#failed === null && !this.#closed) this.#schedule();
    });
  }

  /** Whole pending blocks, oldest first, within the group bounds (at least one block). */
  #takeGroup(): Block[] {
    const group: Block[] = [];
    let bytes = 0;
    let records = 0;
    for (const b of this.#pending) {
      if (
        group.length > 0 &&
        (bytes + b.used > this.#maxGroupBytes || records + b.records > this.#maxGroupRecords)
      )
        break;
      group.push(b);
      bytes += b.used;
      records += b.records;
    }
    this.#pending.splice(0, group.length);
    this.#pendingBytes -= bytes;
    return group;
  }

  /** One write + sync of `bufs`, failed with a timeout if it takes longer than allowed. */
  #writeDurable(fd: number, bufs: Uint8Array[]): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => {
        settled = true;
        reject(new Error(`write + sync not done after ${this.#syncTimeoutMs} ms`));
      }, this.#syncTimeoutMs);
      this.#writing = true;
      this.#writer.writeDurable(
        fd,
        bufs,
        (err) => {
          this.#writing = false;
          if (this.#orphanFd !== null) {
            // close() ran while this write was out: its fd is closed now, unsynced (failed).
            const orphan = this.#orphanFd;
            this.#orphanFd = null;
            closeQuietly(orphan);
          }
          if (settled) return;
          clearTimeout(timer);
          if (err) reject(err);
          else resolve();
        },
        () => settled,
      );
    });
  }

  async #flushLoop(): Promise<void> {
    while (this.#pending.length > 0 && this.#failed === null) {
      const group = this.#takeGroup();
      const first = group[0] as Block;
      const last = (group[group.length - 1] as Block).lastLsn;
      const bufs = group.map((b) => b.buf.subarray(0, b.used));
      let bytes = 0;
      for (const b of group) bytes += b.used;
      try {
        this.#openIfNeeded(first.firstLsn);
        await this.#writeDurable(this.#fd as number, bufs);
      } catch (err) {
        // A write that timed out may still be running: its blocks are not reused.
        this.#fail(err);
        return;
      }
      this.#segSize += bytes;
      this.#groups++;
      this.#durable = last;
      for (const b of group) this.#release(b);
      let keep = 0;
      const ws = this.#waiters;
      for (let i = 0; i < ws.length; i++) {
        const w = ws[i] as Waiter;
        if (w.lsn <= last) w.resolve();
        else ws[keep++] = w;
      }
      ws.length = keep;
    }
  }

  /** Flushes what is pending (synced) and closes the segment. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    // Bounded: each round writes what is pending, and every write has syncTimeoutMs.
    while (this.#flushing !== null || (this.#pending.length > 0 && this.#failed === null)) {
      if (this.#flushing === null) this.#kick();
      await this.#flushing;
    }
    this.#closed = true;
    if (this.#immediate !== null) clearImmediate(this.#immediate);
    this.#immediate = null;
    const fd = this.#fd;
    this.#fd = null;
    if (fd === null) return;
    // A write that timed out may still be queued or running on fd: closing fd now would let
    // its number be reused under it, so that write's callback closes it. A failed log's fd
    // is never synced here: the device may be what stalled, and fsyncSync would block.
    if (this.#writing) this.#orphanFd = fd;
    else if (this.#failed !== null) closeQuietly(fd);
    else {
      try {
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
    }
  }
}

/** Closes an fd whose log has failed already (a second error has nowhere to go). */
function closeQuietly(fd: number): void {
  try {
    fs.closeSync(fd);
  } catch {}
}

/** fsync a directory so a create/rename in it is durable. */
export function syncDir(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}
