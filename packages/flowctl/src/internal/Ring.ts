/** A growable circular FIFO: push/peek/shift/rotate in O(1), no allocation in steady state. */
export class Ring<T> {
  private items: (T | undefined)[];
  private head = 0;
  private count = 0;

  constructor(capacity = 8) {
    this.items = new Array<T | undefined>(capacity);
  }

  get size(): number {
    return this.count;
  }

  peek(): T | undefined {
    return this.count === 0 ? undefined : this.items[this.head];
  }

  at(i: number): T | undefined {
    return i < 0 || i >= this.count ? undefined : this.items[(this.head + i) % this.items.length];
  }

  push(item: T): void {
    if (this.count === this.items.length) this.grow();
    this.items[(this.head + this.count) % this.items.length] = item;
    this.count++;
  }

  shift(): T | undefined {
    if (this.count === 0) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.items.length;
    this.count--;
    return item;
  }

  /** Moves the head to the tail. */
  rotate(): void {
    if (this.count < 2) return;
    const item = this.shift() as T;
    this.push(item);
  }

  private grow(): void {
    const next = new Array<T | undefined>(this.items.length * 2);
    for (let i = 0; i < this.count; i++) next[i] = this.items[(this.head + i) % this.items.length];
    this.items = next;
    this.head = 0;
  }
}
