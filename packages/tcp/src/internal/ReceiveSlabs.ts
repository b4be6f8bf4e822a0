/** Payloads up to this size are cut from slabs; larger ones get a buffer of their own. */
export const SLAB_PAYLOAD_MAX = 64 * 1024;
/** One slab: payloads are cut from it back to back (8-byte aligned, for typed-array views). */
export const SLAB_BYTES = 256 * 1024;
/** Slabs per connection at most: the memory held beyond what the window accounts. */
export const MAX_SLABS = 4;

/** A slab and the number of received messages that still hold a view of it. */
export class Slab {
  readonly bytes = uninitialised(SLAB_BYTES);
  fill = 0;
  live = 0;
  /** No longer cut from: back to the free list when its last view is released. */
  retired = false;
  readonly #free: Slab[];

  constructor(free: Slab[]) {
    this.#free = free;
  }

  /** A message cut from this slab was released. */
  unpin(): void {
    this.live--;
    if (this.live === 0 && this.retired) {
      this.retired = false;
      this.#free.push(this);
    }
  }
}

/**
 * Receive memory of a connection without a receive allocator: small and medium payloads are
 * copied into a few recycled slabs, so steady traffic allocates no ArrayBuffer per message
 * (each fresh backing store is external memory that counts toward V8's next full GC). A
 * slab is cut from until full, then retired until every message in it is released; one
 * whose messages all went is cut from its start again. When all MAX_SLABS slabs are held
 * (an application keeping messages), payloads get buffers of their own: what the slabs pin
 * beyond what the receive window accounts stays within MAX_SLABS × SLAB_BYTES.
 */
export class ReceiveSlabs {
  readonly #free: Slab[] = [];
  #current: Slab | undefined;
  #count = 0;
  /** The slab the last `take` cut from; undefined when it gave a buffer of its own. */
  last: Slab | undefined;
  /** A payload was taken since the last `trimIdle`. */
  #used = false;

  /** Slabs made and not dropped (held by messages, free, or being cut from). */
  get count(): number {
    return this.#count;
  }

  /** Memory for a payload of `length` bytes. */
  take(length: number): Uint8Array {
    this.#used = true;
    if (length > SLAB_PAYLOAD_MAX) return this.#own(length);
    let s = this.#current;
    if (s !== undefined && s.live === 0) s.fill = 0;
    if (s === undefined || s.fill + length > SLAB_BYTES) {
      if (s !== undefined) s.retired = true;
      s = this.#free.pop();
      if (s === undefined && this.#count < MAX_SLABS) {
        s = new Slab(this.#free);
        this.#count++;
      }
      this.#current = s;
      if (s === undefined) return this.#own(length);
      s.fill = 0;
    }
    const at = s.fill;
    s.fill = (at + length + 7) & ~7;
    s.live++;
    this.last = s;
    return s.bytes.subarray(at, at + length);
  }

  #own(length: number): Uint8Array {
    this.last = undefined;
    return uninitialised(length);
  }

  /**
   * Called periodically (the connection's heartbeat tick). When nothing was taken since the
   * last call, the slabs no message holds are dropped (`onDrop` each): a thousand idle
   * connections must not pin 256 KiB each. Slabs still held are dropped by a later call.
   */
  trimIdle(onDrop: (slab: Slab) => void): void {
    if (this.#used) {
      this.#used = false;
      return;
    }
    const c = this.#current;
    if (c !== undefined && c.live === 0) {
      this.#current = undefined;
      this.#count--;
      onDrop(c);
    }
    for (const f of this.#free) {
      this.#count--;
      onDrop(f);
    }
    this.#free.length = 0;
    this.last = undefined;
  }
}

// A plain Uint8Array, not a Buffer: Buffer's slice() is a view, and callers copy what they
// keep with slice() — a view of reused slab memory would change under them. Not zero-filled:
// every byte handed out is written by the frame before anyone reads it.
function uninitialised(length: number): Uint8Array {
  return new Uint8Array(Buffer.allocUnsafeSlow(length).buffer, 0, length);
}
