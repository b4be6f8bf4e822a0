import { MuxError } from '../errors.js';

/**
 * The RDMA setup message, sent on the control connection only after the handshake is
 * 'done' (so no QP endpoint reaches an unauthenticated peer). Peers are untrusted: decode
 * checks every length and range before it builds anything.
 *
 * Layout (big-endian): u16 version, u8 qpCount, u8 ablations, u32 recvBufferBytes,
 * u32 recvBufferCount, 7 × u32 flow parameters (FlowParams order), then per QP a u16 length
 * and that many bytes of UTF-8 JSON: the provider's endpoint object, then u64 incarnation.
 *
 * Version 2 (credit leases): `flow.receiveCredits` is the peer's initial lease and
 * `recvBufferCount` the most it may grow to (buffers come from a shared receive pool).
 * `ablations` (the byte that was reserved, 0 in the full system): the lessons this side
 * switched off for a measurement (ABLATE_* bits); both sides must send the same.
 * Version 3: the sender's transport incarnation (random, non-zero), which every read-region
 * descriptor it hands out carries: the peer refuses descriptors of another incarnation; and
 * the last endpoint is the QP of one-sided reads (so at least 2: channel QPs, then it).
 */
export const RDMA_SETUP_VERSION = 3;
/** Channel QPs of a pool at most (`qpPoolSize`); the setup names one more, the read QP. */
export const MAX_SETUP_QPS = 8;
const MAX_ENDPOINTS = MAX_SETUP_QPS + 1;
/** Ablation bits: SENDs without receive credits (RNR retried forever instead); no send window. */
export const ABLATE_CREDITS = 1;
export const ABLATE_SEND_WINDOW = 2;
const ABLATION_MASK = ABLATE_CREDITS | ABLATE_SEND_WINDOW;
export const MAX_ENDPOINT_JSON_BYTES = 1024;
const FIXED_BYTES = 4 + 8 + 7 * 4;
const INCARNATION_BYTES = 8;
export const MAX_SETUP_BYTES =
  FIXED_BYTES + MAX_ENDPOINTS * (2 + MAX_ENDPOINT_JSON_BYTES) + INCARNATION_BYTES;

/** Same fields as flowctl's FlowParams, kept here so the wire codec owns its layout. */
export interface SetupFlowParams {
  version: number;
  receiveCredits: number;
  reservedCredits: number;
  returnThreshold: number;
  windowBytes: number;
  windowMessages: number;
  maxMessageBytes: number;
}

const FLOW_FIELDS = [
  'version',
  'receiveCredits',
  'reservedCredits',
  'returnThreshold',
  'windowBytes',
  'windowMessages',
  'maxMessageBytes',
] as const satisfies readonly (keyof SetupFlowParams)[];

export interface RdmaSetup {
  /** One provider endpoint object per QP of the pool (e.g. verbs' SoftEndpoint), then the read QP's. */
  endpoints: Record<string, unknown>[];
  recvBufferBytes: number;
  /** The most credits this side leases the peer (its initial lease is `flow.receiveCredits`). */
  recvBufferCount: number;
  flow: SetupFlowParams;
  /** ABLATE_* bits: lessons switched off for a measurement (0: none). */
  ablations: number;
  /** The sender's transport incarnation (non-zero u64): see ReadDescriptor. */
  incarnation: bigint;
}

function u32(name: string, n: unknown, err: (m: string) => MuxError): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 0xffffffff) {
    throw err(`${name} must be a u32, got ${String(n)}`);
  }
  return n;
}

const argErr = (m: string) => new MuxError('ERR_MUX_INVALID_ARG', m);
const protoErr = (m: string) => new MuxError('ERR_MUX_PROTOCOL', `rdma setup: ${m}`);

function checkEndpoint(ep: unknown, err: (m: string) => MuxError): Record<string, unknown> {
  if (typeof ep !== 'object' || ep === null || Array.isArray(ep)) {
    throw err('endpoint must be an object');
  }
  const o = ep as Record<string, unknown>;
  if (typeof o.provider !== 'string' || o.provider.length === 0) {
    throw err('endpoint.provider must be a non-empty string');
  }
  if (typeof o.qpn !== 'number' || !Number.isInteger(o.qpn) || o.qpn < 0 || o.qpn > 0xffffff) {
    throw err('endpoint.qpn must be a 24-bit integer');
  }
  return o;
}

