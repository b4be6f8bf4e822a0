/**
 * Objects kept for reuse, at most `capacity`. Its storage is allocated once, full size: an
 * array used with push/pop reallocates its backing store as it grows and shrinks, which on
 * the data path is an allocation per message whenever the pool's level swings (send slots
 * come back in batches when completions are reaped at the next wake-up).
 */
export class FreeList<T> {
  readonly #items: (T | undefined)[];
  #count = 0;

  constructor(readonly capacity: number) {
    this.#items = new Array<T | undefined>(capacity).fill(undefined);
  }

  get size(): number {
    return this.#count;
  }

  /** One kept object, or undefined when none is. */
  take(): T | undefined {
    if (this.#count === 0) return undefined;
    const i = --this.#count;
    const item = this.#items[i];
    this.#items[i] = undefined;
    return item;
  }

  /** Keeps `item`; false (not kept) when full. */
  put(item: T): boolean {
    if (this.#count === this.capacity) return false;
    this.#items[this.#count++] = item;
    return true;
  }

  /** Hands every kept object to `each` and keeps none. */
  drain(each: (item: T) => void): void {
    while (this.#count > 0) each(this.take() as T);
  }
}
