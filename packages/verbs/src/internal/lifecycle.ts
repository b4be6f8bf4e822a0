import { RdmaError } from '../errors.js';

/** The kinds of verbs objects, in the order a parent closes them (as pyverbs does). */
export type ResourceKind =
  | 'queue pair'
  | 'shared receive queue'
  | 'completion queue'
  | 'memory region'
  | 'protection domain'
  | 'device';

// QPs go before the SRQs and CQs they use, MRs before the PD that holds them.
const CLOSE_ORDER: readonly ResourceKind[] = [
  'queue pair',
  'shared receive queue',
  'completion queue',
  'memory region',
  'protection domain',
  'device',
];

/**
 * Anything with a close(): closing a parent closes every descendant first, kind by kind
 * in CLOSE_ORDER (newest first within a kind); close is idempotent.
 */
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

  protected abstract kind(): ResourceKind;
  /** Frees the native object; runs once. */
  protected abstract release(): void;

  protected assertOpen(): void {
    if (this.#closed) throw new RdmaError('ERR_RDMA_CLOSED', `${this.kind()} is closed`);
  }

  close(): void {
    if (this.#closed) return;
    const all: Resource[] = [];
    const collect = (r: Resource) => {
      for (const c of [...r.#children].reverse()) {
        all.push(c);
        collect(c);
      }
    };
    collect(this);
    const rank = (r: Resource) => CLOSE_ORDER.indexOf(r.kind());
    all.sort((a, b) => rank(a) - rank(b)); // stable: newest first within a kind
    for (const r of all) r.#finish();
    this.#finish();
  }

  #finish(): void {
    if (this.#closed) return;
    this.release();
    this.#closed = true;
    if (this.#parent) this.#parent.#children.delete(this);
    this.#parent = undefined;
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
