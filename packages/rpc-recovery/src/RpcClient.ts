import type { Channel, Connection } from '@rdmajs/mux';
import { CallSequencer } from './CallSequencer.js';
import { RemoteError, RpcError } from './errors.js';
import {
  decodeRpcFrame,
  encodeRequestHeader,
  type RpcFrameLimits,
  RpcStatus,
  rpcFrameLimits,
} from './RpcFrame.js';

export interface CallOptions {
  /** Budget for the whole call, ms. Default 30 000. */
  deadlineMs?: number;
  signal?: AbortSignal;
  idempotent?: boolean;
}

interface Pending {
  resolve(bytes: Uint8Array): void;
  reject(err: Error): void;
}

/**
 * Calls over one channel of a mux Connection (any Transport). Replies are matched by request
 * id; every call ends by its deadline, its signal, the reply, or the channel failing.
 */
export class RpcClient {
  readonly #channel: Channel;
  readonly #limits: RpcFrameLimits;
  readonly #pending = new Map<number, Pending>();
  // Non-idempotent calls carry (session, sequence) so a de-duplicating server runs each once.
  readonly #sequencer = new CallSequencer();
  #nextId = 1;
  #closed: RpcError | undefined;

  constructor(connection: Connection, limits?: Partial<RpcFrameLimits>) {
    this.#limits = rpcFrameLimits(limits);
    this.#channel = connection.openChannel('rpc');
    void this.#readLoop();
  }

  call(method: string, payload: Uint8Array, options: CallOptions = {}): Promise<Uint8Array> {
    const deadlineMs = options.deadlineMs ?? 30_000;
    if (
      !Number.isInteger(deadlineMs) ||
      deadlineMs <= 0 ||
      deadlineMs > this.#limits.maxDeadlineMs
    ) {
      throw new RpcError(
        'ERR_RPC_INVALID_ARG',
        'deadlineMs must be a positive integer within limits',
      );
    }
    if (this.#closed !== undefined) return Promise.reject(this.#closed);
    const idempotent = options.idempotent === true;
    if (!idempotent && !this.#sequencer.canSend) {
      return Promise.reject(
        new RpcError('ERR_RPC_DEDUP_SESSION_FULL', 'too many unsettled non-idempotent calls', {
          retryable: true,
        }),
      );
    }
    const sessionSeq = idempotent ? 0 : this.#sequencer.next();
    const requestId = this.#nextId;
    this.#nextId = this.#nextId >= 0xffff_ffff ? 1 : this.#nextId + 1;
    const header = encodeRequestHeader(
      {
        requestId,
        sessionSeq,
        ackBelow: this.#sequencer.ackBelow,
        epoch: 1,
        idempotent,
        deadlineMs,
        method,
        payloadLength: payload.length,
      },
      this.#limits,
    );
    return new Promise<Uint8Array>((resolve, reject) => {
      const signal = options.signal;
      const finish = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#pending.delete(requestId);
        if (!idempotent) this.#sequencer.settle(sessionSeq);
      };
      const onAbort = (): void => {
        finish();
        reject(
          new RpcError('ERR_RPC_ABORTED', `call ${method} aborted`, { cause: signal?.reason }),
        );
      };
      const timer = setTimeout(() => {
        finish();
        reject(
          new RpcError('ERR_RPC_DEADLINE', `call ${method} passed its ${deadlineMs} ms deadline`),
        );
      }, deadlineMs);
      if (signal?.aborted) {
        onAbort();
        return;
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#pending.set(requestId, {
        resolve: (b) => {
          finish();
          resolve(b);
        },
        reject: (e) => {
          finish();
          reject(e);
        },
      });
      this.#channel.send([header, payload], { timeoutMs: deadlineMs }).catch((err: unknown) => {
        this.#pending
          .get(requestId)
          ?.reject(
            new RpcError('ERR_RPC_CLOSED', `call ${method} could not be sent`, { cause: err }),
          );
      });
    });
  }

  async #readLoop(): Promise<void> {
    try {
      for (;;) {
        const msg = await this.#channel.receive({ copy: true });
        let frame: ReturnType<typeof decodeRpcFrame>;
        try {
          frame = decodeRpcFrame(msg.bytes, this.#limits);
        } finally {
          msg.release();
        }
        if (frame.kind !== 'response') continue;
        const h = frame.header;
        const p = this.#pending.get(h.requestId);
        if (p === undefined) continue; // late reply of a call that already ended
        if (h.status === RpcStatus.Ok) p.resolve(frame.payload);
        else {
          const outcome =
            h.status === RpcStatus.Error
              ? 'error'
              : h.status === RpcStatus.Rejected
                ? 'rejected'
                : 'unknown';
          p.reject(new RemoteError(h.errorCode, h.errorMessage, outcome));
        }
      }
    } catch (err) {
      this.#fail(new RpcError('ERR_RPC_CLOSED', 'rpc channel closed or failed', { cause: err }));
    }
  }

  #fail(err: RpcError): void {
    if (this.#closed !== undefined) return;
    this.#closed = err;
    for (const p of [...this.#pending.values()]) p.reject(err);
  }

  /** Fails pending calls with ERR_RPC_CLOSED and closes the channel. Idempotent. */
  async close(): Promise<void> {
    this.#fail(new RpcError('ERR_RPC_CLOSED', 'client closed'));
    await this.#channel.close().catch(() => {});
  }
}
