import { RpcDecodeError, RpcError } from './errors.js';
import { checkInt, checkKnownKeys, describeValue, ownOptions } from './internal/validate.js';
import { MAX_EPOCH } from './SessionAuthority.js';

/**
 * The RPC frames, one per mux message, big-endian.
 *
 * Request (40-byte fixed part):
 * ```
 *  0 kind u8 (1) | 1 version u8 (1) | 2 flags u16 (bit 0: idempotent) | 4 requestId u32
 *  8 sessionSeq u64 | 16 ackBelow u64 | 24 epoch u32 | 28 deadlineMs u32 (budget, >= 1)
 * 32 methodLength u16 | 34 reserved u16 (0) | 36 payloadLength u32
 * 40 method (ASCII [A-Za-z0-9_.:/-]) | payload
 * ```
 * Response (20-byte fixed part):
 * ```
 *  0 kind u8 (2) | 1 version u8 (1) | 2 status u8 | 3 flags u8 (0) | 4 requestId u32
 *  8 epoch u32 | 12 errorCodeLength u8 | 13 reserved u8 (0) | 14 errorMessageLength u16
 * 16 payloadLength u32
 * 20 errorCode (ASCII [A-Z0-9_]) | errorMessage (UTF-8) | payload
 * ```
 * `ackBelow` piggybacks "every reply below this session sequence received". A response
 * other than ok carries an error code (and maybe a message), never a payload or a stack.
 */
export const RPC_FRAME_VERSION = 1;
export const REQUEST_HEADER_BYTES = 40;
export const RESPONSE_HEADER_BYTES = 20;

export const RpcFrameKind = { Request: 1, Response: 2 } as const;
export type RpcFrameKind = (typeof RpcFrameKind)[keyof typeof RpcFrameKind];

/** Request flag bits; any other bit set is a protocol error. */
export const RequestFlags = { Idempotent: 1 } as const;
const KNOWN_REQUEST_FLAGS = RequestFlags.Idempotent;

export const RpcStatus = {
  /** The handler ran; the payload is its result. */
  Ok: 0,
  /** The handler ran and failed with an application error (code and message). */
  Error: 1,
  /** Not executed (unknown method, bad request, overload, deadline passed before it ran): safe to retry. */
  Rejected: 2,
  /** May or may not have executed (e.g. its de-duplicated reply was dropped): do not assume either. */
  Unknown: 3,
} as const;
export type RpcStatus = (typeof RpcStatus)[keyof typeof RpcStatus];

/** Hard ceilings of the format; configured limits must lie below them. */
export const MAX_METHOD_BYTES = 1024;
export const MAX_ERROR_CODE_BYTES = 64;
export const MAX_ERROR_MESSAGE_BYTES = 0xffff;
export const MAX_PAYLOAD_BYTES = 0xffff_ffff;
export const MAX_DEADLINE_MS = 0xffff_ffff;

/** What a receiver accepts, checked before a byte past the fixed header is looked at. */
export interface RpcFrameLimits {
  /** Default 128. */
  readonly maxMethodBytes: number;
  /** Default 16 MiB. */
  readonly maxPayloadBytes: number;
  /** Default 1024. */
  readonly maxErrorMessageBytes: number;
  /** Largest deadline budget a request may carry, ms. Default 24 h. */
  readonly maxDeadlineMs: number;
}

export interface RpcRequestHeader {
  requestId: number;
  sessionSeq: number;
  ackBelow: number;
  epoch: number;
  idempotent: boolean;
  /** Budget left for the call when sent, ms (>= 1): the server does not start it later. */
  deadlineMs: number;
  method: string;
  payloadLength: number;
}

export interface RpcResponseHeader {
  requestId: number;
  epoch: number;
  status: RpcStatus;
  /** '' for ok. */
  errorCode: string;
  /** '' for ok; a short text, never a stack. */
  errorMessage: string;
  payloadLength: number;
}

