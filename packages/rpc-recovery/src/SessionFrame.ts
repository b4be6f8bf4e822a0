import { RpcDecodeError } from './errors.js';
import { SESSION_SECRET_BYTES } from './SessionAuthority.js';

/**
 * The session control frames, one per mux message on the connection's `rpc-session`
 * channel (kept apart from the calls, so heartbeats never queue behind data). Big-endian;
 * every frame starts `kind u8 | version u8 (2) | reserved u16 (0)`.
 *
 * ```
 * Open      16  (client → server) start a new session
 * Resume    17  idLength u8 | id | lastEpoch u32          resume a session
 * Challenge 18  32 random bytes                             server's nonce for this attempt
 * Proof     19  32 bytes: resumptionProof(token, id, challenge)
 * Welcome   20  idLength u8 | id | epoch u32 | tokenLength u8 (0 | 32) | token
 *               | floor u64 | doneCount u32 | runningCount u32 | done u64… | running u64…
 * Refused   21  codeLength u8 | code (ASCII) | messageLength u16 | message (UTF-8)
 * Ping      22  nonce u32                                   heartbeat
 * Pong      23  nonce u32
 * Bye       24  the client ends its session
 * ```
 * Welcome is also the recovery exchange: on a resume it says what the server's
 * de-duplication table holds for the session (floor, executed, running), so the client
 * knows which in-flight calls are replayed and which can no longer be answered.
 */
export const SessionFrameKind = {
  Open: 16,
  Resume: 17,
  Challenge: 18,
  Proof: 19,
  Welcome: 20,
  Refused: 21,
  Ping: 22,
  Pong: 23,
  Bye: 24,
} as const;

/**
 * The protocol version a peer speaks, checked on every control frame, so a peer of another
 * version is refused at the handshake (ERR_RPC_VERSION) before any call: 2 since the request
 * frame pads its method (RpcFrame, RPC_FRAME_VERSION 2); the control frames themselves are
 * unchanged. Refused keeps its layout in every version, so either side can say why it ends.
 */
export const SESSION_FRAME_VERSION = 2;
/** Channel names of the RPC protocol on a mux connection: session control, and calls. */
export const RPC_CONTROL_CHANNEL = 'rpc-session';
export const RPC_DATA_CHANNEL = 'rpc';
/** Sequences listed in one Welcome, at most (the de-dup table's per-session bound is lower). */
export const MAX_WELCOME_SEQS = 1 << 16;
const MAX_SESSION_ID = 64;
const MAX_REFUSED_MESSAGE = 1024;

export type SessionFrame =
  | { readonly kind: 'open' }
  | { readonly kind: 'resume'; readonly sessionId: string; readonly lastEpoch: number }
  | { readonly kind: 'challenge'; readonly challenge: Uint8Array }
  | { readonly kind: 'proof'; readonly proof: Uint8Array }
  | {
      readonly kind: 'welcome';
      readonly sessionId: string;
      readonly epoch: number;
      /** Only when the session was just opened: the client's secret for resuming. */
      readonly token: Uint8Array | undefined;
      readonly floor: number;
      readonly done: readonly number[];
      readonly running: readonly number[];
    }
  | { readonly kind: 'refused'; readonly code: string; readonly message: string }
  | { readonly kind: 'ping'; readonly nonce: number }
  | { readonly kind: 'pong'; readonly nonce: number }
  | { readonly kind: 'bye' };

const ascii = new TextEncoder();
const utf8Strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const ID = /^[0-9A-Za-z_-]{1,64}$/;
const CODE = /^[A-Z][A-Z0-9_]{0,63}$/;

const protocol = (message: string, offset: number): RpcDecodeError =>
  new RpcDecodeError('ERR_RPC_PROTOCOL', message, offset);

function head(
  kind: number,
  bodyBytes: number,
  version = SESSION_FRAME_VERSION,
): { out: Uint8Array; v: DataView } {
  const out = new Uint8Array(4 + bodyBytes);
  out[0] = kind;
  out[1] = version;
  return { out, v: new DataView(out.buffer) };
}

function writeU64(v: DataView, at: number, n: number): void {
  v.setUint32(at, Math.floor(n / 2 ** 32));
  v.setUint32(at + 4, n >>> 0);
}

