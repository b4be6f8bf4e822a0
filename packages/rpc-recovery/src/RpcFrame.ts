import { RpcDecodeError, RpcError } from './errors.js';
import { MethodNames } from './internal/MethodNames.js';
import { checkInt, checkKnownKeys, describeValue, ownOptions } from './internal/validate.js';
import { MAX_EPOCH } from './SessionAuthority.js';

/**
 * The RPC frames, one per mux message, big-endian.
 *
 * Request (40-byte fixed part):
 * ```
 *  0 kind u8 (1) | 1 version u8 (2) | 2 flags u16 (bit 0: idempotent) | 4 requestId u32
 *  8 sessionSeq u64 | 16 ackBelow u64 | 24 epoch u32 | 28 deadlineMs u32 (budget, >= 1)
 * 32 methodLength u16 | 34 reserved u16 (0) | 36 payloadLength u32
 * 40 method (ASCII [A-Za-z0-9_.:/-]), zero-padded to a multiple of 8 | payload
 * ```
 * The padding puts a request's payload 8-aligned in the frame (version 2; version 1 had none),
 * so a receiver whose frame starts 8-aligned (a mux message does) views the u64/f32 arrays
 * of a payload in place instead of copying it to align them. Padding bytes must be zero.
 * Response (20-byte fixed part):
 * ```
 *  0 kind u8 (2) | 1 version u8 (2) | 2 status u8 | 3 flags u8 (0) | 4 requestId u32
 *  8 epoch u32 | 12 errorCodeLength u8 | 13 reserved u8 (0) | 14 errorMessageLength u16
 * 16 payloadLength u32
 * 20 errorCode (ASCII [A-Z0-9_]) | errorMessage (UTF-8) | payload
 * ```
 * `ackBelow` piggybacks "every reply below this session sequence received". A response
 * other than ok carries an error code (and maybe a message), never a payload or a stack.
 */
/** Version 2: the request's method is zero-padded to 8 bytes (its payload 8-aligned). */
export const RPC_FRAME_VERSION = 2;
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

/** Method names that passed METHOD (a client uses a few, over and over): no RegExp per call. */
const goodMethods = new Set<string>();
const GOOD_METHODS_MAX = 256;

/** Names of decoded requests (a server sees few): found again without building a string. */
const decodedMethods = new MethodNames(16);

function rememberMethod(method: string): boolean {
  if (!METHOD.test(method)) return false;
  if (goodMethods.size >= GOOD_METHODS_MAX) goodMethods.clear();
  goodMethods.add(method);
  return true;
}

function invalid(message: string): RpcError {
  return new RpcError('ERR_RPC_INVALID_ARG', message);
}

const protocol = (message: string, offset: number): RpcDecodeError =>
  new RpcDecodeError('ERR_RPC_PROTOCOL', message, offset);

const tooLarge = (message: string, offset: number): RpcDecodeError =>
  new RpcDecodeError('ERR_RPC_FRAME_TOO_LARGE', message, offset);

// Big-endian reads straight from the bytes: a DataView per decoded frame was an allocation
// through a C++ builtin on every request a server handles.
function u16(b: Uint8Array, at: number): number {
  return ((b[at] as number) << 8) | (b[at + 1] as number);
}

function u32(b: Uint8Array, at: number): number {
  return (
    (((b[at] as number) << 24) |
      ((b[at + 1] as number) << 16) |
      ((b[at + 2] as number) << 8) |
      (b[at + 3] as number)) >>>
    0
  );
}

function readU64(b: Uint8Array, at: number, what: string): number {
  const hi = u32(b, at);
  if (hi >= 2 ** 21) throw protocol(`${what} beyond 2^53 - 1`, at);
  return hi * 2 ** 32 + u32(b, at + 4);
}

/** `n` rounded up to a multiple of 8: the bytes a method name takes in a request. */
const pad8 = (n: number): number => (n + 7) & ~7;

function writeU16(out: Uint8Array, at: number, x: number): void {
  out[at] = x >>> 8;
  out[at + 1] = x & 0xff;
}

function writeU32(out: Uint8Array, at: number, x: number): void {
  out[at] = x >>> 24;
  out[at + 1] = (x >>> 16) & 0xff;
  out[at + 2] = (x >>> 8) & 0xff;
  out[at + 3] = x & 0xff;
}

function writeU64(out: Uint8Array, at: number, x: number): void {
  writeU32(out, at, Math.floor(x / 2 ** 32));
  writeU32(out, at + 4, x >>> 0);
}