/** A decoded frame; `payload` is a view of the input, not a copy. */
export type RpcFrame =
  | { readonly kind: 'request'; readonly header: RpcRequestHeader; readonly payload: Uint8Array }
  | { readonly kind: 'response'; readonly header: RpcResponseHeader; readonly payload: Uint8Array };

const DEFAULT_LIMITS: RpcFrameLimits = Object.freeze({
  maxMethodBytes: 128,
  maxPayloadBytes: 16 << 20,
  maxErrorMessageBytes: 1024,
  maxDeadlineMs: 86_400_000,
});

/** Validated limits: defaults with `overrides` applied, each within the format's ceilings. */
export function rpcFrameLimits(overrides?: Partial<RpcFrameLimits>): RpcFrameLimits {
  const o = ownOptions('RpcFrameLimits', overrides, true);
  checkKnownKeys('RpcFrameLimits', o, Object.keys(DEFAULT_LIMITS));
  const pick = (k: keyof RpcFrameLimits, max: number): number =>
    o[k] === undefined ? DEFAULT_LIMITS[k] : checkInt(k, o[k], 1, max);
  return Object.freeze({
    maxMethodBytes: pick('maxMethodBytes', MAX_METHOD_BYTES),
    maxPayloadBytes: pick('maxPayloadBytes', MAX_PAYLOAD_BYTES),
    maxErrorMessageBytes: pick('maxErrorMessageBytes', MAX_ERROR_MESSAGE_BYTES),
    maxDeadlineMs: pick('maxDeadlineMs', MAX_DEADLINE_MS),
  });
}

const isMethodChar = (c: number): boolean =>
  (c >= 0x30 && c <= 0x39) ||
  (c >= 0x41 && c <= 0x5a) ||
  (c >= 0x61 && c <= 0x7a) ||
  c === 0x5f ||
  c === 0x2e ||
  c === 0x3a ||
  c === 0x2f ||
  c === 0x2d;

