import { PsClientError } from './errors.js';

/** What a PulledRows holds on to: shard replies left in the transport's receive memory. */
export interface HeldReply {
  release(): void;
}

/** What gives the pull's plan (its index arrays and request buffers) back for reuse. */
export interface RecyclablePlan {
  recycle(): void;
}

/** Replies of a PulledRows that was dropped without `release()`: given back by the GC. */
const dropped = new FinalizationRegistry<HeldReply[]>((replies) => {
  for (const r of replies) r.release();
});

/**
 * The rows of one `pull`, in request order, left where they arrived: each shard's reply in
 * the transport's receive memory (registered memory on RDMA, where the server's registered
 * reply block was SENT or READ into), never copied on the way. `row(i)` is a view of row
 * `i`; `rows` is one `keys.length × dim` array — a view of the reply itself when one reply
 * holds exactly the request (one shard's part, no duplicate keys), else gathered on first
 * use into a heap array (the one copy; `pullInto` does the same into yours).
 *
 * `release()` gives the replies back (idempotent; `using` works): until then they count
 * against each shard's send window, so hold rows briefly. Views end at `release()` and at
 * the client's `close()`. A PulledRows dropped unreleased is released by the GC, late.
 */
export class PulledRows implements Disposable {
  readonly count: number;
  readonly dim: number;
  /** For partial pulls: 1 where row i is the table's init (its shard did not answer in time). */
  readonly missing: Uint8Array | undefined;
  readonly missingCount: number;
  readonly missingShards: readonly string[];
  /** True when `rows` is a view of one reply, in request order (no gather needed). */
  readonly contiguous: boolean;
  readonly #segments: readonly Float32Array[];
  readonly #segOf: Uint32Array;
  readonly #offOf: Uint32Array;
  readonly #replies: HeldReply[];
  readonly #plan: RecyclablePlan | undefined;
  #rows: Float32Array | undefined;
  #released = false;

  /**
   * @internal Built by PsClient: row i (< count) is `segments[segOf[i]]` from float
   * `offOf[i]`; `plan`, which owns `segments`, `segOf` and `offOf`, is recycled at `release()`.
   */
  constructor(
    dim: number,
    count: number,
    segments: readonly Float32Array[],
    segOf: Uint32Array,
    offOf: Uint32Array,
    replies: HeldReply[],
    /** The rows in request order as one view, when one segment is exactly that. */
    whole: Float32Array | undefined,
    plan: RecyclablePlan | undefined,
    mask: { missing: Uint8Array; missingCount: number; missingShards: string[] } | undefined,
  ) {
    this.count = count;
    this.#plan = plan;
    this.dim = dim;
    this.#segments = segments;
    this.#segOf = segOf;
    this.#offOf = offOf;
    this.#replies = replies;
    this.#rows = whole;
    this.contiguous = whole !== undefined;
    this.missing = mask?.missing;
    this.missingCount = mask?.missingCount ?? 0;
    this.missingShards = mask?.missingShards ?? [];
    if (replies.length > 0) dropped.register(this, replies, this);
  }

  #live(): void {
    if (this.#released) {
      throw new PsClientError('ERR_PS_CLIENT_RELEASED', 'pulled rows used after release()');
    }
  }

  /** Row `i` (request order): a view of `dim` floats in the reply that carried it. */
  row(i: number): Float32Array {
    this.#live();
    if (!Number.isInteger(i) || i < 0 || i >= this.count) {
      throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', `row ${i} of ${this.count}`);
    }
    const off = this.#offOf[i] as number;
    return (this.#segments[this.#segOf[i] as number] as Float32Array).subarray(off, off + this.dim);
  }

  /** All rows, request order: a view of the reply when `contiguous`, else gathered once. */
  get rows(): Float32Array {
    this.#live();
    if (this.#rows === undefined) {
      const out = new Float32Array(this.count * this.dim);
      this.copyInto(out);
      this.#rows = out;
    }
    return this.#rows;
  }

  /** Copies the rows into `out` (`count × dim` floats from `offset`). */
  copyInto(out: Float32Array, offset = 0): void {
    this.#live();
    const dim = this.dim;
    if (
      !(out instanceof Float32Array) ||
      !Number.isSafeInteger(offset) ||
      offset < 0 ||
      out.length - offset < this.count * dim
    ) {
      throw new PsClientError(
        'ERR_PS_CLIENT_LENGTH_MISMATCH',
        `out needs ${this.count} × ${dim} floats from ${offset}`,
      );
    }
    // Rows next to each other in a segment and in the request (≈ a third of a 3-shard pull's)
    // go in one set(): one subarray object per run, not per row.
    const segOf = this.#segOf;
    const offOf = this.#offOf;
    const n = this.count;
    for (let i = 0; i < n; ) {
      const g = segOf[i] as number;
      const start = offOf[i] as number;
      let end = start + dim;
      let j = i + 1;
      while (j < n && segOf[j] === g && offOf[j] === end) {
        j++;
        end += dim;
      }
      out.set((this.#segments[g] as Float32Array).subarray(start, end), offset + i * dim);
      i = j;
    }
  }

  get released(): boolean {
    return this.#released;
  }

  /** Gives the replies back to the transport. Idempotent. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#rows = undefined;
    dropped.unregister(this);
    for (const r of this.#replies) r.release();
    // Its arrays are only read through this object, which is released now.
    this.#plan?.recycle();
  }

  [Symbol.dispose](): void {
    this.release();
  }
}