function checkHeader(what: string, h: unknown): void {
  if (typeof h !== 'object' || h === null) {
    throw invalid(`${what} must be an object, got ${describeValue(h)}`);
  }
}

function checkRoom(out: unknown, offset: unknown, length: number): void {
  if (!(out instanceof Uint8Array)) {
    throw invalid(`out must be a Uint8Array, got ${describeValue(out)}`);
  }
  checkInt('offset', offset, 0);
  if ((offset as number) + length > out.length) {
    throw invalid(
      `out has ${out.length - (offset as number)} bytes from offset, the header needs ${length}`,
    );
  }
}

/** Bytes of a request header with this method (fixed part and method name, padded to 8). */
export function requestHeaderLength(method: string): number {
  return REQUEST_HEADER_BYTES + pad8(method.length);
}

/**
 * Writes a request header at `offset` of `out` (e.g. a pooled registered block, in front
 * of a payload built in place) and returns the bytes written; no buffer is allocated.
 */
export function encodeRequestHeaderInto(
  out: Uint8Array,
  offset: number,
  h: RpcRequestHeader,
  limits: RpcFrameLimits = DEFAULT_LIMITS,
): number {
  checkHeader('request header', h);
  checkInt('requestId', h.requestId, 0, 0xffff_ffff);
  checkInt('sessionSeq', h.sessionSeq, 0);
  checkInt('ackBelow', h.ackBelow, 0);
  checkInt('epoch', h.epoch, 1, MAX_EPOCH);
  checkInt('deadlineMs', h.deadlineMs, 1, limits.maxDeadlineMs);
  checkInt('payloadLength', h.payloadLength, 0, limits.maxPayloadBytes);
  if (typeof h.idempotent !== 'boolean') {
    throw invalid(`idempotent must be a boolean, got ${describeValue(h.idempotent)}`);
  }
  const method = h.method;
  if (
    typeof method !== 'string' ||
    method.length > limits.maxMethodBytes ||
    (!goodMethods.has(method) && !rememberMethod(method))
  ) {
    throw invalid(
      `method must be 1 to ${limits.maxMethodBytes} characters of [A-Za-z0-9_.:/-], got ${describeValue(method)}`,
    );
  }
  const length = REQUEST_HEADER_BYTES + pad8(method.length);
  checkRoom(out, offset, length);
  const o = offset;
  out[o] = RpcFrameKind.Request;
  out[o + 1] = RPC_FRAME_VERSION;
  writeU16(out, o + 2, h.idempotent ? RequestFlags.Idempotent : 0);
  writeU32(out, o + 4, h.requestId);
  writeU64(out, o + 8, h.sessionSeq);
  writeU64(out, o + 16, h.ackBelow);
  writeU32(out, o + 24, h.epoch);
  writeU32(out, o + 28, h.deadlineMs);
  writeU16(out, o + 32, method.length);
  writeU16(out, o + 34, 0);
  writeU32(out, o + 36, h.payloadLength);
  for (let i = 0; i < method.length; i++) out[o + REQUEST_HEADER_BYTES + i] = method.charCodeAt(i);
  out.fill(0, o + REQUEST_HEADER_BYTES + method.length, o + length);
  return length;
}

/** The header of a request (fixed part and method) in new bytes, to send before its payload. */
export function encodeRequestHeader(
  h: RpcRequestHeader,
  limits: RpcFrameLimits = DEFAULT_LIMITS,
): Uint8Array {
  checkHeader('request header', h);
  const out = new Uint8Array(
    REQUEST_HEADER_BYTES + (typeof h.method === 'string' ? pad8(h.method.length) : 0),
  );
  encodeRequestHeaderInto(out, 0, h, limits);
  return out;
}

/** Bytes of a response header with this error code and message. */
export function responseHeaderLength(errorCode: string, errorMessage: string): number {
  return RESPONSE_HEADER_BYTES + errorCode.length + Buffer.byteLength(errorMessage, 'utf8');
}

/**
 * Writes a response header (fixed part, error code and message) at `offset` of `out` and
 * returns the bytes written; no buffer is allocated.
 */