const isCodeChar = (c: number): boolean =>
  (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || c === 0x5f;

const METHOD = /^[A-Za-z0-9_.:/-]+$/;
const CODE = /^[A-Z0-9_]+$/;
const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function invalid(message: string): RpcError {
  return new RpcError('ERR_RPC_INVALID_ARG', message);
}

const protocol = (message: string, offset: number): RpcDecodeError =>
  new RpcDecodeError('ERR_RPC_PROTOCOL', message, offset);

const tooLarge = (message: string, offset: number): RpcDecodeError =>
  new RpcDecodeError('ERR_RPC_FRAME_TOO_LARGE', message, offset);

function writeU64(v: DataView, at: number, x: number): void {
  v.setUint32(at, Math.floor(x / 2 ** 32));
  v.setUint32(at + 4, x >>> 0);
}

function readU64(v: DataView, at: number, what: string): number {
  const hi = v.getUint32(at);
  if (hi >= 2 ** 21) throw protocol(`${what} beyond 2^53 - 1`, at);
  return hi * 2 ** 32 + v.getUint32(at + 4);
}

/** The header of a request (fixed part and method), to send before its payload. */
export function encodeRequestHeader(
  h: RpcRequestHeader,
  limits: RpcFrameLimits = DEFAULT_LIMITS,
): Uint8Array {
  const o = ownOptions('request header', h);
  checkInt('requestId', o.requestId, 0, 0xffff_ffff);
  checkInt('sessionSeq', o.sessionSeq, 0);
  checkInt('ackBelow', o.ackBelow, 0);
  checkInt('epoch', o.epoch, 1, MAX_EPOCH);
  checkInt('deadlineMs', o.deadlineMs, 1, limits.maxDeadlineMs);
  checkInt('payloadLength', o.payloadLength, 0, limits.maxPayloadBytes);
  if (typeof o.idempotent !== 'boolean') {
    throw invalid(`idempotent must be a boolean, got ${describeValue(o.idempotent)}`);
  }
  const method = o.method;
  if (typeof method !== 'string' || method.length > limits.maxMethodBytes || !METHOD.test(method)) {
    throw invalid(
      `method must be 1 to ${limits.maxMethodBytes} characters of [A-Za-z0-9_.:/-], got ${describeValue(method)}`,
    );
  }
  const out = new Uint8Array(REQUEST_HEADER_BYTES + method.length);
  const v = new DataView(out.buffer);
  out[0] = RpcFrameKind.Request;
  out[1] = RPC_FRAME_VERSION;
  v.setUint16(2, o.idempotent ? RequestFlags.Idempotent : 0);
  v.setUint32(4, o.requestId as number);
  writeU64(v, 8, o.sessionSeq as number);
  writeU64(v, 16, o.ackBelow as number);
  v.setUint32(24, o.epoch as number);
  v.setUint32(28, o.deadlineMs as number);
  v.setUint16(32, method.length);
  v.setUint16(34, 0);
  v.setUint32(36, o.payloadLength as number);
  for (let i = 0; i < method.length; i++) out[REQUEST_HEADER_BYTES + i] = method.charCodeAt(i);
  return out;
}

/** The header of a response (fixed part, error code and message), to send before its payload. */
export function encodeResponseHeader(
  h: RpcResponseHeader,
  limits: RpcFrameLimits = DEFAULT_LIMITS,
): Uint8Array {
  const o = ownOptions('response header', h);
  checkInt('requestId', o.requestId, 0, 0xffff_ffff);
  checkInt('epoch', o.epoch, 1, MAX_EPOCH);
  const status = checkInt('status', o.status, RpcStatus.Ok, RpcStatus.Unknown);
  const payloadLength = checkInt('payloadLength', o.payloadLength, 0, limits.maxPayloadBytes);
  const code = o.errorCode;
  const message = o.errorMessage;
  if (typeof code !== 'string' || typeof message !== 'string') {
    throw invalid('errorCode and errorMessage must be strings');
  }
  const messageBytes = utf8.encode(message);
  if (status === RpcStatus.Ok) {
    if (code !== '' || message !== '') throw invalid('an ok response carries no error');
  } else {
    if (code.length < 1 || code.length > MAX_ERROR_CODE_BYTES || !CODE.test(code)) {
      throw invalid(
        `errorCode must be 1 to ${MAX_ERROR_CODE_BYTES} characters of [A-Z0-9_], got ${describeValue(code)}`,
      );
    }
    if (messageBytes.length > limits.maxErrorMessageBytes) {
      throw invalid(
        `errorMessage is ${messageBytes.length} UTF-8 bytes, the limit is ${limits.maxErrorMessageBytes} (see remoteErrorOf)`,
      );
    }
    if (payloadLength !== 0) throw invalid('an error response carries no payload');
  }
  const out = new Uint8Array(RESPONSE_HEADER_BYTES + code.length + messageBytes.length);
  const v = new DataView(out.buffer);
  out[0] = RpcFrameKind.Response;
  out[1] = RPC_FRAME_VERSION;
  out[2] = status;
  out[3] = 0;
  v.setUint32(4, o.requestId as number);
  v.setUint32(8, o.epoch as number);
  out[12] = code.length;
  out[13] = 0;
  v.setUint16(14, messageBytes.length);
  v.setUint32(16, payloadLength);
  for (let i = 0; i < code.length; i++) out[RESPONSE_HEADER_BYTES + i] = code.charCodeAt(i);
  out.set(messageBytes, RESPONSE_HEADER_BYTES + code.length);
  return out;
}

/**
 * The whole length of the frame starting `bytes` (fixed part, variable parts and payload),
 * from its fixed part alone, which is fully validated: lets a stream reader refuse a frame
 * before buffering it. Throws ERR_RPC_PROTOCOL / ERR_RPC_FRAME_TOO_LARGE (`offset` names
 * the field).
 */
export function rpcFrameLength(bytes: Uint8Array, limits: RpcFrameLimits = DEFAULT_LIMITS): number {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 2) throw protocol(`truncated: ${bytes.length} bytes`, bytes.length);
  const kind = bytes[0] as number;
  if (kind !== RpcFrameKind.Request && kind !== RpcFrameKind.Response) {
    throw protocol(`unknown frame kind ${kind}`, 0);
  }
  if (bytes[1] !== RPC_FRAME_VERSION) throw protocol(`unsupported version ${bytes[1]}`, 1);
  if (kind === RpcFrameKind.Request) {
    if (bytes.length < REQUEST_HEADER_BYTES) {
      throw protocol(`truncated request header: ${bytes.length} bytes`, bytes.length);
    }
    const flags = v.getUint16(2);
    if ((flags & ~KNOWN_REQUEST_FLAGS) !== 0) {
      throw protocol(`unknown request flags 0x${flags.toString(16)}`, 2);
    }
    readU64(v, 8, 'sessionSeq');
    readU64(v, 16, 'ackBelow');
    if (v.getUint32(24) === 0) throw protocol('epoch 0', 24);
    const deadline = v.getUint32(28);
    if (deadline === 0) throw protocol('deadline budget 0', 28);
    if (deadline > limits.maxDeadlineMs) {
      throw protocol(`deadline budget ${deadline} ms beyond ${limits.maxDeadlineMs}`, 28);
    }
    const methodLength = v.getUint16(32);
    if (methodLength === 0) throw protocol('empty method name', 32);
    if (methodLength > limits.maxMethodBytes) {
      throw tooLarge(
        `method name of ${methodLength} bytes, the limit is ${limits.maxMethodBytes}`,
        32,
      );
    }
    if (v.getUint16(34) !== 0) throw protocol('reserved bits set', 34);
    const payload = v.getUint32(36);
    if (payload > limits.maxPayloadBytes) {
      throw tooLarge(`payload of ${payload} bytes, the limit is ${limits.maxPayloadBytes}`, 36);
    }
    return REQUEST_HEADER_BYTES + methodLength + payload;
  }
  if (bytes.length < RESPONSE_HEADER_BYTES) {
    throw protocol(`truncated response header: ${bytes.length} bytes`, bytes.length);
  }
  const status = bytes[2] as number;
  if (status > RpcStatus.Unknown) throw protocol(`unknown status ${status}`, 2);
  if (bytes[3] !== 0)
    throw protocol(`unknown response flags 0x${(bytes[3] as number).toString(16)}`, 3);
  if (v.getUint32(8) === 0) throw protocol('epoch 0', 8);
  const codeLength = bytes[12] as number;
  if (bytes[13] !== 0) throw protocol('reserved bits set', 13);
  const messageLength = v.getUint16(14);
  const payload = v.getUint32(16);
  if (status === RpcStatus.Ok) {
    if (codeLength !== 0) throw protocol('an ok response with an error code', 12);
    if (messageLength !== 0) throw protocol('an ok response with an error message', 14);
    if (payload > limits.maxPayloadBytes) {
      throw tooLarge(`payload of ${payload} bytes, the limit is ${limits.maxPayloadBytes}`, 16);
    }
  } else {
    if (codeLength === 0) throw protocol('an error response without an error code', 12);
    if (codeLength > MAX_ERROR_CODE_BYTES) {
      throw tooLarge(`error code of ${codeLength} bytes, the limit is ${MAX_ERROR_CODE_BYTES}`, 12);
    }
    if (messageLength > limits.maxErrorMessageBytes) {
      throw tooLarge(
        `error message of ${messageLength} bytes, the limit is ${limits.maxErrorMessageBytes}`,
        14,
      );
    }
    if (payload !== 0) throw protocol('an error response with a payload', 16);
  }
  return RESPONSE_HEADER_BYTES + codeLength + messageLength + payload;
}

