import { crc32 } from 'node:zlib';
import { RpcDecodeError, RpcError } from '../errors.js';
import { MAX_SESSION_ID_LENGTH } from './validate.js';

/**
 * The saved form of a DeduplicationTable, big-endian:
 *
 *   0  4  magic 'RDDT'
 *   4  2  version (1)
 *   6  2  flags (0)
 *   8  4  total length in bytes, trailer included
 *  12  4  session count
 *      per session: u8 id length (1..64), id (ASCII [0-9A-Za-z_-]), u64 floor, u32 entry count,
 *        per entry (ascending seq, each >= floor): u64 seq, u8 kind (1 reply, 2 reply dropped),
 *        u32 reply length (0 for kind 2), reply bytes
 * end-4 4  CRC-32 of every byte before it
 */
export const DEDUP_MAGIC = 0x52444454;
export const DEDUP_VERSION = 1;
const HEADER = 16;
const TRAILER = 4;
const KIND_REPLY = 1;
const KIND_DROPPED = 2;

export interface SavedEntry {
  seq: number;
  reply: Uint8Array | null;
}

export interface SavedSession {
  id: string;
  floor: number;
  entries: SavedEntry[];
}

export interface DedupLimits {
  maxSessions: number;
  maxEntriesPerSession: number;
  maxBytesPerSession: number;
  maxTotalEntries: number;
  maxTotalBytes: number;
  maxReplyBytes: number;
}

export function encodeDedupState(sessions: readonly SavedSession[]): Uint8Array {
  let size = HEADER + TRAILER;
  for (const s of sessions) {
    size += 1 + s.id.length + 8 + 4;
    for (const e of s.entries) size += 8 + 1 + 4 + (e.reply?.length ?? 0);
  }
  if (size > 0xffff_ffff) {
    throw new RpcError('ERR_RPC_INVALID_STATE', `save: ${size} bytes exceed the format's 4 GiB`);
  }
  const out = new Uint8Array(size);
  const v = new DataView(out.buffer);
  v.setUint32(0, DEDUP_MAGIC);
  v.setUint16(4, DEDUP_VERSION);
  v.setUint16(6, 0);
  v.setUint32(8, size);
  v.setUint32(12, sessions.length);
  let p = HEADER;
  for (const s of sessions) {
    out[p++] = s.id.length;
    for (let i = 0; i < s.id.length; i++) out[p++] = s.id.charCodeAt(i);
    v.setBigUint64(p, BigInt(s.floor));
    v.setUint32(p + 8, s.entries.length);
    p += 12;
    for (const e of s.entries) {
      v.setBigUint64(p, BigInt(e.seq));
      out[p + 8] = e.reply === null ? KIND_DROPPED : KIND_REPLY;
      v.setUint32(p + 9, e.reply?.length ?? 0);
      p += 13;
      if (e.reply !== null) {
        out.set(e.reply, p);
        p += e.reply.length;
      }
    }
  }
  v.setUint32(p, crc32(out.subarray(0, p)) >>> 0);
  return out;
}

const corrupt = (message: string, offset: number): RpcDecodeError =>
  new RpcDecodeError('ERR_RPC_DEDUP_CORRUPT', `restore: ${message}`, offset);

const limit = (message: string): RpcError =>
  new RpcError('ERR_RPC_DEDUP_RESTORE_LIMIT', `restore: ${message}`);

function isIdChar(c: number): boolean {
  return (
    (c >= 0x30 && c <= 0x39) ||
    (c >= 0x41 && c <= 0x5a) ||
    (c >= 0x61 && c <= 0x7a) ||
    c === 0x5f ||
    c === 0x2d
  );
}

