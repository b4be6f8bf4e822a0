import type { InboundMessage } from '@rdmajs/mux';
import { RpcError } from './errors.js';

/**
 * A reply left where the transport received it (registered memory on RDMA): `bytes` is a
 * view of its payload until `release()`, which gives the buffer back (idempotent; `using`
 * releases at scope end). Held replies count against the server's send window: release
 * them promptly, or the connection stalls.
 */
export class RpcReply {
  #msg: InboundMessage | undefined;
  readonly #bytes: Uint8Array;

  /** Made by `RpcClient.callView`. */
  constructor(msg: InboundMessage, payload: Uint8Array) {
    this.#msg = msg;
    this.#bytes = payload;
  }

  /** The reply's payload (a view). Throws ERR_RPC_INVALID_STATE after `release()`. */
  get bytes(): Uint8Array {
    if (this.#msg === undefined) {
      throw new RpcError('ERR_RPC_INVALID_STATE', 'the reply was released');
    }
    return this.#bytes;
  }

  get released(): boolean {
    return this.#msg === undefined;
  }

  release(): void {
    const m = this.#msg;
    this.#msg = undefined;
    m?.release();
  }

  [Symbol.dispose](): void {
    this.release();
  }
}