export function encodeResponseHeaderInto(
  out: Uint8Array,
  offset: number,
  h: RpcResponseHeader,
  limits: RpcFrameLimits = DEFAULT_LIMITS,
): number {
  checkHeader('response header', h);
  checkInt('requestId', h.requestId, 0, 0xffff_ffff);
  checkInt('epoch', h.epoch, 1, MAX_EPOCH);
  const status = checkInt('status', h.status, RpcStatus.Ok, RpcStatus.Unknown);
  const payloadLength = checkInt('payloadLength', h.payloadLength, 0, limits.maxPayloadBytes);
  const code = h.errorCode;
  const message = h.errorMessage;
  if (typeof code !== 'string' || typeof message !== 'string') {
    throw invalid('errorCode and errorMessage must be strings');
  }
  let messageLength = 0;
  if (status === RpcStatus.Ok) {
    if (code !== '' || message !== '') throw invalid('an ok response carries no error');
  } else {
    if (code.length < 1 || code.length > MAX_ERROR_CODE_BYTES || !CODE.test(code)) {
      throw invalid(
        `errorCode must be 1 to ${MAX_ERROR_CODE_BYTES} characters of [A-Z0-9_], got ${describeValue(code)}`,
      );
    }
    messageLength = Buffer.byteLength(message, 'utf8');
    if (messageLength > limits.maxErrorMessageBytes) {
      throw invalid(
        `errorMessage is ${messageLength} UTF-8 bytes, the limit is ${limits.maxErrorMessageBytes} (see remoteErrorOf)`,
      );
    }
    if (payloadLength !== 0) throw invalid('an error response carries no payload');
  }
  const length = RESPONSE_HEADER_BYTES + code.length + messageLength;
  checkRoom(out, offset, length);
  const o = offset;
  out[o] = RpcFrameKind.Response;
  out[o + 1] = RPC_FRAME_VERSION;
  out[o + 2] = status;
  out[o + 3] = 0;
  writeU32(out, o + 4, h.requestId);
  writeU32(out, o + 8, h.epoch);
  out[o + 12] = code.length;
  out[o + 13] = 0;
  writeU16(out, o + 14, messageLength);
  writeU32(out, o + 16, payloadLength);
  for (let i = 0; i < code.length; i++) out[o + RESPONSE_HEADER_BYTES + i] = code.charCodeAt(i);
  if (messageLength > 0) {
    const at = o + RESPONSE_HEADER_BYTES + code.length;
    utf8.encodeInto(message, out.subarray(at, at + messageLength));
  }
  return length;
}

/**
 * @internal An Ok response header at the start of `out`, for fields the caller already knows
 * valid (a decoded request id, the connection's epoch, a length within the payload limit):
 * what `encodeResponseHeaderInto` writes for them, without re-checking each per reply.
 */
export function writeOkResponseHeader(
  out: Uint8Array,
  requestId: number,
  epoch: number,
  payloadLength: number,
): void {
  if (out.length < RESPONSE_HEADER_BYTES) {
    throw invalid(`out has ${out.length} bytes, the header needs ${RESPONSE_HEADER_BYTES}`);
  }
  out[0] = RpcFrameKind.Response;
  out[1] = RPC_FRAME_VERSION;
  out[2] = RpcStatus.Ok;
  out[3] = 0;
  writeU32(out, 4, requestId);
  writeU32(out, 8, epoch);
  out[12] = 0;
  out[13] = 0;
  out[14] = 0;
  out[15] = 0;
  writeU32(out, 16, payloadLength);
}

/** The header of a response in new bytes, to send before its payload. */
export function encodeResponseHeader(
  h: RpcResponseHeader,
  limits: RpcFrameLimits = DEFAULT_LIMITS,
): Uint8Array {
  checkHeader('response header', h);
  const sized =
    typeof h.errorCode === 'string' && typeof h.errorMessage === 'string'
      ? responseHeaderLength(h.errorCode, h.errorMessage)
      : RESPONSE_HEADER_BYTES;
  const out = new Uint8Array(sized);
  encodeResponseHeaderInto(out, 0, h, limits);
  return out;
}

/**
 * The whole length of the frame starting `bytes` (fixed part, variable parts and payload),
 * from its fixed part alone, which is fully validated: lets a stream reader refuse a frame
 * before buffering it. Throws ERR_RPC_PROTOCOL / ERR_RPC_FRAME_TOO_LARGE (`offset` names
 * the field).
 */
