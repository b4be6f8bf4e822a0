// A FIFO over a growable array: push and shift without allocating once it has grown to
// the depth in use (Array#shift would move every element; a linked list allocates per node).
export class Ring<T> {
  #items: (T | undefined)[] = new Array(16);
  #head = 0;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  push(v: T): void {
    if (this.#size === this.#items.length) {
      const old = this.#items;
      const next: (T | undefined)[] = new Array(old.length * 2);
      for (let i = 0; i < this.#size; i++) next[i] = old[(this.#head + i) % old.length];
      this.#items = next;
      this.#head = 0;
    }
    this.#items[(this.#head + this.#size) % this.#items.length] = v;
    this.#size++;
  }

  /** The `i`-th item from the oldest (0), or undefined past the end. */
  at(i: number): T | undefined {
    return i < this.#size ? this.#items[(this.#head + i) % this.#items.length] : undefined;
  }

  shift(): T | undefined {
    if (this.#size === 0) return undefined;
    const v = this.#items[this.#head];
    this.#items[this.#head] = undefined;
    this.#head = (this.#head + 1) % this.#items.length;
    this.#size--;
    return v;
  }
}
