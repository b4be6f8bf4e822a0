import { MuxError } from '../errors.js';

/**
 * The payload of a rendezvous frame (24 bytes, big-endian):
 *
 * ```
 * 0 kind u8 | 1 reserved u8 (0) | 2 reserved u16 (0) | 4 token u32 | 8 addr u64 | 16 length u32 | 20 rkey u32
 * ```
 * `Ready` offers one registered block of the sender (address, length and the rkey of the
 * arena holding it: the key reaches the whole arena, not just the block) for the receiver
 * to RDMA READ; `Done` (addr, length, rkey zero) tells the
 * sender that `token`'s block was read and may be released. The receiver checks a Ready
 * against its declared limits before it allocates anything for it.
 */
export const RENDEZVOUS_NOTICE_BYTES = 24;

export const NoticeKind = { Ready: 1, Done: 2 } as const;
export type NoticeKind = (typeof NoticeKind)[keyof typeof NoticeKind];

export interface RendezvousNotice {
  kind: NoticeKind;
  token: number;
  addr: bigint;
  length: number;
  rkey: number;
}

/** What a receiver accepts in a Ready notice. */
export interface NoticeLimits {
  /** Messages up to this size must come eager: a Ready for them is a protocol error. */
  readonly eagerThreshold: number;
  /** Largest message this side announced. */
  readonly maxMessageBytes: number;
}

const U64_MAX = (1n << 64n) - 1n;

function isU32(n: number): boolean {
  return Number.isInteger(n) && n >= 0 && n <= 0xffffffff;
}

export function encodeRendezvousNotice(out: Uint8Array, offset: number, n: RendezvousNotice): void {
  if (n.kind !== NoticeKind.Ready && n.kind !== NoticeKind.Done) {
    throw new MuxError('ERR_MUX_INVALID_ARG', `unknown notice kind ${String(n.kind)}`);
  }
  if (!isU32(n.token) || !isU32(n.length) || !isU32(n.rkey)) {
    throw new MuxError('ERR_MUX_INVALID_ARG', 'token, length and rkey must be u32');
  }
  if (n.addr < 0n || n.addr + BigInt(n.length) > U64_MAX) {
    throw new MuxError('ERR_MUX_INVALID_ARG', 'addr + length must fit in u64');
  }
  const v = new DataView(out.buffer, out.byteOffset + offset, RENDEZVOUS_NOTICE_BYTES);
  v.setUint8(0, n.kind);
  v.setUint8(1, 0);
  v.setUint16(2, 0);
  v.setUint32(4, n.token);
  v.setBigUint64(8, n.addr);
  v.setUint32(16, n.length);
  v.setUint32(20, n.rkey);
}

/** Parses and validates a notice from an untrusted peer; throws ERR_MUX_PROTOCOL. */
export function decodeRendezvousNotice(msg: Uint8Array, limits: NoticeLimits): RendezvousNotice {
  const bad = (m: string) => new MuxError('ERR_MUX_PROTOCOL', `rendezvous notice: ${m}`);
  if (msg.length !== RENDEZVOUS_NOTICE_BYTES) throw bad(`${msg.length} bytes`);
  const v = new DataView(msg.buffer, msg.byteOffset, msg.length);
  const kind = v.getUint8(0);
  if (v.getUint8(1) !== 0 || v.getUint16(2) !== 0) throw bad('reserved fields set');
  const token = v.getUint32(4);
  const addr = v.getBigUint64(8);
  const length = v.getUint32(16);
  const rkey = v.getUint32(20);
  if (kind === NoticeKind.Done) {
    if (addr !== 0n || length !== 0 || rkey !== 0) throw bad('Done with a block');
    return { kind, token, addr, length, rkey };
  }
  if (kind !== NoticeKind.Ready) throw bad(`unknown kind ${kind}`);
  if (length <= limits.eagerThreshold) throw bad(`${length} B is below the eager threshold`);
  if (length > limits.maxMessageBytes) throw bad(`${length} B exceeds the announced limit`);
  if (addr + BigInt(length) > U64_MAX) throw bad('block wraps the address space');
  return { kind, token, addr, length, rkey };
}
