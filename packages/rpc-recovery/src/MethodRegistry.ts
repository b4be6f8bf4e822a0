import { type MessagePart, partBytes } from '@rdmajs/mux';
import type { DeduplicationTable } from './DeduplicationTable.js';
import { RpcError } from './errors.js';
import {
  ReplyBuffer,
  type ReplyMemory,
  releaseReplyBuffer,
  replyFrame,
  replyFrameBytes,
} from './ReplyBuffer.js';
import {
  decodeRpcFrame,
  encodeResponseHeader,
  RESPONSE_HEADER_BYTES,
  type RpcFrameLimits,
  type RpcRequestHeader,
  RpcStatus,
  remoteErrorOf,
  rpcFrameLimits,
  writeOkResponseHeader,
} from './RpcFrame.js';

/** What a handler learns about the call it serves. */
export interface CallContext {
  readonly method: string;
  readonly requestId: number;
  readonly idempotent: boolean;
  /** The caller's remaining budget when the request was sent, ms (0: none). */
  readonly deadlineMs: number;
  /** The session the call arrived on (set by RpcServer): what a service binds its own ids to. */
  readonly sessionId: string | undefined;
  /** The remote host it came from (IPv6 by its /64), as per-peer bounds count it. */
  readonly peer: string | undefined;
  /**
   * Room for a reply payload of `length` bytes, in the connection's reply memory (registered
   * memory on RDMA: the reply then goes out without a copy) or on the heap. Write the payload
   * into its `payload` and return the ReplyBuffer; it is released once sent, or when the
   * handler fails.
   */
  allocateReply(length: number): ReplyBuffer;
}

/**
 * Gets a view of the request payload (valid only until it returns or settles) and returns
 * the reply bytes, or a ReplyBuffer of `context.allocateReply()` built in place.
 */
export type MethodHandler = (
  payload: Uint8Array,
  context: CallContext,
) => Uint8Array | ReplyBuffer | Promise<Uint8Array | ReplyBuffer>;

export interface MethodOptions {
  /** Safe to run more than once: replayed after recovery instead of de-duplicated. Default false. */
  idempotent?: boolean;
}

/** Where a request arrived: the connection's epoch and, for de-duplication, its session. */
export interface DispatchScope {
  readonly epoch: number;
  /** With `dedup`: non-idempotent requests run at most once per (session, sequence). */
  readonly sessionId?: string;
  readonly dedup?: DeduplicationTable;
  /**
   * Called synchronously once a non-idempotent call's reply is in `dedup`, before it is
   * sent: where a service persists its state with `dedup.save()`. For a handler that
   * returns its bytes synchronously, the handler, the table update and this call run in one
   * tick, so no other call's effect is ever half-recorded in what is saved.
   */
  readonly onRecorded?: (sessionId: string, seq: number) => void;
  /**
   * Where `context.allocateReply` builds replies (default: the heap). Parts of the response
   * that are blocks from it belong to the response: send them with `{ transfer: true }`.
   */
  readonly replyMemory?: ReplyMemory;
  /** The remote host, handed to handlers as `context.peer`. */
  readonly peer?: string;
}

/** Whether call `c`'s handler made `r`. */
let callMade: (c: Call, r: ReplyBuffer) => boolean;
/** Gives back every reply buffer call `c` made but `result` (the response, if one of them). */
let releaseCallReplies: (c: Call, result: unknown) => void;
/** Call `c`'s `allocateReply`. */
let allocate: (c: Call, length: number) => ReplyBuffer;

/** `c.allocateReply`: an anonymous arrow (see Call.allocateReply). */
function allocatorOf(c: Call): (length: number) => ReplyBuffer {
  return (length) => allocate(c, length);
}

/**
 * The context of one call: its fields and the reply buffers its handler made. Nothing but
 * the CallContext members is reachable from a handler.
 */
class Call implements CallContext {
  readonly method: string;
  readonly requestId: number;
  readonly idempotent: boolean;
  readonly deadlineMs: number;
  readonly sessionId: string | undefined;
  readonly peer: string | undefined;
  readonly #memory: ReplyMemory | undefined;
  readonly #maxPayloadBytes: number;
  /** The first reply buffer made (the usual only one), then any others. */
  #first: ReplyBuffer | undefined;
  #more: ReplyBuffer[] | undefined;

