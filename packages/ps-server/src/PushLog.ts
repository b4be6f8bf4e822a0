import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { PsCorruptError, PsError } from './errors.js';
import { crc32c } from './internal/crc32c.js';
import {
  decodeBody,
  MAX_RECORD_BODY,
  type PushRecord,
  RECORD_HEADER,
  RECORD_MAGIC,
} from './internal/record.js';

/**
 * When an appended push is durable: `fsync` — written and fdatasync'ed before its promise
 * resolves (appends that arrive during a sync share the next one); `group` — the same, but
 * a sync waits for `groupBytes` or `groupDelayMs`; `none` — written to the OS at once (it
 * survives a process kill, not a power cut) and acknowledged without a sync.
 */
export type LogPolicy = 'fsync' | 'group' | 'none';

export interface PushLogOptions {
  policy?: LogPolicy;
  /** Group commit: sync once this many bytes wait. Default 1 MiB. */
  groupBytes?: number;
  /** Group commit: sync at most this long after the first waiting append. Default 2 ms. */
  groupDelayMs?: number;
  /** Start a new segment once the current one reaches this size. Default 64 MiB. */
  segmentBytes?: number;
}

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

interface Waiter {
  lsn: number;
  resolve: () => void;
  reject: (e: unknown) => void;
}

/** The append side of the push log: one open segment, rolled by size or on request. */
export class PushLog {
  readonly dir: string;
  readonly policy: LogPolicy;
  readonly #groupBytes: number;
  readonly #groupDelayMs: number;
  readonly #segmentBytes: number;
  #fd: number | null = null;
  #segSize = 0;
  #roll = true;
  #pending: Uint8Array[] = [];
  #pendingBytes = 0;
  #pendingFirst = 0;
  #pendingLast = 0;
  #durable: number;
  #waiters: Waiter[] = [];
  #flushing: Promise<void> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #failed: PsError | null = null;
  #closed = false;

  constructor(dir: string, lastLsn: number, options: PushLogOptions = {}) {
    this.dir = dir;
    this.policy = options.policy ?? 'fsync';
    if (!['fsync', 'group', 'none'].includes(this.policy))
      throw new PsError('ERR_PS_INVALID_ARG', `unknown log policy ${String(this.policy)}`);
    this.#groupBytes = options.groupBytes ?? 1 << 20;
    this.#groupDelayMs = options.groupDelayMs ?? 2;
    this.#segmentBytes = options.segmentBytes ?? 64 << 20;
    for (const [k, v] of [
      ['groupBytes', this.#groupBytes],
      ['groupDelayMs', this.#groupDelayMs],
      ['segmentBytes', this.#segmentBytes],
    ] as const)
      if (!Number.isFinite(v) || v < 0)
        throw new PsError('ERR_PS_INVALID_ARG', `log ${k} must be a non-negative number`);
    this.#durable = lastLsn;
  }

  /** Highest lsn known durable under the policy. */
  get durableLsn(): number {
    return this.#durable;
  }

  /** The next append starts a new segment (after a snapshot, so old ones can go). */
  roll(): void {
    this.#roll = true;
  }

  /** Appends one encoded record; resolves when it is durable under the policy. */
  append(lsn: number, rec: Uint8Array): Promise<void> {
    if (this.#failed !== null) return Promise.reject(this.#failed);
    if (this.#closed) return Promise.reject(new PsError('ERR_PS_CLOSED', 'push log is closed'));
    if (this.policy === 'none') {
      try {
        this.#openIfNeeded(lsn);
        fs.writeSync(this.#fd as number, rec);
        this.#segSize += rec.length;
        this.#durable = lsn;
        return Promise.resolve();
      } catch (err) {
        return Promise.reject(this.#fail(err));
      }
    }
    if (this.#pending.length === 0) this.#pendingFirst = lsn;
    this.#pending.push(rec);
    this.#pendingBytes += rec.length;
    this.#pendingLast = lsn;
    const p = new Promise<void>((resolve, reject) => this.#waiters.push({ lsn, resolve, reject }));
    if (this.policy === 'fsync' || this.#pendingBytes >= this.#groupBytes) this.#kick();
    else if (this.#timer === null) this.#timer = setTimeout(() => this.#kick(), this.#groupDelayMs);
    return p;
  }

  /** Resolves when every record up to `lsn` is durable. */
  waitDurable(lsn: number): Promise<void> {
    if (lsn <= this.#durable) return Promise.resolve();
    if (this.#failed !== null) return Promise.reject(this.#failed);
    const p = new Promise<void>((resolve, reject) => this.#waiters.push({ lsn, resolve, reject }));
    this.#kick();
    return p;
  }

  #fail(err: unknown): PsError {
    this.#failed ??= new PsError('ERR_PS_IO', `push log write failed in ${this.dir}`, {
      cause: err,
    });
    for (const w of this.#waiters) w.reject(this.#failed);
    this.#waiters = [];
    return this.#failed;
  }

  #openIfNeeded(firstLsn: number): void {
    if (this.#fd !== null && !this.#roll && this.#segSize < this.#segmentBytes) return;
    if (this.#fd !== null) {
      fs.fsyncSync(this.#fd);
      fs.closeSync(this.#fd);
    }
    this.#fd = fs.openSync(path.join(this.dir, segmentName(firstLsn)), 'w');
    this.#segSize = 0;
    this.#roll = false;
    syncDir(this.dir);
  }

  #kick(): void {
    if (this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
    if (this.#flushing !== null) return;
    this.#flushing = this.#flushLoop().finally(() => {
      this.#flushing = null;
    });
  }

  async #flushLoop(): Promise<void> {
    while (this.#pending.length > 0 && this.#failed === null) {
      const batch = Buffer.concat(this.#pending);
      const first = this.#pendingFirst;
      const last = this.#pendingLast;
      this.#pending = [];
      this.#pendingBytes = 0;
      try {
        this.#openIfNeeded(first);
        const fd = this.#fd as number;
        await new Promise<void>((resolve, reject) =>
          fs.write(fd, batch, 0, batch.length, null, (err) => (err ? reject(err) : resolve())),
        );
        this.#segSize += batch.length;
        await new Promise<void>((resolve, reject) =>
          fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())),
        );
      } catch (err) {
        this.#fail(err);
        return;
      }
      this.#durable = last;
      const still: Waiter[] = [];
      for (const w of this.#waiters) {
        if (w.lsn <= last) w.resolve();
        else still.push(w);
      }
      this.#waiters = still;
    }
  }

  /** Flushes what is pending (synced) and closes the segment. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#kick();
    while (this.#flushing !== null) await this.#flushing;
    this.#closed = true;
    if (this.#fd !== null) {
      try {
        fs.fsyncSync(this.#fd);
      } finally {
        fs.closeSync(this.#fd);
        this.#fd = null;
      }
    }
  }
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
