/** Smallest buffer kept (2^8 bytes); smaller requests are on-heap typed arrays anyway. */
const MIN_CLASS = 8;
/** Largest buffer kept (2^22 bytes = 4 MiB); bigger requests are rare and big beside their work. */
export const MAX_CLASS = 22;
/** Bytes the free lists may hold in all: a bound on what a burst of pushes leaves pinned. */
const MAX_FREE_BYTES = 16 << 20;

/**
 * Request buffers reused once nothing can read them any more (a push acknowledged after its
 * only send): each push would otherwise allocate one fresh ArrayBuffer per shard, and those
 * backing stores count against V8's external memory limit, so steady pushing ran a full
 * Mark-Compact every few hundred pushes. Power-of-two classes, 8-aligned (each buffer is its
 * own ArrayBuffer), bounded in total.
 */
export class RequestBuffers {
  readonly #free: ArrayBuffer[][] = Array.from({ length: MAX_CLASS + 1 }, () => []);
  #freeBytes = 0;

  /** A buffer of exactly `length` bytes (a view of a kept or new ArrayBuffer; contents stale). */
  take(length: number): Uint8Array {
    const c = classOf(length);
    if (c > MAX_CLASS) return new Uint8Array(length);
    const buf = (this.#free[c] as ArrayBuffer[]).pop();
    if (buf === undefined) return new Uint8Array(new ArrayBuffer(1 << c), 0, length);
    this.#freeBytes -= buf.byteLength;
    return new Uint8Array(buf, 0, length);
  }

  /** Gives back a buffer from `take` that nothing references any more. */
  give(bytes: Uint8Array): void {
    const buf = bytes.buffer as ArrayBuffer;
    const c = classOf(buf.byteLength);
    if (
      bytes.byteOffset !== 0 ||
      c > MAX_CLASS ||
      buf.byteLength !== 1 << c ||
      this.#freeBytes + buf.byteLength > MAX_FREE_BYTES
    ) {
      return; // not one of ours, or the lists are full: the GC takes it
    }
    this.#freeBytes += buf.byteLength;
    (this.#free[c] as ArrayBuffer[]).push(buf);
  }
}

/** The power-of-two class holding `length` bytes (MAX_CLASS + 1 beyond the largest). */
export function classOf(length: number): number {
  let c = MIN_CLASS;
  while (1 << c < length && c <= MAX_CLASS) c++;
  return c;
}