/**
 * Decodes one whole frame (exactly one mux message). The fixed part is validated first
 * (`rpcFrameLength`), then the total length, then the variable parts (method and error code
 * characters, the message's UTF-8). Every failure is an RpcDecodeError with code
 * ERR_RPC_PROTOCOL or ERR_RPC_FRAME_TOO_LARGE and the offset of the bad field; nothing else
 * is ever thrown for any input bytes.
 */
export function decodeRpcFrame(
  bytes: Uint8Array,
  limits: RpcFrameLimits = DEFAULT_LIMITS,
): RpcFrame {
  if (!(bytes instanceof Uint8Array)) {
    throw invalid(`a frame must be a Uint8Array, got ${describeValue(bytes)}`);
  }
  const total = rpcFrameLength(bytes, limits);
  if (bytes.length < total)
    throw protocol(`truncated: ${bytes.length} of ${total} bytes`, bytes.length);
  if (bytes.length > total) throw protocol(`${bytes.length - total} bytes after the frame`, total);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes[0] === RpcFrameKind.Request) {
    const methodLength = v.getUint16(32);
    let method = '';
    for (let i = 0; i < methodLength; i++) {
      const c = bytes[REQUEST_HEADER_BYTES + i] as number;
      if (!isMethodChar(c)) {
        throw protocol(`byte 0x${c.toString(16)} in a method name`, REQUEST_HEADER_BYTES + i);
      }
      method += String.fromCharCode(c);
    }
    const start = REQUEST_HEADER_BYTES + methodLength;
    return {
      kind: 'request',
      header: {
        requestId: v.getUint32(4),
        sessionSeq: readU64(v, 8, 'sessionSeq'),
        ackBelow: readU64(v, 16, 'ackBelow'),
        epoch: v.getUint32(24),
        idempotent: (v.getUint16(2) & RequestFlags.Idempotent) !== 0,
        deadlineMs: v.getUint32(28),
        method,
        payloadLength: v.getUint32(36),
      },
      payload: bytes.subarray(start),
    };
  }
  const codeLength = bytes[12] as number;
  const messageLength = v.getUint16(14);
  let errorCode = '';
  for (let i = 0; i < codeLength; i++) {
    const c = bytes[RESPONSE_HEADER_BYTES + i] as number;
    if (!isCodeChar(c)) {
      throw protocol(`byte 0x${c.toString(16)} in an error code`, RESPONSE_HEADER_BYTES + i);
    }
    errorCode += String.fromCharCode(c);
  }
  const messageAt = RESPONSE_HEADER_BYTES + codeLength;
  let errorMessage = '';
  if (messageLength > 0) {
    try {
      errorMessage = utf8Strict.decode(bytes.subarray(messageAt, messageAt + messageLength));
    } catch {
      throw protocol('an error message that is not UTF-8', messageAt);
    }
  }
  return {
    kind: 'response',
    header: {
      requestId: v.getUint32(4),
      epoch: v.getUint32(8),
      status: bytes[2] as RpcStatus,
      errorCode,
      errorMessage,
      payloadLength: v.getUint32(16),
    },
    payload: bytes.subarray(messageAt + messageLength),
  };
}

