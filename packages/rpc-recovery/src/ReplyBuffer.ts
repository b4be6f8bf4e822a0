import type { MessagePart } from '@rdmajs/mux';
import { RpcError } from './errors.js';
import { RESPONSE_HEADER_BYTES } from './RpcFrame.js';

/** An allocator block (what `RegisteredAllocator.alloc()` returns): a message part with `release()`. */
export type ReplyBlock = Extract<MessagePart, { release(): void }>;

/**
 * Where a server builds reply frames for one connection, e.g. that RDMA connection's own
 * registered pool: `(n) => connection.allocator.alloc(n, 'remote-read')` (remote-read, so a
 * reply above the eager size goes by rendezvous READ from this very block, with a key that
 * reaches that connection's pool only; a block of the shared `transport.allocator` would be
 * copied first). A pool of reused heap blocks (for a transport that copies anyway, TCP)
 * spares a fresh ArrayBuffer per reply; mark it `registered: false` so that
 * `ReplyBuffer.registered` stays true only for registered memory.
 *
 * It may return `undefined` (e.g. a shared pool at its limit): that reply is then built on the
 * heap, as without reply memory, instead of failing the call.
 */
export type ReplyMemory = ((frameBytes: number) => ReplyBlock | undefined) & {
  readonly registered?: boolean;
};

let frameOf: (r: ReplyBuffer) => MessagePart;
let frameBytesOf: (r: ReplyBuffer) => Uint8Array;
let releaseReply: (r: ReplyBuffer) => void;

/**
 * Room for one Ok reply, built in place: the handler writes its payload into `payload`
 * and returns the ReplyBuffer; the response header goes into the bytes reserved in front of
 * it, and the whole frame is sent as one message part — from registered memory without a
 * copy when the connection has some (RDMA), else from the heap. Get one with
 * `context.allocateReply(length)`; the server releases it once sent (or when the handler
 * fails).
 */
export class ReplyBuffer {
  /** Where the handler writes the reply payload (exactly the length asked for). */
  readonly payload: Uint8Array;
  readonly #frame: MessagePart;
  readonly #bytes: Uint8Array;
  readonly #block: ReplyBlock | undefined;
  readonly #registered: boolean;
  #released = false;

  static {
    frameOf = (r) => r.#frame;
    frameBytesOf = (r) => r.#bytes;
    releaseReply = (r) => {
      if (r.#released) return;
      r.#released = true;
      if (r.#block !== undefined && !r.#block.released) r.#block.release();
    };
  }

  /** @internal Made by `CallContext.allocateReply`. */
  constructor(length: number, memory: ReplyMemory | undefined) {
    const n = RESPONSE_HEADER_BYTES + length;
    const block = memory === undefined ? undefined : memory(n);
    if (memory === undefined || block === undefined) {
      this.#bytes = new Uint8Array(n);
      this.#frame = this.#bytes;
      this.#block = undefined;
      this.#registered = false;
    } else {
      const bytes = block.bytes;
      if (bytes.length < n) {
        if (!block.released) block.release();
        throw new RpcError(
          'ERR_RPC_INVALID_STATE',
          `reply memory gave ${bytes.length} < ${n} bytes`,
        );
      }
      this.#block = block;
      this.#registered = memory.registered !== false;
      // Blocks may be rounded up: send exactly the frame.
      this.#frame = bytes.length === n ? block : block.slice(0, n);
      this.#bytes = bytes.subarray(0, n);
    }
    this.payload = this.#bytes.subarray(RESPONSE_HEADER_BYTES);
  }

  /**
   * True when the frame lives in the connection's registered reply memory (RDMA): not for the
   * heap, nor for reply memory marked `registered: false`.
   */
  get registered(): boolean {
    return this.#registered;
  }
}

/** @internal The frame to send (header space first). */
export function replyFrame(r: ReplyBuffer): MessagePart {
  return frameOf(r);
}

/** @internal The frame's bytes (to write the header into). */
export function replyFrameBytes(r: ReplyBuffer): Uint8Array {
  return frameBytesOf(r);
}

/** @internal Gives the block back (idempotent); for a handler that failed or a reply not sent. */
export function releaseReplyBuffer(r: ReplyBuffer): void {
  releaseReply(r);
}
