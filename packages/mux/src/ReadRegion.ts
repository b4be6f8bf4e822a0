import type { Block, RegisteredAllocator } from '@rdmajs/allocator';
import { MuxClosedError } from './errors.js';
import type { ReadDescriptor } from './ReadDescriptor.js';

/**
 * Memory this process exposes for peers to READ one-sidedly (`connection.read()`), made by
 * `RdmaTransport.allocReadRegion()`. The owner writes `bytes` with the CPU; peers that hold
 * the `descriptor` read it without waking this process.
 *
 * Its registration is its own (a pool of the transport's allocator holding nothing else),
 * registered remote-READ only (never remote write), so the key in the descriptor reaches
 * this memory and nothing of anyone else's. `close()` deregisters it: a peer READ with the
 * old descriptor then fails on the peer's side (REM_ACCESS_ERR, which fails that peer's
 * connection: see the README), and this memory is never read again.
 */
export class ReadRegion {
  readonly descriptor: ReadDescriptor;
  /** The readable bytes (exactly `descriptor.length` of them), zeroed at allocation. */
  readonly bytes: Uint8Array;
  readonly #pool: RegisteredAllocator;
  readonly #block: Block;
  readonly #onClose: (r: ReadRegion) => void;
  #closed = false;

  /** @internal made by RdmaTransport.allocReadRegion. */
  constructor(
    pool: RegisteredAllocator,
    block: Block,
    incarnation: bigint,
    onClose: (r: ReadRegion) => void,
  ) {
    this.#pool = pool;
    this.#block = block;
    this.#onClose = onClose;
    this.bytes = block.bytes;
    this.bytes.fill(0); // no earlier contents of the registration reach a reader
    this.descriptor = Object.freeze({
      incarnation,
      addr: block.addr,
      rkey: block.rkey,
      length: block.length,
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The registered block behind `bytes` (e.g. to send part of it on a channel). */
  get block(): Block {
    if (this.#closed) throw new MuxClosedError('ReadRegion.block');
    return this.#block;
  }

  /** Deregisters the memory (peers' READs with its descriptor fail from now on). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#onClose(this);
    // Quietly: after the transport closed, its allocator already took both back.
    quietly(() => this.#block.release());
    quietly(() => this.#pool.close());
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

function quietly(f: () => void): void {
  try {
    f();
  } catch {
    // already gone with the allocator
  }
}