/**
 * What a server may tell a caller about an error: its `code` when it is a stable code
 * (`[A-Z][A-Z0-9_]*`, at most 64 characters; else ERR_RPC_REMOTE) and the first line of its
 * message, cut to the message limit on a character boundary. Never the stack, the cause or
 * any other property.
 */
export function remoteErrorOf(
  err: unknown,
  limits: RpcFrameLimits = DEFAULT_LIMITS,
): { code: string; message: string } {
  let rawCode: unknown;
  let message = '';
  try {
    // A hostile or odd error object (throwing getters) must not stop the server answering.
    if (err !== null && typeof err === 'object') rawCode = (err as { code?: unknown }).code;
    if (err instanceof Error) message = typeof err.message === 'string' ? err.message : '';
    else if (typeof err === 'string') message = err;
  } catch {
    rawCode = undefined;
    message = '';
  }
  const code =
    typeof rawCode === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(rawCode)
      ? rawCode
      : 'ERR_RPC_REMOTE';
  message = message.split(/\r?\n/, 1)[0] ?? '';
  let bytes = utf8.encode(message);
  if (bytes.length > limits.maxErrorMessageBytes) {
    let end = limits.maxErrorMessageBytes;
    while (end > 0 && ((bytes[end] as number) & 0xc0) === 0x80) end--; // not mid-character
    bytes = bytes.subarray(0, end);
    message = new TextDecoder().decode(bytes);
  }
  return { code, message };
}
