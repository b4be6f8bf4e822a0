import { RpcError } from './errors.js';
import {
  decodeRpcFrame,
  encodeResponseHeader,
  type RpcFrameLimits,
  type RpcRequestHeader,
  RpcStatus,
  remoteErrorOf,
  rpcFrameLimits,
} from './RpcFrame.js';

/** What a handler learns about the call it serves. */
export interface CallContext {
  readonly method: string;
  readonly requestId: number;
  readonly idempotent: boolean;
  /** The caller's remaining budget when the request was sent, ms (0: none). */
  readonly deadlineMs: number;
}

/** Gets a view of the request payload (valid only until it returns or settles) and returns the reply bytes. */
export type MethodHandler = (
  payload: Uint8Array,
  context: CallContext,
) => Uint8Array | Promise<Uint8Array>;

export interface MethodOptions {
  /** Safe to run more than once: replayed after recovery instead of de-duplicated. Default false. */
  idempotent?: boolean;
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
  async dispatch(frame: Uint8Array, epoch: number): Promise<Uint8Array[] | undefined> {
    const decoded = decodeRpcFrame(frame, this.#limits);
    if (decoded.kind !== 'request') return undefined;
    const h = decoded.header;
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
    const context: CallContext = {
      method: h.method,
      requestId: h.requestId,
      idempotent: method.idempotent,
      deadlineMs: h.deadlineMs,
    };
    let result: Uint8Array;
    try {
      result = await method.handler(decoded.payload, context);
      if (!(result instanceof Uint8Array)) {
        throw new RpcError('ERR_RPC_INVALID_ARG', `handler of ${h.method} returned no bytes`);
      }
      if (result.length > this.#limits.maxPayloadBytes) {
        throw new RpcError('ERR_RPC_FRAME_TOO_LARGE', `reply of ${h.method} is too large`);
      }
    } catch (err) {
      const { code, message } = remoteErrorOf(err, this.#limits);
      const header = encodeResponseHeader(
        {
          requestId: h.requestId,
          epoch,
          status: RpcStatus.Error,
          errorCode: code,
          errorMessage: message,
          payloadLength: 0,
        },
        this.#limits,
      );
      return [header];
    }
    const header = encodeResponseHeader(
      {
        requestId: h.requestId,
        epoch,
        status: RpcStatus.Ok,
        errorCode: '',
        errorMessage: '',
        payloadLength: result.length,
      },
      this.#limits,
    );
    return [header, result];
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