export function rpcFrameLength(bytes: Uint8Array, limits: RpcFrameLimits = DEFAULT_LIMITS): number {
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
    const flags = u16(bytes, 2);
    if ((flags & ~KNOWN_REQUEST_FLAGS) !== 0) {
      throw protocol(`unknown request flags 0x${flags.toString(16)}`, 2);
    }
    readU64(bytes, 8, 'sessionSeq');
    readU64(bytes, 16, 'ackBelow');
    if (u32(bytes, 24) === 0) throw protocol('epoch 0', 24);
    const deadline = u32(bytes, 28);
    if (deadline === 0) throw protocol('deadline budget 0', 28);
    if (deadline > limits.maxDeadlineMs) {
      throw protocol(`deadline budget ${deadline} ms beyond ${limits.maxDeadlineMs}`, 28);
    }
    const methodLength = u16(bytes, 32);
    if (methodLength === 0) throw protocol('empty method name', 32);
    if (methodLength > limits.maxMethodBytes) {
      throw tooLarge(
        `method name of ${methodLength} bytes, the limit is ${limits.maxMethodBytes}`,
        32,
      );
    }
    if (u16(bytes, 34) !== 0) throw protocol('reserved bits set', 34);
    const payload = u32(bytes, 36);
    if (payload > limits.maxPayloadBytes) {
      throw tooLarge(`payload of ${payload} bytes, the limit is ${limits.maxPayloadBytes}`, 36);
    }
    return REQUEST_HEADER_BYTES + pad8(methodLength) + payload;
  }
  if (bytes.length < RESPONSE_HEADER_BYTES) {
    throw protocol(`truncated response header: ${bytes.length} bytes`, bytes.length);
  }
  const status = bytes[2] as number;
  if (status > RpcStatus.Unknown) throw protocol(`unknown status ${status}`, 2);
  if (bytes[3] !== 0)
    throw protocol(`unknown response flags 0x${(bytes[3] as number).toString(16)}`, 3);
  if (u32(bytes, 8) === 0) throw protocol('epoch 0', 8);
  const codeLength = bytes[12] as number;
  if (bytes[13] !== 0) throw protocol('reserved bits set', 13);
  const messageLength = u16(bytes, 14);
  const payload = u32(bytes, 16);
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
 * The deadline budget (ms) a request frame carries, read from its fixed part without
 * decoding it; 0 for anything that is not a request with a valid budget (its decode will
 * fail and say why). For a server deciding how long a request may wait for a slot.
 */
export function requestBudgetMs(
  bytes: Uint8Array,
  limits: RpcFrameLimits = DEFAULT_LIMITS,
): number {
  if (bytes.length < REQUEST_HEADER_BYTES || bytes[0] !== RpcFrameKind.Request) return 0;
  const budget =
    (((bytes[28] as number) << 24) |
      ((bytes[29] as number) << 16) |
      ((bytes[30] as number) << 8) |
      (bytes[31] as number)) >>>
    0;
  return budget <= limits.maxDeadlineMs ? budget : 0;
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
  if (bytes[0] === RpcFrameKind.Request) {
    const methodLength = u16(bytes, 32);
    let method = decodedMethods.find(bytes, REQUEST_HEADER_BYTES, methodLength);
    if (method === undefined) {
      method = '';
      for (let i = 0; i < methodLength; i++) {
        const c = bytes[REQUEST_HEADER_BYTES + i] as number;
        if (!isMethodChar(c)) {
          throw protocol(`byte 0x${c.toString(16)} in a method name`, REQUEST_HEADER_BYTES + i);
        }
        method += String.fromCharCode(c);
      }
      decodedMethods.add(method);
    }
    const start = REQUEST_HEADER_BYTES + pad8(methodLength);
    // Checked zero, not ignored: a frame has one encoding (no covert or stale bytes).
    for (let i = REQUEST_HEADER_BYTES + methodLength; i < start; i++) {
      if (bytes[i] !== 0) throw protocol('method padding not zero', i);
    }
    return {
      kind: 'request',
      header: {
        requestId: u32(bytes, 4),
        sessionSeq: readU64(bytes, 8, 'sessionSeq'),
        ackBelow: readU64(bytes, 16, 'ackBelow'),
        epoch: u32(bytes, 24),
        idempotent: (u16(bytes, 2) & RequestFlags.Idempotent) !== 0,
        deadlineMs: u32(bytes, 28),
        method,
        payloadLength: u32(bytes, 36),
      },
      payload: bytes.subarray(start),
    };
  }
  const codeLength = bytes[12] as number;
  const messageLength = u16(bytes, 14);
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
      requestId: u32(bytes, 4),
      epoch: u32(bytes, 8),
      status: bytes[2] as RpcStatus,
      errorCode,
      errorMessage,
      payloadLength: u32(bytes, 16),
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