/**
 * Encodes one control frame. Callers pass validated values (they come from this package).
 * `version` is for a Refused only: one a peer of that version decodes (ERR_RPC_VERSION).
 */
export function encodeSessionFrame(f: SessionFrame, version = SESSION_FRAME_VERSION): Uint8Array {
  switch (f.kind) {
    case 'open':
      return head(SessionFrameKind.Open, 0).out;
    case 'bye':
      return head(SessionFrameKind.Bye, 0).out;
    case 'resume': {
      const id = ascii.encode(f.sessionId);
      const { out, v } = head(SessionFrameKind.Resume, 1 + id.length + 4);
      out[4] = id.length;
      out.set(id, 5);
      v.setUint32(5 + id.length, f.lastEpoch);
      return out;
    }
    case 'challenge':
    case 'proof': {
      const bytes = f.kind === 'challenge' ? f.challenge : f.proof;
      const { out } = head(
        f.kind === 'challenge' ? SessionFrameKind.Challenge : SessionFrameKind.Proof,
        SESSION_SECRET_BYTES,
      );
      out.set(bytes, 4);
      return out;
    }
    case 'welcome': {
      const id = ascii.encode(f.sessionId);
      const tokenLength = f.token?.length ?? 0;
      const n = f.done.length + f.running.length;
      const { out, v } = head(
        SessionFrameKind.Welcome,
        1 + id.length + 4 + 1 + tokenLength + 8 + 4 + 4 + 8 * n,
      );
      let at = 4;
      out[at++] = id.length;
      out.set(id, at);
      at += id.length;
      v.setUint32(at, f.epoch);
      at += 4;
      out[at++] = tokenLength;
      if (f.token !== undefined) out.set(f.token, at);
      at += tokenLength;
      writeU64(v, at, f.floor);
      v.setUint32(at + 8, f.done.length);
      v.setUint32(at + 12, f.running.length);
      at += 16;
      for (const seq of f.done) {
        writeU64(v, at, seq);
        at += 8;
      }
      for (const seq of f.running) {
        writeU64(v, at, seq);
        at += 8;
      }
      return out;
    }
    case 'refused': {
      const code = ascii.encode(f.code.slice(0, 64));
      let message = ascii.encode(f.message);
      if (message.length > MAX_REFUSED_MESSAGE) {
        let end = MAX_REFUSED_MESSAGE;
        while (end > 0 && ((message[end] as number) & 0xc0) === 0x80) end--;
        message = message.subarray(0, end);
      }
      const { out, v } = head(
        SessionFrameKind.Refused,
        1 + code.length + 2 + message.length,
        version,
      );
      out[4] = code.length;
      out.set(code, 5);
      v.setUint16(5 + code.length, message.length);
      out.set(message, 7 + code.length);
      return out;
    }
    case 'ping':
    case 'pong': {
      const { out, v } = head(f.kind === 'ping' ? SessionFrameKind.Ping : SessionFrameKind.Pong, 4);
      v.setUint32(4, f.nonce);
      return out;
    }
  }
}

/**
 * Decodes one control frame from a peer. Lengths are checked against the bytes present
 * before anything is read or allocated; every failure is an RpcDecodeError
 * (ERR_RPC_PROTOCOL, with the offset of the bad field), nothing else is thrown.
 */