/** Parses saved bytes; every length is checked against the input before it is used. */
export function decodeDedupState(bytes: Uint8Array, limits: DedupLimits): SavedSession[] {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const len = bytes.length;
  if (len < HEADER + TRAILER) {
    throw corrupt(`truncated: ${len} bytes, a header and trailer need ${HEADER + TRAILER}`, len);
  }
  if (v.getUint32(0) !== DEDUP_MAGIC)
    throw corrupt('not saved de-duplication state (bad magic)', 0);
  const version = v.getUint16(4);
  if (version !== DEDUP_VERSION) throw corrupt(`unsupported version ${version}`, 4);
  if (v.getUint16(6) !== 0) throw corrupt(`unknown flags 0x${v.getUint16(6).toString(16)}`, 6);
  const declared = v.getUint32(8);
  if (declared > len) throw corrupt(`truncated: ${len} of ${declared} bytes`, len);
  if (declared < len) throw corrupt(`${len - declared} bytes after the end`, declared);
  const body = len - TRAILER;
  const sum = crc32(bytes.subarray(0, body)) >>> 0;
  if (v.getUint32(body) !== sum) throw corrupt('checksum mismatch', body);

  // The checksum matched, so what follows only catches a writer that broke the format.
  const need = (p: number, n: number): void => {
    if (p + n > body) throw corrupt(`truncated: ${n} bytes needed, ${body - p} left`, p);
  };
  const u64 = (p: number): number => {
    const x = v.getBigUint64(p);
    if (x > BigInt(Number.MAX_SAFE_INTEGER)) throw corrupt(`sequence ${x} beyond 2^53 - 1`, p);
    return Number(x);
  };
  const count = v.getUint32(12);
  if (count > limits.maxSessions) {
    throw limit(`${count} sessions, this table keeps ${limits.maxSessions}`);
  }
  const sessions: SavedSession[] = [];
  const ids = new Set<string>();
  let totalEntries = 0;
  let totalBytes = 0;
  let p = HEADER;
  for (let i = 0; i < count; i++) {
    need(p, 1);
    const idLen = bytes[p] as number;
    if (idLen < 1 || idLen > MAX_SESSION_ID_LENGTH) {
      throw corrupt(`session id length ${idLen} not in [1, ${MAX_SESSION_ID_LENGTH}]`, p);
    }
    need(p + 1, idLen + 12);
    let id = '';
    for (let k = 0; k < idLen; k++) {
      const c = bytes[p + 1 + k] as number;
      if (!isIdChar(c)) throw corrupt(`byte 0x${c.toString(16)} in a session id`, p + 1 + k);
      id += String.fromCharCode(c);
    }
    if (ids.has(id)) throw corrupt(`session ${id} appears twice`, p);
    ids.add(id);
    p += 1 + idLen;
    const floor = u64(p);
    const n = v.getUint32(p + 8);
    if (n > limits.maxEntriesPerSession) {
      throw limit(
        `session ${id} has ${n} entries, this table keeps ${limits.maxEntriesPerSession}`,
      );
    }
    totalEntries += n;
    if (totalEntries > limits.maxTotalEntries) {
      throw limit(`more than ${limits.maxTotalEntries} entries in total`);
    }
    p += 12;
    const entries: SavedEntry[] = [];
    let sessionBytes = 0;
    let last = -1;
    for (let k = 0; k < n; k++) {
      need(p, 13);
      const seq = u64(p);
      if (seq < floor) throw corrupt(`sequence ${seq} below the session's floor ${floor}`, p);
      if (seq <= last) throw corrupt(`sequence ${seq} not above ${last}`, p);
      last = seq;
      const kind = bytes[p + 8] as number;
      const replyLen = v.getUint32(p + 9);
      if (kind === KIND_DROPPED) {
        if (replyLen !== 0) throw corrupt(`a dropped reply with length ${replyLen}`, p + 9);
        entries.push({ seq, reply: null });
        p += 13;
        continue;
      }
      if (kind !== KIND_REPLY) throw corrupt(`unknown entry kind ${kind}`, p + 8);
      if (replyLen > limits.maxReplyBytes) {
        throw limit(`a reply of ${replyLen} bytes, this table keeps ${limits.maxReplyBytes}`);
      }
      need(p + 13, replyLen);
      sessionBytes += replyLen;
      totalBytes += replyLen;
      if (sessionBytes > limits.maxBytesPerSession) {
        throw limit(`session ${id} holds more than ${limits.maxBytesPerSession} reply bytes`);
      }
      if (totalBytes > limits.maxTotalBytes) {
        throw limit(`more than ${limits.maxTotalBytes} reply bytes in total`);
      }
      entries.push({ seq, reply: bytes.slice(p + 13, p + 13 + replyLen) });
      p += 13 + replyLen;
    }
    sessions.push({ id, floor, entries });
  }
  if (p !== body) throw corrupt(`${body - p} unused bytes before the checksum`, p);
  return sessions;
}
