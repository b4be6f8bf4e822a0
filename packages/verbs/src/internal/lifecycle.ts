import { RdmaError } from '../errors.js';

/** Anything with a close(): parents close their children first; close is idempotent. */
export abstract class Resource {
  #closed = false;
  readonly #children = new Set<Resource>();
  #parent: Resource | undefined;

  protected constructor(parent?: Resource) {
    this.#parent = parent;
    if (parent) parent.#children.add(this);
  }

  get closed(): boolean {
    return this.#closed;
  }

  protected abstract kind(): string;
  protected abstract release(): void;

  protected assertOpen(): void {
    if (this.#closed) throw new RdmaError('ERR_RDMA_CLOSED', `${this.kind()} is closed`);
  }

  protected children(): Iterable<Resource> {
    return this.#children;
  }

  close(): void {
    if (this.#closed) return;
    // Newest first: what was created later tends to depend on what came before.
    for (const child of [...this.#children].reverse()) child.close();
    this.release();
    this.#closed = true;
    if (this.#parent) this.#parent.#children.delete(this);
    this.#parent = undefined;
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