  constructor(h: RpcRequestHeader, idempotent: boolean, scope: DispatchScope, maxPayload: number) {
    this.method = h.method;
    this.requestId = h.requestId;
    this.idempotent = idempotent;
    this.deadlineMs = h.deadlineMs;
    this.sessionId = scope.sessionId;
    this.peer = scope.peer;
    this.#memory = scope.replyMemory;
    this.#maxPayloadBytes = maxPayload;
  }

  /**
   * An own function, not a method: handlers take it from the context as documented
   * (`(payload, { allocateReply })`), detached from the Call. Made by `allocatorOf`, not
   * written here as a named arrow: run from source (tsx, esbuild's keepNames) a named arrow is
   * wrapped to set its `name` — an Object.defineProperty per call that turned each call's
   * function into a dictionary-mode object (≈ 4 % of a shard's CPU per pull, measured).
   */
  readonly allocateReply: (length: number) => ReplyBuffer = allocatorOf(this);

  static {
    callMade = (c, r) => r === c.#first || c.#more?.includes(r) === true;
    releaseCallReplies = (c, result) => c.#releaseExcept(result);
    allocate = (c, length) => c.#allocate(length);
  }

  #allocate(length: number): ReplyBuffer {
    if (!Number.isInteger(length) || length < 0 || length > this.#maxPayloadBytes) {
      throw new RpcError(
        'ERR_RPC_FRAME_TOO_LARGE',
        `a reply of ${length} bytes exceeds the payload limit`,
      );
    }
    const r = new ReplyBuffer(length, this.#memory);
    if (this.#first === undefined) this.#first = r;
    else if (this.#more === undefined) this.#more = [r];
    else this.#more.push(r);
    return r;
  }

  /** Gives back every reply buffer made but `result` (the response, if one of them). */
  #releaseExcept(result: unknown): void {
    const first = this.#first;
    if (first === undefined) return;
    if (first !== result) releaseReplyBuffer(first);
    if (this.#more !== undefined)
      for (const r of this.#more) if (r !== result) releaseReplyBuffer(r);
  }
}

interface Method {
  readonly handler: MethodHandler;
  readonly idempotent: boolean;
}

/**
 * Methods registered by name and the transport-independent part of serving one request:
 * decode and validate the frame, run the handler, and turn its result or its error into a
 * response. A peer's bad frame or a handler's failure becomes a response (code and
 * message only, never a stack), so nothing a peer sends stops the server.
 */
export class MethodRegistry {
  readonly #methods = new Map<string, Method>();
  readonly #limits: RpcFrameLimits;

  constructor(limits?: Partial<RpcFrameLimits>) {
    this.#limits = rpcFrameLimits(limits);
  }

  get limits(): RpcFrameLimits {
    return this.#limits;
  }

  register(name: string, handler: MethodHandler, options: MethodOptions = {}): void {
    if (typeof name !== 'string' || name.length === 0 || !/^[\x21-\x7e]+$/.test(name)) {
      throw new RpcError('ERR_RPC_INVALID_ARG', 'a method name must be non-empty printable ASCII');
    }
    if (name.length > this.#limits.maxMethodBytes) {
      throw new RpcError(
        'ERR_RPC_INVALID_ARG',
        `method name longer than ${this.#limits.maxMethodBytes} bytes`,
      );
    }
    if (typeof handler !== 'function') {
      throw new RpcError('ERR_RPC_INVALID_ARG', 'a method handler must be a function');
    }
    if (this.#methods.has(name)) {
      throw new RpcError('ERR_RPC_INVALID_STATE', `method ${name} is already registered`);
    }
    this.#methods.set(name, { handler, idempotent: options.idempotent === true });
  }

  has(name: string): boolean {
    return this.#methods.has(name);
  }

  /** Whether `name` was registered idempotent (undefined when not registered). */
  isIdempotent(name: string): boolean | undefined {
    return this.#methods.get(name)?.idempotent;
  }

  /**
   * Serves one request frame. Resolves to the response as parts (header, then payload) to
   * send as one message, or undefined when the frame is not a request (nothing to answer).
   * Throws RpcDecodeError for a malformed frame: the caller drops the connection, since its
   * request id cannot be trusted.
   */
  async dispatch(frame: Uint8Array, scope: DispatchScope): Promise<MessagePart[] | undefined> {
    return this.dispatchNow(frame, scope);
  }

  /**
   * `dispatch` without a promise where none is needed: a synchronous handler's response
   * comes back as it returns (no promise job per request), an asynchronous one's as a
   * promise. Throws (synchronously) what `dispatch` rejects with.
   */
  dispatchNow(
    frame: Uint8Array,
    scope: DispatchScope,
  ): MessagePart[] | undefined | Promise<MessagePart[] | undefined> {
    const epoch = scope.epoch;
    const decoded = decodeRpcFrame(frame, this.#limits);
    if (decoded.kind !== 'request') return undefined;
    const h = decoded.header;
    // A request of another epoch belongs to a connection that is gone: its caller has moved on.
    if (h.epoch !== epoch) return undefined;
    const method = this.#methods.get(h.method);
    if (method === undefined) {
      return this.#reject(h, epoch, 'ERR_RPC_METHOD_UNKNOWN', `no method ${h.method}`);
    }
    // A client that believes a method idempotent would replay it: refuse before running it.
    if (h.idempotent && !method.idempotent) {
      return this.#reject(
        h,
        epoch,
        'ERR_RPC_IDEMPOTENCY_MISMATCH',
        `method ${h.method} is not idempotent`,
      );
    }
    const { dedup, sessionId } = scope;
    if (!method.idempotent && dedup !== undefined && sessionId !== undefined) {
      let begun: ReturnType<DeduplicationTable['begin']>;
      try {
        begun = dedup.begin(sessionId, h.sessionSeq, h.ackBelow);
      } catch (err) {
        // Expired or reply dropped: it may have run, so the caller must not assume either.
        const code = remoteErrorOf(err, this.#limits);
        const ran =
          code.code === 'ERR_RPC_DEDUP_EXPIRED' || code.code === 'ERR_RPC_DEDUP_REPLY_DROPPED';
        return [this.#header(h, epoch, ran ? RpcStatus.Unknown : RpcStatus.Rejected, code, 0)];
      }
      if (begun.status === 'done') return this.#replay(begun.reply, h, epoch);
      if (begun.status !== 'new') {
        return begun.reply.then(
          (stored) => this.#replay(stored, h, epoch),
          (err: unknown) => [
            this.#header(h, epoch, RpcStatus.Rejected, remoteErrorOf(err, this.#limits), 0),
          ],
        );
      }
      const ran = this.#run(method, h, decoded.payload, epoch, scope);
      // A synchronous handler is recorded in the same tick it ran (see `onRecorded`).
      if (Array.isArray(ran)) return this.#record(ran, sessionId, h.sessionSeq, dedup, scope);
      return ran.then((parts) => this.#record(parts, sessionId, h.sessionSeq, dedup, scope));
    }
    return this.#run(method, h, decoded.payload, epoch, scope);
  }

  #record(
    parts: MessagePart[],
    sessionId: string,
    seq: number,
    dedup: DeduplicationTable,
    scope: DispatchScope,
  ): MessagePart[] {
    dedup.complete(sessionId, seq, concat(parts));
    scope.onRecorded?.(sessionId, seq);
    return parts;
  }

  /** Runs the handler; its outcome as response parts, synchronously when the handler is. */
  #run(
    method: Method,
    h: RpcRequestHeader,
    payload: Uint8Array,
    epoch: number,
    scope: DispatchScope,
  ): MessagePart[] | Promise<MessagePart[]> {
    // One object per call, no closures: the context is what the handler sees.
    const call = new Call(h, method.idempotent, scope, this.#limits.maxPayloadBytes);
    let result: Uint8Array | ReplyBuffer | Promise<Uint8Array | ReplyBuffer>;
    try {
      result = method.handler(payload, call);
    } catch (err) {
      releaseCallReplies(call, undefined);
      return this.#errorParts(h, epoch, err);
    }
    if (result instanceof Uint8Array || result instanceof ReplyBuffer) {
      releaseCallReplies(call, result);
      return this.#okParts(h, epoch, result, call);
    }
    return Promise.resolve(result).then(
      (r) => {
        releaseCallReplies(call, r);
        return this.#okParts(h, epoch, r, call);
      },
      (err: unknown) => {
        releaseCallReplies(call, undefined);
        return this.#errorParts(h, epoch, err);
      },
    );
  }

  #okParts(h: RpcRequestHeader, epoch: number, result: unknown, call: Call): MessagePart[] {
    if (result instanceof ReplyBuffer) {
      if (!callMade(call, result)) {
        return this.#errorParts(
          h,
          epoch,
          new RpcError(
            'ERR_RPC_INVALID_ARG',
            `handler of ${h.method} returned another call's reply`,
          ),
        );
      }
      // The header goes into the room left in front of the payload: no copy of the payload.
      // Its fields are known valid: the request id was decoded as a u32, the epoch is the
      // connection's, the length passed allocateReply's bound.
      writeOkResponseHeader(replyFrameBytes(result), h.requestId, epoch, result.payload.length);
      return [replyFrame(result)];
    }
    if (!(result instanceof Uint8Array)) {
      return this.#errorParts(
        h,
        epoch,
        new RpcError('ERR_RPC_INVALID_ARG', `handler of ${h.method} returned no bytes`),
      );
    }
    if (result.length > this.#limits.maxPayloadBytes) {
      return this.#errorParts(
        h,
        epoch,
        new RpcError('ERR_RPC_FRAME_TOO_LARGE', `reply of ${h.method} is too large`),
      );
    }
    const header = new Uint8Array(RESPONSE_HEADER_BYTES);
    writeOkResponseHeader(header, h.requestId, epoch, result.length);
    return [header, result];
  }

  #errorParts(h: RpcRequestHeader, epoch: number, err: unknown): Uint8Array[] {
    const { code, message } = remoteErrorOf(err, this.#limits);
    return [
      encodeResponseHeader(
        {
          requestId: h.requestId,
          epoch,
          status: RpcStatus.Error,
          errorCode: code,
          errorMessage: message,
          payloadLength: 0,
        },
        this.#limits,
      ),
    ];
  }

  /** A stored reply, sent again under the current epoch. */
  #replay(stored: Uint8Array, h: RpcRequestHeader, epoch: number): Uint8Array[] {
    const f = decodeRpcFrame(stored, this.#limits);
    if (f.kind !== 'response') {
      throw new RpcError(
        'ERR_RPC_INVALID_STATE',
        'a stored de-duplication reply is not a response',
      );
    }
    const r = f.header;
    const header = this.#header(
      h,
      epoch,
      r.status,
      { code: r.errorCode, message: r.errorMessage },
      f.payload.length,
    );
    return f.payload.length === 0 ? [header] : [header, f.payload];
  }

  #header(
    h: RpcRequestHeader,
    epoch: number,
    status: RpcStatus,
    err: { code: string; message: string },
    payloadLength: number,
  ): Uint8Array {
    return encodeResponseHeader(
      {
        requestId: h.requestId,
        epoch,
        status,
        errorCode: err.code,
        errorMessage: err.message,
        payloadLength,
      },
      this.#limits,
    );
  }

  #reject(h: RpcRequestHeader, epoch: number, code: string, message: string): Uint8Array[] {
    const header = encodeResponseHeader(
      {
        requestId: h.requestId,
        epoch,
        status: RpcStatus.Rejected,
        errorCode: code,
        errorMessage: message,
        payloadLength: 0,
      },
      this.#limits,
    );
    return [header];
  }
}

function concat(parts: readonly MessagePart[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += partBytes(p).length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    const b = partBytes(p);
    out.set(b, o);
    o += b.length;
  }
  return out;
}