function checkSetup(s: RdmaSetup, err: (m: string) => MuxError): void {
  if (!Array.isArray(s.endpoints) || s.endpoints.length < 2 || s.endpoints.length > MAX_ENDPOINTS) {
    throw err(`endpoints must hold 2..${MAX_ENDPOINTS} QPs (channel QPs, then the read QP)`);
  }
  for (const ep of s.endpoints) checkEndpoint(ep, err);
  if (u32('recvBufferBytes', s.recvBufferBytes, err) < 64) throw err('recvBufferBytes < 64');
  if (u32('recvBufferCount', s.recvBufferCount, err) < 1) throw err('recvBufferCount < 1');
  for (const f of FLOW_FIELDS) u32(`flow.${f}`, s.flow[f], err);
  if ((u32('ablations', s.ablations, err) & ~ABLATION_MASK) !== 0) {
    throw err(`unknown ablation bits ${s.ablations}`);
  }
  if (typeof s.incarnation !== 'bigint' || s.incarnation <= 0n || s.incarnation >= 1n << 64n) {
    throw err('incarnation must be a non-zero u64');
  }
  // What the flow parameters promise must match the buffers actually posted.
  if (s.flow.receiveCredits > s.recvBufferCount) {
    throw err('flow.receiveCredits exceeds recvBufferCount');
  }
  if (s.flow.maxMessageBytes > s.recvBufferBytes) {
    throw err('flow.maxMessageBytes exceeds recvBufferBytes');
  }
}

export function encodeRdmaSetup(s: RdmaSetup): Uint8Array {
  checkSetup(s, argErr);
  const jsons = s.endpoints.map((ep) => Buffer.from(JSON.stringify(ep), 'utf8'));
  for (const j of jsons) {
    if (j.length > MAX_ENDPOINT_JSON_BYTES) throw argErr('endpoint JSON too large');
  }
  const out = Buffer.alloc(
    FIXED_BYTES + jsons.reduce((a, j) => a + 2 + j.length, 0) + INCARNATION_BYTES,
  );
  out.writeUInt16BE(RDMA_SETUP_VERSION, 0);
  out.writeUInt8(s.endpoints.length, 2);
  out.writeUInt8(s.ablations, 3);
  out.writeUInt32BE(s.recvBufferBytes, 4);
  out.writeUInt32BE(s.recvBufferCount, 8);
  let off = 12;
  for (const f of FLOW_FIELDS) {
    out.writeUInt32BE(s.flow[f], off);
    off += 4;
  }
  for (const j of jsons) {
    out.writeUInt16BE(j.length, off);
    j.copy(out, off + 2);
    off += 2 + j.length;
  }
  out.writeBigUInt64BE(s.incarnation, off);
  return out;
}

export function decodeRdmaSetup(msg: Uint8Array): RdmaSetup {
  if (msg.length < FIXED_BYTES || msg.length > MAX_SETUP_BYTES) {
    throw protoErr(`message of ${msg.length} bytes`);
  }
  const b = Buffer.from(msg.buffer, msg.byteOffset, msg.length);
  const version = b.readUInt16BE(0);
  if (version !== RDMA_SETUP_VERSION) throw protoErr(`version ${version}`);
  const qps = b.readUInt8(2);
  if (qps < 2 || qps > MAX_ENDPOINTS) throw protoErr(`${qps} QPs`);
  const flow = {} as SetupFlowParams;
  let off = 12;
  for (const f of FLOW_FIELDS) {
    flow[f] = b.readUInt32BE(off);
    off += 4;
  }
  const endpoints: Record<string, unknown>[] = [];
  for (let i = 0; i < qps; i++) {
    if (off + 2 > b.length) throw protoErr('truncated endpoint length');
    const len = b.readUInt16BE(off);
    if (len > MAX_ENDPOINT_JSON_BYTES || off + 2 + len > b.length) {
      throw protoErr(`endpoint of ${len} bytes`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(b.toString('utf8', off + 2, off + 2 + len));
    } catch (cause) {
      throw new MuxError('ERR_MUX_PROTOCOL', 'rdma setup: endpoint is not JSON', { cause });
    }
    endpoints.push(checkEndpoint(parsed, protoErr));
    off += 2 + len;
  }
  if (off + INCARNATION_BYTES > b.length) throw protoErr('truncated incarnation');
  const incarnation = b.readBigUInt64BE(off);
  if (off + INCARNATION_BYTES !== b.length) throw protoErr('trailing bytes');
  const setup: RdmaSetup = {
    endpoints,
    recvBufferBytes: b.readUInt32BE(4),
    recvBufferCount: b.readUInt32BE(8),
    flow,
    ablations: b.readUInt8(3),
    incarnation,
  };
  checkSetup(setup, protoErr);
  return setup;
}