export function decodeSessionFrame(bytes: Uint8Array): SessionFrame {
  if (bytes.length < 4) throw protocol(`truncated control frame: ${bytes.length} bytes`, 0);
  // A Refused of any version is read (its layout never changes): the peer's reason is kept.
  if (bytes[1] !== SESSION_FRAME_VERSION && bytes[0] !== SessionFrameKind.Refused) {
    throw new RpcDecodeError(
      'ERR_RPC_VERSION',
      `peer speaks protocol version ${bytes[1]}, this side ${SESSION_FRAME_VERSION}`,
      1,
    );
  }
  if (bytes[2] !== 0 || bytes[3] !== 0) throw protocol('reserved bits set', 2);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const need = (at: number, n: number): void => {
    if (bytes.length < at + n) throw protocol(`truncated: needs ${at + n} bytes`, bytes.length);
  };
  const end = (at: number): void => {
    if (bytes.length !== at) throw protocol(`${bytes.length - at} bytes after the frame`, at);
  };
  const readId = (at: number): string => {
    need(at, 1);
    const n = bytes[at] as number;
    if (n === 0 || n > MAX_SESSION_ID) throw protocol(`session id of ${n} bytes`, at);
    need(at + 1, n);
    let id = '';
    for (let i = 0; i < n; i++) id += String.fromCharCode(bytes[at + 1 + i] as number);
    if (!ID.test(id)) throw protocol('bad session id characters', at + 1);
    return id;
  };
  const readU64 = (at: number): number => {
    const hi = v.getUint32(at);
    if (hi >= 2 ** 21) throw protocol('a sequence beyond 2^53', at);
    return hi * 2 ** 32 + v.getUint32(at + 4);
  };
  switch (bytes[0]) {
    case SessionFrameKind.Open:
      end(4);
      return { kind: 'open' };
    case SessionFrameKind.Bye:
      end(4);
      return { kind: 'bye' };
    case SessionFrameKind.Resume: {
      const sessionId = readId(4);
      const at = 5 + sessionId.length;
      need(at, 4);
      end(at + 4);
      return { kind: 'resume', sessionId, lastEpoch: v.getUint32(at) };
    }
    case SessionFrameKind.Challenge:
    case SessionFrameKind.Proof: {
      need(4, SESSION_SECRET_BYTES);
      end(4 + SESSION_SECRET_BYTES);
      const b = bytes.slice(4);
      return bytes[0] === SessionFrameKind.Challenge
        ? { kind: 'challenge', challenge: b }
        : { kind: 'proof', proof: b };
    }
    case SessionFrameKind.Welcome: {
      const sessionId = readId(4);
      let at = 5 + sessionId.length;
      need(at, 5);
      const epoch = v.getUint32(at);
      if (epoch === 0) throw protocol('epoch 0', at);
      const tokenLength = bytes[at + 4] as number;
      if (tokenLength !== 0 && tokenLength !== SESSION_SECRET_BYTES) {
        throw protocol(`token of ${tokenLength} bytes`, at + 4);
      }
      at += 5;
      need(at, tokenLength + 16);
      const token = tokenLength === 0 ? undefined : bytes.slice(at, at + tokenLength);
      at += tokenLength;
      const floor = readU64(at);
      const doneCount = v.getUint32(at + 8);
      const runningCount = v.getUint32(at + 12);
      if (doneCount + runningCount > MAX_WELCOME_SEQS) {
        throw protocol(`${doneCount + runningCount} sequences listed`, at + 8);
      }
      at += 16;
      need(at, 8 * (doneCount + runningCount));
      end(at + 8 * (doneCount + runningCount));
      const done: number[] = [];
      const running: number[] = [];
      for (let i = 0; i < doneCount; i++, at += 8) done.push(readU64(at));
      for (let i = 0; i < runningCount; i++, at += 8) running.push(readU64(at));
      return { kind: 'welcome', sessionId, epoch, token, floor, done, running };
    }
    case SessionFrameKind.Refused: {
      need(4, 1);
      const n = bytes[4] as number;
      need(5, n + 2);
      let code = '';
      for (let i = 0; i < n; i++) code += String.fromCharCode(bytes[5 + i] as number);
      if (!CODE.test(code)) throw protocol('bad error code', 5);
      const m = v.getUint16(5 + n);
      if (m > MAX_REFUSED_MESSAGE) throw protocol(`message of ${m} bytes`, 5 + n);
      need(7 + n, m);
      end(7 + n + m);
      let message: string;
      try {
        message = utf8Strict.decode(bytes.subarray(7 + n));
      } catch {
        throw protocol('a message that is not UTF-8', 7 + n);
      }
      return { kind: 'refused', code, message };
    }
    case SessionFrameKind.Ping:
    case SessionFrameKind.Pong: {
      need(4, 4);
      end(8);
      const nonce = v.getUint32(4);
      return bytes[0] === SessionFrameKind.Ping ? { kind: 'ping', nonce } : { kind: 'pong', nonce };
    }
    default:
      throw protocol(`unknown control frame kind ${bytes[0]}`, 0);
  }
}
