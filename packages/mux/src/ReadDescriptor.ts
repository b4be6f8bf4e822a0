import { MuxError } from './errors.js';

/**
 * What a peer needs to READ a region another process exposed with
 * `RdmaTransport.allocReadRegion()`: its address and remote key, its length (every read is
 * checked against it before posting), and the owning transport's incarnation, a random
 * 64-bit id drawn when that transport was made. A connection knows its peer's incarnation
 * from the setup exchange, so a descriptor of a restarted process (or of another peer) is
 * refused before anything is posted, never read from whatever now lies at that address.
 */
export interface ReadDescriptor {
  /** The owning transport's incarnation (never 0). */
  readonly incarnation: bigint;
  readonly addr: number;
  readonly rkey: number;
  /** Readable bytes from `addr` (at least 1). */
  readonly length: number;
}

/**
 * Wire form (big-endian, 32 bytes): u16 version (1), u16 flags (0), u32 rkey, u64 addr,
 * u64 length, u64 incarnation.
 */
export const READ_DESCRIPTOR_BYTES = 32;
const READ_DESCRIPTOR_VERSION = 1;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

function fail(code: 'ERR_MUX_INVALID_ARG' | 'ERR_MUX_PROTOCOL', what: string): MuxError {
  return new MuxError(code, `read descriptor: ${what}`);
}

/** Throws `code` unless `d` names a region a reader could ask for (validates, no I/O). */
function check(d: ReadDescriptor, code: 'ERR_MUX_INVALID_ARG' | 'ERR_MUX_PROTOCOL'): void {
  if (typeof d.incarnation !== 'bigint' || d.incarnation <= 0n || d.incarnation >= 1n << 64n)
    throw fail(code, 'incarnation must be a non-zero u64');
  if (!Number.isSafeInteger(d.rkey) || d.rkey < 0 || d.rkey > 0xffffffff)
    throw fail(code, 'rkey must be a u32');
  if (!Number.isSafeInteger(d.length) || d.length < 1) throw fail(code, 'length must be ≥ 1');
  // addr + length stays exact: a reader's range arithmetic never rounds.
  if (!Number.isSafeInteger(d.addr) || d.addr < 0 || !Number.isSafeInteger(d.addr + d.length))
    throw fail(code, 'addr + length must be a safe integer');
}

/** Writes `d` into `out` at `offset` (READ_DESCRIPTOR_BYTES bytes); returns the end offset. */
export function encodeReadDescriptor(d: ReadDescriptor, out: Uint8Array, offset = 0): number {
  check(d, 'ERR_MUX_INVALID_ARG');
  if (!Number.isSafeInteger(offset) || offset < 0 || offset + READ_DESCRIPTOR_BYTES > out.length)
    throw fail('ERR_MUX_INVALID_ARG', `no room for ${READ_DESCRIPTOR_BYTES} bytes at ${offset}`);
  const v = new DataView(out.buffer, out.byteOffset + offset, READ_DESCRIPTOR_BYTES);
  v.setUint16(0, READ_DESCRIPTOR_VERSION);
  v.setUint16(2, 0);
  v.setUint32(4, d.rkey);
  v.setBigUint64(8, BigInt(d.addr));
  v.setBigUint64(16, BigInt(d.length));
  v.setBigUint64(24, d.incarnation);
  return offset + READ_DESCRIPTOR_BYTES;
}

/**
 * Reads a descriptor at `offset` of `bytes`, which came from a peer: untrusted. Every field
 * is checked (version, flags, ranges); anything else throws ERR_MUX_PROTOCOL.
 */
export function decodeReadDescriptor(bytes: Uint8Array, offset = 0): ReadDescriptor {
  if (!(bytes instanceof Uint8Array))
    throw fail('ERR_MUX_INVALID_ARG', 'bytes must be a Uint8Array');
  if (!Number.isSafeInteger(offset) || offset < 0 || offset + READ_DESCRIPTOR_BYTES > bytes.length)
    throw fail('ERR_MUX_PROTOCOL', `${READ_DESCRIPTOR_BYTES} bytes needed at ${offset}`);
  const v = new DataView(bytes.buffer, bytes.byteOffset + offset, READ_DESCRIPTOR_BYTES);
  const version = v.getUint16(0);
  if (version !== READ_DESCRIPTOR_VERSION) throw fail('ERR_MUX_PROTOCOL', `version ${version}`);
  if (v.getUint16(2) !== 0) throw fail('ERR_MUX_PROTOCOL', 'unknown flags');
  const addr = v.getBigUint64(8);
  const length = v.getBigUint64(16);
  if (addr > MAX_SAFE || length > MAX_SAFE)
    throw fail('ERR_MUX_PROTOCOL', 'addr or length too large');
  const d: ReadDescriptor = {
    incarnation: v.getBigUint64(24),
    addr: Number(addr),
    rkey: v.getUint32(4),
    length: Number(length),
  };
  check(d, 'ERR_MUX_PROTOCOL');
  return d;
}

/** A fresh random incarnation id (non-zero u64) for a transport. */
export function newIncarnation(random: (n: number) => Uint8Array): bigint {
  for (;;) {
    const b = random(8);
    const id = new DataView(b.buffer, b.byteOffset, 8).getBigUint64(0);
    if (id !== 0n) return id;
  }
}
